"""The `<tool_call>{"name": ..., "arguments": {...}}</tool_call>` text form of a call, which tool_call and
native_tools write and read (and `userrl serve` parses back into OpenAI tool_calls)."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

TOOL_BLOCK = re.compile(r"<tool_call>(.*?)(?:</tool_call>|$)", re.DOTALL)


def call_block(name: str, arguments: dict[str, Any]) -> str:
    """One call written as training writes it: a `<tool_call>` block of `json.dumps` defaults."""
    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"


def strict_json(text: str) -> Any:
    """The JSON value of text; None for invalid or non-standard JSON (NaN, Infinity) and for runaway nesting."""
    def refuse(constant: str) -> Any:
        raise ValueError(constant)

    try:
        return json.loads(text, parse_constant=refuse)
    except (ValueError, RecursionError):
        return None


def tool_call_blocks(text: str, tool_names: Sequence[str]) -> list[tuple[str, dict[str, Any]]]:
    """(name, arguments) of the well-formed `<tool_call>{json}</tool_call>` blocks that call one of `tool_names`."""
    calls = []
    for block in TOOL_BLOCK.findall(text):
        try:
            payload = json.loads(block.strip())
        except json.JSONDecodeError:
            continue
        if not isinstance(payload, dict) or payload.get("name") not in tool_names:
            continue
        arguments = payload.get("arguments", {})
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments)
            except json.JSONDecodeError:
                continue
        if isinstance(arguments, dict):
            calls.append((payload["name"], arguments))
    return calls


def any_tool_call(block: str) -> tuple[str, dict[str, Any]] | None:
    """(name, arguments) of one `<tool_call>` block of any tool name, or None when it is not well-formed."""
    payload = strict_json(block.strip())
    if not isinstance(payload, dict):
        return None
    name, arguments = payload.get("name"), payload.get("arguments")
    if not isinstance(name, str) or not name.strip():
        return None
    if arguments is None:
        arguments = {}
    elif isinstance(arguments, str):  # OpenAI's wire format: the arguments as a JSON-encoded string
        arguments = strict_json(arguments) if arguments.strip() else {}
    return (name.strip(), arguments) if isinstance(arguments, dict) else None
