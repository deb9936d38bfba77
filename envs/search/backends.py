"""Search backends of the Search gym (docs/spec/GYMS.md §4, "Search backends") and the result formatting.

* `local_corpus` (our default): BM25 over a local JSONL corpus of {title, text} documents; by default our
  own fictional corpus (data/corpus.jsonl). It has no direct-answer box.
* `scripted`: the oracle stub of the spec. It leaks the gold answer on purpose and exists only to
  exercise the plumbing; never report scores produced with it.
* `serper` (the original web search) needs network access, which this build never has, so it is not
  implemented: asking for it raises a ValueError that says so.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, runtime_checkable

from userrl.envs.search.corpus import corpus_index
from userrl.envs.text import content_words

MAX_SEARCH_RESULTS = 5
NO_RESULTS = "No relevant results found."
SEARCH_BACKENDS = ("local_corpus", "scripted")


class SearchError(Exception):
    """A search backend failed (timeout, transport, empty answer after retries)."""


@dataclass
class SearchResults:
    """What one search returned: an optional direct-answer box and organic (title, snippet) results."""

    organic: list[tuple[str, str]] = field(default_factory=list)
    answer_box: tuple[str, str] | None = None


@runtime_checkable
class SearchBackend(Protocol):
    """Anything that answers a query with at most k results; raises SearchError on failure."""

    name: str

    async def search(self, query: str, k: int) -> SearchResults:
        """The results for one query."""
        ...


def format_results(query: str, results: SearchResults, max_results: int = MAX_SEARCH_RESULTS) -> str:
    """The search feedback: a header line, then up to max_results numbered `title: snippet` lines."""
    entries = ([results.answer_box] if results.answer_box is not None else []) + list(results.organic)
    entries = entries[:max_results]
    if not entries:
        return NO_RESULTS
    # One entry per line: snippets may carry newlines from a corpus or a web page.
    lines = [
        f"{i}. {' '.join(title.split())}: {' '.join(text.split())}"
        for i, (title, text) in enumerate(entries, 1)
    ]
    return f"Search results for '{query}':\n" + "\n".join(lines)


class LocalCorpusBackend:
    """BM25 over a JSONL corpus; the index is built once per process and file (corpus.corpus_index)."""

    name = "local_corpus"

    def __init__(self, path: str | Path | None = None) -> None:
        self.index = corpus_index(path)

    async def search(self, query: str, k: int) -> SearchResults:
        """The k best-scoring documents with a positive score."""
        return SearchResults([(doc.title, doc.text) for doc, _ in self.index.search(query, k)])


class OracleStubBackend:
    """The spec's scripted search: the gold answer for any query sharing >= 2 content words with the question."""

    name = "scripted"

    def __init__(self, question: str, answer: str) -> None:
        self.question = question
        self.answer = answer
        self._question_words = content_words(question)

    async def search(self, query: str, k: int) -> SearchResults:
        """`1. Reference: <gold>` then `2. Related: <question>`, or nothing."""
        if len(content_words(query) & self._question_words) >= 2:
            return SearchResults([("Related", self.question)], answer_box=("Reference", self.answer))
        return SearchResults()


def check_backend_name(name: str) -> None:
    """Raise a ValueError naming the choices when `name` is not a search backend of this build."""
    if name == "serper":
        raise ValueError(
            "search backend 'serper' is the original web search; it needs network access and an API key, "
            "which this build does not have. Use 'local_corpus' (BM25 over a local corpus) or 'scripted'."
        )
    if name not in SEARCH_BACKENDS:
        raise ValueError(f"unknown search backend {name!r}; use one of {list(SEARCH_BACKENDS)}")
