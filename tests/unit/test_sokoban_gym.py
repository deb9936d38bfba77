"""Sokoban (RAGEN's text game): board text, walking, walls, pushing, targets, rewards, the generated rooms
(all solvable, checked by a breadth-first solver written here) and their splits, and the
observation-grounded scripted solver."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import deque
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from userrl.envs import Task, load_tasks, make_env, make_solver, solve_episode
from userrl.envs.base import ENDED_FEEDBACK
from userrl.envs.grid import DROPPED, INVALID_ACTION, INVALID_MOVES
from userrl.envs.sokoban.board import parse_board, parse_moves, read_rows
from userrl.envs.sokoban.env import (
    GAVE_UP,
    OFF_TARGET,
    ON_TARGET,
    SOLVED,
    SokobanEnv,
)
from userrl.envs.sokoban.generate import MOVE_RANGE, generate_tasks, main, render
from userrl.envs.sokoban.tasks import (
    BUILTIN_TASKS_PATH,
    LEVELS,
    SOKOBAN_SYSTEM_PROMPT,
    builtin_prompt,
    load_sokoban_tasks,
)
from userrl.envs.solving import play_episode

#: One box below its target, the player below the box: "up" solves it.
ONE = ["######", "#____#", "#_O__#", "#_X__#", "#_P__#", "######"]
#: Two boxes side by side above their targets, the player left of them.
TWO = ["######", "#____#", "#PXX_#", "#_OO_#", "#____#", "######"]


def make_task(rows: list[str], key: str = "sk-test") -> Task:
    return Task("sokoban", key, builtin_prompt(read_rows(rows)), {"id": key, "map": rows, "optimal_moves": 1})


def started(rows: list[str] = TWO, **kwargs: Any) -> SokobanEnv:
    env = SokobanEnv(make_task(rows), **kwargs)
    env.reset()
    return env


def feedback(env: SokobanEnv, action: str) -> tuple[str, float, bool, bool]:
    obs, reward, terminated, truncated, _ = env.step(action)
    return obs["feedback"], reward, terminated, truncated


def board(rows: list[str]) -> str:
    return "\n".join(" ".join(row) for row in rows)


def shipped() -> list[dict[str, Any]]:
    return json.loads(BUILTIN_TASKS_PATH.read_text(encoding="utf-8"))["tasks"]


# ---------------------------------------------------------------- board text


def test_the_first_observation_shows_the_room_and_explains_the_symbols() -> None:
    assert make_task(ONE).prompt[1]["content"] == (
        "The room:\n# # # # # #\n# _ _ _ _ #\n# _ O _ _ #\n# _ X _ _ #\n# _ P _ _ #\n# # # # # #\n"
        "Push the box onto the target."
    )
    assert make_task(TWO).prompt[1]["content"].endswith("Push all 2 boxes onto the targets.")
    for words in ("# wall", "_ floor", "O target", "X box", "√ box on a target", "P you", "S you on a target",
                  "up, down, left or right", "one to three moves", "cannot pull"):
        assert words in SOKOBAN_SYSTEM_PROMPT
    for protocol_word in ("[action]", "[answer]", "interact_with_env", "tool", "JSON"):
        assert protocol_word not in SOKOBAN_SYSTEM_PROMPT


def test_rows_render_and_parse_back() -> None:
    room = read_rows(TWO)
    assert room.rows() == TWO and room.player == (2, 1) and room.boxes == {(2, 2), (2, 3)}
    assert parse_board("You moved up.\n" + room.render()) == room
    assert parse_board("no room") is None
    on_target = read_rows(["#####", "#S√X#", "#___#", "#####"])
    assert on_target.targets == {(1, 1), (1, 2)} and on_target.boxes == {(1, 2), (1, 3)}
    assert on_target.rows() == ["#####", "#S√X#", "#___#", "#####"]
    with pytest.raises(ValueError, match="one player"):
        read_rows(["#####", "#_X_#", "#_O_#", "#####"])
    with pytest.raises(ValueError, match="as many targets as boxes"):
        read_rows(["#####", "#PXX#", "#_O_#", "#####"])
    with pytest.raises(ValueError, match="unknown symbols"):
        read_rows(["#####", "#PX?#", "#_O_#", "#####"])


@pytest.mark.parametrize("content", ["left", "Up", "right, DOWN", "up up up", "down."])
def test_moves_parse(content: str) -> None:
    assert parse_moves(content) == content.lower().rstrip(".").replace(",", "").split()


@pytest.mark.parametrize("content", ["", "push", "up, up, up, up", "u", "left" * 100])
def test_bad_moves_are_refused(content: str) -> None:
    assert parse_moves(content) is None


# ---------------------------------------------------------------- steps


def test_walls_stop_the_player() -> None:
    env = started()
    text, reward, terminated, truncated = feedback(env, "[action] left")
    assert text == "A wall blocks the way left.\n" + board(TWO) and (reward, terminated, truncated) == (0.0, False, False)


def test_a_box_cannot_push_another_box() -> None:
    env = started()
    assert feedback(env, "[action] right")[0] == "The box cannot move right: a wall or another box is behind it.\n" + board(TWO)


def test_pushing_onto_and_off_a_target_with_box_shaping() -> None:
    env = started(box_reward=0.5)
    text, reward, terminated, _ = feedback(env, "[action] up, right, down")
    assert text == (f"You moved up. You moved right. You pushed a box down. {ON_TARGET}\n"
                    + board(["######", "#____#", "#_PX_#", "#_√O_#", "#____#", "######"]))
    assert (reward, terminated) == (0.5, False)
    text, reward, terminated, _ = feedback(env, "[action] down")
    assert text == f"You pushed a box down. {OFF_TARGET}\n" + board(["######", "#____#", "#__X_#", "#_SO_#", "#_X__#", "######"])
    assert (reward, terminated) == (-0.5, False)
    assert env.pushes == 2 and env.moves_made == 4


def test_solving_terminates_with_the_success_reward() -> None:
    env = started(reward_scale=2.0)
    assert feedback(env, "[action] up, right, down")[1:] == (0.0, False, False)
    text, reward, terminated, truncated = feedback(env, "[action] up, right, down")
    assert text == (f"You moved up. You moved right. You pushed a box down. {ON_TARGET} {SOLVED}\n"
                    + board(["######", "#____#", "#__P_#", "#_√√_#", "#____#", "######"]))
    assert (reward, terminated, truncated) == (2.0, True, False)
    assert env.step("[action] up")[0]["feedback"] == ENDED_FEEDBACK


def test_moves_after_the_solution_are_dropped() -> None:
    env = started(ONE)
    text, reward, terminated, _ = feedback(env, "[action] up, left, left")
    assert text.split("\n")[0] == f"You pushed a box up. {ON_TARGET} {SOLVED} {DROPPED}"
    assert (reward, terminated) == (1.0, True) and env.moves_made == 1


def test_invalid_actions_count_a_step_and_change_nothing() -> None:
    env = started(max_steps=4)
    assert feedback(env, "push right") == (INVALID_ACTION, 0.0, False, False)
    assert feedback(env, "[search] up") == (INVALID_ACTION, 0.0, False, False)
    assert feedback(env, "[action] up, up, up, up") == (INVALID_MOVES, 0.0, False, False)
    assert env.room == read_rows(TWO) and env.step_count == 3
    assert feedback(env, "[finish]") == (GAVE_UP, 0.0, True, False)


def test_step_penalty_and_truncation() -> None:
    env = started(step_penalty=0.1, max_steps=2)
    assert feedback(env, "[action] down")[1:] == (pytest.approx(-0.1), False, False)
    assert feedback(env, "[action] up")[1:] == (pytest.approx(-0.1), False, True)


def test_the_game_is_deterministic_whatever_the_seed() -> None:
    actions = ["[action] up, right", "[action] down, down", "[action] left, up"]
    transcripts = set()
    for seed in (0, 1, None):
        env = started(seed=seed)
        transcripts.add(tuple(env.step(a)[0]["feedback"] for a in actions))
    assert len(transcripts) == 1


def test_bad_rooms_are_refused() -> None:
    for rows in (["#####", "#P√_#", "#####"], ["####", "#P_#", "####"], "PXO"):
        with pytest.raises(ValueError, match="sokoban task"):
            SokobanEnv(Task("sokoban", "bad", make_task(ONE).prompt, {"map": rows}))


# ---------------------------------------------------------------- an independent solver (written here)


def independent_solve(text_or_rows: str | list[str]) -> int | None:
    """Fewest moves that solve a room (its rows, or a text whose last lines are its spaced rows)."""
    rows = (text_or_rows if isinstance(text_or_rows, list)
            else ["".join(line.split(" ")) for line in text_or_rows.split("\n") if line.startswith("#")])
    cells = {(r, c): x for r, row in enumerate(rows) for c, x in enumerate(row)}
    walls = {p for p, x in cells.items() if x == "#"}
    targets = {p for p, x in cells.items() if x in "O√S"}
    start = (next(p for p, x in cells.items() if x in "PS"), frozenset(p for p, x in cells.items() if x in "X√"))
    seen, queue = {start: 0}, deque([start])
    while queue:
        state = queue.popleft()
        (r, c), boxes = state
        if boxes <= targets:
            return seen[state]
        for dr, dc in ((1, 0), (-1, 0), (0, 1), (0, -1)):
            nxt = (r + dr, c + dc)
            if nxt in walls:
                continue
            new_boxes = boxes
            if nxt in boxes:
                beyond = (r + 2 * dr, c + 2 * dc)
                if beyond in walls or beyond in boxes:
                    continue
                new_boxes = (boxes - {nxt}) | {beyond}
            if (nxt, new_boxes) not in seen:
                seen[(nxt, new_boxes)] = seen[state] + 1
                queue.append((nxt, new_boxes))
    return None


def independent_moves(text: str, moves: list[str]) -> Iterator[str]:
    """The rows after each move (walking, pushing, or standing still), replayed here without the gym's code."""
    rows = [line.split(" ") for line in text.split("\n") if line.startswith("#")]
    for move in moves:
        dr, dc = {"up": (-1, 0), "down": (1, 0), "left": (0, -1), "right": (0, 1)}[move]
        r, c = next((r, c) for r, row in enumerate(rows) for c, x in enumerate(row) if x in "PS")
        a = rows[r + dr][c + dc]  # rooms are walled all round: a box never stands on the edge
        b = rows[r + 2 * dr][c + 2 * dc] if a in "X√" else "#"
        if a == "#" or (a in "X√" and b in "#X√"):
            yield board(["".join(row) for row in rows])
            continue
        if a in "X√":
            rows[r + 2 * dr][c + 2 * dc] = "√" if b == "O" else "X"
        rows[r + dr][c + dc] = "S" if a in "O√" else "P"
        rows[r][c] = "O" if rows[r][c] == "S" else "_"
        yield board(["".join(row) for row in rows])


def test_the_independent_solver_agrees_on_small_rooms() -> None:
    assert independent_solve(ONE) == 1 and independent_solve(TWO) == 6
    assert independent_solve(["######", "#P_X_#", "#___O#", "######"]) is None  # box against the top wall


# ---------------------------------------------------------------- the shipped rooms


def test_shipped_file_regenerates_identically() -> None:
    assert BUILTIN_TASKS_PATH.stat().st_size < 150_000
    assert render(generate_tasks(), 20250721) == BUILTIN_TASKS_PATH.read_text(encoding="utf-8")
    assert main(["--check"]) == 0


def test_splits_are_disjoint_and_sized() -> None:
    train, test = load_sokoban_tasks("train"), load_sokoban_tasks("test")
    assert (len(train), len(test)) == (324, 81)
    maps = lambda tasks: {tuple(t.data["map"]) for t in tasks}  # noqa: E731
    assert not maps(train) & maps(test) and len(maps(train)) == len(train) and len(maps(test)) == len(test)
    assert not {t.item_key for t in train} & {t.item_key for t in test}
    for level, (size, boxes) in LEVELS.items():
        tasks = load_sokoban_tasks("test", difficulty=level)
        assert len(tasks) == 27
        for t in tasks:
            room = read_rows(t.data["map"])
            assert room.size == (size, size) and len(room.boxes) == boxes == len(room.targets)
    assert {t.difficulty for t in load_tasks("sokoban", "train", difficulty=[1])} == {1}
    with pytest.raises(ValueError, match="difficulty"):
        load_sokoban_tasks(difficulty=3)
    with pytest.raises(ValueError, match="no Sokoban tasks"):
        load_tasks("sokoban", "test", source="userrl", data_root="/nowhere")


def test_every_shipped_room_is_solvable_in_its_stated_moves() -> None:
    # No generated room is a deadlock: the solver written here solves each in exactly optimal_moves.
    for item in shipped():
        rows = item["map"]
        least, most = MOVE_RANGE[item["difficulty"]]
        assert independent_solve(rows) == item["optimal_moves"], item["id"]
        assert least <= item["optimal_moves"] <= most
        assert "√" not in "".join(rows) and all(row[0] == row[-1] == "#" for row in rows)
        assert set(rows[0]) == set(rows[-1]) == {"#"}


# ---------------------------------------------------------------- the scripted solver, grounded


def check_grounded(task: Task, steps: list[tuple[str, str, str, float]]) -> None:
    """Each action's moves start a shortest solution of the room last shown, and the next board is theirs."""
    seen = task.prompt[1]["content"]
    for choice, content, text, _ in steps:
        assert choice == "action", (task.item_key, choice)
        moves = content.split(", ")
        before = independent_solve(seen)
        assert before is not None, (task.item_key, seen)
        after = list(independent_moves(seen, moves))
        assert independent_solve(after[-1]) == before - len(moves), (task.item_key, content)
        assert text.split("\n", 1)[1] == after[-1], (task.item_key, content, text)
        seen = text


@pytest.mark.parametrize("split", ["test", "train"])
def test_the_solver_solves_every_room_from_the_boards_it_was_shown(split: str) -> None:
    env = make_env("sokoban")
    for i, task in enumerate(load_sokoban_tasks(split)):
        steps = play_episode(env, task, make_solver("sokoban", task, np.random.default_rng(i), env.max_steps))
        check_grounded(task, steps)
        assert steps[-1][3] == 1.0 and SOLVED in steps[-1][2] and len(steps) <= env.max_steps, task.item_key
        assert sum(len(c.split(", ")) for _, c, _, _ in steps) == task.data["optimal_moves"]


def test_the_checker_rejects_a_move_off_every_shortest_solution() -> None:
    task = make_task(ONE)
    env = started(ONE)
    good = [("action", "up", env.step("[action] up")[0]["feedback"], 1.0)]
    check_grounded(task, good)
    env = started(ONE)
    with pytest.raises(AssertionError):
        check_grounded(task, [("action", "left", env.step("[action] left")[0]["feedback"], 0.0)])


def test_the_solver_reads_only_the_board_it_was_shown() -> None:
    task = make_task(TWO)
    solver = make_solver("sokoban", task, np.random.default_rng(0), 16)
    assert solver.next_action(None) == ("action", "up")
    # A room the env never showed: the solver plays it all the same (nothing hidden is read).
    shown = "You moved up.\n" + board(["######", "#____#", "#__XP#", "#_√O_#", "#____#", "######"])
    assert solver.next_action(shown) == ("action", "up")
    assert solver.next_action("x\n" + board(["######", "#____#", "#__P_#", "#_√√_#", "#____#", "######"])) == ("finish", "")


def test_with_few_steps_left_the_solver_makes_several_moves_per_step() -> None:
    task = make_task(TWO)
    steps = solve_episode(make_env("sokoban", max_steps=2), task, np.random.default_rng(0))
    assert [c.count(",") + 1 for _, c, _, _ in steps] == [3, 3] and steps[-1][3] == 1.0


def test_demonstrations_are_deterministic_given_the_rng() -> None:
    task = load_sokoban_tasks("train", difficulty=2)[0]
    one = solve_episode(make_env("sokoban"), task, np.random.default_rng(3))
    assert solve_episode(make_env("sokoban"), task, np.random.default_rng(3)) == one


def test_the_game_modules_import_no_torch() -> None:
    code = ("import sys, userrl.envs.sokoban, userrl.envs.frozenlake; "
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"
