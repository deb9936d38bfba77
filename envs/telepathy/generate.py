"""Render the builtin Telepathy set from its hand-written facts; `python -m userrl.envs.telepathy.generate`.

facts.json (id, title, category, structured attributes) is the source; entities.json adds the text fields
the gym uses (description, goal, target_entity) and a seeded, per-category train/test split.
"""

from __future__ import annotations

import random
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

from userrl.envs.generate_cli import generator_parser, render_item_lines, sample_test_ids, write_or_check
from userrl.envs.loading import read_json_list
from userrl.envs.telepathy import facts
from userrl.envs.telepathy.tasks import BUILTIN_ENTITIES_PATH

FACTS_PATH = BUILTIN_ENTITIES_PATH.parent / "facts.json"
GENERATOR_SEED = 20250612
TEST_FRACTION = 0.25


def read_facts(path: Path = FACTS_PATH) -> list[dict[str, Any]]:
    """The hand-written facts, validated: unique ids and titles (case-insensitively), known categories."""
    out, ids, titles = [], set(), set()
    for raw in read_json_list(path, "entities"):
        if not isinstance(raw, dict) or not all(
            isinstance(raw.get(k), str) for k in ("id", "title", "category")
        ):
            raise ValueError(f"{path}: every entity needs string id, title and category: {raw!r:.200}")
        where = f"{path}: entity {raw['id']!r}"
        if raw["id"] in ids or raw["title"].casefold() in titles:
            raise ValueError(f"{where}: duplicate id or title {raw['title']!r}")
        if raw["category"] not in facts.CATEGORY_NOUNS:
            raise ValueError(f"{where}: unknown category {raw['category']!r}")
        ids.add(raw["id"])
        titles.add(raw["title"].casefold())
        attributes = facts.validate_attributes(raw.get("attributes"), where)
        out.append(
            {"id": raw["id"], "title": raw["title"], "category": raw["category"], "attributes": attributes}
        )
    return out


def split_ids(entities: list[dict[str, Any]], seed: int = GENERATOR_SEED) -> set[str]:
    """Ids of the test split: round(25%) of every category, drawn with a per-category seeded generator."""
    by_category: dict[str, list[str]] = defaultdict(list)
    for entity in entities:
        by_category[entity["category"]].append(entity["id"])
    test: set[str] = set()
    for category, ids in sorted(by_category.items()):
        test |= sample_test_ids(random.Random(f"{seed}-{category}"), sorted(ids), TEST_FRACTION)
    return test


def generate_entities(seed: int = GENERATOR_SEED, path: Path = FACTS_PATH) -> list[dict[str, Any]]:
    """Every entity with its rendered text fields and split, in facts order."""
    entities = read_facts(path)
    test = split_ids(entities, seed)
    out = []
    for entity in entities:
        description, goal = facts.teaser(entity["category"])
        out.append(
            {
                **entity,
                "description": description,
                "goal": goal,
                "target_entity": facts.target_entity(entity["title"], entity["attributes"]),
                "split": "test" if entity["id"] in test else "train",
            }
        )
    return out


def render(entities: list[dict[str, Any]], seed: int) -> str:
    """The entities.json text: a small header, then one entity per line (readable diffs)."""
    return render_item_lines("telepathy", "entities", seed, entities, ensure_ascii=False)


def main(argv: list[str] | None = None) -> int:
    """Write (or, with --check, compare against) the builtin entities file."""
    parser = generator_parser(__doc__.splitlines()[0], GENERATOR_SEED, {"--output": BUILTIN_ENTITIES_PATH})
    parser.add_argument("--facts", type=Path, default=FACTS_PATH)
    args = parser.parse_args(argv)
    return write_or_check(
        {args.output: render(generate_entities(args.seed, args.facts), args.seed)}, args.check
    )


if __name__ == "__main__":
    sys.exit(main())
