"""Seeded generator of the builtin Tau data; `python -m userrl.envs.tau.generate` rewrites both files.

It writes our own retail database (tau/data/retail_db.json) and our own tasks over it (tau/data/tasks.json).
Every task's gold actions are replayed before writing: each call must succeed, a task that changes the
database must end in a state other than the fresh one, and the end state's hash is written with the task.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from userrl.envs.generate_cli import generator_parser, render_item_lines, write_or_check
from userrl.envs.tau.database import BUILTIN_RETAIL_DB, DomainData, EpisodeDB
from userrl.envs.tau.generate_db import generate_database
from userrl.envs.tau.generate_tasks import generate_task_records
from userrl.envs.tau.tasks import BUILTIN_TASKS_PATH, DB_BUILTIN
from userrl.envs.tau.tools import ERROR_PREFIX, offered_tools, replay_actions

GENERATOR_SEED = 20250612


def with_gold_hashes(db: dict[str, dict[str, Any]], records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Replay every task's gold actions on a fresh copy and record the end state's hash (`gold_hash`); raise on
    a failing call, a no-op change or a tool the task does not offer."""
    domain = DomainData("retail", db, "generated retail database", None)
    ids = [r["id"] for r in records]
    if len(set(ids)) != len(ids):
        raise RuntimeError("duplicate builtin tau task ids")
    hashed = []
    for record in records:
        tools = offered_tools("retail", tuple(record["tools"]) if record.get("tools") else None)
        unoffered = sorted({a["name"] for a in record["actions"]} - set(tools))
        if unoffered:
            raise RuntimeError(f"task {record['id']}: gold actions use tools it does not offer: {unoffered}")
        episode = EpisodeDB(domain)
        observations = replay_actions(episode, record["actions"])
        failed = [o for o in observations if o.startswith(ERROR_PREFIX)]
        if failed:
            raise RuntimeError(f"task {record['id']}: a gold action failed: {failed[0]}")
        writes = any(tools[a["name"]].writes for a in record["actions"])
        if writes and episode.state_hash() == domain.fresh_hash():
            raise RuntimeError(f"task {record['id']}: the gold actions do not change the database")
        hashed.append({**record, "gold_hash": episode.state_hash()})
    return hashed


def generate(seed: int = GENERATOR_SEED) -> tuple[dict[str, dict[str, Any]], list[dict[str, Any]]]:
    """The builtin database and its validated tasks (each task with domain/database fields)."""
    db = generate_database(seed)
    records = [{**r, "domain": "retail", "database": DB_BUILTIN} for r in generate_task_records(db, seed)]
    return db, with_gold_hashes(db, records)


def render_database(db: dict[str, dict[str, Any]]) -> str:
    """retail_db.json: one record per line (readable diffs, a few hundred KB)."""
    tables = []
    for name, table in db.items():
        lines = ",\n".join(f"  {json.dumps(key)}: {json.dumps(record)}" for key, record in table.items())
        tables.append(f" {json.dumps(name)}: {{\n{lines}\n }}")
    return "{\n" + ",\n".join(tables) + "\n}\n"


def render_tasks(records: list[dict[str, Any]], seed: int) -> str:
    """tasks.json: a small header, then one task per line."""
    return render_item_lines("tau", "tasks", seed, records, header_extra=', "database": "retail_db.json"')


def main(argv: list[str] | None = None) -> int:
    """Write (or, with --check, compare against) the builtin database and tasks files."""
    outputs = {"--db-output": BUILTIN_RETAIL_DB, "--tasks-output": BUILTIN_TASKS_PATH}
    args = generator_parser(__doc__.splitlines()[0], GENERATOR_SEED, outputs).parse_args(argv)
    db, records = generate(args.seed)
    texts = {args.db_output: render_database(db), args.tasks_output: render_tasks(records, args.seed)}
    return write_or_check(texts, args.check)


if __name__ == "__main__":
    sys.exit(main())
