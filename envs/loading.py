"""Task-loading helpers shared by the gyms: shipped JSON data files and the original UserRL parquet rows."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Collection, Iterable, Sequence
from pathlib import Path
from typing import Any

from userrl.envs.base import Task

logger = logging.getLogger(__name__)

#: The original mixtures of every gym (rows are filtered by data_source), relative to data_root.
MIXTURE_PARQUET = {
    "alltrain": Path("data/alltrain_multiturn/train.parquet"),
    "alltest": Path("data/alltest_multiturn/test.parquet"),
}

#: What a missing original file means; every gym's FileNotFoundError says it the same way.
DATA_ROOT_HINT = "data_root must point at a UserRL data folder (holding gyms/ and data/)"


# ---------------------------------------------------------------- prompts and files


def system_user_prompt(system: str, user: str) -> list[dict[str, str]]:
    """A task's prompt: one system message, then one user message."""
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


def userrl_parquet(folder: str, splits: Sequence[str] = ("train", "test")) -> dict[str, Path]:
    """Split name -> original parquet file under data_root: the gym's own files, then the mixtures."""
    return {**{split: Path("data") / folder / f"{split}.parquet" for split in splits}, **MIXTURE_PARQUET}


def read_json(path: Path) -> Any:
    """A JSON file's content; ValueError names the file when it does not parse."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: not valid JSON ({exc})") from exc


def require_file(path: Path, hint: str = DATA_ROOT_HINT) -> Path:
    """path itself; FileNotFoundError naming it, followed by hint, when it is not a file."""
    if not path.is_file():
        raise FileNotFoundError(f"{path} not found: {hint}")
    return path


def read_json_list(path: Path, key: str) -> list[Any]:
    """The list under `key` of a JSON object file, such as the 'tasks' of a shipped builtin file."""
    doc = read_json(path)
    if not isinstance(doc, dict) or not isinstance(doc.get(key), list):
        article = "an" if key[:1] in ("a", "e", "i", "o", "u") else "a"
        raise ValueError(f"{path}: expected an object with {article} {key!r} list")
    return doc[key]


def read_json_array(path: Path, what: str) -> list[Any]:
    """An original JSON array file under data_root; the errors name the file and what it should hold."""
    items = read_json(require_file(path))
    if not isinstance(items, list):
        raise ValueError(f"{path}: expected a JSON array of {what}")
    return items


def item_id_of(raw: Any, where: str) -> str:
    """The string 'id' of one data item; ValueError naming where unless raw is an object with one."""
    if not isinstance(raw, dict):
        raise ValueError(f"{where}: every item must be an object, got {type(raw).__name__}")
    item_id = raw.get("id")
    if not isinstance(item_id, str) or not item_id:
        raise ValueError(f"{where}: an item has no string 'id': {raw!r:.200}")
    return item_id


def nonempty_text(value: Any, what: str, where: str) -> str:
    """value itself; ValueError naming where and what unless it is a non-empty string."""
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{where}: {what} must be a non-empty string, got {value!r:.80}")
    return value


def index_by_id(
    items: Sequence[Any],
    validate: Callable[[Any, str], dict[str, Any]],
    path: Path,
    index: dict[str, dict[str, Any]] | None = None,
) -> dict[str, dict[str, Any]]:
    """Validated records by their 'id' (added to index when given); ValueError on a duplicate id."""
    index = {} if index is None else index
    for raw in items:
        record = validate(raw, str(path))
        if record["id"] in index:
            raise ValueError(f"{path}: duplicate id {record['id']!r}")
        index[record["id"]] = record
    return index


def index_json_arrays(
    data_root: str | Path, rels: Iterable[Path], what: str, validate: Callable[[Any, str], dict[str, Any]]
) -> dict[str, dict[str, Any]]:
    """Validated records of original JSON array files under data_root, by 'id'; ValueError on a duplicate."""
    index: dict[str, dict[str, Any]] = {}
    for rel in rels:
        path = Path(data_root) / rel
        # One index over every file: an id in two files is a duplicate too.
        index_by_id(read_json_array(path, what), validate, path, index)
    return index


def read_split_items(
    path: Path, key: str, validate: Callable[[Any, str], dict[str, Any]]
) -> list[dict[str, Any]]:
    """Every item of a shipped file (validated, unique by id) with its 'train'/'test' split, in file order."""
    items, seen = [], set()
    for raw in read_json_list(path, key):
        record = validate(raw, str(path))
        if record["id"] in seen:
            raise ValueError(f"{path}: duplicate id {record['id']!r}")
        seen.add(record["id"])
        if raw.get("split") not in ("train", "test"):
            raise ValueError(f"{path}: item {record['id']!r} needs split 'train' or 'test'")
        items.append(dict(record, split=raw["split"]))
    return items


# ---------------------------------------------------------------- splits, filters and sources


def label_filter(gym: str, what: str, value: Any, known: Collection[Any] | None = None) -> frozenset[Any] | None:
    """The labels a loader filter keeps (one label or several; None keeps all); ValueError on unknown ones."""
    if value is None:
        return None
    wanted = frozenset([value] if isinstance(value, str | int) else value)
    unknown = sorted(wanted - set(known)) if known is not None else []
    if unknown:
        raise ValueError(f"unknown {gym} {what} {unknown}; known: {sorted(known)}")
    return wanted


def check_builtin_split(gym: str, split: str) -> None:
    """ValueError unless split is one of the builtin sets' two splits."""
    if split not in ("train", "test"):
        raise ValueError(f"builtin {gym} tasks have splits 'train' and 'test', not {split!r}")


def load_leveled_tasks(
    gym: str,
    path: Path,
    split: str,
    difficulty: int | Sequence[int] | None,
    levels: Sequence[int],
    validate: Callable[[Any, str], dict[str, Any]],
    prompt: Callable[[dict[str, Any]], list[dict[str, str]]],
) -> list[Task]:
    """The builtin tasks of one split (and optionally some levels) from a generated file whose items carry
    `difficulty` and `split`: each item checked by `validate(raw, where)`, its prompt built by `prompt(record)`."""
    check_builtin_split(gym, split)
    wanted = label_filter(gym, "difficulty levels", difficulty, levels)
    tasks, seen = [], set()
    for raw in read_json_list(path, "tasks"):
        record = validate(raw, str(path))
        if record["id"] in seen:
            raise ValueError(f"{path}: duplicate id {record['id']!r}")
        seen.add(record["id"])
        level, item_split = raw.get("difficulty"), raw.get("split")
        if level not in levels or item_split not in ("train", "test"):
            raise ValueError(f"{path}: item {record['id']!r} needs difficulty {min(levels)}..{max(levels)} "
                             "and split train/test")
        if item_split == split and (wanted is None or level in wanted):
            tasks.append(Task(gym, record["id"], prompt(record), record, split=split, difficulty=level,
                              source="builtin"))
    return tasks


def check_userrl_split(gym: str, split: str, known: Collection[str], note: str = "") -> None:
    """ValueError unless split is one of the original data's splits (note is appended to the message)."""
    if split not in known:
        raise ValueError(f"UserRL {gym} splits are {sorted(known)}, not {split!r}{note}")


def require_data_root(data_root: str | Path | None) -> str | Path:
    """data_root itself; ValueError when source 'userrl' is asked for without one."""
    if data_root is None:
        raise ValueError("source='userrl' needs data_root: the folder of the original UserRL data")
    return data_root


def unknown_source(source: str) -> ValueError:
    """The error for a task source other than 'builtin' and 'userrl'."""
    return ValueError(f"unknown task source {source!r}; use 'builtin' or 'userrl'")


def source_loader(
    gym: str,
    builtin: Callable[..., list[Task]],
    userrl: Callable[..., list[Task]],
    *,
    builtin_only: Collection[str] = (),
    userrl_only: Collection[str] = (),
) -> Callable[..., list[Task]]:
    """A gym's load_tasks(split, source, data_root, **options): the one dispatch between the sources.

    Source "builtin" (our own tasks) calls builtin(split, **filters); source "userrl" (the original UserRL
    data) calls userrl(split, data_root, **options). builtin_only names filters the original data has no
    labels for (refused with source "userrl"); userrl_only names options only the original loader takes
    (such as another data folder; ignored with source "builtin").
    """

    def load(
        split: str = "train", source: str = "builtin", data_root: str | Path | None = None, **options: Any
    ) -> list[Task]:
        if source == "builtin":
            return builtin(split, **{k: v for k, v in options.items() if k not in userrl_only})
        if source == "userrl":
            root = require_data_root(data_root)
            for name in builtin_only:
                if options.get(name) is not None:
                    raise ValueError(
                        f"the {name} filter applies to builtin {gym} tasks only: the original UserRL data "
                        f"has no {name} labels; drop it"
                    )
            return userrl(split, root, **{k: v for k, v in options.items() if k not in builtin_only})
        raise unknown_source(source)

    load.__name__ = load.__qualname__ = f"load_{gym}_tasks"
    load.__doc__ = (
        f"{gym.capitalize()} tasks from our own set (source 'builtin') or the original UserRL files "
        "(source 'userrl', which needs data_root)."
    )
    return load


# ---------------------------------------------------------------- original parquet rows


def read_userrl_rows(
    path: Path, data_source: str, columns: Sequence[str], hint: str = DATA_ROOT_HINT
) -> list[dict[str, Any]]:
    """The rows of one gym (by data_source) of an original parquet file; clear errors when absent or bad."""
    require_file(path, hint)
    import polars as pl  # lazy: only the original-data loaders need polars

    try:
        frame = pl.read_parquet(path, columns=list(columns))
    except Exception as exc:  # polars raises several error types for unreadable files
        raise ValueError(f"{path}: cannot read the parquet file ({exc})") from exc
    # The all* files mix every gym; keep this gym's rows.
    return list(frame.filter(pl.col("data_source") == data_source).iter_rows(named=True))


def create_kwargs(row: dict[str, Any]) -> dict[str, Any]:
    """The env's create_kwargs of an original row (its lookup keys such as id or title); {} when absent."""
    return (((row.get("extra_info") or {}).get("tools_kwargs") or {}).get("interact_with_env") or {}).get(
        "create_kwargs"
    ) or {}


def row_split(row: dict[str, Any], split: str) -> str:
    """The split a row names itself (the all* files say which split each row came from), else split."""
    return (row.get("extra_info") or {}).get("split") or split


def userrl_task(
    gym: str, key: str, row: dict[str, Any], data: dict[str, Any], split: str, where: str
) -> Task:
    """The Task of one original row with its prompt verbatim; ValueError says where (file and row) and key."""
    try:
        return Task(gym, key, list(row["prompt"]), data, split=row_split(row, split), source="userrl")
    except ValueError as exc:
        raise ValueError(f"{where} ({key!r}): {exc}") from exc


def resolve_userrl_rows(
    gym: str,
    split: str,
    path: Path,
    data_source: str,
    lookup: Callable[[Any], dict[str, Any] | None],
    *,
    key: str = "id",
    what: str,
    missing: str,
    columns: Sequence[str] = ("data_source", "prompt", "extra_info"),
    check: Callable[[dict[str, Any], dict[str, Any], str], None] | None = None,
) -> list[Task]:
    """The Tasks of one gym's original parquet rows at path, each resolved through its lookup key.

    Every row's create_kwargs[key] goes to lookup (its record, or None: ValueError "row N has <what> K,
    which is <missing>"); check(row, record, where) may compare the row's own copies with the record.
    """
    tasks = []
    for index, row in enumerate(read_userrl_rows(path, data_source, columns)):
        where = f"{path}: row {index}"
        item_key = create_kwargs(row).get(key)
        record = lookup(item_key)
        if record is None:
            raise ValueError(f"{where} has {what} {item_key!r}, which is {missing}")
        if check is not None:
            check(row, record, f"{where} ({item_key!r})")
        tasks.append(userrl_task(gym, item_key, row, dict(record), split, where))
    if not tasks:
        logger.warning("%s has no %s rows", path, data_source)
    return tasks
