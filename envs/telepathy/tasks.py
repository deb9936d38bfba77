"""Telepathy task sets: our own entities ("builtin") and the original UserRL files ("userrl")."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from userrl.envs.base import Task
from userrl.envs.loading import (
    check_builtin_split,
    check_userrl_split,
    label_filter,
    read_json_array,
    read_json_list,
    resolve_userrl_rows,
    source_loader,
    system_user_prompt,
    userrl_parquet,
)
from userrl.envs.telepathy import facts

GYM = "telepathy"
DATA_SOURCE = "interact_telepathygym"

#: The system message of builtin tasks: the game and its choices only (the chat layer adds the format).
TELEPATHY_SYSTEM_PROMPT = (
    "You are playing TelepathyGym, a guessing game like twenty questions. I am thinking of one entity: a "
    "person, animal, plant, food, object, place or something else. Your goal is to name it.\n"
    "Choices:\n"
    "- action: ask one yes/no question about the entity. You get Yes, No or Maybe.\n"
    "- answer: name the entity. A correct guess ends the game.\n"
    "Ask questions to narrow it down, then guess. You may guess more than once. Your steps are limited."
)

BUILTIN_ENTITIES_PATH = Path(__file__).resolve().parent / "data" / "entities.json"
USERRL_ENTITIES_JSON = Path("gyms/TelepathyGym/telepathygym/data/all_entities_refined.json")
#: Split name -> parquet file (relative to data_root). alltrain holds no Telepathy rows (never trained on).
USERRL_PARQUET = userrl_parquet("telepathy_multiturn")
_TEXT_FIELDS = ("id", "title", "description", "goal", "target_entity", "category")


def builtin_prompt(description: str) -> list[dict[str, str]]:
    """The [system, user] prompt of a builtin task: the user message is the entity's teaser."""
    return system_user_prompt(TELEPATHY_SYSTEM_PROMPT, description)


def validate_entity(record: Any, where: str) -> dict[str, Any]:
    """Check one entity (the original fields, plus optional structured attributes); returns Task.data."""
    if not isinstance(record, dict):
        raise ValueError(f"{where}: every entity must be an object, got {type(record).__name__}")
    name = record.get("title", record.get("id"))
    for key in _TEXT_FIELDS:
        if not isinstance(record.get(key), str) or not record[key].strip():
            raise ValueError(f"{where}: entity {name!r} needs a non-empty string {key!r}")
    data: dict[str, Any] = {key: record[key] for key in _TEXT_FIELDS}
    attributes = record.get("attributes")
    data["attributes"] = (
        facts.validate_attributes(attributes, f"{where}: entity {name!r}") if attributes is not None else {}
    )
    return data


def index_entities(items: list[Any], where: str) -> tuple[list[dict[str, Any]], dict[str, dict[str, Any]]]:
    """Validated entities (in order) and an index by case-folded title and by id; both must be unique."""
    entities: list[dict[str, Any]] = []
    index: dict[str, dict[str, Any]] = {}
    for raw in items:
        entity = validate_entity(raw, where)
        keys = {entity["title"].casefold(), entity["id"]}
        if keys & set(index):
            raise ValueError(f"{where}: duplicate title or id {entity['title']!r} / {entity['id']!r}")
        index.update(dict.fromkeys(keys, entity))
        entities.append(entity)
    return entities, index


def read_builtin_entities(path: str | Path | None = None) -> list[dict[str, Any]]:
    """Every builtin entity (validated, with its split), in file order."""
    path = Path(path) if path is not None else BUILTIN_ENTITIES_PATH
    items = read_json_list(path, "entities")
    entities, _ = index_entities(items, str(path))
    out = []
    for raw, entity in zip(items, entities, strict=True):
        if raw.get("split") not in ("train", "test"):
            raise ValueError(f"{path}: entity {entity['title']!r} needs split 'train' or 'test'")
        if not entity["attributes"]:
            raise ValueError(f"{path}: builtin entity {entity['title']!r} needs structured attributes")
        out.append({**entity, "split": raw["split"]})
    return out


def load_builtin_tasks(
    split: str = "train", category: str | list[str] | None = None, path: str | Path | None = None
) -> list[Task]:
    """Our own entities (telepathy/data/entities.json) of one split, optionally of some categories."""
    check_builtin_split(GYM, split)
    wanted = label_filter(GYM, "categories", category, facts.CATEGORY_NOUNS)
    tasks = []
    for entity in read_builtin_entities(path):
        if entity.pop("split") != split or (wanted is not None and entity["category"] not in wanted):
            continue
        prompt = builtin_prompt(entity["description"])
        tasks.append(Task(GYM, entity["title"], prompt, entity, split=split, source="builtin"))
    return tasks


def load_userrl_entities(data_root: str | Path) -> dict[str, dict[str, Any]]:
    """The original all_entities_refined.json, indexed by case-folded title and by id."""
    path = Path(data_root) / USERRL_ENTITIES_JSON
    _, index = index_entities(read_json_array(path, "entities"), str(path))
    return index


def load_userrl_tasks(split: str, data_root: str | Path) -> list[Task]:
    """Original parquet rows of one split (train, test, alltrain, alltest) resolved by title (or id)."""
    check_userrl_split(GYM, split, USERRL_PARQUET)
    entities = load_userrl_entities(data_root)

    def lookup(title: Any) -> dict[str, Any] | None:
        return (entities.get(title.casefold()) or entities.get(title)) if isinstance(title, str) else None

    path = Path(data_root) / USERRL_PARQUET[split]
    missing = f"not in {Path(data_root) / USERRL_ENTITIES_JSON}"
    return resolve_userrl_rows(GYM, split, path, DATA_SOURCE, lookup, key="title", what="telepathy title", missing=missing)


#: load_telepathy_tasks(split, source, data_root, category=None): the registry's loader of Telepathy tasks.
load_telepathy_tasks = source_loader(GYM, load_builtin_tasks, load_userrl_tasks, builtin_only=("category",))
