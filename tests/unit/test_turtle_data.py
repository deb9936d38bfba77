"""Turtle task data: the shipped hand-written puzzles, the loaders, and the privileged solver."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pytest
from gym_helpers import (
    DATA_ROOT,
    global_rngs_untouched,
    needs_shared_file,
    original_row,
    write_json,
    write_parquet,
)

import userrl.envs.turtle  # noqa: F401  (registers the gym until discovery imports every gym)
from userrl.envs import Task, load_tasks, make_env, make_solver, solve_episode
from userrl.envs.text import content_words
from userrl.envs.turtle import roles
from userrl.envs.turtle.solver import (
    TurtleSolver,
    clauses,
    proposition,
    question_proposition,
    sentence,
)
from userrl.envs.turtle.tasks import (
    BUILTIN_STORIES_PATH,
    TURTLE_SYSTEM_PROMPT,
    builtin_prompt,
    load_turtle_tasks,
)

STORIES_JSON = DATA_ROOT / "gyms/TurtleGym/turtlegym/data/all_stories_refined.json"
needs_shared_data = needs_shared_file(STORIES_JSON)


def shipped() -> list[dict[str, Any]]:
    return json.loads(BUILTIN_STORIES_PATH.read_text(encoding="utf-8"))["stories"]


# ---------------------------------------------------------------- the shipped builtin set


def test_shipped_counts_ids_titles_and_split() -> None:
    stories = shipped()
    assert len(stories) >= 40 and BUILTIN_STORIES_PATH.stat().st_size < 1_000_000
    assert len({s["id"] for s in stories}) == len(stories)
    assert len({s["title"].casefold() for s in stories}) == len(stories)
    assert len({s["surface"] for s in stories}) == len(stories)
    # Deterministic split: every fifth story is a test story.
    assert [s["split"] for s in stories] == ["test" if i % 5 == 4 else "train" for i in range(len(stories))]


def test_shipped_rubrics() -> None:
    for s in shipped():
        weights = [r["weight"] for r in s["rubric"]]
        assert 2 <= len(weights) <= 5 and all(0 < w <= 0.6 for w in weights), s["title"]
        assert math.isclose(math.fsum(weights), 1.0, abs_tol=1e-9), s["title"]
        assert len({r["statement"] for r in s["rubric"]}) == len(weights)
    # Some rubrics sum to slightly below 1.0 in float order, so the termination tolerance is exercised.
    assert any(sum(r["weight"] for r in s["rubric"]) < 1.0 for s in shipped())


def test_the_bottom_covers_every_statement_and_the_surface_does_not() -> None:
    for s in shipped():
        surface_words = content_words(s["surface"])
        keys = [roles.statement_keys(r["statement"], surface_words) for r in s["rubric"]]
        assert roles.scripted_grade(keys, s["bottom"]) == [1.0] * len(keys), s["title"]
        weights = [r["weight"] for r in s["rubric"]]
        from_surface = sum(
            w * x for w, x in zip(weights, roles.scripted_grade(keys, s["surface"]), strict=True)
        )
        assert from_surface < 0.5, s["title"]  # restating the puzzle must not solve it


def test_key_questions_get_their_recorded_answers() -> None:
    for s in shipped():
        answers = [q["answer"] for q in s["key_questions"]]
        assert "Yes" in answers and "No" in answers, s["title"]
        surface_words, bottom_words = content_words(s["surface"]), content_words(s["bottom"])
        for q in s["key_questions"]:
            assert roles.scripted_oracle(q["question"], surface_words, bottom_words) == q["answer"], q


# ---------------------------------------------------------------- loaders (builtin)


def test_builtin_loader() -> None:
    train, test = load_turtle_tasks("train"), load_turtle_tasks("test")
    assert (len(train), len(test)) == (41, 10) and len(train) + len(test) == len(shipped())
    assert {t.split for t in train} == {"train"} and {t.split for t in test} == {"test"}
    assert not {t.item_key for t in train} & {t.item_key for t in test}
    task = test[0]
    assert task.gym == "turtle" and task.source == "builtin" and task.item_key == task.data["title"]
    assert task.prompt == builtin_prompt(task.data["title"], task.data["surface"])
    assert task.prompt[1]["content"].startswith(
        f"Title: {task.data['title']}\nSurface: {task.data['surface']}\n"
    )
    assert set(task.data) == {"id", "title", "surface", "bottom", "rubric", "key_questions"}
    assert [t.item_key for t in load_tasks("turtle", "test")] == [t.item_key for t in test]


def test_builtin_loader_errors(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="splits"):
        load_turtle_tasks("validation")
    with pytest.raises(ValueError, match="source"):
        load_turtle_tasks(source="hf")
    with pytest.raises(ValueError, match="data_root"):
        load_turtle_tasks(source="userrl")
    doc = json.loads(BUILTIN_STORIES_PATH.read_text(encoding="utf-8"))
    doc["stories"][1]["title"] = doc["stories"][0]["title"].upper()
    bad = tmp_path / "stories.json"
    bad.write_text(json.dumps(doc), encoding="utf-8")
    with pytest.raises(ValueError, match=r"stories\.json: duplicate title"):
        userrl.envs.turtle.tasks.load_builtin_tasks("train", path=bad)
    doc = json.loads(BUILTIN_STORIES_PATH.read_text(encoding="utf-8"))
    doc["stories"][2]["rubric"][0]["weight"] += 0.1
    bad.write_text(json.dumps(doc), encoding="utf-8")
    with pytest.raises(ValueError, match=r"weights summing to 1\.1"):
        userrl.envs.turtle.tasks.load_builtin_tasks("train", path=bad)


def test_system_prompt_is_short_and_protocol_free() -> None:
    assert len(TURTLE_SYSTEM_PROMPT.split()) < 150
    for word in ("action", "answer", "yes/no", "surface"):
        assert word in TURTLE_SYSTEM_PROMPT
    for protocol_word in ("[action]", "[answer]", "interact_with_env", "tool", "JSON", "search"):
        assert protocol_word not in TURTLE_SYSTEM_PROMPT


# ---------------------------------------------------------------- solver


@pytest.mark.parametrize("split", ["test", "train"])
def test_solver_solves_every_builtin_task(split: str) -> None:
    env = make_env("turtle")
    for task in load_turtle_tasks(split):
        steps = solve_episode(env, task, np.random.default_rng(0))
        choices = [s[0] for s in steps]
        n_points, n_keys = len(task.data["rubric"]), len(task.data["key_questions"])
        assert choices[-1] == "answer" and set(choices[:-1]) <= {"action"}
        assert n_points + 1 <= len(steps) <= n_points + n_keys + 1
        assert steps[-1][3] == pytest.approx(1.0) and env.done and sum(s[3] for s in steps) > 0.99
        recorded = {q["question"]: q["answer"] for q in task.data["key_questions"]}
        explored = steps[: len(steps) - 1 - n_points]
        assert all(recorded[content] == feedback for _, content, feedback, _ in explored)
        # One question per rubric point, each confirmed; the story restates exactly those propositions.
        checks = steps[len(explored) : -1]
        assert all(feedback == "Yes" for _, _, feedback, _ in checks)
        assert steps[-1][1] == " ".join(sentence(question_proposition(q)) for _, q, _, _ in checks)


def test_solver_is_deterministic_and_varies_with_the_rng() -> None:
    task = load_turtle_tasks("test")[0]
    plans = [[make_solver("turtle", task, np.random.default_rng(5)).next_action(None) for _ in range(4)]]
    plans.append([make_solver("turtle", task, np.random.default_rng(5)).next_action(None) for _ in range(4)])
    assert plans[0] == plans[1]
    lengths = {len(TurtleSolver(task, np.random.default_rng(s))._plan) for s in range(30)}
    n_points, n_keys = len(task.data["rubric"]), len(task.data["key_questions"])
    assert lengths == {n_points + k for k in range(n_keys + 1)}


def test_proposition_drops_the_grading_frame() -> None:
    assert proposition("The story reveals that the audience were deaf students.") == "the audience were deaf students"
    assert proposition("The students applauded by waving.") == "the students applauded by waving"
    assert question_proposition("Is it true that the owner lied?") == "the owner lied"
    assert question_proposition("Was the owner angry?") is None
    assert clauses("he was tired, so he slept on the long train home") == ["he was tired", "he slept on the long train home"]


def test_solver_finishes_when_the_story_falls_short() -> None:
    data = dict(load_turtle_tasks("test")[0].data)
    data["rubric"] = [
        *data["rubric"][:-1],
        {"statement": "Zebras danced.", "weight": data["rubric"][-1]["weight"]},
    ]
    task = Task("turtle", data["title"], builtin_prompt(data["title"], data["surface"]), data)
    steps = solve_episode(make_env("turtle"), task, np.random.default_rng(1))
    assert [s[0] for s in steps[-2:]] == ["answer", "finish"] and 0 < steps[-2][3] < 1


def test_solver_without_key_questions_checks_the_points_at_once() -> None:
    data = dict(load_turtle_tasks("test")[0].data, key_questions=[])
    task = Task("turtle", data["title"], builtin_prompt(data["title"], data["surface"]), data)
    solver = TurtleSolver(task, np.random.default_rng(0))
    first = solver.next_action(None)
    assert first[0] == "action" and question_proposition(first[1]) == proposition(data["rubric"][0]["statement"])
    for _ in data["rubric"][1:]:
        solver.next_action("Yes")
    story = solver.next_action("Yes")
    assert story[0] == "answer" and data["bottom"] not in story[1] and len(solver.confirmed) == len(data["rubric"])
    assert solver.next_action("x") == ("finish", "")


def test_solver_touches_no_global_rng() -> None:
    with global_rngs_untouched():
        solve_episode(make_env("turtle"), load_turtle_tasks("test")[3], np.random.default_rng(1))


# ---------------------------------------------------------------- loaders (userrl): fake folders

STORY = {
    "new_title": "The Bar",
    "new_surface": "A man asks for water; the bartender points a gun at him.",
    "new_bottom": "The man had hiccups and the scare cured them.",
    "evaluation": [
        {"statement": "The man had hiccups.", "score": 0.7},
        {"statement": "It cured.", "score": 0.3},
    ],
    "evaluation_thought": "",
    "judgment": "Yes",
    "judgment_thought": "",
}


def _fake_root(tmp_path: Path, stories: object, titles: list[str], split: str = "train") -> Path:
    write_json(tmp_path / "gyms/TurtleGym/turtlegym/data/all_stories_refined.json", stories)
    rows = [
        original_row(
            "interact_turtlegym", i, {"env_name": "TurtleGym", "title": t}, split=split, user=f"Title: {t}"
        )
        for i, t in enumerate(titles)
    ]
    write_parquet(tmp_path / f"data/turtle_multiturn/{split}.parquet", rows)
    return tmp_path


def test_userrl_loader_on_a_fake_folder(tmp_path: Path) -> None:
    root = _fake_root(tmp_path, {"5": STORY, "6": dict(STORY, new_title="Other", judgment="No")}, ["the bar"])
    (task,) = load_tasks("turtle", "train", source="userrl", data_root=root)
    assert task.item_key == "the bar" and task.source == "userrl" and task.split == "train"
    assert task.prompt == [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "Title: the bar"},
    ]
    assert task.data == {
        "id": "5",
        "title": "The Bar",
        "surface": STORY["new_surface"],
        "bottom": STORY["new_bottom"],
        "rubric": [
            {"statement": "The man had hiccups.", "weight": 0.7},
            {"statement": "It cured.", "weight": 0.3},
        ],
        "key_questions": [],
    }
    env = make_env("turtle", task)
    env.reset()
    assert env.step("[answer] The man had hiccups and it cured them.")[1:3] == (1.0, True)


def test_userrl_loader_skips_stories_not_judged_yes(tmp_path: Path) -> None:
    root = _fake_root(tmp_path, {"5": STORY, "6": dict(STORY, new_title="Other", judgment="No")}, ["Other"])
    with pytest.raises(ValueError, match=r"train\.parquet: row 0 has turtle title 'Other'"):
        load_turtle_tasks("train", "userrl", root)


def test_userrl_loader_missing_folder(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"all_stories_refined\.json not found: data_root"):
        load_turtle_tasks("train", "userrl", tmp_path / "nowhere")


def test_userrl_loader_corrupt_json(tmp_path: Path) -> None:
    root = _fake_root(tmp_path, "{not json", ["The Bar"])
    with pytest.raises(ValueError, match=r"all_stories_refined\.json: not valid JSON"):
        load_turtle_tasks("train", "userrl", root)


@pytest.mark.parametrize(
    ("story", "message"),
    [
        (dict(STORY, new_bottom=""), "needs a non-empty string 'new_bottom'"),
        (dict(STORY, evaluation=[]), "non-empty rubric"),
        (dict(STORY, evaluation=[{"statement": "x", "score": 0.5}]), "summing to 0.5"),
        (dict(STORY, evaluation=[{"statement": "x", "score": "1"}]), "not a number"),
    ],
)
def test_userrl_loader_bad_story(tmp_path: Path, story: dict[str, Any], message: str) -> None:
    root = _fake_root(tmp_path, {"5": story}, ["The Bar"])
    with pytest.raises(ValueError, match=rf"all_stories_refined\.json: story 'The Bar' .*{message}"):
        load_turtle_tasks("train", "userrl", root)


def test_userrl_loader_unknown_split(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="UserRL turtle splits"):
        load_turtle_tasks("dev", "userrl", tmp_path)


# ---------------------------------------------------------------- the original data (when present)


@pytest.mark.shared_data
@needs_shared_data
@pytest.mark.parametrize(
    ("split", "count"), [("train", 423), ("test", 48), ("alltrain", 423), ("alltest", 48)]
)
def test_every_original_row_loads_and_resolves(split: str, count: int) -> None:
    tasks = load_turtle_tasks(split, "userrl", DATA_ROOT)
    assert len(tasks) == count
    frame = pl.read_parquet(DATA_ROOT / userrl.envs.turtle.tasks.USERRL_PARQUET[split])
    rows = frame.filter(pl.col("data_source") == "interact_turtlegym").iter_rows(named=True)
    env = make_env("turtle")
    for task, row in zip(tasks, rows, strict=True):
        kwargs = row["extra_info"]["tools_kwargs"]["interact_with_env"]["create_kwargs"]
        assert task.item_key == row["reward_model"]["title"] == kwargs["title"]
        assert task.data["surface"] == kwargs["surface"] and task.data["bottom"] == kwargs["bottom"]
        assert task.data["bottom"] == row["reward_model"]["ground_truth"]
        assert task.prompt == [dict(m) for m in row["prompt"]]  # verbatim
        env.reset(options={"task": task})


@pytest.mark.shared_data
@needs_shared_data
def test_original_stories_load_with_their_float_sums() -> None:
    stories = userrl.envs.turtle.tasks.load_userrl_stories(DATA_ROOT)
    assert len(stories) == 471
    sums = [sum(r["weight"] for r in s["rubric"]) for s in stories.values()]
    assert sum(x < 1.0 for x in sums) == 138 and sum(x > 1.0 for x in sums) == 16
