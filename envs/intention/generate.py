"""Canonicalise the hand-written builtin Intention set; `python -m userrl.envs.intention.generate` rewrites it.

The requests and their missing details are written by hand in data/intentions.json. This module gives each
item a stable id (a UUID5 of its request text) and a seeded, per-category train/test split, checks the
design rules that the scripted backend and the solver rely on, and writes the file back in canonical form.
`--check` only verifies that the file is canonical (exit status 1 when it is not).
"""

from __future__ import annotations

import random
import sys
import uuid
from typing import Any

from userrl.envs.generate_cli import HandWrittenSet, sample_test_ids
from userrl.envs.intention.scripted import covers, detail_keywords
from userrl.envs.intention.tasks import BUILTIN_TASKS_PATH, GYM, details_of, validate_detail
from userrl.envs.text import content_words

SPLIT_SEED = 20250612
TEST_FRACTION = 0.2
#: Namespace of the item ids; fixed forever, so ids only change when a request's text changes.
ID_NAMESPACE = uuid.UUID("6b1f7c1e-2f55-4a44-9a53-3d0f3c2b8e11")
MIN_OPTIONS = 2


def item_id(task: str) -> str:
    """The stable id of a request: UUID5 of its text."""
    return str(uuid.uuid5(ID_NAMESPACE, task))


def design_problems(item: dict[str, Any]) -> list[str]:
    """What makes a validated item unfit for the builtin set (empty when it is fine)."""
    details = details_of(item)
    keywords = [detail_keywords(item["task"], d) for d in details]
    problems = []
    for i, detail in enumerate(details):
        name = f"{item['task']!r} detail {detail.description!r}"
        if len(detail.options) < MIN_OPTIONS:
            problems.append(f"{name}: needs at least {MIN_OPTIONS} options")
        if not keywords[i]:
            problems.append(f"{name}: no words of its own (all of them are in the request)")
            continue
        # Its example question must cover it, and only it, even while every detail is still open.
        q = content_words(detail.inquiry)
        hit = [details[j].description for j, k in enumerate(keywords) if covers(q, k)]
        if hit != [detail.description]:
            problems.append(f"{name}: its inquiry covers {hit} under the scripted rule")
    return problems


def build_item(raw: dict[str, Any], where: str) -> dict[str, Any]:
    """A raw item as validated, with its id; ValueError when malformed."""
    for key in ("category", "task"):
        if not isinstance(raw.get(key), str) or not raw[key].strip():
            raise ValueError(f"{where}: {key} must be a non-empty string")
    details = raw.get("missing_details")
    if not isinstance(details, list) or not details:
        raise ValueError(f"{where}: missing_details must be a non-empty list")
    return {
        "id": item_id(raw["task"]),
        "category": raw["category"],
        "task": raw["task"],
        "missing_details": [validate_detail(d, f"{where}, detail {i + 1}") for i, d in enumerate(details)],
    }


def assign_splits(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per category, a seeded TEST_FRACTION of the items (at least one when it has two) go to test."""
    by_category: dict[str, list[str]] = {}
    for item in items:
        by_category.setdefault(item["category"], []).append(item["id"])
    test_ids: set[str] = set()
    for category, ids in by_category.items():
        if len(ids) < 2:
            continue
        # A generator of its own per category: adding one category leaves the others' splits alone.
        test_ids |= sample_test_ids(random.Random(f"{SPLIT_SEED}/{category}"), sorted(ids), TEST_FRACTION, 1)
    out = []
    for item in items:
        split = "test" if item["id"] in test_ids else "train"
        out.append(
            {
                "id": item["id"],
                "category": item["category"],
                "task": item["task"],
                "split": split,
                "missing_details": item["missing_details"],
            }
        )
    return out


BUILTIN = HandWrittenSet(GYM, BUILTIN_TASKS_PATH, SPLIT_SEED, __doc__.splitlines()[0], build_item,
                         ("task", "request"), design_problems, assign_splits)
canonical_items, canonical_text, main = BUILTIN.canonical_items, BUILTIN.canonical_text, BUILTIN.main


if __name__ == "__main__":
    sys.exit(main())
