"""`tool_call`: the gyms' choices as calls of the one `interact_with_env` tool, written as `<tool_call>` blocks."""

from __future__ import annotations

import json
from typing import Any

from userrl.protocols.base import Messages, ParsedTurn, register_protocol, with_system_text
from userrl.protocols.choices import TOOL_NAME, TOOL_SCHEMA, ChoiceProtocol
from userrl.protocols.tool_blocks import TOOL_BLOCK, call_block, tool_call_blocks

TOOL_INSTRUCTIONS = (
    "You have one tool:\n{schema}\nCall it by writing\n<tool_call>\n"
    '{{"name": "interact_with_env", "arguments": {{"choice": "...", "content": "..."}}}}\n</tool_call>'
)


def parse_tool_calls(text: str) -> ParsedTurn:
    """Find `<tool_call>{json}</tool_call>` blocks; only well-formed interact_with_env calls count as calls."""
    n_blocks = sum(1 for b in TOOL_BLOCK.findall(text) if b.strip())
    calls = [(str(arguments.get("choice", "")), str(arguments.get("content", "")))
             for _, arguments in tool_call_blocks(text, (TOOL_NAME,))]
    return ParsedTurn(calls=calls, n_tool_calls=n_blocks)


@register_protocol
class ToolCallProtocol(ChoiceProtocol):
    """`<tool_call>{"name": "interact_with_env", "arguments": {"choice": ..., "content": ...}}</tool_call>`."""

    name = "tool_call"
    offers_tools = True

    def instructions(self, prompt: Messages, tools: list[dict[str, Any]] | None = None, *,
                     tools_rendered: bool = False) -> Messages:
        """The tool's schema and how to call it, unless the schema reaches the model otherwise."""
        if tools_rendered:
            return [dict(m) for m in prompt]
        return with_system_text(prompt, TOOL_INSTRUCTIONS.format(schema=json.dumps(TOOL_SCHEMA["function"])))

    def tool_schemas(self, tools: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
        """Always the one interact_with_env tool."""
        return [TOOL_SCHEMA]

    def render_action(self, choice: str, content: str) -> str:
        """One interact_with_env call block."""
        return call_block(TOOL_NAME, {"choice": choice, "content": content})

    def parse(self, text: str) -> ParsedTurn:
        """The message's interact_with_env call blocks (`parse_tool_calls`)."""
        return parse_tool_calls(text)

    def completion_calls(self, text: str, tool_names: list[str]) -> tuple[str, list[tuple[str, dict[str, Any]]]]:
        """The well-formed call blocks of the request's tools; the text around them is the content."""
        calls = tool_call_blocks(text, tool_names)
        return (TOOL_BLOCK.sub("", text) if calls else text), calls
