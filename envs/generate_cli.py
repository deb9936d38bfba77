"""Scaffolding shared by the gyms' data generators: seeded test splits, file rendering, write or --check."""

from __future__ import annotations

import argparse
import json
import random
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from userrl.envs.loading import read_json

_T = TypeVar("_T")


def sample_test_ids(rnd: random.Random, ids: Sequence[_T], fraction: float, at_least: int = 0) -> set[_T]:
    """The test split of ids: round(fraction * len(ids)) of them (at least at_least), drawn with rnd."""
    return set(rnd.sample(ids, max(at_least, round(fraction * len(ids)))))


def leveled_tasks(
    prefix: str,
    levels: Iterable[int],
    seed: int,
    make_level: Callable[[int, random.Random], list[dict[str, Any]]],
    test_fraction: float,
) -> list[dict[str, Any]]:
    """A leveled task set: per level, items from make_level, ids <prefix>-<level>-<nnn> and a seeded test split."""
    tasks: list[dict[str, Any]] = []
    for level in levels:
        # One generator per level, so changing one level's builder leaves the other levels unchanged.
        rnd = random.Random(f"{seed}-level-{level}")
        items = make_level(level, rnd)
        test_ids = sample_test_ids(rnd, range(len(items)), test_fraction)
        for i, item in enumerate(items):
            tasks.append({"id": f"{prefix}-{level}-{i:03d}", **item, "split": "test" if i in test_ids else "train"})
    return tasks


def render_item_lines(
    gym: str,
    key: str,
    seed: int,
    items: list[dict[str, Any]],
    ensure_ascii: bool = True,
    header_extra: str = "",
) -> str:
    """A generated data file: a small header, then the `key` list with one item per line (readable diffs)."""
    lines = [json.dumps(item, ensure_ascii=ensure_ascii, separators=(", ", ": ")) for item in items]
    header = (
        f'{{"format": "userrl-{gym}-{key}", "version": 1, "seed": {seed}, '
        f'"generator": "python -m userrl.envs.{gym}.generate"{header_extra},\n "{key}": [\n'
    )
    return header + ",\n".join(f"  {line}" for line in lines) + "\n]}\n"


def generator_parser(description: str, seed: int, outputs: Mapping[str, Path]) -> argparse.ArgumentParser:
    """A generator's command line: an option per output file (its default path), --seed and --check."""
    parser = argparse.ArgumentParser(description=description)
    for option, default in outputs.items():
        parser.add_argument(option, type=Path, default=default)
    parser.add_argument("--seed", type=int, default=seed)
    which = "the file" if len(outputs) == 1 else "a file"
    parser.add_argument("--check", action="store_true", help=f"exit 1 if {which} differs from a fresh run")
    return parser


def leveled_main(
    argv: Sequence[str] | None,
    description: str,
    default_path: Path,
    seed: int,
    generate: Callable[[int, Any], list[dict[str, Any]]],
    render: Callable[[list[dict[str, Any]], int], str],
    per_level: int | None,
    per_level_help: str,
) -> int:
    """Write (or, with --check, compare against) a leveled gym's tasks file: render(generate(seed, per_level))."""
    parser = generator_parser(description, seed, {"--output": default_path})
    parser.add_argument("--per-level", type=int, default=per_level, help=per_level_help)
    args = parser.parse_args(argv)
    text = render(generate(args.seed, args.per_level), args.seed)
    return write_or_check({args.output: text}, args.check)


def write_or_check(outputs: Mapping[Path, str], check: bool) -> int:
    """Write each file (exit status 0), or with check only say whether each matches (1 when one does not)."""
    if check:
        stale = [p for p, text in outputs.items() if not p.is_file() or p.read_text(encoding="utf-8") != text]
        for path in outputs:
            print(f"{path}: {'differs from a fresh run' if path in stale else 'up to date'}")
        return 1 if stale else 0
    for path, text in outputs.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        print(f"wrote {path} ({len(text)} bytes)")
    return 0


# ---------------------------------------------------------------- hand-written sets kept in canonical form


def read_raw_items(path: Path) -> list[Any]:
    """The items of a hand-written task file: a bare list, or the 'tasks' list of a canonical file."""
    doc = read_json(path)
    raw = doc.get("tasks") if isinstance(doc, dict) else doc
    if not isinstance(raw, list):
        raise ValueError(f"{path}: expected a list of items or an object with a 'tasks' list")
    return raw


def render_task_file(gym: str, split_seed: int, items: list[dict[str, Any]]) -> str:
    """The canonical text of a hand-written gym's task file."""
    doc = {
        "format": f"userrl-{gym}-tasks",
        "version": 1,
        "split_seed": split_seed,
        "generator": f"python -m userrl.envs.{gym}.generate",
        "tasks": items,
    }
    return json.dumps(doc, indent=2, ensure_ascii=False) + "\n"


Item = dict[str, Any]


@dataclass(frozen=True)
class HandWrittenSet:
    """A gym's hand-written task file kept in canonical form: each raw object is built into an item (a malformed
    one stops at once), duplicates and design problems are listed together, then the items get their splits."""

    gym: str
    path: Path
    split_seed: int
    description: str  # of the generator's command line
    #: A raw object and where it stands ("item 3") -> the item with its id; ValueError when malformed.
    build: Callable[[Item, str], Item]
    #: The key no two items may share, and what an error calls it (e.g. ("task", "request")).
    unique: tuple[str, str]
    design_problems: Callable[[Item], list[str]]
    #: The checked items, in input order -> the canonical items, each with its split.
    split: Callable[[list[Item]], list[Item]]

    def canonical_items(self, raw_items: Sequence[Any]) -> list[Item]:
        """Validated items with ids and splits assigned, in input order; ValueError lists every problem."""
        key, noun = self.unique
        items, problems, seen = [], [], set()
        for n, raw in enumerate(raw_items):
            where = f"item {n + 1}"
            if not isinstance(raw, dict):
                raise ValueError(f"{where}: expected an object")
            item = self.build(raw, where)
            if item[key] in seen:
                problems.append(f"{where}: duplicate {noun} {item[key]!r}")
            seen.add(item[key])
            problems.extend(self.design_problems(item))
            items.append(item)
        if problems:
            raise ValueError(f"the builtin {self.gym} set breaks its design rules:\n  " + "\n  ".join(problems))
        return self.split(items)

    def canonical_text(self, path: Path | None = None) -> str:
        """The canonical form of the data file at path (the builtin file when None)."""
        return render_task_file(self.gym, self.split_seed, self.canonical_items(read_raw_items(path or self.path)))

    def main(self, argv: Sequence[str] | None = None) -> int:
        """Rewrite the data file in canonical form, or with --check only report whether it already is."""
        parser = argparse.ArgumentParser(description=self.description)
        parser.add_argument("--path", type=Path, default=self.path)
        parser.add_argument("--check", action="store_true", help="verify only; exit 1 if the file would change")
        args = parser.parse_args(argv)
        text = self.canonical_text(args.path)
        if args.check:
            same = args.path.read_text(encoding="utf-8") == text
            print(f"{args.path}: {'canonical' if same else 'NOT canonical; run without --check'}")
            return 0 if same else 1
        args.path.write_text(text, encoding="utf-8")
        print(f"wrote {args.path}")
        return 0
