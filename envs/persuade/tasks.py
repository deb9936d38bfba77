"""Persuade task sets: our own hand-written claims ("builtin") and the original UserRL parquet rows ("userrl").

The original Persuade JSON is absent from the shared data (GYMS.md 0.1), but every parquet row carries the
claim and the environment's initial argument in its create_kwargs, so source "userrl" runs from the rows
alone and needs no JSON.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from userrl.envs.base import Task

GYM = "persuade"
DATA_SOURCE = "interact_persuade"

#: The system message of builtin tasks: the gym and its one choice. The chat layer appends how to act.
PERSUADE_SYSTEM_PROMPT = (
    "You are playing PersuadeGym. The other side strongly agrees with a claim that you oppose. Your goal "
    "is to move its stance, step by step, all the way to strongly disagree.\n"
    "Choice:\n"
    "- answer: give one argument against the claim. Respond to the other side's points, support yours "
    "with evidence, develop your reasoning, and do not repeat yourself.\n"
    "Every step that moves its stance towards disagreement earns reward. Your steps are limited."
)
PERSUADE_USER_TEMPLATE = (
    "The other side holds this claim, which you oppose: {claim}\n"
    "Persuade it to change its position on the claim."
)

BUILTIN_TASKS_PATH = Path(__file__).resolve().parent / "data" / "claims.json"
#: Where the original JSON would be; it is not needed and not read (see the module docstring).
USERRL_JSON = Path("gyms/PersuadeGym/persuadegym/data/all_statements_refined.json")
#: Split name -> parquet file (relative to data_root). The all* files mix every gym; rows are filtered.
USERRL_PARQUET = {
    "train": Path("data/persuasion_multiturn/train.parquet"),
    "test": Path("data/persuasion_multiturn/test.parquet"),
    "alltrain": Path("data/alltrain_multiturn/train.parquet"),
    "alltest": Path("data/alltest_multiturn/test.parquet"),
}


def builtin_prompt(claim: str) -> list[dict[str, str]]:
    """The [system, user] prompt of one builtin claim."""
    return [
        {"role": "system", "content": PERSUADE_SYSTEM_PROMPT},
        {"role": "user", "content": PERSUADE_USER_TEMPLATE.format(claim=claim)},
    ]


def _text(value: Any, what: str, where: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{where}: {what} must be a non-empty string, got {value!r:.80}")
    return value


def validate_item(raw: Any, where: str) -> dict[str, Any]:
    """Check one item (id, claim, argument; optional counterarguments); ValueError names where and the id."""
    if not isinstance(raw, dict):
        raise ValueError(f"{where}: every item must be an object, got {type(raw).__name__}")
    item_id = raw.get("id")
    if not isinstance(item_id, str) or not item_id:
        raise ValueError(f"{where}: an item has no string 'id': {raw!r:.200}")
    here = f"{where}: item {item_id!r}"
    record = {
        "id": item_id,
        "claim": _text(raw.get("claim"), "claim", here),
        "argument": _text(raw.get("argument"), "argument", here),
    }
    counter = raw.get("counterarguments")
    if counter is not None:
        # Hidden solver material of our own items: rebuttals the privileged solver plays in order.
        if not isinstance(counter, list):
            raise ValueError(f"{here}: counterarguments must be a list of strings")
        record["counterarguments"] = [_text(c, "every counterargument", here) for c in counter]
    return record


def read_json(path: Path) -> Any:
    """A JSON file's content; ValueError names the file when it does not parse."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: not valid JSON ({exc})") from exc


def read_builtin_items(path: str | Path | None = None) -> list[dict[str, Any]]:
    """Every builtin item (validated, with its split) in file order."""
    path = Path(path) if path is not None else BUILTIN_TASKS_PATH
    doc = read_json(path)
    if not isinstance(doc, dict) or not isinstance(doc.get("tasks"), list):
        raise ValueError(f"{path}: expected an object with a 'tasks' list")
    items, seen = [], set()
    for raw in doc["tasks"]:
        record = validate_item(raw, str(path))
        if record["id"] in seen:
            raise ValueError(f"{path}: duplicate id {record['id']!r}")
        seen.add(record["id"])
        if raw.get("split") not in ("train", "test"):
            raise ValueError(f"{path}: item {record['id']!r} needs split 'train' or 'test'")
        items.append(dict(record, split=raw["split"]))
    return items


def load_builtin_tasks(split: str = "train", path: str | Path | None = None) -> list[Task]:
    """Our own claims (persuade/data/claims.json) of one split."""
    if split not in ("train", "test"):
        raise ValueError(f"builtin persuade tasks have splits 'train' and 'test', not {split!r}")
    tasks = []
    for item in read_builtin_items(path):
        if item["split"] != split:
            continue
        record = {k: v for k, v in item.items() if k != "split"}
        tasks.append(Task(GYM, record["id"], builtin_prompt(record["claim"]), record, split=split))
    return tasks


def _row_fields(row: dict[str, Any]) -> dict[str, Any]:
    """id, claim and argument of a row: from create_kwargs, else from the reward_model copies."""
    kwargs = (((row.get("extra_info") or {}).get("tools_kwargs") or {}).get("interact_with_env") or {}).get(
        "create_kwargs"
    ) or {}
    reward_model = row.get("reward_model") or {}
    return {key: kwargs.get(key) or reward_model.get(key) for key in ("id", "claim", "argument")}


def load_userrl_tasks(split: str, data_root: str | Path) -> list[Task]:
    """Original parquet rows of one split (train, test, alltrain, alltest), built from the rows alone."""
    if split not in USERRL_PARQUET:
        raise ValueError(f"UserRL persuade splits are {sorted(USERRL_PARQUET)}, not {split!r}")
    import polars as pl  # lazy: only this loader needs polars

    path = Path(data_root) / USERRL_PARQUET[split]
    if not path.is_file():
        raise FileNotFoundError(
            f"{path} not found: data_root must point at a UserRL data folder (holding data/). Persuade needs "
            f"only the parquet rows; the original JSON ({USERRL_JSON.name}) is not used."
        )
    try:
        frame = pl.read_parquet(path, columns=["data_source", "prompt", "reward_model", "extra_info"])
    except Exception as exc:  # polars raises several error types for unreadable files
        raise ValueError(f"{path}: cannot read the parquet file ({exc})") from exc
    tasks = []
    for index, row in enumerate(frame.filter(pl.col("data_source") == DATA_SOURCE).iter_rows(named=True)):
        fields = _row_fields(row)
        try:
            record = validate_item(fields, f"{path}: row {index}")
        except ValueError as exc:
            raise ValueError(f"{exc} (the persuade env is built from each row's claim and argument)") from exc
        row_split = (row.get("extra_info") or {}).get("split") or split
        try:
            tasks.append(
                Task(GYM, record["id"], list(row["prompt"]), record, split=row_split, source="userrl")
            )
        except ValueError as exc:
            raise ValueError(f"{path}: row {index} ({record['id']!r}): {exc}") from exc
    return tasks


def load_persuade_tasks(
    split: str = "train", source: str = "builtin", data_root: str | Path | None = None
) -> list[Task]:
    """Persuade tasks from our own set (source "builtin") or the original parquet rows (source "userrl")."""
    if source == "builtin":
        return load_builtin_tasks(split)
    if source == "userrl":
        if data_root is None:
            raise ValueError("source='userrl' needs data_root: the folder of the original UserRL data")
        return load_userrl_tasks(split, data_root)
    raise ValueError(f"unknown task source {source!r}; use 'builtin' or 'userrl'")
