"""Function task sets: our own generated tasks ("builtin") and the original UserRL files ("userrl")."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from userrl.envs.base import Task
from userrl.envs.function.safe_eval import Formula, RuleError

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
USERRL_PARQUET = {
    "train": Path("data/function_multiturn/train.parquet"),
    "test": Path("data/function_multiturn/test.parquet"),
    "alltrain": Path("data/alltrain_multiturn/train.parquet"),
    "alltest": Path("data/alltest_multiturn/test.parquet"),
}
DIFFICULTY_LEVELS = (0, 1, 2, 3, 4)


def builtin_prompt() -> list[dict[str, str]]:
    """The [system, user] prompt of every builtin task."""
    return [
        {"role": "system", "content": FUNCTION_SYSTEM_PROMPT},
        {"role": "user", "content": FUNCTION_USER_MESSAGE},
    ]


def validate_record(record: Any, where: str) -> dict[str, Any]:
    """Check one function item (id, rule, test_case, expected_result); ValueError names where and the id."""
    if not isinstance(record, dict):
        raise ValueError(f"{where}: every item must be an object, got {type(record).__name__}")
    item_id = record.get("id")
    if not isinstance(item_id, str) or not item_id:
        raise ValueError(f"{where}: an item has no string 'id': {record!r:.200}")
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


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: not valid JSON ({exc})") from exc


def _difficulty_filter(difficulty: int | Sequence[int] | None) -> frozenset[int] | None:
    if difficulty is None:
        return None
    levels = frozenset([difficulty] if isinstance(difficulty, int) else difficulty)
    bad = sorted(levels - set(DIFFICULTY_LEVELS))
    if bad:
        raise ValueError(
            f"unknown function difficulty levels {bad}; known levels are {list(DIFFICULTY_LEVELS)}"
        )
    return levels


def load_builtin_tasks(
    split: str = "train", difficulty: int | Sequence[int] | None = None, path: str | Path | None = None
) -> list[Task]:
    """Our own generated tasks (function/data/tasks.json) of one split, optionally of some levels."""
    if split not in ("train", "test"):
        raise ValueError(f"builtin function tasks have splits 'train' and 'test', not {split!r}")
    levels = _difficulty_filter(difficulty)
    path = Path(path) if path is not None else BUILTIN_TASKS_PATH
    doc = _read_json(path)
    if not isinstance(doc, dict) or not isinstance(doc.get("tasks"), list):
        raise ValueError(f"{path}: expected an object with a 'tasks' list")
    tasks = []
    for raw in doc["tasks"]:
        record = validate_record(raw, str(path))
        level, item_split = raw.get("difficulty"), raw.get("split")
        if level not in DIFFICULTY_LEVELS or item_split not in ("train", "test"):
            raise ValueError(f"{path}: item {record['id']!r} needs difficulty 0..4 and split train/test")
        if item_split != split or (levels is not None and level not in levels):
            continue
        tasks.append(
            Task(GYM, record["id"], builtin_prompt(), record, split=split, difficulty=level, source="builtin")
        )
    return tasks


def load_userrl_functions(data_root: str | Path) -> dict[str, dict[str, Any]]:
    """The original functions.json, validated and indexed by id."""
    path = Path(data_root) / USERRL_FUNCTIONS_JSON
    if not path.is_file():
        raise FileNotFoundError(
            f"{path} not found: data_root must point at a UserRL data folder (holding gyms/ and data/)"
        )
    items = _read_json(path)
    if not isinstance(items, list):
        raise ValueError(f"{path}: expected a JSON array of function items")
    index: dict[str, dict[str, Any]] = {}
    for raw in items:
        record = validate_record(raw, str(path))
        if record["id"] in index:
            raise ValueError(f"{path}: duplicate id {record['id']!r}")
        index[record["id"]] = record
    return index


def _create_kwargs_id(row: dict[str, Any]) -> Any:
    kwargs = (((row.get("extra_info") or {}).get("tools_kwargs") or {}).get("interact_with_env") or {}).get(
        "create_kwargs"
    ) or {}
    return kwargs.get("id")


def load_userrl_tasks(split: str, data_root: str | Path) -> list[Task]:
    """Original parquet rows of one split (train, test, alltrain, alltest) resolved against functions.json."""
    if split not in USERRL_PARQUET:
        raise ValueError(f"UserRL function splits are {sorted(USERRL_PARQUET)}, not {split!r}")
    import polars as pl  # lazy: only this loader needs polars

    functions = load_userrl_functions(data_root)
    functions_path = Path(data_root) / USERRL_FUNCTIONS_JSON
    path = Path(data_root) / USERRL_PARQUET[split]
    if not path.is_file():
        raise FileNotFoundError(
            f"{path} not found: data_root must point at a UserRL data folder (holding gyms/ and data/)"
        )
    try:
        frame = pl.read_parquet(path, columns=["data_source", "prompt", "extra_info"])
    except Exception as exc:  # polars raises several error types for unreadable files
        raise ValueError(f"{path}: cannot read the parquet file ({exc})") from exc
    tasks = []
    for index, row in enumerate(frame.filter(pl.col("data_source") == DATA_SOURCE).iter_rows(named=True)):
        item_id = _create_kwargs_id(row)
        if item_id not in functions:
            raise ValueError(
                f"{path}: row {index} has function id {item_id!r}, which is not in {functions_path}"
            )
        row_split = (row.get("extra_info") or {}).get("split") or split
        try:
            tasks.append(
                Task(
                    GYM,
                    item_id,
                    list(row["prompt"]),
                    dict(functions[item_id]),
                    split=row_split,
                    source="userrl",
                )
            )
        except ValueError as exc:
            raise ValueError(f"{path}: row {index} ({item_id!r}): {exc}") from exc
    return tasks


def load_function_tasks(
    split: str = "train",
    source: str = "builtin",
    data_root: str | Path | None = None,
    difficulty: int | Sequence[int] | None = None,
) -> list[Task]:
    """Function tasks from our own set (source "builtin") or the original UserRL files (source "userrl")."""
    if source == "builtin":
        return load_builtin_tasks(split, difficulty)
    if source == "userrl":
        if data_root is None:
            raise ValueError("source='userrl' needs data_root: the folder of the original UserRL data")
        if difficulty is not None:
            raise ValueError("the original UserRL function tasks have no difficulty levels; drop the filter")
        return load_userrl_tasks(split, data_root)
    raise ValueError(f"unknown task source {source!r}; use 'builtin' or 'userrl'")
