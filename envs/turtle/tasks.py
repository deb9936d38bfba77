"""Turtle task sets: our own hand-written puzzles ("builtin") and the original UserRL files ("userrl")."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from userrl.envs.base import Task
from userrl.envs.loading import (
    check_builtin_split,
    check_userrl_split,
    read_json,
    read_json_list,
    require_file,
    resolve_userrl_rows,
    source_loader,
    system_user_prompt,
    userrl_parquet,
)

GYM = "turtle"
DATA_SOURCE = "interact_turtlegym"

#: The system message of builtin tasks: the game and its choices only (the chat layer adds the format).
TURTLE_SYSTEM_PROMPT = (
    "You are playing TurtleGym, a lateral-thinking puzzle game. You get a short, puzzling story (the "
    "surface). Behind it lies a hidden full story with a twist. Your goal is to uncover it.\n"
    "Choices:\n"
    "- action: ask one yes/no question about the hidden story. You get Yes, No or Maybe.\n"
    "- answer: tell the whole hidden story as you understand it. You learn which key points it covers; "
    "covering all of them ends the game.\n"
    "Ask questions to test your guesses, then answer with a complete story. You may answer more than "
    "once. Your steps are limited."
)
TURTLE_USER_TEMPLATE = (
    "Title: {title}\nSurface: {surface}\nUncover the hidden story behind the surface and tell it in full."
)

BUILTIN_STORIES_PATH = Path(__file__).resolve().parent / "data" / "stories.json"
USERRL_STORIES_JSON = Path("gyms/TurtleGym/turtlegym/data/all_stories_refined.json")
#: Split name -> parquet file (relative to data_root). The all* files mix every gym; rows are filtered.
USERRL_PARQUET = userrl_parquet("turtle_multiturn")
#: Rubric weights must sum to 1 up to this much (the original data is off by float rounding only).
WEIGHT_SUM_TOLERANCE = 1e-6
ANSWER_LABELS = ("Yes", "No", "Maybe")


def builtin_prompt(title: str, surface: str) -> list[dict[str, str]]:
    """The [system, user] prompt of a builtin task."""
    return system_user_prompt(TURTLE_SYSTEM_PROMPT, TURTLE_USER_TEMPLATE.format(title=title, surface=surface))


def _text(record: dict[str, Any], key: str, where: str, name: str) -> str:
    value = record.get(key)
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{where}: story {name!r} needs a non-empty string {key!r}")
    return value


def _rubric(items: Any, weight_key: str, where: str, name: str) -> list[dict[str, Any]]:
    """Validated [{statement, weight}] from a list of {statement, <weight_key>} objects."""
    if not isinstance(items, list) or not items:
        raise ValueError(f"{where}: story {name!r} needs a non-empty rubric list")
    rubric = []
    for item in items:
        statement = item.get("statement") if isinstance(item, dict) else None
        weight = item.get(weight_key) if isinstance(item, dict) else None
        if not isinstance(statement, str) or not statement.strip():
            raise ValueError(f"{where}: story {name!r} has a rubric entry without a statement")
        if isinstance(weight, bool) or not isinstance(weight, int | float) or not math.isfinite(weight):
            raise ValueError(f"{where}: story {name!r} has a rubric weight that is not a number")
        if weight < 0:
            raise ValueError(f"{where}: story {name!r} has a negative rubric weight")
        rubric.append({"statement": statement, "weight": float(weight)})
    total = math.fsum(r["weight"] for r in rubric)
    if abs(total - 1.0) > WEIGHT_SUM_TOLERANCE:
        raise ValueError(f"{where}: story {name!r} has rubric weights summing to {total}, not 1.0")
    return rubric


def validate_story(record: Any, where: str) -> dict[str, Any]:
    """Check one builtin story; the result is the Task.data of the gym (also used for userrl stories)."""
    if not isinstance(record, dict):
        raise ValueError(f"{where}: every story must be an object, got {type(record).__name__}")
    name = record.get("title") if isinstance(record.get("title"), str) else record.get("id")
    data = {
        "id": _text(record, "id", where, str(name)),
        "title": _text(record, "title", where, str(name)),
        "surface": _text(record, "surface", where, str(name)),
        "bottom": _text(record, "bottom", where, str(name)),
        "rubric": _rubric(record.get("rubric"), "weight", where, str(name)),
    }
    questions = record.get("key_questions", [])
    if not isinstance(questions, list) or not all(
        isinstance(q, dict) and isinstance(q.get("question"), str) and q.get("answer") in ANSWER_LABELS
        for q in questions
    ):
        raise ValueError(
            f"{where}: story {name!r} needs key_questions as [{{question, answer: Yes/No/Maybe}}]"
        )
    data["key_questions"] = [{"question": q["question"], "answer": q["answer"]} for q in questions]
    return data


def read_builtin_stories(path: str | Path | None = None) -> list[dict[str, Any]]:
    """Every builtin story (validated, with its split), in file order; titles unique case-insensitively."""
    path = Path(path) if path is not None else BUILTIN_STORIES_PATH
    stories, seen = [], set()
    for raw in read_json_list(path, "stories"):
        story = validate_story(raw, str(path))
        if raw.get("split") not in ("train", "test"):
            raise ValueError(f"{path}: story {story['title']!r} needs split 'train' or 'test'")
        folded = story["title"].casefold()
        if folded in seen:
            raise ValueError(f"{path}: duplicate title {story['title']!r}")
        seen.add(folded)
        stories.append({**story, "split": raw["split"]})
    return stories


def load_builtin_tasks(split: str = "train", path: str | Path | None = None) -> list[Task]:
    """Our own hand-written puzzles (turtle/data/stories.json) of one split."""
    check_builtin_split(GYM, split)
    tasks = []
    for story in read_builtin_stories(path):
        if story.pop("split") != split:
            continue
        prompt = builtin_prompt(story["title"], story["surface"])
        tasks.append(Task(GYM, story["title"], prompt, story, split=split, source="builtin"))
    return tasks


def load_userrl_stories(data_root: str | Path) -> dict[str, dict[str, Any]]:
    """The original all_stories_refined.json as Task.data records, indexed by case-folded title.

    Only stories judged "Yes" are kept (docs/spec/GYMS.md §8).
    """
    path = Path(data_root) / USERRL_STORIES_JSON
    doc = read_json(require_file(path))
    if not isinstance(doc, dict):
        raise ValueError(f"{path}: expected a JSON object of stories keyed by number")
    index: dict[str, dict[str, Any]] = {}
    for key, raw in doc.items():
        if not isinstance(raw, dict):
            raise ValueError(f"{path}: story {key!r} is not an object")
        if raw.get("judgment") != "Yes":
            continue
        name = str(raw.get("new_title", key))
        story = {
            "id": str(key),
            "title": _text(raw, "new_title", str(path), name),
            "surface": _text(raw, "new_surface", str(path), name),
            "bottom": _text(raw, "new_bottom", str(path), name),
            "rubric": _rubric(raw.get("evaluation"), "score", str(path), name),
            "key_questions": [],
        }
        folded = story["title"].casefold()
        if folded in index:
            raise ValueError(f"{path}: duplicate title {story['title']!r}")
        index[folded] = story
    return index


def load_userrl_tasks(split: str, data_root: str | Path) -> list[Task]:
    """Original parquet rows of one split (train, test, alltrain, alltest) resolved by title."""
    check_userrl_split(GYM, split, USERRL_PARQUET)
    stories = load_userrl_stories(data_root)

    def lookup(title: Any) -> dict[str, Any] | None:
        return stories.get(title.casefold()) if isinstance(title, str) else None

    path = Path(data_root) / USERRL_PARQUET[split]
    missing = f"not in {Path(data_root) / USERRL_STORIES_JSON}"
    return resolve_userrl_rows(GYM, split, path, DATA_SOURCE, lookup, key="title", what="turtle title", missing=missing)


#: load_turtle_tasks(split, source, data_root): the registry's loader of Turtle tasks.
load_turtle_tasks = source_loader(GYM, load_builtin_tasks, load_userrl_tasks)
