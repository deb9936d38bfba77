"""Function task data: the shipped builtin set, its generator, the solver, and the loaders."""

from __future__ import annotations

import ast
import contextlib
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

from userrl.envs import UngroundedTask, load_tasks, make_env, make_solver, solve_episode
from userrl.envs.function.generate import generate_tasks, main, render
from userrl.envs.function.safe_eval import Formula
from userrl.envs.function.solver import PROBE_POOL, FunctionSolver, format_number
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
        keys = [t["rule"] if level in (3, 4) else (t["rule"], tuple(t["test_case"])) for t in items]
        assert len(set(keys)) == len(keys), level


def test_levels_0_to_2_hold_at_least_64_test_tasks_each() -> None:
    tests = Counter(t["difficulty"] for t in shipped() if t["split"] == "test")
    assert min(tests[level] for level in (0, 1, 2)) >= 64


def test_shipped_rules_evaluate_to_whole_expected_results() -> None:
    for t in shipped():
        formula = Formula(t["rule"])
        assert all(isinstance(v, int) and 1 <= v <= 10 for v in t["test_case"]) and len(t["test_case"]) == 4
        assert tuple(t["test_case"]) not in PROBE_POOL
        value = round(formula.evaluate(t["test_case"]), 4)
        assert value == t["expected_result"] and value.is_integer() and abs(value) <= 1e6, t
        for probe in PROBE_POOL:
            assert abs(formula.evaluate(probe)) <= 1e6, (t["rule"], probe)


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


def test_solver_solves_every_task_of_levels_0_to_2_and_refuses_the_others() -> None:
    env = make_env("function")
    for task in load_function_tasks("test") + load_function_tasks("train"):
        if task.difficulty > 2:
            with pytest.raises(UngroundedTask, match="level"):
                solve_episode(env, task, np.random.default_rng(0))
            continue
        steps = solve_episode(env, task, np.random.default_rng(0))
        assert 3 <= len(steps) <= 5 and steps[-1][2:] == ("Correct!", 1.0), (task.item_key, steps)
        assert steps[0][:2] == ("search", "test")
        assert all(s[0] == "action" and "the result is" in s[2] for s in steps[1:-1])
        if task.difficulty == 0:  # one probe: the test input with a set to 0
            test_case = task.data["test_case"]
            assert [s[1] for s in steps[1:-1]] == [" ".join(str(v) for v in [0, *test_case[1:]])]
        else:
            assert [s[1] for s in steps[1:-1]] == [" ".join(map(str, p)) for p in PROBE_POOL[: len(steps) - 2]]


# A plain re-derivation of the answer from the transcript alone, written here without the solver's
# code: rules of levels 0-2 as Python functions, Occam's razor over them, simplest class first.
_VARS = {"a": 0, "b": 1, "c": 2, "d": 3}
_OPS = {"+": lambda x, y: x + y, "-": lambda x, y: x - y, "*": lambda x, y: x * y, "/": lambda x, y: x / y}


def _oracle_classes() -> list[list]:
    level0 = [lambda v, i=i: v[i] for i in range(4)]
    level1 = []
    for i in range(4):
        for op in "+-*":
            for k in range(2 if op == "*" else 1, 10):
                level1.append(lambda v, i=i, op=op, k=k: _OPS[op](v[i], k))
                level1.append(lambda v, i=i, op=op, k=k: _OPS[op](k, v[i]))
    level2 = [lambda v, i=i, j=j, op=op: _OPS[op](v[i], v[j])
              for i in range(4) for j in range(4) if i != j for op in "+-*/"]
    return [level0, level1, level2]


def _derived_answer(steps: list[tuple[str, str, str, float]]) -> float | None:
    test_case, observations = None, []
    for choice, content, feedback, _ in steps[:-1]:
        if feedback.startswith("Test case: "):
            test_case = [float(x) for x in feedback[len("Test case: ["):-1].split(",")]
        elif choice == "action" and "the result is" in feedback:
            observations.append(([float(x) for x in content.split()], float(feedback.rsplit(" ", 1)[1][:-1])))
    if test_case is None:
        return None
    for rules in _oracle_classes():
        fits = [f for f in rules if all(round(f(x), 4) == y for x, y in observations)]
        if fits:
            values = {round(f(test_case), 4) for f in fits}
            return values.pop() if len(values) == 1 else None
    return None


def test_every_demonstrated_answer_follows_from_the_transcript() -> None:
    # The transcript carries no hidden state: the answer must be what its probes imply.
    env = make_env("function")
    for task in load_function_tasks("train", difficulty=[0, 1, 2])[::3]:
        steps = solve_episode(env, task, np.random.default_rng(0))
        assert float(steps[-1][1]) == _derived_answer(steps), (task.item_key, steps)


def test_the_old_uninformative_probe_justifies_no_answer() -> None:
    # What the first solver did: probe 4 2 2 1 (b = c) and answer from the rule. Nothing follows from it.
    steps = [("action", "4 2 2 1", "For numbers [4.0, 2.0, 2.0, 1.0], the result is 2.0.", 0.0),
             ("search", "test", "Test case: [3, 5, 6, 3]", 0.0), ("answer", "6", "Correct!", 1.0)]
    assert _derived_answer(steps) is None


def test_solver_answer_is_read_from_the_transcript() -> None:
    task = next(t for t in load_function_tasks("test", difficulty=0) if t.data["rule"] == "b")
    a, b, c, d = task.data["test_case"]
    solver = make_solver("function", task, np.random.default_rng(5))
    assert solver.next_action(None) == ("search", "test")
    # The probe is built from the test case shown, and the answer follows from its result: f does not
    # change when a is 0, so the simple rule that gives this result gives it at the test input too.
    assert solver.next_action(f"Test case: [{a}, {b}, {c}, {d}]") == ("action", f"0 {b} {c} {d}")
    feedback = f"For numbers [0.0, {b:.1f}, {c:.1f}, {d:.1f}], the result is {b:.1f}."
    assert solver.next_action(feedback) == ("answer", str(b))


def test_solver_reads_a_zero_as_f_equals_a() -> None:
    task = next(t for t in load_function_tasks("test", difficulty=0) if t.data["rule"] == "a")
    solver = make_solver("function", task, np.random.default_rng(0))
    solver.next_action(None)
    assert solver.next_action(f"Test case: {task.data['test_case']}")[0] == "action"
    probe = [0.0, *map(float, task.data["test_case"][1:])]
    answer = solver.next_action(f"For numbers {probe}, the result is 0.0.")
    assert answer == ("answer", str(task.data["test_case"][0]))


def test_solver_avoids_the_test_case() -> None:
    task = load_function_tasks("test", difficulty=1)[0]
    task.data = dict(task.data, test_case=[1, 2, 3, 4])
    solver = FunctionSolver(task, np.random.default_rng(0))
    solver.next_action(None)
    assert solver.next_action("Test case: [1, 2, 3, 4]") == ("action", "3 7 2 5")


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
        # The original rules mostly lie beyond the few-probe classes: the solver refuses those.
        with contextlib.suppress(UngroundedTask):
            steps = solve_episode(env, task, np.random.default_rng(0))
            assert steps[-1][2:] == ("Correct!", 1.0) and len(steps) <= 5
