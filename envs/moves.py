"""The move actions of the grid games (FrozenLake, Sokoban): `[action] left, down` names 1-3 moves."""

from __future__ import annotations

import re

#: The four moves an action may name.
MOVE_NAMES = frozenset({"up", "down", "left", "right"})
#: Moves one action may make (RAGEN let an action hold several).
MAX_MOVES_PER_TURN = 3
_MAX_MOVE_TEXT = 200
_SEPARATORS = re.compile(r"[\s,;|]+")


def parse_moves(content: str) -> list[str] | None:
    """The moves of an action's content ("left, down", "Up"): 1..MAX_MOVES_PER_TURN of them, else None."""
    if len(content) > _MAX_MOVE_TEXT:
        return None
    words = [w for w in _SEPARATORS.split(content.strip().lower().rstrip(".!")) if w]
    if not 1 <= len(words) <= MAX_MOVES_PER_TURN or any(w not in MOVE_NAMES for w in words):
        return None
    return words
