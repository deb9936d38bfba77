"""Intention task sets: our own hand-written requests ("builtin") and the original UserRL files ("userrl")."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from userrl.envs.base import Task
from userrl.envs.loading import (
    check_builtin_split,
    check_userrl_split,
    create_kwargs,
    index_json_arrays,
    item_id_of,
    label_filter,
    nonempty_text,
    read_split_items,
    resolve_userrl_rows,
    source_loader,
    system_user_prompt,
    userrl_parquet,
)

GYM = "intention"
DATA_SOURCE = "interact_intention"
IMPORTANCE_LEVELS = (1, 2, 3)
#: Upper bound on details per item; the observation's detail counters are Discrete(MAX_DETAILS + 1).
MAX_DETAILS = 64

#: The system message of builtin tasks: the gym and its one choice. The chat layer appends how to act.
INTENTION_SYSTEM_PROMPT = (
    "You are playing IntentionGym. A user has made a vague request. Several details that matter for "
    "doing it well are missing, and only the user knows them.\n"
    "Choice:\n"
    "- action: ask the user one clarifying question. Aim each question at one missing detail: a question "
    "that bundles several details earns less, and a generic question earns nothing.\n"
    "The more important a detail, the more it is worth. The game ends when every missing detail is "
    "uncovered. Your steps are limited."
)
INTENTION_USER_TEMPLATE = (
    "Category: {category}\n"
    "Request: {task}\n"
    "Ask clarifying questions to find out all the missing details of this request."
)

BUILTIN_TASKS_PATH = Path(__file__).resolve().parent / "data" / "intentions.json"
USERRL_JSON = {
    "train": Path("gyms/IntentionGym/intentiongym/data/all_intentions_train.json"),
    "test": Path("gyms/IntentionGym/intentiongym/data/all_intentions_test.json"),
}
#: Split name -> parquet file (relative to data_root). The all* files mix every gym; rows are filtered.
USERRL_PARQUET = userrl_parquet("intention_multiturn")


@dataclass(frozen=True)
class Detail:
    """One hidden missing detail of a request."""

    description: str
    importance: int
    inquiry: str
    options: tuple[str, ...]


def details_of(record: dict[str, Any]) -> tuple[Detail, ...]:
    """The Detail objects of a validated item, in file order."""
    return tuple(
        Detail(d["description"], d["importance"], d["inquiry"], tuple(d["options"]))
        for d in record["missing_details"]
    )


def builtin_prompt(category: str, task: str) -> list[dict[str, str]]:
    """The [system, user] prompt of one builtin request."""
    user = INTENTION_USER_TEMPLATE.format(category=category, task=task)
    return system_user_prompt(INTENTION_SYSTEM_PROMPT, user)


def _importance(value: Any, where: str) -> int:
    # The original files store "1"/"2"/"3" as strings; ours store integers. Anything else is refused.
    if isinstance(value, bool):
        raise ValueError(f"{where}: importance must be 1, 2 or 3, got {value!r}")
    if isinstance(value, str) and value.strip() in ("1", "2", "3"):
        return int(value.strip())
    if isinstance(value, int) and value in IMPORTANCE_LEVELS:
        return value
    raise ValueError(f"{where}: importance must be 1, 2 or 3, got {value!r}")


def validate_detail(raw: Any, where: str) -> dict[str, Any]:
    """Check one missing detail; returns it normalised (importance as int, options as a list of str)."""
    if not isinstance(raw, dict):
        raise ValueError(f"{where}: a missing detail must be an object, got {type(raw).__name__}")
    options = raw.get("options")
    if not isinstance(options, list) or not options:
        raise ValueError(f"{where}: options must be a non-empty list of strings")
    return {
        "description": nonempty_text(raw.get("description"), "description", where),
        "importance": _importance(raw.get("importance"), where),
        "inquiry": nonempty_text(raw.get("inquiry"), "inquiry", where),
        "options": [nonempty_text(o, "every option", where) for o in options],
    }


def validate_item(raw: Any, where: str) -> dict[str, Any]:
    """Check one request (id, category, task, missing_details); ValueError names where and the id."""
    item_id = item_id_of(raw, where)
    here = f"{where}: item {item_id!r}"
    details = raw.get("missing_details")
    if not isinstance(details, list) or not details:
        raise ValueError(f"{here}: missing_details must be a non-empty list")
    if len(details) > MAX_DETAILS:
        raise ValueError(f"{here}: {len(details)} missing details, more than the limit of {MAX_DETAILS}")
    return {
        "id": item_id,
        "category": nonempty_text(raw.get("category"), "category", here),
        "task": nonempty_text(raw.get("task"), "task", here),
        "missing_details": [validate_detail(d, f"{here}, detail {i + 1}") for i, d in enumerate(details)],
    }


def read_builtin_items(path: str | Path | None = None) -> list[dict[str, Any]]:
    """Every builtin item (validated, with its split) in file order."""
    return read_split_items(Path(path) if path is not None else BUILTIN_TASKS_PATH, "tasks", validate_item)


def load_builtin_tasks(
    split: str = "train", category: str | Sequence[str] | None = None, path: str | Path | None = None
) -> list[Task]:
    """Our own requests (intention/data/intentions.json) of one split, optionally of some categories."""
    check_builtin_split(GYM, split)
    wanted = label_filter(GYM, "categories", category)
    tasks = []
    for item in read_builtin_items(path):
        if item["split"] != split or (wanted is not None and item["category"] not in wanted):
            continue
        record = {k: v for k, v in item.items() if k != "split"}
        prompt = builtin_prompt(record["category"], record["task"])
        tasks.append(Task(GYM, record["id"], prompt, record, split=split, source="builtin"))
    if wanted is not None and not tasks:
        raise ValueError(f"no builtin intention tasks of split {split!r} in categories {sorted(wanted)}")
    return tasks


def load_userrl_items(data_root: str | Path) -> dict[str, dict[str, Any]]:
    """The original train and test JSON files, validated and indexed by id."""
    return index_json_arrays(data_root, USERRL_JSON.values(), "intention items", validate_item)


def load_userrl_tasks(
    split: str, data_root: str | Path, category: str | Sequence[str] | None = None
) -> list[Task]:
    """Original parquet rows of one split (train, test, alltrain, alltest) resolved against the JSON files,
    optionally of some categories."""
    check_userrl_split(GYM, split, USERRL_PARQUET)
    wanted = label_filter(GYM, "categories", category)
    items = load_userrl_items(data_root)
    missing = f"in neither {USERRL_JSON['train'].name} nor {USERRL_JSON['test'].name}"
    path = Path(data_root) / USERRL_PARQUET[split]
    tasks = resolve_userrl_rows(
        GYM, split, path, DATA_SOURCE, items.get, what="intention id", missing=missing, check=_same_request
    )
    return tasks if wanted is None else [t for t in tasks if t.data["category"] in wanted]


def _same_request(row: dict[str, Any], record: dict[str, Any], where: str) -> None:
    kwargs = create_kwargs(row)
    for key in ("task", "category"):
        # The row repeats these fields; a disagreement means the parquet and JSON files do not match.
        if kwargs.get(key) is not None and kwargs[key] != record[key]:
            raise ValueError(f"{where} has a {key} that differs from the JSON")


#: load_intention_tasks(split, source, data_root, category=None): the registry's loader of Intention tasks.
load_intention_tasks = source_loader(GYM, load_builtin_tasks, load_userrl_tasks)
