"""The offline document collection of the `local_corpus` search backend: JSONL loading and a BM25 index.

The index is built with the `bm25s` library (Lucene BM25 scoring) once per corpus file per process and
cached, so every env of a worker shares it.
"""

from __future__ import annotations

import json
import re
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from userrl.envs.text import stopwords

#: Our own fictional corpus, shipped with the package (written by `python -m userrl.envs.search.generate`).
BUILTIN_CORPUS_PATH = Path(__file__).resolve().parent / "data" / "corpus.jsonl"

_NON_ALNUM = re.compile(r"[^a-z0-9]+")
_cache: dict[str, CorpusIndex] = {}
_cache_lock = threading.Lock()


@dataclass(frozen=True)
class Document:
    """One searchable document: a unique title and a few sentences of text."""

    title: str
    text: str

    def as_json(self) -> str:
        """One JSONL line {"title", "text"}."""
        return json.dumps({"title": self.title, "text": self.text}, ensure_ascii=False)


def index_tokens(text: str) -> list[str]:
    """BM25 terms: the content-word rules of CW (docs/spec/GYMS.md §0.7), as a list so term counts survive."""
    stop = stopwords()
    out = []
    for token in _NON_ALNUM.split(text.lower()):
        if len(token) <= 2 or token in stop:
            continue
        out.append(token[:-1] if len(token) > 3 and token.endswith("s") else token)
    return out


def _document(record: Any, where: str) -> Document:
    if not isinstance(record, dict):
        raise ValueError(f"{where}: expected a JSON object with 'title' and 'text'")
    title, text = record.get("title"), record.get("text")
    if not isinstance(title, str) or not title.strip() or not isinstance(text, str) or not text.strip():
        raise ValueError(f"{where}: 'title' and 'text' must be non-empty strings")
    return Document(title.strip(), " ".join(text.split()))


def load_corpus(path: str | Path) -> tuple[Document, ...]:
    """Read a JSONL file of {title, text} documents (blank lines skipped); titles must be unique."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: search corpus not found (expected a JSONL file of {{title, text}})")
    docs: list[Document] = []
    seen: set[str] = set()
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{path}:{number}"
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{where}: not valid JSON ({exc})") from exc
        doc = _document(record, where)
        if doc.title in seen:
            raise ValueError(f"{where}: duplicate title {doc.title!r}")
        seen.add(doc.title)
        docs.append(doc)
    if not docs:
        raise ValueError(f"{path}: the search corpus has no documents")
    return tuple(docs)


class CorpusIndex:
    """A BM25 index over documents; `search` returns the best-scoring documents, ties by corpus order."""

    def __init__(self, documents: tuple[Document, ...] | list[Document]) -> None:
        import bm25s  # lazy: importing the gym package must stay cheap

        self.documents = tuple(documents)
        if not self.documents:
            raise ValueError("a search index needs at least one document")
        self.by_title = {d.title: d for d in self.documents}
        # Lucene BM25 with the usual k1/b, spelled out so that a bm25s default change cannot move results.
        self._bm25 = bm25s.BM25(k1=1.5, b=0.75, method="lucene", backend="numpy")
        # The title is indexed with the text: queries usually name the entity a document is about.
        self._bm25.index([index_tokens(f"{d.title} {d.text}") for d in self.documents], show_progress=False)
        self._vocab = self._bm25.vocab_dict

    def search(self, query: str, k: int) -> list[tuple[Document, float]]:
        """Up to k (document, score) pairs with a positive BM25 score, best first."""
        terms = [t for t in index_tokens(query) if t in self._vocab]
        if not terms or k <= 0:
            return []
        scores = np.asarray(self._bm25.get_scores(terms), dtype=np.float64)
        # A stable sort on the negated scores keeps ties in corpus order: results are reproducible.
        order = np.argsort(-scores, kind="stable")[:k]
        return [(self.documents[i], float(scores[i])) for i in order if scores[i] > 0]


def corpus_index(path: str | Path | None = None) -> CorpusIndex:
    """The cached index of a corpus file (default: the builtin corpus), built on first use per process."""
    key = str(Path(path if path is not None else BUILTIN_CORPUS_PATH).resolve())
    with _cache_lock:
        index = _cache.get(key)
        if index is None:
            index = _cache[key] = CorpusIndex(load_corpus(key))
        return index
