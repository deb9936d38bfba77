"""`bracket`: the gyms' choices as `[choice] content` lines (no tools in the prompt).

`userrl serve` offers a bracket model as the `interact_with_env` tool: its lines come back as that tool's
calls, and incoming calls of it are written back as lines."""

from __future__ import annotations

import json
import re
from typing import Any

from userrl.protocols.base import Messages, ParsedTurn, register_protocol, with_system_text
from userrl.protocols.choices import TOOL_NAME, ChoiceProtocol

BRACKET_INSTRUCTIONS = (
    "Act by writing exactly one line of the form [choice] content, for example:\n[search] test"
)
#: The choices a `[choice]` line may begin with.
BRACKET_CHOICES = ("action", "answer", "search", "finish")
_BRACKET_LINE = re.compile(rf"^[ \t]*\[({'|'.join(BRACKET_CHOICES)})\]", re.MULTILINE)


def parse_bracket(text: str) -> ParsedTurn:
    """Find `[choice] content` blocks; each runs until the next bracket line."""
    starts = [m.start() for m in _BRACKET_LINE.finditer(text)]
    calls = []
    for i, start in enumerate(starts):
        end = starts[i + 1] if i + 1 < len(starts) else len(text)
        block = text[start:end].strip()
        choice = block[1:block.index("]")]
        calls.append((choice, block[block.index("]") + 1:].strip()))
    return ParsedTurn(calls=calls, n_tool_calls=len(calls))


@register_protocol
class BracketProtocol(ChoiceProtocol):
    """`[answer] 42`: one line per step."""

    name = "bracket"
    call_markers = tuple(f"[{choice}]" for choice in BRACKET_CHOICES)

    def instructions(self, prompt: Messages, tools: list[dict[str, Any]] | None = None, *,
                     tools_rendered: bool = False) -> Messages:
        """The bracket instructions (there are no tool schemas to render)."""
        return with_system_text(prompt, BRACKET_INSTRUCTIONS)

    def render_action(self, choice: str, content: str) -> str:
        """One `[choice] content` line."""
        return f"[{choice}] {content}"

    def parse(self, text: str) -> ParsedTurn:
        """The message's bracket lines (`parse_bracket`)."""
        return parse_bracket(text)

    def check_request_tools(self, names: list[str]) -> None:
        """Only interact_with_env can be offered: its lines are all a bracket model writes."""
        if names != [TOOL_NAME]:
            raise ValueError(f"this model was trained with the bracket protocol: the only tool it can call is "
                             f"{TOOL_NAME!r} (userrl.protocols.choices.TOOL_SCHEMA)")

    def calls_as_text(self, arguments: list[str]) -> str | None:
        """interact_with_env calls as the bracket lines that make them."""
        lines = []
        for raw in arguments:
            try:
                args = json.loads(raw)
                lines.append(self.render_action(str(args["choice"]), str(args["content"])))
            except (json.JSONDecodeError, KeyError, TypeError):
                raise ValueError("arguments must be a JSON object with 'choice' and 'content' for this model's "
                                 "bracket protocol") from None
        return "\n".join(lines)

    def template_inputs(self, messages: Messages, tools: list[dict[str, Any]]) -> tuple[Messages, list]:
        """Offered the tool, the model gets the bracket instructions instead of the schema (as in training)."""
        if not tools:
            return messages, []
        if messages and messages[0]["role"] == "system":
            return with_system_text(messages, BRACKET_INSTRUCTIONS), []
        return [{"role": "system", "content": BRACKET_INSTRUCTIONS}, *messages], []

    def completion_calls(self, text: str, tool_names: list[str]) -> tuple[str, list[tuple[str, dict[str, Any]]]]:
        """Each bracket line is an interact_with_env call; the text before the first is the content."""
        parsed = parse_bracket(text)
        calls = [(TOOL_NAME, {"choice": c, "content": body}) for c, body in parsed.calls]
        first = text.find(f"[{parsed.calls[0][0]}]") if parsed.calls else len(text)
        return text[:first], calls
