"""Canonicalise the hand-written builtin Persuade set; `python -m userrl.envs.persuade.generate` rewrites it.

The claims, the persuadee's opening arguments and the solver's counterarguments are written by hand in
data/claims.json. This module gives each item a stable id (12 upper-case characters from a hash of its
claim, in the style of the original ids) and a seeded train/test split, checks the design rules the solver
relies on, and writes the file back in canonical form. `--check` only verifies (exit status 1 when the file
is not canonical).
"""

from __future__ import annotations

import base64
import hashlib
import random
import sys
from typing import Any

from userrl.envs.generate_cli import HandWrittenSet, sample_test_ids
from userrl.envs.persuade.scripted import score_argument
from userrl.envs.persuade.tasks import BUILTIN_TASKS_PATH, GYM
from userrl.envs.text import content_words

SPLIT_SEED = 20250613
TEST_FRACTION = 0.2
ID_CHARS = 12
MIN_COUNTERARGUMENTS = 3
MIN_ARGUMENT_WORDS = 60


def item_id(claim: str) -> str:
    """The stable id of a claim: 12 base32 characters (A-Z, 2-7) of its SHA-256."""
    digest = hashlib.sha256(claim.encode("utf-8")).digest()
    return base64.b32encode(digest).decode("ascii")[:ID_CHARS]


def design_problems(item: dict[str, Any]) -> list[str]:
    """What makes an item unfit for the builtin set (empty when it is fine)."""
    name = repr(item["claim"])
    problems = []
    if len(item["argument"].split()) < MIN_ARGUMENT_WORDS:
        problems.append(f"{name}: the opening argument is shorter than {MIN_ARGUMENT_WORDS} words")
    counter = item["counterarguments"]
    if len(counter) < MIN_COUNTERARGUMENTS:
        problems.append(f"{name}: needs at least {MIN_COUNTERARGUMENTS} counterarguments")
    topic = content_words(item["claim"] + " " + item["argument"])
    # Played in order, each counterargument must meet all five rubric criteria (two stance steps each).
    for i, text in enumerate(counter):
        rubric = score_argument(text, topic, counter[:i])
        if rubric.met != 5:
            unmet = [
                k
                for k in ("relevance", "evidence", "rebuttal", "substance", "novelty")
                if not getattr(rubric, k)
            ]
            problems.append(f"{name}: counterargument {i + 1} misses {unmet}")
    return problems


def _text(raw: dict[str, Any], key: str, where: str) -> str:
    value = raw.get(key)
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{where}: {key} must be a non-empty string")
    return " ".join(value.split())


def build_item(raw: dict[str, Any], where: str) -> dict[str, Any]:
    """A raw item with its text normalised and its id; ValueError when malformed."""
    counter = raw.get("counterarguments")
    if not isinstance(counter, list):
        raise ValueError(f"{where}: counterarguments must be a list of strings")
    item = {
        "claim": _text(raw, "claim", where),
        "argument": _text(raw, "argument", where),
        "counterarguments": [_text({"c": c}, "c", f"{where} counterargument") for c in counter],
    }
    return {**item, "id": item_id(item["claim"])}


def assign_splits(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A seeded TEST_FRACTION of the items (at least one) go to test."""
    ids = sorted(item["id"] for item in items)
    test_ids = sample_test_ids(random.Random(SPLIT_SEED), ids, TEST_FRACTION, 1)
    return [
        {
            "id": item["id"],
            "claim": item["claim"],
            "split": "test" if item["id"] in test_ids else "train",
            "argument": item["argument"],
            "counterarguments": item["counterarguments"],
        }
        for item in items
    ]


BUILTIN = HandWrittenSet(GYM, BUILTIN_TASKS_PATH, SPLIT_SEED, __doc__.splitlines()[0], build_item,
                         ("claim", "claim"), design_problems, assign_splits)
canonical_items, canonical_text, main = BUILTIN.canonical_items, BUILTIN.canonical_text, BUILTIN.main


if __name__ == "__main__":
    sys.exit(main())
