"""Shared text helpers of the scripted backends (docs/spec/GYMS.md §0.7): content words and normalisation."""

from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path

_NON_ALNUM = re.compile(r"[^a-z0-9]+")
_NOT_KEPT = re.compile(r"[^a-z0-9]")


@lru_cache(maxsize=1)
def stopwords() -> frozenset[str]:
    """The package's fixed English stopword list (envs/data/stopwords.txt)."""
    text = (Path(__file__).resolve().parent / "data" / "stopwords.txt").read_text(encoding="utf-8")
    words = (line.strip().lower() for line in text.splitlines())
    return frozenset(w for w in words if w and not w.startswith("#"))


def content_words(text: str) -> set[str]:
    """CW(text): lower-cased alphanumeric tokens longer than 2, minus stopwords, one trailing 's' stripped."""
    stop = stopwords()
    out: set[str] = set()
    for token in _NON_ALNUM.split(text.lower()):
        if len(token) <= 2 or token in stop:
            continue
        # The spec strips the plural 's' after the stopword filter, and only from tokens longer than 3.
        if len(token) > 3 and token.endswith("s"):
            token = token[:-1]
        out.add(token)
    return out


def norm(text: str) -> str:
    """norm(text): lower-case and keep only a-z and 0-9."""
    return _NOT_KEPT.sub("", text.lower())
