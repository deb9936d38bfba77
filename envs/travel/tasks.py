"""Travel task sets: our generated scenarios ("builtin") and the original UserRL files ("userrl").

Both sources use the same scenario files, `<id> -> scenario` objects in the schema of docs/spec/GYMS.md §7.
The original `travelgym_data_<N>.json` files are not part of the shared data, so loading source "userrl"
fails with TravelDataUnavailable until they are put in place; `read_travel_rows` still reads the parquet
rows (ids, best ids, prompts) for inspection.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from userrl.envs.base import Task
from userrl.envs.loading import (
    check_builtin_split,
    check_userrl_split,
    create_kwargs,
    label_filter,
    read_json,
    read_userrl_rows,
    row_split,
    source_loader,
    system_user_prompt,
)
from userrl.envs.travel.schema import (
    ASPECT_LETTERS,
    best_ids_from_ground_truth,
    parse_scenario,
    parse_scenario_id,
    subset_of_id,
)

GYM = "travel"
DATA_SOURCE = "interact_travelgym"
#: The eight sub-sets; the digits are the preference counts per aspect.
SUBSETS: tuple[str, ...] = ("22", "33", "44", "233", "333", "334", "444", "2222")

#: The system message of builtin tasks: the gym and its choices only (the chat layer adds the action format).
TRAVEL_SYSTEM_PROMPT = (
    "You are a travel agent in TravelGym. A traveller needs a trip with several aspects, such as a flight, "
    "a hotel or apartment, a rental car and a restaurant. For each aspect the traveller has hidden "
    "preferences and wants the cheapest option that satisfies all of them.\n"
    "Choices:\n"
    "- search: one database request for one aspect, with all of its details from the traveller's message "
    "(places, dates, number of people). You get that aspect's options.\n"
    "- action: say something to the traveller. Ask concrete, specific questions to uncover preferences; "
    "vague questions reveal nothing.\n"
    "- answer: recommend one option id, such as H11. Only your first recommendation per aspect counts.\n"
    "Search each aspect, ask about preferences, then recommend. Your steps are limited."
)
BUDGET_SENTENCE = (
    "Also my budget is limited so as long as my preferences are satisfied, I would also like to choose the "
    "cheapest option for each."
)

DATA_DIR = Path(__file__).resolve().parent / "data"
#: Our scenario files use exactly the schema of the original travelgym_data_<N>.json files.
BUILTIN_SCENARIO_FILE = "travel_{subset}.json"
BUILTIN_SPLITS_PATH = DATA_DIR / "splits.json"

USERRL_SCENARIO_DIR = Path("gyms/TravelGym/travelgym/data")
USERRL_SCENARIO_FILE = "travelgym_data_{subset}.json"
USERRL_SPLITS: dict[str, list[tuple[Path, str | None]]] = {
    "train": [(Path(f"data/travel{s}_multiturn_onechoice/train.parquet"), s) for s in SUBSETS],
    "test": [(Path(f"data/travel{s}_multiturn_onechoice/test.parquet"), s) for s in SUBSETS],
    "alltrain": [(Path("data/alltrain_multiturn/train.parquet"), None)],
    "alltest": [(Path("data/alltest_multiturn/test.parquet"), None)],
}


class TravelDataUnavailable(FileNotFoundError):
    """The original Travel scenario JSON files are missing: source "userrl" cannot build Travel tasks."""


@dataclass(frozen=True)
class TravelRow:
    """One original Travel parquet row, for inspection: what the row holds without its scenario."""

    scenario_id: str
    subset: str
    best_ids: tuple[str, ...]
    prompt: tuple[dict[str, str], ...]
    split: str
    index: int
    path: str


def builtin_prompt(initial_description: str) -> list[dict[str, str]]:
    """The [system, user] prompt of a builtin scenario: user = initial description + the budget rule."""
    return system_user_prompt(TRAVEL_SYSTEM_PROMPT, f"{initial_description.strip()}\n{BUDGET_SENTENCE}")


@cache
def _scenario_file(path: str, mtime_ns: int, size: int) -> dict[str, dict[str, Any]]:
    # Keyed by modification time too, so a rewritten file is read again; otherwise once per process.
    doc = read_json(Path(path))
    if not isinstance(doc, dict):
        raise ValueError(f"{path}: expected an object keyed by scenario id")
    for scenario_id, raw in doc.items():
        scenario = parse_scenario(scenario_id, raw, path)
        parts = parse_scenario_id(scenario_id)
        if sorted(a for a, _ in parts) != sorted(scenario.dimensions):
            raise ValueError(f"{path}: scenario {scenario_id!r}: the id's aspects differ from 'dimensions'")
    return doc


def read_scenario_file(path: str | Path) -> dict[str, dict[str, Any]]:
    """A validated scenario file (id -> scenario object), read once per process and cached."""
    path = Path(path).resolve()
    if not path.is_file():
        raise FileNotFoundError(f"{path} not found")
    stat = path.stat()
    return _scenario_file(str(path), stat.st_mtime_ns, stat.st_size)


def _task(
    scenario_id: str, raw: dict[str, Any], prompt: list[dict[str, str]], split: str, source: str
) -> Task:
    scenario = parse_scenario(scenario_id, raw)
    data = {
        "id": scenario_id,
        "subset": subset_of_id(scenario_id),
        "scenario": raw,
        "best_ids": scenario.best_ids,
    }
    return Task(GYM, scenario_id, prompt, data, split=split, source=source)


def load_builtin_tasks(
    split: str = "train", subset: str | Sequence[str] | None = None, data_dir: str | Path | None = None
) -> list[Task]:
    """Our generated scenarios of one split (travel/data), optionally of some sub-sets."""
    check_builtin_split(GYM, split)
    wanted = label_filter(GYM, "sub-sets", subset, SUBSETS)
    data_dir = Path(data_dir) if data_dir is not None else DATA_DIR
    splits_path = data_dir / BUILTIN_SPLITS_PATH.name
    splits = read_json(splits_path)
    if not isinstance(splits, dict) or not all(isinstance(splits.get(s), list) for s in ("train", "test")):
        raise ValueError(f"{splits_path}: expected an object with 'train' and 'test' id lists")
    ids = set(splits[split])
    tasks = []
    for name in SUBSETS:
        if wanted is not None and name not in wanted:
            continue
        path = data_dir / BUILTIN_SCENARIO_FILE.format(subset=name)
        for scenario_id, raw in read_scenario_file(path).items():
            if scenario_id not in ids:
                continue
            if subset_of_id(scenario_id) != name:
                raise ValueError(f"{path}: scenario {scenario_id!r} does not belong to sub-set {name}")
            tasks.append(
                _task(scenario_id, raw, builtin_prompt(raw["initial_description"]), split, "builtin")
            )
    return tasks


def _row(row: dict[str, Any], index: int, path: Path, file_subset: str | None, split: str) -> TravelRow:
    where = f"{path}: row {index}"
    scenario_id = create_kwargs(row).get("id")
    if not isinstance(scenario_id, str):
        raise ValueError(f"{where}: no create_kwargs.id")
    try:
        parts = parse_scenario_id(scenario_id)
        subset = subset_of_id(scenario_id)
    except ValueError as exc:
        raise ValueError(f"{where}: {exc}") from exc
    if file_subset is not None and subset != file_subset:
        raise ValueError(f"{where}: scenario {scenario_id!r} is not of sub-set {file_subset}")
    best = best_ids_from_ground_truth(((row.get("reward_model") or {}).get("ground_truth")) or "")
    if sorted(b[0] for b in best) != sorted(ASPECT_LETTERS[a] for a, _ in parts):
        raise ValueError(
            f"{where}: ground-truth ids {best} do not give one option per aspect of {scenario_id!r}"
        )
    prompt = tuple({"role": m["role"], "content": m["content"]} for m in row.get("prompt") or [])
    if [m["role"] for m in prompt] != ["system", "user"]:
        raise ValueError(f"{where}: prompt must be [system, user] messages")
    return TravelRow(scenario_id, subset, tuple(best), prompt, row_split(row, split), index, str(path))


def read_travel_rows(
    split: str, data_root: str | Path, subset: str | Sequence[str] | None = None
) -> list[TravelRow]:
    """The original Travel parquet rows of one split (train, test: the eight sub-sets; alltrain, alltest)."""
    check_userrl_split(GYM, split, USERRL_SPLITS)
    wanted = label_filter(GYM, "sub-sets", subset, SUBSETS)
    rows: list[TravelRow] = []
    for rel, file_subset in USERRL_SPLITS[split]:
        if wanted is not None and file_subset is not None and file_subset not in wanted:
            continue
        path = Path(data_root) / rel
        columns = ["data_source", "prompt", "reward_model", "extra_info"]
        for index, raw in enumerate(read_userrl_rows(path, DATA_SOURCE, columns)):
            row = _row(raw, index, path, file_subset, split)
            if wanted is None or row.subset in wanted:
                rows.append(row)
    return rows


def _unavailable(missing: list[Path]) -> TravelDataUnavailable:
    names = ", ".join(str(p) for p in missing)
    return TravelDataUnavailable(
        f"the original Travel scenario files (travelgym_data_*.json) are not available: {names} not found. "
        "The shared UserRL data holds only the Travel parquet rows (scenario ids, best option ids, prompts), "
        "not the preferences, options and search arguments the gym needs. Use source='builtin' for our "
        "generated scenarios, or read_travel_rows() to inspect the parquet rows."
    )


def load_userrl_tasks(
    split: str, data_root: str | Path, subset: str | Sequence[str] | None = None
) -> list[Task]:
    """Original parquet rows resolved against travelgym_data_<N>.json (TravelDataUnavailable when absent)."""
    rows = read_travel_rows(split, data_root, subset)
    scenario_dir = Path(data_root) / USERRL_SCENARIO_DIR
    files = {
        s: scenario_dir / USERRL_SCENARIO_FILE.format(subset=s) for s in sorted({r.subset for r in rows})
    }
    missing = [p for p in files.values() if not p.is_file()]
    if missing:
        raise _unavailable(missing)
    scenarios = {s: read_scenario_file(p) for s, p in files.items()}
    tasks = []
    for row in rows:
        raw = scenarios[row.subset].get(row.scenario_id)
        where = f"{row.path}: row {row.index} ({row.scenario_id!r})"
        if raw is None:
            raise ValueError(f"{where}: not in {files[row.subset]}")
        task = _task(row.scenario_id, raw, list(row.prompt), row.split, "userrl")
        if task.data["best_ids"] != list(row.best_ids):
            raise ValueError(
                f"{where}: ground truth {list(row.best_ids)} differs from the best ids "
                f"{task.data['best_ids']} of {files[row.subset]}"
            )
        tasks.append(task)
    return tasks


#: load_travel_tasks(split, source, data_root, subset=None): the registry's loader of Travel tasks.
load_travel_tasks = source_loader(GYM, load_builtin_tasks, load_userrl_tasks)
