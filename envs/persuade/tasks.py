"""Persuade task sets: our own hand-written claims ("builtin") and the original UserRL parquet rows ("userrl").

The original Persuade JSON is absent from the shared data (docs/spec/GYMS.md §0.1), but every parquet row carries the
claim and the environment's initial argument in its create_kwargs, so source "userrl" runs from the rows
alone and needs no JSON.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from userrl.envs.base import Task
from userrl.envs.loading import (
    check_builtin_split,
    check_userrl_split,
    create_kwargs,
    item_id_of,
    nonempty_text,
    read_split_items,
    read_userrl_rows,
    source_loader,
    system_user_prompt,
    userrl_parquet,
    userrl_task,
)

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
USERRL_PARQUET = userrl_parquet("persuasion_multiturn")


def builtin_prompt(claim: str) -> list[dict[str, str]]:
    """The [system, user] prompt of one builtin claim."""
    return system_user_prompt(PERSUADE_SYSTEM_PROMPT, PERSUADE_USER_TEMPLATE.format(claim=claim))


def validate_item(raw: Any, where: str) -> dict[str, Any]:
    """Check one item (id, claim, argument; optional counterarguments); ValueError names where and the id."""
    item_id = item_id_of(raw, where)
    here = f"{where}: item {item_id!r}"
    record = {
        "id": item_id,
        "claim": nonempty_text(raw.get("claim"), "claim", here),
        "argument": nonempty_text(raw.get("argument"), "argument", here),
    }
    counter = raw.get("counterarguments")
    if counter is not None:
        # Hidden solver material of our own items: rebuttals the privileged solver plays in order.
        if not isinstance(counter, list):
            raise ValueError(f"{here}: counterarguments must be a list of strings")
        record["counterarguments"] = [nonempty_text(c, "every counterargument", here) for c in counter]
    return record


def read_builtin_items(path: str | Path | None = None) -> list[dict[str, Any]]:
    """Every builtin item (validated, with its split) in file order."""
    return read_split_items(Path(path) if path is not None else BUILTIN_TASKS_PATH, "tasks", validate_item)


def load_builtin_tasks(split: str = "train", path: str | Path | None = None) -> list[Task]:
    """Our own claims (persuade/data/claims.json) of one split."""
    check_builtin_split(GYM, split)
    tasks = []
    for item in read_builtin_items(path):
        if item["split"] != split:
            continue
        record = {k: v for k, v in item.items() if k != "split"}
        tasks.append(Task(GYM, record["id"], builtin_prompt(record["claim"]), record, split=split))
    return tasks


def _row_fields(row: dict[str, Any]) -> dict[str, Any]:
    """id, claim and argument of a row: from create_kwargs, else from the reward_model copies."""
    kwargs = create_kwargs(row)
    reward_model = row.get("reward_model") or {}
    return {key: kwargs.get(key) or reward_model.get(key) for key in ("id", "claim", "argument")}


def load_userrl_tasks(split: str, data_root: str | Path) -> list[Task]:
    """Original parquet rows of one split (train, test, alltrain, alltest), built from the rows alone."""
    check_userrl_split(GYM, split, USERRL_PARQUET)
    path = Path(data_root) / USERRL_PARQUET[split]
    hint = (
        "data_root must point at a UserRL data folder (holding data/). Persuade needs only the parquet rows; "
        f"the original JSON ({USERRL_JSON.name}) is not used."
    )
    rows = read_userrl_rows(path, DATA_SOURCE, ["data_source", "prompt", "reward_model", "extra_info"], hint)
    tasks = []
    for index, row in enumerate(rows):
        fields = _row_fields(row)
        try:
            record = validate_item(fields, f"{path}: row {index}")
        except ValueError as exc:
            raise ValueError(f"{exc} (the persuade env is built from each row's claim and argument)") from exc
        tasks.append(userrl_task(GYM, record["id"], row, record, split, f"{path}: row {index}"))
    return tasks


#: load_persuade_tasks(split, source, data_root): the registry's loader of Persuade tasks.
load_persuade_tasks = source_loader(GYM, load_builtin_tasks, load_userrl_tasks)
