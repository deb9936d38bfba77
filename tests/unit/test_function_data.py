"""Function task data: the shipped builtin set, its generator, the solver, and the loaders."""

from __future__ import annotations

import ast
import json
from collections import Counter
from pathlib import Path

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

from userrl.envs import load_tasks, make_env, make_solver
from userrl.envs.function.generate import generate_tasks, main, render
from userrl.envs.function.safe_eval import Formula
from userrl.envs.function.solver import PROBE_POOL, FunctionSolver, format_number, solve_episode
from userrl.envs.function.tasks import (
    BUILTIN_TASKS_PATH,
    FUNCTION_SYSTEM_PROMPT,
    FUNCTION_USER_MESSAGE,
    load_function_tasks,
)

FUNCTIONS_JSON = DATA_ROOT / "gyms/FunctionGym/functiongym/data/functions.json"
needs_shared_data = needs_shared_file(FUNCTIONS_JSON)


def shipped() -> list[dict]:
    return json.loads(BUILTIN_TASKS_PATH.read_text(encoding="utf-8"))["tasks"]


def n_binops(rule: str) -> int:
    return sum(isinstance(node, ast.BinOp) for node in ast.walk(ast.parse(rule, mode="eval")))


# ---------------------------------------------------------------- the shipped builtin set


def test_shipped_file_is_small_and_regenerates_identically() -> None:
    assert BUILTIN_TASKS_PATH.stat().st_size < 300_000
    assert render(generate_tasks(), 20250611) == BUILTIN_TASKS_PATH.read_text(encoding="utf-8")
    assert main(["--check"]) == 0


def test_shipped_counts_splits_and_ids() -> None:
    tasks = shipped()
    assert len(tasks) >= 600
    assert len({t["id"] for t in tasks}) == len(tasks)
    per_level = Counter(t["difficulty"] for t in tasks)
    assert sorted(per_level) == [0, 1, 2, 3, 4] and min(per_level.values()) >= 100
    for level, n in per_level.items():
        n_test = sum(t["split"] == "test" for t in tasks if t["difficulty"] == level)
        assert 0.1 * n <= n_test <= 0.2 * n


def test_shipped_rules_are_unique_within_a_level() -> None:
    tasks = shipped()
    for level in range(5):
        items = [t for t in tasks if t["difficulty"] == level]
        # Levels 0 and 2 have fewer distinct rules than tasks (4 and 41), so their tasks differ by test case.
        keys = [t["rule"] if level in (1, 3, 4) else (t["rule"], tuple(t["test_case"])) for t in items]
        assert len(set(keys)) == len(keys), level


def test_shipped_rules_evaluate_to_whole_expected_results() -> None:
    for t in shipped():
        formula = Formula(t["rule"])
        assert all(isinstance(v, int) and 1 <= v <= 10 for v in t["test_case"]) and len(t["test_case"]) == 4
        assert tuple(t["test_case"]) not in PROBE_POOL
        value = round(formula.evaluate(t["test_case"]), 4)
        assert value == t["expected_result"] and value.is_integer() and abs(value) <= 1e6, t
        for probe in PROBE_POOL:
            at_probe = formula.evaluate(probe)
            assert at_probe.is_integer() and abs(at_probe) <= 1e6, (t["rule"], probe)


def test_shipped_levels_have_their_shape() -> None:
    for t in shipped():
        rule, level = t["rule"], t["difficulty"]
        variables = Formula(rule).variables
        if level == 0:
            assert rule in ("a", "b", "c", "d")
        elif level == 1:
            assert n_binops(rule) == 1 and len(variables) == 1 and any(ch.isdigit() for ch in rule)
        elif level == 2:
            assert n_binops(rule) == 1 and len(variables) == 2
        elif level == 3:
            assert n_binops(rule) in (2, 3) and "/" not in rule and "**" not in rule
        else:
            assert len(rule) <= 23 and variables == {"a", "b", "c", "d"} and n_binops(rule) >= 3
    level4 = [t["rule"] for t in shipped() if t["difficulty"] == 4]
    assert sum("/" in r for r in level4) >= 10 and sum("**" in r for r in level4) >= 20
    assert sum("(" in r for r in level4) >= 20


# ---------------------------------------------------------------- loaders (builtin)


def test_builtin_loader() -> None:
    train, test = load_function_tasks("train"), load_function_tasks("test")
    assert len(train) + len(test) == len(shipped()) and len(test) >= 90
    assert {t.split for t in train} == {"train"} and {t.split for t in test} == {"test"}
    assert not {t.item_key for t in train} & {t.item_key for t in test}
    task = test[0]
    assert task.gym == "function" and task.source == "builtin" and task.difficulty in range(5)
    assert task.prompt == [
        {"role": "system", "content": FUNCTION_SYSTEM_PROMPT},
        {"role": "user", "content": FUNCTION_USER_MESSAGE},
    ]
    assert set(task.data) == {"id", "rule", "test_case", "expected_result"}


def test_builtin_loader_filters_and_errors() -> None:
    assert {t.difficulty for t in load_function_tasks(difficulty=2)} == {2}
    assert {t.difficulty for t in load_tasks("function", "test", difficulty=[0, 4])} == {0, 4}
    with pytest.raises(ValueError, match="difficulty"):
        load_function_tasks(difficulty=7)
    with pytest.raises(ValueError, match="splits"):
        load_function_tasks("validation")
    with pytest.raises(ValueError, match="source"):
        load_function_tasks(source="hf")
    with pytest.raises(ValueError, match="data_root"):
        load_function_tasks(source="userrl")


def test_system_prompt_is_short_and_protocol_free() -> None:
    assert len(FUNCTION_SYSTEM_PROMPT.split()) < 120
    for word in ("action", "search", "answer", "test"):
        assert word in FUNCTION_SYSTEM_PROMPT
    for protocol_word in ("[action]", "[answer]", "interact_with_env", "tool", "JSON"):
        assert protocol_word not in FUNCTION_SYSTEM_PROMPT


# ---------------------------------------------------------------- solver


def test_solver_solves_every_builtin_task_within_four_steps() -> None:
    env = make_env("function")
    for task in load_function_tasks("test") + load_function_tasks("train"):
        steps = solve_episode(env, task, np.random.default_rng(0))
        assert len(steps) <= 4 and steps[-1][2:] == ("Correct!", 1.0), (task.item_key, steps)
        assert [s[0] for s in steps[-2:]] == ["search", "answer"]
        assert all(s[0] == "action" and "the result is" in s[2] for s in steps[:-2])


def test_solver_is_deterministic_and_uses_the_probe_pool() -> None:
    task = load_function_tasks("test")[0]
    plans = []
    for _ in range(2):
        solver = make_solver("function", task, np.random.default_rng(5))
        plans.append([solver.next_action(None) for _ in range(5)])
    assert plans[0] == plans[1]
    probes = [tuple(int(x) for x in content.split()) for choice, content in plans[0] if choice == "action"]
    assert 1 <= len(probes) <= 2 and all(p in PROBE_POOL for p in probes)
    assert plans[0][len(probes)] == ("search", "test")
    assert plans[0][-1] == ("answer", format_number(task.data["expected_result"]))
    n_probes = {len(FunctionSolver(task, np.random.default_rng(s))._plan) - 2 for s in range(20)}
    assert n_probes == {1, 2}


def test_solver_avoids_the_test_case() -> None:
    task = load_function_tasks("test")[0]
    task.data = dict(task.data, test_case=list(PROBE_POOL[0]))
    for seed in range(30):
        solver = FunctionSolver(task, np.random.default_rng(seed))
        assert all(content != "4 2 2 1" for _, content in solver._plan)


def test_format_number() -> None:
    assert (format_number(8.0), format_number(-16.0), format_number(0.5)) == ("8", "-16", "0.5")


def test_solver_touches_no_global_rng() -> None:
    with global_rngs_untouched():
        solve_episode(make_env("function"), load_function_tasks("test")[3], np.random.default_rng(1))


# ---------------------------------------------------------------- loaders (userrl): error paths on fake folders


def _fake_root(tmp_path: Path, items: object, ids: list[str]) -> Path:
    write_json(tmp_path / "gyms/FunctionGym/functiongym/data/functions.json", items)
    rows = [
        original_row("interact_function", i, {"env_name": "FunctionGym", "id": item_id})
        for i, item_id in enumerate(ids)
    ]
    write_parquet(tmp_path / "data/function_multiturn/train.parquet", rows)
    return tmp_path


ITEM = {"id": "func-1", "rule": "c * (a * b) * d", "test_case": [3, 5, 5, 3], "expected_result": 225.0}


def test_userrl_loader_on_a_fake_folder(tmp_path: Path) -> None:
    root = _fake_root(tmp_path, [ITEM], ["func-1"])
    (task,) = load_tasks("function", "train", source="userrl", data_root=root)
    assert task.item_key == "func-1" and task.source == "userrl" and task.data == ITEM
    assert task.prompt == [{"role": "system", "content": "sys"}, {"role": "user", "content": "go"}]


def test_userrl_loader_missing_folder(tmp_path: Path) -> None:
    with pytest.raises(
        FileNotFoundError, match=r"functions\.json not found: data_root must point at a UserRL"
    ):
        load_function_tasks("train", "userrl", tmp_path / "nowhere")


def test_userrl_loader_corrupt_json(tmp_path: Path) -> None:
    root = _fake_root(tmp_path, "[{not json", ["func-1"])
    with pytest.raises(ValueError, match=r"functions\.json: not valid JSON"):
        load_function_tasks("train", "userrl", root)


def test_userrl_loader_bad_item(tmp_path: Path) -> None:
    root = _fake_root(tmp_path, [dict(ITEM, rule="__import__('os')")], ["func-1"])
    with pytest.raises(ValueError, match=r"functions\.json: item 'func-1'"):
        load_function_tasks("train", "userrl", root)


def test_userrl_loader_unknown_id(tmp_path: Path) -> None:
    root = _fake_root(tmp_path, [ITEM], ["func-1", "func-999"])
    with pytest.raises(ValueError, match=r"train\.parquet: row 1 has function id 'func-999'"):
        load_function_tasks("train", "userrl", root)


def test_userrl_loader_missing_parquet(tmp_path: Path) -> None:
    root = _fake_root(tmp_path, [ITEM], ["func-1"])
    with pytest.raises(FileNotFoundError, match=r"test\.parquet not found"):
        load_function_tasks("test", "userrl", root)
    with pytest.raises(ValueError, match="difficulty"):
        load_function_tasks("train", "userrl", root, difficulty=1)


# ---------------------------------------------------------------- the original data (skipped when absent)


@pytest.mark.shared_data
@needs_shared_data
def test_all_538_original_rules_evaluate_to_the_expected_result() -> None:
    items = json.loads(FUNCTIONS_JSON.read_text(encoding="utf-8"))
    assert len(items) == 538
    for item in items:
        assert round(Formula(item["rule"]).evaluate(item["test_case"]), 4) == item["expected_result"], item


@pytest.mark.shared_data
@needs_shared_data
@pytest.mark.parametrize(
    ("split", "rows"), [("train", 460), ("test", 78), ("alltrain", 200), ("alltest", 50)]
)
def test_every_original_parquet_row_loads_and_resolves(split: str, rows: int) -> None:
    tasks = load_tasks("function", split, source="userrl", data_root=DATA_ROOT)
    assert len(tasks) == rows
    parquet = {"train": "function_multiturn/train", "test": "function_multiturn/test"}.get(split)
    if parquet:
        frame = pl.read_parquet(DATA_ROOT / f"data/{parquet}.parquet")
        for task, row in zip(tasks, frame.iter_rows(named=True), strict=True):
            assert task.prompt == [{"role": m["role"], "content": m["content"]} for m in row["prompt"]]
            assert task.item_key == row["reward_model"]["id"]
            assert row["reward_model"]["ground_truth"] == str(task.data["expected_result"])
    env = make_env("function")
    for task in tasks:
        assert task.source == "userrl" and task.split in ("train", "test")
        steps = solve_episode(env, task, np.random.default_rng(0))
        assert steps[-1][2:] == ("Correct!", 1.0) and len(steps) <= 4
