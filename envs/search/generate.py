"""Seeded generator of the builtin Search data; `python -m userrl.envs.search.generate` rewrites it.

It builds the fictional world (world.py), writes one document per entity to data/corpus.jsonl, and picks
questions from the templates (questions.py) to data/questions.json. A question is kept only if its
answer is stated in its last supporting document, a two-hop answer is absent from the first document,
and every hop's document is among the top results of the BM25 index for at least one solver query
(the failing query options are dropped).
"""

from __future__ import annotations

import random
import re
import sys
from collections import defaultdict
from collections.abc import Callable
from functools import cache
from typing import Any

from userrl.envs.generate_cli import generator_parser, render_item_lines, sample_test_ids, write_or_check
from userrl.envs.search.backends import MAX_SEARCH_RESULTS
from userrl.envs.search.corpus import BUILTIN_CORPUS_PATH, CorpusIndex, Document
from userrl.envs.search.documents import render_documents
from userrl.envs.search.questions import ONE_HOP, TWO_HOP, Candidate, Template
from userrl.envs.search.tasks import BUILTIN_QUESTIONS_PATH
from userrl.envs.search.world import World, build_world

GENERATOR_SEED = 20250612
N_ONE_HOP = 100
N_TWO_HOP = 80
TEST_FRACTION = 1 / 3

_WORDS = re.compile(r"[a-z0-9]+")


def contains_phrase(text: str, phrase: str) -> bool:
    """Whether the lower-case a-z0-9 words of phrase occur consecutively among those of text."""
    words = _WORDS.findall(phrase.lower())
    return bool(words) and f" {' '.join(words)} " in f" {' '.join(_WORDS.findall(text.lower()))} "


def checked(
    candidate: Candidate, index: CorpusIndex, top: Callable[[str], tuple[str, ...]]
) -> Candidate | None:
    """The candidate with its retrievable query options only, or None when it breaks a rule.

    `top(query)` gives the titles of the top results of the index for a query.
    """
    docs = [index.by_title[t] for t in candidate.supporting]
    last = docs[-1]
    if not contains_phrase(f"{last.title} {last.text}", candidate.answer):
        return None
    if contains_phrase(candidate.question, candidate.answer):
        return None
    if candidate.hops > 1 and contains_phrase(f"{docs[0].title} {docs[0].text}", candidate.answer):
        return None
    plan = []
    for doc, options in zip(docs, candidate.plan, strict=True):
        kept = tuple(q for q in options if doc.title in top(q))
        if not kept:
            return None
        plan.append(kept)
    return Candidate(
        candidate.template, candidate.question, candidate.answer, candidate.supporting, tuple(plan)
    )


def _pool(templates: tuple[Template, ...], world: World, index: CorpusIndex) -> dict[str, list[Candidate]]:
    # Templates share entities, so the same query comes up many times: search each one once.
    @cache
    def top(query: str) -> tuple[str, ...]:
        return tuple(d.title for d, _ in index.search(query, MAX_SEARCH_RESULTS))

    pools: dict[str, list[Candidate]] = defaultdict(list)
    for template in templates:
        for candidate in template(world):
            kept = checked(candidate, index, top)
            if kept is not None:
                pools[kept.template].append(kept)
    return pools


def select(pools: dict[str, list[Candidate]], count: int, rnd: random.Random) -> list[Candidate]:
    """`count` candidates drawn round-robin over the templates, so every template is represented."""
    names = sorted(pools)
    rnd.shuffle(names)
    queues = {n: rnd.sample(pools[n], len(pools[n])) for n in names}
    chosen: list[Candidate] = []
    seen: set[str] = set()
    while len(chosen) < count:
        progressed = False
        for name in names:
            while queues[name]:
                candidate = queues[name].pop()
                if candidate.question not in seen:
                    seen.add(candidate.question)
                    chosen.append(candidate)
                    progressed = True
                    break
            if len(chosen) == count:
                break
        if not progressed:
            raise RuntimeError(f"only {len(chosen)} of {count} questions pass the checks")
    return chosen


def generate(seed: int = GENERATOR_SEED) -> tuple[list[Document], list[dict[str, Any]]]:
    """The corpus documents and the question records (with ids and a stratified train/test split)."""
    world = build_world(seed)
    documents = render_documents(world, seed)
    index = CorpusIndex(documents)
    rnd = random.Random(f"search-questions-{seed}")
    chosen = select(_pool(ONE_HOP, world, index), N_ONE_HOP, rnd)
    chosen += select(_pool(TWO_HOP, world, index), N_TWO_HOP, rnd)
    rnd.shuffle(chosen)
    test_ids: set[int] = set()
    for hops in (1, 2):
        members = [i for i, c in enumerate(chosen) if c.hops == hops]
        test_ids |= sample_test_ids(rnd, members, TEST_FRACTION)
    records = [
        {
            "id": f"search-{i + 1:03d}",
            "question": c.question,
            "answer": c.answer,
            "hops": c.hops,
            "template": c.template,
            "supporting": list(c.supporting),
            "search_plan": [list(options) for options in c.plan],
            "split": "test" if i in test_ids else "train",
        }
        for i, c in enumerate(chosen)
    ]
    return documents, records


def render_corpus(documents: list[Document]) -> str:
    """The corpus.jsonl text: one {title, text} object per line."""
    return "".join(d.as_json() + "\n" for d in documents)


def render_questions(records: list[dict[str, Any]], seed: int) -> str:
    """The questions.json text: a small header, then one question per line (readable diffs)."""
    return render_item_lines(
        "search", "questions", seed, records, ensure_ascii=False, header_extra=', "corpus": "corpus.jsonl"'
    )


def main(argv: list[str] | None = None) -> int:
    """Write (or, with --check, compare against) the builtin corpus and questions files."""
    files = {"--corpus": BUILTIN_CORPUS_PATH, "--questions": BUILTIN_QUESTIONS_PATH}
    args = generator_parser(__doc__.splitlines()[0], GENERATOR_SEED, files).parse_args(argv)
    documents, records = generate(args.seed)
    outputs = {args.corpus: render_corpus(documents), args.questions: render_questions(records, args.seed)}
    return write_or_check(outputs, args.check)


if __name__ == "__main__":
    sys.exit(main())
