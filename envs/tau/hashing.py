"""The τ-bench database state hash (docs/spec/TAU_TOOLS.md §6, docs/spec/ALGORITHMS.md §5.1).

H(D) = sha256(str(to_hashable(D))). The text is Python's repr of nested tuples, so building the tuples and
calling `str` reproduces it exactly. The fast path in `database.py` assembles the same text from cached
per-record pieces; the helpers here define those pieces so both paths share one definition.
"""

from __future__ import annotations

import hashlib
from typing import Any


def to_hashable(value: Any) -> Any:
    """Canonical form: dicts as key-sorted (key, value) tuples, lists as tuples, sets as sorted tuples."""
    if isinstance(value, dict):
        return tuple(sorted((k, to_hashable(v)) for k, v in value.items()))
    if isinstance(value, list | tuple):
        return tuple(to_hashable(v) for v in value)
    if isinstance(value, set | frozenset):
        return tuple(sorted(to_hashable(v) for v in value))
    return value


def canonical_text(value: Any) -> str:
    """str(to_hashable(value)): the text whose SHA-256 is the state hash."""
    return str(to_hashable(value))


def state_hash(value: Any) -> str:
    """The reference (slow) hash of a whole database: lowercase SHA-256 hex of canonical_text."""
    return hashlib.sha256(canonical_text(value).encode("utf-8")).hexdigest()


def pair_text(key: str, value_text: str) -> str:
    """The text of one (key, value) pair of a canonical dict, given the value's canonical text."""
    return f"({key!r}, {value_text})"


