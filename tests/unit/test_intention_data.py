"""Intention task data: the shipped builtin set, its generator, the solver, and the loaders."""

from __future__ import annotations

import json
import random
from collections import Counter
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

from userrl.envs import Task, load_tasks, make_env, make_solver, solve_episode
from userrl.envs.intention.env import max_return
from userrl.envs.intention.generate import canonical_items, canonical_text, design_problems, item_id, main
from userrl.envs.intention.solver import IntentionSolver
from userrl.envs.intention.tasks import (
    BUILTIN_TASKS_PATH,
    INTENTION_SYSTEM_PROMPT,
    INTENTION_USER_TEMPLATE,
    builtin_prompt,
    load_intention_tasks,
    validate_item,
)

INTENTION_DIR = DATA_ROOT / "gyms/IntentionGym/intentiongym/data"
needs_shared_data = needs_shared_file(INTENTION_DIR / "all_intentions_train.json")


def shipped() -> list[dict[str, Any]]:
    return json.loads(BUILTIN_TASKS_PATH.read_text(encoding="utf-8"))["tasks"]


def importances(task_data: dict[str, Any]) -> list[int]:
    return [int(d["importance"]) for d in task_data["missing_details"]]


# ---------------------------------------------------------------- the shipped builtin set


def test_shipped_file_is_small_and_canonical() -> None:
    assert BUILTIN_TASKS_PATH.stat().st_size < 1_000_000
    assert canonical_text() == BUILTIN_TASKS_PATH.read_text(encoding="utf-8")
    assert main(["--check"]) == 0


def test_shipped_counts_and_uniqueness() -> None:
    items = shipped()
    assert len(items) >= 60
    assert len({i["id"] for i in items}) == len({i["task"] for i in items}) == len(items)
    assert all(i["id"] == item_id(i["task"]) for i in items)
    categories = Counter(i["category"] for i in items)
    assert len(categories) >= 12 and min(categories.values()) >= 3
    levels = Counter(d["importance"] for i in items for d in i["missing_details"])
    assert set(levels) == {1, 2, 3} and min(levels.values()) >= 30
    assert all(3 <= len(i["missing_details"]) <= 6 for i in items)
    assert all(len(d["options"]) >= 2 for i in items for d in i["missing_details"])


def test_split_is_per_category_and_about_a_fifth() -> None:
    items = shipped()
    n_test = sum(i["split"] == "test" for i in items)
    assert 0.15 * len(items) <= n_test <= 0.3 * len(items)
    for category in {i["category"] for i in items}:
        splits = {i["split"] for i in items if i["category"] == category}
        assert splits == {"train", "test"}, category


def test_split_is_seeded_and_independent_of_file_order() -> None:
    items = shipped()
    raw = [{k: v for k, v in i.items() if k not in ("id", "split")} for i in items]
    assert canonical_items(raw) == items
    shuffled = list(raw)
    random.Random(1).shuffle(shuffled)
    assert {i["id"]: i["split"] for i in canonical_items(shuffled)} == {i["id"]: i["split"] for i in items}


def test_every_example_question_covers_exactly_its_own_detail() -> None:
    for item in shipped():
        assert design_problems(validate_item(item, "shipped")) == []


def test_design_rules_catch_bad_items() -> None:
    item = validate_item(shipped()[0], "shipped")
    bundled = json.loads(json.dumps(item))
    first, second = bundled["missing_details"][:2]
    first["inquiry"] = second["inquiry"] + " " + first["inquiry"]
    assert any("its inquiry covers" in p for p in design_problems(bundled))
    no_words = json.loads(json.dumps(item))
    no_words["missing_details"][0].update(description="x", inquiry="x", options=["x", "y"])
    assert any("no words of its own" in p for p in design_problems(no_words))
    raw = [{k: v for k, v in i.items() if k not in ("id", "split")} for i in shipped()[:2]]
    with pytest.raises(ValueError, match="duplicate request"):
        canonical_items(raw + raw[:1])


# ---------------------------------------------------------------- loaders (builtin)


def test_builtin_loader() -> None:
    train, test = load_intention_tasks("train"), load_intention_tasks("test")
    assert len(train) + len(test) == len(shipped()) and len(test) >= 12
    assert {t.split for t in train} == {"train"} and {t.split for t in test} == {"test"}
    assert not {t.item_key for t in train} & {t.item_key for t in test}
    task = test[0]
    assert task.gym == "intention" and task.source == "builtin" and task.item_key == task.data["id"]
    assert task.prompt == [
        {"role": "system", "content": INTENTION_SYSTEM_PROMPT},
        {
            "role": "user",
            "content": INTENTION_USER_TEMPLATE.format(category=task.data["category"], task=task.data["task"]),
        },
    ]
    assert set(task.data) == {"id", "category", "task", "missing_details"}


def test_builtin_loader_filters_and_errors() -> None:
    assert {t.data["category"] for t in load_intention_tasks(category="Gardening")} == {"Gardening"}
    both = load_tasks("intention", "test", category=["Gardening", "Pet Care"])
    assert {t.data["category"] for t in both} == {"Gardening", "Pet Care"}
    with pytest.raises(ValueError, match="no builtin intention tasks"):
        load_intention_tasks(category="Astrology")
    with pytest.raises(ValueError, match="splits"):
        load_intention_tasks("validation")
    with pytest.raises(ValueError, match="source"):
        load_intention_tasks(source="hf")
    with pytest.raises(ValueError, match="data_root"):
        load_intention_tasks(source="userrl")


def test_system_prompt_is_short_and_protocol_free() -> None:
    assert len(INTENTION_SYSTEM_PROMPT.split()) < 150
    assert "action" in INTENTION_SYSTEM_PROMPT and "question" in INTENTION_SYSTEM_PROMPT
    for protocol_word in ("[action]", "interact_with_env", "tool", "JSON", "answer", "search"):
        assert protocol_word not in INTENTION_SYSTEM_PROMPT


# ---------------------------------------------------------------- solver


def test_solver_reaches_the_maximum_return_on_every_builtin_task() -> None:
    env = make_env("intention")
    for task in load_intention_tasks("test") + load_intention_tasks("train"):
        steps = solve_episode(env, task, np.random.default_rng(0))
        assert len(steps) == len(task.data["missing_details"]), task.item_key
        assert sum(s[3] for s in steps) == pytest.approx(max_return(importances(task.data)))
        assert all(s[0] == "action" and s[3] > 0 for s in steps)
        assert steps[0][3] == 1.0 or max(importances(task.data)) < 3  # most important first


def test_solver_questions_use_the_detail_words_and_vary_with_the_rng() -> None:
    task = load_intention_tasks("test")[0]
    plans = {tuple(IntentionSolver(task, np.random.default_rng(s)).plan) for s in range(20)}
    assert len(plans) > 1
    inquiries = {d["inquiry"] for d in task.data["missing_details"]}
    assert any(q in inquiries for plan in plans for _, q in plan)
    solver = make_solver("intention", task, np.random.default_rng(5))
    actions = [solver.next_action(None) for _ in range(len(solver.plan) + 2)]
    assert actions[-2:] == [("finish", ""), ("finish", "")]


def test_solver_skips_details_it_cannot_cover_and_avoids_bundling() -> None:
    data = {
        "id": "x",
        "category": "Travel",
        "task": "Plan my trip.",
        "missing_details": [
            {
                "description": "Trip plan",
                "importance": 3,
                "inquiry": "Plan my trip?",
                "options": ["plan", "trip"],
            },
            # Its example question also covers the next detail, so a template question is used instead.
            {
                "description": "Hotel budget",
                "importance": 2,
                "inquiry": "Hotel budget near the destination city?",
                "options": ["low", "high"],
            },
            {
                "description": "Destination city",
                "importance": 2,
                "inquiry": "Which destination city?",
                "options": ["Rome", "Oslo"],
            },
        ],
    }
    task = Task("intention", "x", builtin_prompt("Travel", "Plan my trip."), data)
    steps = solve_episode(make_env("intention"), task, np.random.default_rng(0))
    assert [s[3] for s in steps[:2]] == [0.7, 0.7] and steps[-1] == ("finish", "", "Episode finished.", 0.0)
    assert "hotel budget" in steps[0][1] and steps[0][1] != "Hotel budget near the destination city?"
    assert steps[1][1] == "Which destination city?"


def test_solver_touches_no_global_rng() -> None:
    with global_rngs_untouched():
        solve_episode(make_env("intention"), load_intention_tasks("test")[3], np.random.default_rng(1))


# ---------------------------------------------------------------- loaders (userrl): error paths on fake folders

ITEM = {
    "id": "u-1",
    "category": "Travel",
    "task": "Plan my trip.",
    "missing_details": [
        {
            "description": "Destination city",
            "importance": "3",
            "inquiry": "Which city?",
            "options": ["Rome", "Oslo"],
        }
    ],
}


def _fake_root(tmp_path: Path, train_items: object, ids: list[str], task: str = "Plan my trip.") -> Path:
    folder = tmp_path / "gyms/IntentionGym/intentiongym/data"
    write_json(folder / "all_intentions_train.json", train_items)
    write_json(folder / "all_intentions_test.json", "[]")
    kwargs = {"task": task, "category": "Travel"}
    rows = [
        original_row("interact_intention", i, {"env_name": "IntentionGym", "id": item_id, **kwargs})
        for i, item_id in enumerate(ids)
    ]
    write_parquet(tmp_path / "data/intention_multiturn/train.parquet", rows)
    return tmp_path


def test_userrl_loader_on_a_fake_folder(tmp_path: Path) -> None:
    root = _fake_root(tmp_path, [ITEM], ["u-1"])
    (task,) = load_tasks("intention", "train", source="userrl", data_root=root)
    assert task.item_key == "u-1" and task.source == "userrl" and task.split == "train"
    assert task.data["missing_details"][0]["importance"] == 3
    assert task.prompt == [{"role": "system", "content": "sys"}, {"role": "user", "content": "go"}]
    assert load_intention_tasks("train", "userrl", root, category="Food") == []


@pytest.mark.parametrize(
    ("items", "ids", "task", "error", "match"),
    [
        ("[{not json", ["u-1"], "Plan my trip.", ValueError, r"all_intentions_train\.json: not valid JSON"),
        (
            [dict(ITEM, missing_details=[dict(ITEM["missing_details"][0], importance="5")])],
            ["u-1"],
            "Plan my trip.",
            ValueError,
            r"item 'u-1', detail 1: importance must be 1, 2 or 3",
        ),
        ([ITEM], ["u-1", "u-9"], "Plan my trip.", ValueError, r"row 1 has intention id 'u-9'"),
        ([ITEM], ["u-1"], "Other task.", ValueError, r"row 0 \('u-1'\) has a task that differs"),
        ([ITEM, ITEM], ["u-1"], "Plan my trip.", ValueError, r"duplicate id 'u-1'"),
    ],
)
def test_userrl_loader_errors(
    tmp_path: Path, items: object, ids: list[str], task: str, error: type[Exception], match: str
) -> None:
    root = _fake_root(tmp_path, items, ids, task)
    with pytest.raises(error, match=match):
        load_intention_tasks("train", "userrl", root)


def test_userrl_loader_missing_files(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"all_intentions_train\.json not found: data_root"):
        load_intention_tasks("train", "userrl", tmp_path / "nowhere")
    root = _fake_root(tmp_path, [ITEM], ["u-1"])
    with pytest.raises(FileNotFoundError, match=r"test\.parquet not found"):
        load_intention_tasks("test", "userrl", root)
    with pytest.raises(ValueError, match="splits"):
        load_intention_tasks("dev", "userrl", root)


# ---------------------------------------------------------------- the original data (skipped when absent)


@pytest.mark.shared_data
@needs_shared_data
def test_original_json_counts() -> None:
    for name, n_items, n_details in (("train", 1012, 3615), ("test", 95, 350)):
        items = json.loads((INTENTION_DIR / f"all_intentions_{name}.json").read_text(encoding="utf-8"))
        assert len(items) == n_items
        assert sum(len(validate_item(i, name)["missing_details"]) for i in items) == n_details


@pytest.mark.shared_data
@needs_shared_data
@pytest.mark.parametrize(("split", "rows"), [("train", 380), ("test", 40), ("alltest", 40), ("alltrain", 0)])
def test_every_original_parquet_row_loads_and_resolves(split: str, rows: int) -> None:
    tasks = load_tasks("intention", split, source="userrl", data_root=DATA_ROOT)
    assert len(tasks) == rows
    parquet = {"train": "intention_multiturn/train", "test": "intention_multiturn/test"}.get(split)
    if parquet:
        frame = pl.read_parquet(DATA_ROOT / f"data/{parquet}.parquet")
        for task, row in zip(tasks, frame.iter_rows(named=True), strict=True):
            assert task.prompt == [{"role": m["role"], "content": m["content"]} for m in row["prompt"]]
            assert task.item_key == row["reward_model"]["id"] and task.split == split
            descriptions = ", ".join(d["description"] for d in task.data["missing_details"])
            assert row["reward_model"]["ground_truth"] == descriptions
    env = make_env("intention")
    for task in tasks:
        steps = solve_episode(env, task, np.random.default_rng(0))
        assert sum(s[3] for s in steps) > 0, task.item_key
