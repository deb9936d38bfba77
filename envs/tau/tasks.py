"""Tau task sets: our own generated retail tasks ("builtin") and the original UserRL/τ-bench tasks ("userrl")."""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from userrl.envs.base import Task
from userrl.envs.loading import (
    check_builtin_split,
    check_userrl_split,
    create_kwargs,
    index_json_arrays,
    item_id_of,
    load_leveled_tasks,
    read_userrl_rows,
    source_loader,
    system_user_prompt,
    userrl_parquet,
    userrl_task,
)
from userrl.envs.tau.database import (
    BUILTIN_RETAIL_DB,
    DOMAINS,
    DomainData,
    builtin_domain,
    domain_available,
    find_tau_data_root,
    tau_bench_domain,
)

GYM = "tau"
DATA_SOURCE = "interact_taugym"
#: Task.data["database"]: our shipped retail database, or the τ-bench files under tau_data_root.
DB_BUILTIN = "builtin"
DB_TAU_BENCH = "tau-bench"

#: The system message of builtin tasks (choices and contents only; the chat layer adds how to act).
TAU_SYSTEM_PROMPT = (
    "You are playing TauGym: you are the customer-service agent of an online store. A customer wants "
    "something done, such as cancelling or changing a pending order, returning or exchanging delivered "
    "items, or updating an address. Help them by talking with them and by using the store's internal "
    "tools, which read and change the store database.\n"
    "Choices:\n"
    "- search: give 'tools' to list the internal tools and their arguments, or 'help' for a short guide.\n"
    "- action: write a message to the customer, for example to ask for details or to confirm a change.\n"
    '- answer: call one internal tool as JSON: {"name": tool_name, "arguments": {...}}.\n'
    "Identify the customer first, get an explicit yes before changing anything, and tell the customer "
    "the facts they ask for. Your steps are limited."
)
TAU_USER_TEMPLATE = (
    "Here is my request: {obs}\nPlease handle it step by step, using the internal tools and talking with me."
)

BUILTIN_TASKS_PATH = Path(__file__).resolve().parent / "data" / "tasks.json"
#: Difficulty levels of the builtin tasks: 0 the easy tier (one or two look-ups and one change, with only the
#: tier's few tools offered, so that a small model's prompt stays short), 1 the full set (every retail tool).
LEVELS = (0, 1)
USERRL_TAU_JSON = {
    "train": Path("gyms/TauGym/taugym/data/tau_train.json"),
    "test": Path("gyms/TauGym/taugym/data/tau_test.json"),
}
#: Split name -> parquet file (relative to data_root). The all* files mix every gym; rows are filtered.
USERRL_PARQUET = userrl_parquet("tau_multiturn")


def domain_of(task_id: str) -> str:
    """The τ domain of a task id: retail if the id says 'retail', else airline (docs/spec/GYMS.md §5)."""
    return "retail" if "retail" in task_id else "airline"


def builtin_prompt(obs: str) -> list[dict[str, str]]:
    """The [system, user] prompt of a builtin task."""
    return system_user_prompt(TAU_SYSTEM_PROMPT, TAU_USER_TEMPLATE.format(obs=obs.strip()))


# ---------------------------------------------------------------------- validation


def _check(condition: bool, where: str, item_id: Any, what: str) -> None:
    if not condition:
        raise ValueError(f"{where}: item {item_id!r} {what}")


def validate_task_data(data: Any, where: str) -> dict[str, Any]:
    """Check a Task.data payload (id, domain, database, user_id, obs, instruction, actions, outputs; optionally
    the tools offered and the gold end state's hash)."""
    if not isinstance(data, Mapping):
        raise ValueError(f"{where}: task data must be an object, got {type(data).__name__}")
    item_id = data.get("id")
    _check(isinstance(item_id, str) and bool(item_id), where, item_id, "needs a string 'id'")
    _check(data.get("domain") in DOMAINS, where, item_id, f"needs 'domain' in {list(DOMAINS)}")
    _check(data.get("database") in (DB_BUILTIN, DB_TAU_BENCH), where, item_id, "has an unknown 'database'")
    for key in ("user_id", "obs", "instruction"):
        _check(isinstance(data.get(key), str), where, item_id, f"needs a string {key!r}")
    actions = data.get("actions")
    _check(isinstance(actions, list), where, item_id, "needs 'actions' as a list")
    for action in actions:
        _check(
            isinstance(action, Mapping)
            and isinstance(action.get("name"), str)
            and isinstance(action.get("kwargs", {}), Mapping),
            where,
            item_id,
            f"has a malformed action {action!r:.120}",
        )
    outputs = data.get("outputs")
    _check(
        isinstance(outputs, list) and all(isinstance(o, str) for o in outputs),
        where,
        item_id,
        "needs 'outputs' as a list of strings",
    )
    root = data.get("tau_data_root")
    _check(root is None or isinstance(root, str), where, item_id, "has a non-string 'tau_data_root'")
    tools = data.get("tools")
    _check(tools is None or (isinstance(tools, list | tuple) and all(isinstance(t, str) for t in tools)),
           where, item_id, "needs 'tools' as a list of tool names (or none: every tool of the domain)")
    gold_hash = data.get("gold_hash")
    _check(gold_hash is None or isinstance(gold_hash, str), where, item_id, "has a non-string 'gold_hash'")
    return {
        "id": item_id,
        "domain": data["domain"],
        "database": data["database"],
        "tau_data_root": root,
        "user_id": data["user_id"],
        "obs": data["obs"],
        "instruction": data["instruction"],
        "actions": [{"name": a["name"], "kwargs": dict(a.get("kwargs") or {})} for a in actions],
        "outputs": list(outputs),
        "tools": None if tools is None else tuple(tools),
        "gold_hash": gold_hash,
    }


def resolve_domain_data(data: Mapping[str, Any], tau_data_root: str | Path | None = None) -> DomainData:
    """The pristine database a task runs on (the explicit tau_data_root wins over the task's own)."""
    if data["database"] == DB_BUILTIN:
        return builtin_domain()
    root = tau_data_root if tau_data_root is not None else data.get("tau_data_root")
    if root is None:
        raise ValueError(
            f"tau task {data['id']!r} needs the τ-bench {data['domain']} database: pass tau_data_root "
            f"(the folder holding retail/ and airline/)"
        )
    return tau_bench_domain(root, data["domain"])


# ---------------------------------------------------------------------- builtin tasks


def _check_domain(domain: str | None) -> None:
    if domain is not None and domain not in DOMAINS:
        raise ValueError(f"unknown tau domain {domain!r}; known: {', '.join(DOMAINS)}")


def load_builtin_tasks(
    split: str = "train",
    domain: str | None = None,
    path: str | Path | None = None,
    difficulty: int | list[int] | None = None,
) -> list[Task]:
    """Our own generated retail tasks (tau/data/tasks.json) of one split, optionally of some levels (`LEVELS`)."""
    _check_domain(domain)
    check_builtin_split(GYM, split)
    if domain not in (None, "retail"):
        return []  # the builtin set is retail only
    path = Path(path) if path is not None else BUILTIN_TASKS_PATH
    return load_leveled_tasks(GYM, path, split, difficulty, LEVELS, validate_task_data,
                              lambda data: builtin_prompt(data["obs"]))


# ---------------------------------------------------------------------- the original UserRL tasks


def _raw_item(raw: Any, where: str) -> dict[str, Any]:
    # Raw items: they are turned into Task.data per row, once the τ-bench folder is known.
    return dict(raw, id=item_id_of(raw, where))


def load_userrl_items(data_root: str | Path) -> dict[str, dict[str, Any]]:
    """Both original task files (tau_train.json, tau_test.json) as raw items indexed by id."""
    return index_json_arrays(data_root, USERRL_TAU_JSON.values(), "tau items", _raw_item)


def userrl_task_data(item: Mapping[str, Any], tau_data_root: str | Path | None, where: str) -> dict[str, Any]:
    """Task.data of one original item: user id, gold actions, instruction and outputs from info.task."""
    task = ((item.get("info") or {}).get("task")) if isinstance(item.get("info"), Mapping) else None
    if not isinstance(task, Mapping):
        raise ValueError(f"{where}: item {item.get('id')!r} has no 'info.task' object")
    return validate_task_data(
        {
            "id": item.get("id"),
            "domain": domain_of(str(item.get("id"))),
            "database": DB_TAU_BENCH,
            "tau_data_root": None if tau_data_root is None else str(Path(tau_data_root).resolve()),
            "user_id": task.get("user_id"),
            "obs": item.get("obs"),
            "instruction": task.get("instruction"),
            "actions": task.get("actions"),
            "outputs": task.get("outputs"),
        },
        where,
    )


def load_userrl_tasks(
    split: str,
    data_root: str | Path,
    tau_data_root: str | Path | None = None,
    domain: str | None = None,
    strict: bool = False,
) -> list[Task]:
    """Original parquet rows of one split resolved against the UserRL JSON; rows whose τ-bench domain
    database is missing are skipped with a warning (strict=True raises instead)."""
    _check_domain(domain)
    check_userrl_split(GYM, split, USERRL_PARQUET)
    items = load_userrl_items(data_root)
    root = find_tau_data_root(tau_data_root, data_root)
    path = Path(data_root) / USERRL_PARQUET[split]
    tasks, skipped = [], 0
    for index, row in enumerate(read_userrl_rows(path, DATA_SOURCE, ["data_source", "prompt", "extra_info"])):
        item_id = create_kwargs(row).get("id")
        if item_id not in items:
            raise ValueError(
                f"{path}: row {index} has tau id {item_id!r}, which is not in the UserRL tau JSON"
            )
        row_domain = domain_of(item_id)
        if domain is not None and row_domain != domain:
            continue
        if not domain_available(root, row_domain):
            skipped += 1
            continue
        json_path = Path(data_root) / USERRL_TAU_JSON["train" if "train" in item_id else "test"]
        data = userrl_task_data(items[item_id], root, str(json_path))
        tasks.append(userrl_task(GYM, item_id, row, data, split, f"{path}: row {index}"))
    if skipped:
        message = (
            f"{skipped} tau rows of {path} skipped: the τ-bench domain data was not found "
            f"(tau_data_root={root}); pass tau_data_root or place tau-bench-data beside data_root"
        )
        if strict:
            raise FileNotFoundError(message)
        warnings.warn(message, RuntimeWarning, stacklevel=2)
    return tasks


#: load_tau_tasks(split, source, data_root, domain=None, tau_data_root=None, strict=False): the registry's
#: loader of Tau tasks (tau_data_root and strict apply to the original data only).
load_tau_tasks = source_loader(
    GYM, load_builtin_tasks, load_userrl_tasks, builtin_only=("difficulty",), userrl_only=("tau_data_root", "strict")
)


__all__ = [
    "BUILTIN_RETAIL_DB",
    "BUILTIN_TASKS_PATH",
    "DB_BUILTIN",
    "DB_TAU_BENCH",
    "LEVELS",
    "TAU_SYSTEM_PROMPT",
    "TAU_USER_TEMPLATE",
    "builtin_prompt",
    "domain_of",
    "load_builtin_tasks",
    "load_tau_tasks",
    "load_userrl_items",
    "load_userrl_tasks",
    "resolve_domain_data",
    "userrl_task_data",
    "validate_task_data",
]
