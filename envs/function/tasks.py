"""Function task sets: our own generated tasks ("builtin") and the original UserRL files ("userrl")."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from userrl.envs.base import Task
from userrl.envs.function.safe_eval import Formula, RuleError
from userrl.envs.loading import (
    check_userrl_split,
    index_by_id,
    item_id_of,
    load_leveled_tasks,
    read_json_array,
    resolve_userrl_rows,
    source_loader,
    system_user_prompt,
    userrl_parquet,
)

GYM = "function"
DATA_SOURCE = "interact_function"

#: The system message of builtin tasks. Choices and contents only: the chat layer appends how to act
#: (tool call or bracket line). Kept short for small models.
FUNCTION_SYSTEM_PROMPT = (
    "You are playing FunctionGym. A hidden function f(a, b, c, d) turns four numbers into one number "
    "using +, -, *, / and powers. Your goal is to find f at the test input.\n"
    "Choices:\n"
    "- action: give four numbers a b c d, for example 1 2 3 4. You get f of those numbers.\n"
    "- search: give the word test. You get the four test-input numbers.\n"
    "- answer: give one number, f at the test input. A correct answer ends the game.\n"
    "Try a few inputs, get the test input, then answer. Your steps are limited."
)
FUNCTION_USER_MESSAGE = "The hidden function is ready. You can start now."

BUILTIN_TASKS_PATH = Path(__file__).resolve().parent / "data" / "tasks.json"
USERRL_FUNCTIONS_JSON = Path("gyms/FunctionGym/functiongym/data/functions.json")
#: Split name -> parquet file (relative to data_root). The all* files mix every gym; rows are filtered.
USERRL_PARQUET = userrl_parquet("function_multiturn")
DIFFICULTY_LEVELS = (0, 1, 2, 3, 4)


def builtin_prompt() -> list[dict[str, str]]:
    """The [system, user] prompt of every builtin task."""
    return system_user_prompt(FUNCTION_SYSTEM_PROMPT, FUNCTION_USER_MESSAGE)


def validate_record(record: Any, where: str) -> dict[str, Any]:
    """Check one function item (id, rule, test_case, expected_result); ValueError names where and the id."""
    item_id = item_id_of(record, where)
    rule, test_case, expected = record.get("rule"), record.get("test_case"), record.get("expected_result")
    if not isinstance(rule, str):
        raise ValueError(f"{where}: item {item_id!r} has no string 'rule'")
    if not (
        isinstance(test_case, list)
        and len(test_case) == 4
        and all(isinstance(v, int | float) and not isinstance(v, bool) for v in test_case)
    ):
        raise ValueError(f"{where}: item {item_id!r} needs 'test_case' as a list of 4 numbers")
    if isinstance(expected, bool) or not isinstance(expected, int | float) or not math.isfinite(expected):
        raise ValueError(f"{where}: item {item_id!r} needs a finite number as 'expected_result'")
    try:
        Formula(rule)
    except RuleError as exc:
        raise ValueError(f"{where}: item {item_id!r}: {exc}") from exc
    return {"id": item_id, "rule": rule, "test_case": list(test_case), "expected_result": float(expected)}


def load_builtin_tasks(
    split: str = "train", difficulty: int | Sequence[int] | None = None, path: str | Path | None = None
) -> list[Task]:
    """Our own generated tasks (function/data/tasks.json) of one split, optionally of some levels."""
    return load_leveled_tasks(GYM, Path(path) if path is not None else BUILTIN_TASKS_PATH, split, difficulty,
                              DIFFICULTY_LEVELS, validate_record, lambda record: builtin_prompt())


def load_userrl_functions(data_root: str | Path) -> dict[str, dict[str, Any]]:
    """The original functions.json, validated and indexed by id."""
    path = Path(data_root) / USERRL_FUNCTIONS_JSON
    return index_by_id(read_json_array(path, "function items"), validate_record, path)


def load_userrl_tasks(split: str, data_root: str | Path) -> list[Task]:
    """Original parquet rows of one split (train, test, alltrain, alltest) resolved against functions.json."""
    check_userrl_split(GYM, split, USERRL_PARQUET)
    functions = load_userrl_functions(data_root)
    missing = f"not in {Path(data_root) / USERRL_FUNCTIONS_JSON}"
    path = Path(data_root) / USERRL_PARQUET[split]
    return resolve_userrl_rows(GYM, split, path, DATA_SOURCE, functions.get, what="function id", missing=missing)


#: load_function_tasks(split, source, data_root, difficulty=None): the registry's loader of Function tasks.
load_function_tasks = source_loader(GYM, load_builtin_tasks, load_userrl_tasks, builtin_only=("difficulty",))
