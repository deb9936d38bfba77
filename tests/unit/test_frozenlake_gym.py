"""FrozenLake (RAGEN's text game on gymnasium's FrozenLake-v1): board text, moves, holes and goal, slippery
ice, seeding, the generated maps and their splits, and the observation-grounded scripted solver."""

from __future__ import annotations

import json
from collections import deque
from typing import Any

import gymnasium
import numpy as np
import pytest
from gymnasium.envs.toy_text.frozen_lake import FrozenLakeEnv as GymnasiumFrozenLake

from userrl.envs import Task, load_tasks, make_env, make_solver, solve_episode
from userrl.envs.frozenlake.board import parse_board, parse_moves, render_board
from userrl.envs.frozenlake.env import (
    FELL,
    GAVE_UP,
    REACHED,
    FrozenLakeEnv,
)
from userrl.envs.frozenlake.generate import generate_tasks, main, render
from userrl.envs.frozenlake.tasks import (
    BUILTIN_TASKS_PATH,
    FROZENLAKE_SYSTEM_PROMPT,
    LEVEL_SIZES,
    builtin_prompt,
    load_frozenlake_tasks,
)
from userrl.envs.grid import DROPPED, INVALID_ACTION, INVALID_MOVES
from userrl.envs.solving import play_episode

#: A 4x4 lake: start top-left, holes at (1,1), (1,3), (2,3), (3,0), goal bottom-right (gymnasium's 4x4).
MAP = ["SFFF", "FHFH", "FFFH", "HFFG"]


def make_task(desc: list[str] = MAP, key: str = "fl-test") -> Task:
    return Task("frozenlake", key, builtin_prompt(desc), {"id": key, "map": desc, "optimal_moves": 6})


def started(desc: list[str] = MAP, **kwargs: Any) -> FrozenLakeEnv:
    env = FrozenLakeEnv(make_task(desc), **kwargs)
    env.reset()
    return env


def shipped() -> list[dict[str, Any]]:
    return json.loads(BUILTIN_TASKS_PATH.read_text(encoding="utf-8"))["tasks"]


# ---------------------------------------------------------------- board text


def test_the_first_observation_shows_the_board_and_explains_the_symbols() -> None:
    task = make_task()
    assert task.prompt[1]["content"] == (
        "The lake:\nP _ _ _\n_ O _ O\n_ _ _ O\nO _ _ G\nReach the goal G."
    )
    for words in ("P you", "_ frozen ice", "O hole", "G goal", "up, down, left or right", "one to three moves"):
        assert words in FROZENLAKE_SYSTEM_PROMPT
    for protocol_word in ("[action]", "[answer]", "interact_with_env", "tool", "JSON"):
        assert protocol_word not in FROZENLAKE_SYSTEM_PROMPT


def test_render_and_parse_round_trip() -> None:
    assert render_board(MAP, (3, 3)) == "_ _ _ _\n_ O _ O\n_ _ _ O\nO _ _ √"
    assert render_board(MAP, (1, 1)) == "_ _ _ _\n_ X _ O\n_ _ _ O\nO _ _ G"
    lake = parse_board("You moved down.\n" + render_board(MAP, (2, 1)))
    assert lake is not None and lake.player == (2, 1) and lake.rows == ("FFFF", "FHFH", "FFFH", "HFFG")
    # The last board of a text counts; text without a board, or with two players, gives none.
    two = render_board(MAP, (0, 0)) + "\nthen\n" + render_board(MAP, (0, 2))
    assert parse_board(two).player == (0, 2)  # type: ignore[union-attr]
    assert parse_board("no board here") is None
    assert parse_board("P P\n_ G") is None


@pytest.mark.parametrize(
    ("content", "moves"),
    [("left", ["left"]), ("Up", ["up"]), ("RIGHT, down", ["right", "down"]), ("up down left", ["up", "down", "left"]),
     ("left,down.", ["left", "down"]), ("up | up", ["up", "up"])],
)
def test_moves_parse(content: str, moves: list[str]) -> None:
    assert parse_moves(content) == moves


@pytest.mark.parametrize("content", ["", "jump", "left, jump", "up, up, up, up", "north", "l", "up" * 200])
def test_bad_moves_are_refused(content: str) -> None:
    assert parse_moves(content) is None


# ---------------------------------------------------------------- steps


def feedback(env: FrozenLakeEnv, action: str) -> tuple[str, float, bool, bool]:
    obs, reward, terminated, truncated, _ = env.step(action)
    return obs["feedback"], reward, terminated, truncated


def test_a_move_shows_what_happened_and_the_new_board() -> None:
    env = started()
    assert feedback(env, "[action] right") == ("You moved right.\n_ P _ _\n_ O _ O\n_ _ _ O\nO _ _ G", 0.0, False, False)
    text, *_ = feedback(env, "[action] Up")
    assert text == "You tried to move up, but the edge of the lake stopped you.\n_ P _ _\n_ O _ O\n_ _ _ O\nO _ _ G"
    text, *_ = feedback(env, "[action] right, down, down")
    assert text.split("\n")[0] == "You moved right. You moved down. You moved down."
    assert env.unwrapped._cell() == (2, 2) and env.moves_made == 5 and env.step_count == 3


def test_a_hole_ends_the_episode_and_drops_the_remaining_moves() -> None:
    env = started()
    text, reward, terminated, truncated = feedback(env, "[action] down, right, right")
    assert text == f"You moved down. You moved right. {FELL} {DROPPED}\n_ _ _ _\n_ X _ O\n_ _ _ O\nO _ _ G"
    assert (reward, terminated, truncated) == (0.0, True, False)
    obs, _, _, _, info = env.step("[action] up")
    assert obs["feedback"] == "The episode has already ended."
    assert info["fell_in_hole"] and not info["success"]


def test_the_goal_pays_the_success_reward() -> None:
    env = started(reward_scale=2.0)
    for action in ("[action] down, down", "[action] right, right, down"):
        assert feedback(env, action)[1:] == (0.0, False, False)
    text, reward, terminated, truncated = feedback(env, "[action] right")
    assert text == f"You moved right. {REACHED}\n_ _ _ _\n_ O _ O\n_ _ _ O\nO _ _ √"
    assert (reward, terminated, truncated) == (2.0, True, False)
    assert env.unwrapped._last_obs["success"] is True


def test_invalid_actions_count_a_step_and_change_nothing() -> None:
    env = started(max_steps=3)
    assert feedback(env, "go left") == (INVALID_ACTION, 0.0, False, False)
    assert feedback(env, "[answer] left") == (INVALID_ACTION, 0.0, False, False)
    assert feedback(env, "[action] jump") == (INVALID_MOVES, 0.0, False, True)
    assert env.unwrapped._cell() == (0, 0) and env.step_count == 3


def test_finish_gives_up_and_step_penalty_applies_to_every_step() -> None:
    env = started(step_penalty=0.1)
    assert feedback(env, "[action] right")[1] == pytest.approx(-0.1)
    assert feedback(env, "[finish]") == (GAVE_UP, pytest.approx(-0.1), True, False)


def test_bad_maps_and_keywords_are_refused() -> None:
    for desc in (["SFF", "FG"], ["SFFX", "FFFG"], ["SFFF", "HHHH", "FFFG"], ["FFFF", "FFFG"]):
        with pytest.raises(ValueError, match="map"):
            FrozenLakeEnv(Task("frozenlake", "bad", builtin_prompt(MAP), {"map": desc}))
    with pytest.raises(ValueError, match="slippery"):
        FrozenLakeEnv(make_task(), slippery="yes")
    with pytest.raises(ValueError, match="slip_success_rate"):
        FrozenLakeEnv(make_task(), slippery=True, slip_success_rate=0.0)


# ---------------------------------------------------------------- slippery ice and seeding


def play(env: FrozenLakeEnv, actions: list[str]) -> list[str]:
    out = []
    for action in actions:
        obs, *_ = env.step(action)
        out.append(obs["feedback"])
    return out


def test_slippery_ice_wraps_gymnasium_and_is_deterministic_given_the_seed() -> None:
    env = started(slippery=True, seed=3)
    assert isinstance(env._lake, GymnasiumFrozenLake)
    # gymnasium's transition table: three outcomes per move on slippery ice, one otherwise.
    assert len(env._lake.P[4][2]) == 3
    assert len(started()._lake.P[4][2]) == 1
    actions = ["[action] right"] * 3 + ["[action] down"] * 3
    first = play(env, actions)
    assert play(started(slippery=True, seed=3), actions) == first
    env.reset()
    assert play(env, actions) == first  # a reset replays the same slips
    transcripts = {tuple(play(started(slippery=True, seed=s), actions)) for s in range(12)}
    assert len(transcripts) > 1
    assert any("slipped" in text for t in transcripts for text in t)


def test_without_slippery_ice_moves_always_go_where_asked() -> None:
    for seed in range(5):
        env = started(seed=seed)
        assert play(env, ["[action] right", "[action] right"])[-1].startswith("You moved right.")


def test_gymnasium_make_takes_the_slippery_keyword() -> None:
    env = gymnasium.make("userrl/FrozenLake-v0", task=make_task(), slippery=True)
    env.reset(seed=0)
    assert env.unwrapped.slippery and isinstance(env.unwrapped._lake, GymnasiumFrozenLake)


# ---------------------------------------------------------------- the shipped maps


def test_shipped_file_regenerates_identically() -> None:
    assert BUILTIN_TASKS_PATH.stat().st_size < 150_000
    assert render(generate_tasks(), 20250720) == BUILTIN_TASKS_PATH.read_text(encoding="utf-8")
    assert main(["--check"]) == 0


def test_splits_are_disjoint_and_sized() -> None:
    train, test = load_frozenlake_tasks("train"), load_frozenlake_tasks("test")
    assert (len(train), len(test)) == (324, 81)
    maps = lambda tasks: {tuple(t.data["map"]) for t in tasks}  # noqa: E731
    assert not maps(train) & maps(test) and len(maps(train)) == len(train) and len(maps(test)) == len(test)
    assert not {t.item_key for t in train} & {t.item_key for t in test}
    for level, size in LEVEL_SIZES.items():
        tasks = load_frozenlake_tasks("test", difficulty=level)
        assert len(tasks) == 27 and all(len(t.data["map"]) == size == len(t.data["map"][0]) for t in tasks)
    task = test[0]
    assert task.gym == "frozenlake" and task.source == "builtin" and task.split == "test"


def independent_distance(rows: list[str] | tuple[str, ...], start: tuple[int, int]) -> int | None:
    """Fewest moves from start to G avoiding holes, written here without the gym's code."""
    n, m = len(rows), len(rows[0])
    seen, queue = {start: 0}, deque([start])
    while queue:
        r, c = queue.popleft()
        if rows[r][c] == "G":
            return seen[(r, c)]
        for dr, dc in ((1, 0), (-1, 0), (0, 1), (0, -1)):
            nr, nc = r + dr, c + dc
            if 0 <= nr < n and 0 <= nc < m and rows[nr][nc] != "H" and (nr, nc) not in seen:
                seen[(nr, nc)] = seen[(r, c)] + 1
                queue.append((nr, nc))
    return None


def test_every_shipped_map_is_solvable_with_its_stated_optimum() -> None:
    for item in shipped():
        desc = item["map"]
        start = next((r, row.index("S")) for r, row in enumerate(desc) if "S" in row)
        goal = next((r, row.index("G")) for r, row in enumerate(desc) if "G" in row)
        apart = abs(start[0] - goal[0]) + abs(start[1] - goal[1])
        # level 0 draws S and G anywhere (RAGEN); levels 1-2 at least the board's side apart
        assert apart >= (1 if item["difficulty"] == 0 else len(desc)), item["id"]
        assert independent_distance(desc, start) == item["optimal_moves"] >= apart, item["id"]
        assert "H" in "".join(desc)


def test_level_0_has_short_paths_as_ragen_draws_them() -> None:
    lengths = [item["optimal_moves"] for item in shipped() if item["difficulty"] == 0]
    # one turn of up to three moves reaches the goal on some maps: a small model finds it by chance
    assert min(lengths) == 1 and sum(n <= 3 for n in lengths) > len(lengths) // 2


def test_loader_filters_and_errors() -> None:
    assert {t.difficulty for t in load_tasks("frozenlake", "train", difficulty=[0, 2])} == {0, 2}
    with pytest.raises(ValueError, match="difficulty"):
        load_frozenlake_tasks(difficulty=5)
    with pytest.raises(ValueError, match="splits"):
        load_frozenlake_tasks("validation")
    with pytest.raises(ValueError, match="no FrozenLake tasks"):
        load_tasks("frozenlake", "train", source="userrl", data_root="/nowhere")


# ---------------------------------------------------------------- the scripted solver, grounded


def read_lake(text: str) -> tuple[list[str], tuple[int, int]] | None:
    """The last board of a text as (terrain rows, player), parsed here without the gym's code."""
    rows = [line.split(" ") for line in text.split("\n") if line and set(line.split(" ")) <= set("P_OGX√")]
    if not rows:
        return None
    player = next((r, c) for r, row in enumerate(rows) for c, x in enumerate(row) if x in "PX√")
    terrain = ["".join({"O": "H", "G": "G", "X": "H", "√": "G"}.get(x, "F") for x in row) for row in rows]
    return terrain, player


def check_grounded(task: Task, steps: list[tuple[str, str, str, float]], slippery: bool) -> None:
    """Each action's moves walk a shortest path on the board last shown; without slips, as predicted."""
    seen = task.prompt[1]["content"]
    for choice, content, text, _ in steps:
        lake = read_lake(seen)
        assert lake is not None and choice == "action", (task.item_key, choice)
        rows, cell = lake
        for move in content.split(", "):
            dr, dc = {"up": (-1, 0), "down": (1, 0), "left": (0, -1), "right": (0, 1)}[move]
            nxt = (cell[0] + dr, cell[1] + dc)
            assert 0 <= nxt[0] < len(rows) and 0 <= nxt[1] < len(rows[0]), (task.item_key, content)
            assert rows[nxt[0]][nxt[1]] != "H", (task.item_key, content)
            assert independent_distance(rows, nxt) == independent_distance(rows, cell) - 1, (task.item_key, content)  # type: ignore[operator]
            cell = nxt
        if not slippery:
            assert read_lake(text) == (rows, cell), (task.item_key, content, text)
        seen = text


@pytest.mark.parametrize("split", ["train", "test"])
def test_the_solver_solves_every_map_from_the_boards_it_was_shown(split: str) -> None:
    env = make_env("frozenlake")
    for i, task in enumerate(load_frozenlake_tasks(split)):
        steps = play_episode(env, task, make_solver("frozenlake", task, np.random.default_rng(i), env.max_steps))
        check_grounded(task, steps, slippery=False)
        assert steps[-1][3] == 1.0 and REACHED in steps[-1][2], task.item_key
        assert sum(len(c.split(", ")) for _, c, _, _ in steps) == task.data["optimal_moves"]
        assert len(steps) == task.data["optimal_moves"]  # one move per step: every map fits 16 steps


def test_on_slippery_ice_the_solver_replans_from_every_board() -> None:
    wins = 0
    tasks = load_frozenlake_tasks("test")
    for i, task in enumerate(tasks):
        env = make_env("frozenlake", slippery=True, seed=i)
        steps = play_episode(env, task, make_solver("frozenlake", task, np.random.default_rng(i), env.max_steps))
        check_grounded(task, steps, slippery=True)
        assert all(len(c.split(", ")) == 1 for _, c, _, _ in steps)
        wins += steps[-1][3] == 1.0
    assert 0 < wins < len(tasks)


def test_the_checker_rejects_a_move_off_the_shortest_path() -> None:
    task = make_task()
    steps = [("action", "down", "You moved down.\n" + render_board(MAP, (1, 0)), 0.0)]
    check_grounded(task, steps, slippery=False)  # down is one of the two shortest first moves
    with pytest.raises(AssertionError):
        check_grounded(task, [("action", "left", "x\n" + render_board(MAP, (0, 0)), 0.0)], slippery=False)


def test_the_solver_reads_only_the_board_it_was_shown() -> None:
    task = make_task()
    solver = make_solver("frozenlake", task, np.random.default_rng(0))
    assert solver.next_action(None)[1] in ("right", "down")
    # A board the env never showed: the solver plays it all the same (nothing hidden is read).
    assert solver.next_action("You moved down.\n_ _ _ _\n_ O _ O\n_ _ P O\nO _ _ G") == ("action", "down")
    assert solver.next_action(f"You moved right. {REACHED}\n_ _ _ _\n_ O _ O\n_ _ _ O\nO _ _ √") == ("finish", "")


def test_demonstrations_are_deterministic_given_the_rng() -> None:
    task = load_frozenlake_tasks("train", difficulty=2)[0]
    one = solve_episode(make_env("frozenlake"), task, np.random.default_rng(7))
    assert solve_episode(make_env("frozenlake"), task, np.random.default_rng(7)) == one
