"""Structured output extraction for JSON-returning model roles (docs/spec/GYMS.md §0.6, steps 1-5).

Model text is only ever parsed with the standard JSON parser: never eval, exec or ast.literal_eval.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable
from typing import Any

__all__ = [
    "JSONExtractionError",
    "as_bool",
    "as_float",
    "as_int",
    "as_label",
    "extract_json_object",
    "parse_json_object",
    "strip_think",
]

_THINK_CLOSE = "</think>"
_THINK_BLOCK = re.compile(r"<think>.*?</think>", re.DOTALL)
# Fences pair up in order of appearance: the first ``` opens, the next closes, and so on.
_FENCE = re.compile(r"```(.*?)```", re.DOTALL)
# The rest of an opening fence's line is a language tag ("json", "JSON", "jsonc", "") when it looks like one.
_INFO_STRING = re.compile(r"[ \t]*[\w.+#-]*[ \t]*\r?")
# Outside a string only quotes and braces matter; inside one only quotes and backslashes do.
_OUTSIDE_SPECIAL = re.compile(r'["{}]')
_INSIDE_SPECIAL = re.compile(r'["\\]')
_DIGITS = re.compile(r"[+-]?[0-9]+")
_NUMBER = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
_TRUE = frozenset({"true", "yes"})
_FALSE = frozenset({"false", "no"})


class JSONExtractionError(ValueError):
    """No JSON object could be extracted from a model reply."""


def strip_think(text: str) -> str:
    """Step 1: drop everything up to and including the last `</think>`, then any complete think blocks."""
    cut = text.rfind(_THINK_CLOSE)
    if cut != -1:
        text = text[cut + len(_THINK_CLOSE) :]
    # Without a `</think>` no block is complete; skipping the regex then keeps a reply of many unclosed
    # `<think>` linear (the lazy scan from each one to the end is quadratic: 30 s for 140k characters).
    return _THINK_BLOCK.sub("", text) if _THINK_CLOSE in text else text


def _reject_constant(name: str) -> Any:
    # Python's json accepts NaN/Infinity by default; standard JSON does not, and they poison numeric fields.
    raise ValueError(f"non-standard JSON constant {name}")


def parse_json_object(candidate: str) -> dict[str, Any] | None:
    """`candidate` parsed as a standard JSON object (no NaN/Infinity), or None (extract_json_object's step 4)."""
    try:
        value = json.loads(candidate, parse_constant=_reject_constant)
    except (ValueError, RecursionError):
        # RecursionError: pathologically deep nesting must read as "not parseable", not crash the caller.
        return None
    return value if isinstance(value, dict) else None


def _fence_bodies(text: str) -> list[str]:
    """Step 2: the bodies of the fenced code blocks in order, without their language tags."""
    bodies = []
    for match in _FENCE.finditer(text):
        raw = match.group(1)
        first, newline, rest = raw.partition("\n")
        bodies.append(rest if newline and _INFO_STRING.fullmatch(first) else raw)
    return bodies


def _match_brace(text: str, start: int, matches: dict[int, int | None]) -> int | None:
    """Index of the `}` matching the `{` at start (string-aware), or None; `matches` holds later braces'."""
    pos = start + 1
    while True:
        special = _OUTSIDE_SPECIAL.search(text, pos)
        if special is None:
            return None
        char, pos = special.group(), special.start()
        if char == "}":
            return pos
        if char == "{":
            # A nested brace outside a string continues exactly like a scan started there, so reuse its
            # result: this keeps the whole scan linear even for degenerate replies such as "{{{{...".
            end = matches[pos]
            if end is None:
                return None
            pos = end + 1
            continue
        # A string literal: skip to its closing quote, stepping over backslash escapes.
        pos += 1
        while True:
            inner = _INSIDE_SPECIAL.search(text, pos)
            if inner is None:
                return None  # unterminated string: the brace counter never leaves it
            if inner.group() == "\\":
                pos = inner.start() + 2
                continue
            pos = inner.start() + 1
            break


def _brace_spans(text: str) -> list[tuple[int, int]]:
    """Step 3: (start, end) of every `{` in order of appearance that has a matching `}`."""
    opens = [i for i, char in enumerate(text) if char == "{"]
    matches: dict[int, int | None] = {}
    # Right to left, so every nested brace's match is known when an enclosing scan reaches it.
    for start in reversed(opens):
        matches[start] = _match_brace(text, start, matches)
    return [(start, end) for start in opens if (end := matches[start]) is not None]


def extract_json_object(text: str) -> dict[str, Any]:
    """The model's JSON object from a reply (docs/spec/GYMS.md §0.6 steps 1-4), else JSONExtractionError."""
    if not isinstance(text, str):
        raise JSONExtractionError(f"expected the reply as a string, got {type(text).__name__}")
    text = strip_think(text)
    for body in _fence_bodies(text):
        found = parse_json_object(body)
        if found is not None:
            return found
    # No fenced block held an object (or the closing fence was cut off): scan the whole text instead.
    for start, end in _brace_spans(text):
        found = parse_json_object(text[start : end + 1])
        if found is not None:
            return found
    raise JSONExtractionError(
        f"no JSON object found in the reply ({len(text)} characters after think blocks)"
    )


def _show(value: Any) -> str:
    """A short repr of a model-supplied value for error messages."""
    shown = repr(value)
    return shown if len(shown) <= 60 else shown[:57] + "..."


def as_bool(value: Any) -> bool:
    """A required boolean: JSON true/false, or the strings true/false/yes/no in any case."""
    if isinstance(value, bool):
        return value
    if isinstance(value, str):
        word = value.strip().lower()
        if word in _TRUE:
            return True
        if word in _FALSE:
            return False
    raise ValueError(f"expected a boolean (true/false/yes/no), got {_show(value)}")


def as_int(value: Any) -> int:
    """A required integer: a JSON integer or a digit string (an optional sign allowed)."""
    # bool is a subclass of int in Python, but true/false is not an integer answer.
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str) and _DIGITS.fullmatch(value.strip()):
        return int(value.strip())
    raise ValueError(f"expected an integer, got {_show(value)}")


def as_float(value: Any) -> float:
    """A required number: a finite JSON number or a numeric string."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        number = float(value)
    elif isinstance(value, str) and _NUMBER.fullmatch(value.strip()):
        number = float(value.strip())
    else:
        raise ValueError(f"expected a number, got {_show(value)}")
    if not math.isfinite(number):
        raise ValueError(f"expected a finite number, got {_show(value)}")
    return number


def as_label(value: Any, allowed: Iterable[str]) -> str:
    """A required label: compared after trimming and case-folding; returns the allowed label as spelled there."""
    options = list(allowed)
    if isinstance(value, str):
        key = value.strip().casefold()
        for label in options:
            if label.strip().casefold() == key:
                return label
    raise ValueError(f"expected one of {options}, got {_show(value)}")
