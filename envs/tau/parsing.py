"""Parsing the content of an `answer` step into one tool call (docs/spec/GYMS.md §5; JSON, never eval)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from userrl.envs.json_extract import JSONExtractionError, extract_json_object, parse_json_object, strip_think

INVALID_TOOL_FORMAT = 'Invalid tool call format. Use {"name": tool_name, "arguments": {...}}.'
#: Arguments nested deeper than this are refused: canonical hashing recurses once per level.
MAX_ARGUMENT_DEPTH = 64

# `tool_name: {...}` or `tool_name {...}`: an identifier, an optional colon, then one JSON object.
_NAME_FORM = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)\s*:?\s*(\{.*\})", re.DOTALL)


@dataclass(frozen=True)
class ToolCall:
    """A parsed tool call: the tool name and its JSON-decoded keyword arguments."""

    name: str
    arguments: dict[str, Any]


def _depth(value: Any) -> int:
    """Nesting depth of a JSON value, iteratively (the value may be too deep for recursion)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict | list):
            deepest = max(deepest, level)
            children = item.values() if isinstance(item, dict) else item
            stack.extend((child, level + 1) for child in children)
    return deepest


def _arguments(value: Any) -> dict[str, Any] | None:
    """`arguments` as a dict: missing/null means {}, a string holds JSON-encoded arguments."""
    if value is None:
        return {}
    if isinstance(value, str):
        value = parse_json_object(value) if value.strip() else {}
    return value if isinstance(value, dict) else None


def parse_tool_call(content: str) -> ToolCall | None:
    """The tool call in an answer's content, or None when it has neither accepted form."""
    text = strip_think(content).strip()
    call: ToolCall | None = None
    match = _NAME_FORM.fullmatch(text)
    if match is not None:
        arguments = parse_json_object(match.group(2))
        if arguments is not None:
            call = ToolCall(match.group(1), arguments)
    if call is None:
        try:
            found = extract_json_object(text)
        except JSONExtractionError:
            return None
        name, arguments = found.get("name"), _arguments(found.get("arguments"))
        if not isinstance(name, str) or not name.strip() or arguments is None:
            return None
        call = ToolCall(name.strip(), arguments)
    if _depth(call.arguments) > MAX_ARGUMENT_DEPTH:
        return None
    return call
