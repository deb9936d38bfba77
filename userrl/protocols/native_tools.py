"""`native_tools` (MUA-RL's episode, docs/spec/ALGORITHMS.md §5.1): the gym's own tools as function schemas,
on the gym's own prompt; each assistant message calls one tool (a `<tool_call>` block) or speaks plain text
to the user.

Tool schemas reach the prompt through the chat template's `tools` argument when the template renders it, and
are otherwise written into the system message (SmolLM2's template ignores `tools`)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from userrl.envs import MultiTurnEnv, Task
from userrl.envs.json_extract import strip_think
from userrl.protocols.base import (
    ActionProtocol,
    Messages,
    ParsedTurn,
    register_protocol,
    template_renders_tools,
    with_system_text,
)
from userrl.protocols.tool_blocks import TOOL_BLOCK, any_tool_call, call_block, strict_json

if TYPE_CHECKING:
    from userrl.trajectory import Trajectory

NATIVE_IGNORED_CALL_NOTICE = "Only the first tool call of a message is executed; this call was ignored."
# For a template that ignores `tools`: one schema (its "function" object) per line.
NATIVE_TOOL_INSTRUCTIONS = (
    "You have these tools, one per line:\n{schemas}\nTo use one, write exactly one call\n<tool_call>\n"
    '{{"name": "<tool name>", "arguments": {{...}}}}\n</tool_call>\n'
    "To talk to the user, write plain text without a tool call."
)


def parse_native_tools(text: str) -> ParsedTurn:
    """One native-tools message: its well-formed `<tool_call>` blocks, or plain text for the user.

    A message with any `<tool_call>` block is a tool message (its other text goes nowhere); when no block
    holds a well-formed call it has no call, which ends the episode (docs/spec/ALGORITHMS.md §5.1). An empty
    plain message has no call either: there is nothing to send to the user.
    """
    text = strip_think(text)
    if "<tool_call>" not in text:
        message = text.strip()
        return ParsedTurn(calls=[("action", message)], speaks=True) if message else ParsedTurn()
    blocks = TOOL_BLOCK.findall(text)
    calls = [("answer", json.dumps({"name": call[0], "arguments": call[1]}))
             for block in blocks if (call := any_tool_call(block)) is not None]
    return ParsedTurn(calls=calls, n_tool_calls=len(blocks))


def opening_text(messages: Messages, tools: list[dict[str, Any]]) -> str:
    """What a native-tools agent reads before its first message: the opening's texts and the tool schemas."""
    return "\n".join([*(m["content"] for m in messages), *(json.dumps(t["function"]) for t in tools)])


@register_protocol
class NativeToolsProtocol(ActionProtocol):
    """The gym's tools as function calls, plain text to the user."""

    name = "native_tools"
    offers_tools = True
    ignored_call_notice = NATIVE_IGNORED_CALL_NOTICE
    needs_gym_tools = True
    preamble_kinds = ("native_tools", "native_tools_template")

    def instructions(self, prompt: Messages, tools: list[dict[str, Any]] | None = None, *,
                     tools_rendered: bool = False) -> Messages:
        """The tool schemas, one per line, and how to call them, unless they reach the model otherwise."""
        if not tools:
            raise ValueError("env.protocol=native_tools needs the gym's tool schemas; this gym exposes none")
        if tools_rendered:
            return [dict(m) for m in prompt]
        schemas = "\n".join(json.dumps(t["function"]) for t in tools)
        return with_system_text(prompt, NATIVE_TOOL_INSTRUCTIONS.format(schemas=schemas))

    def opening(self, task: Task, env: MultiTurnEnv, *, tools_rendered: bool = False) -> tuple[Messages, list]:
        """The gym's own prompt (Tau: the domain policy and the customer's first message) and its tools."""
        tools = env.tool_schemas()
        return self.instructions(env.native_prompt(), tools, tools_rendered=tools_rendered), tools

    def tool_schemas(self, tools: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
        """The gym's own tools."""
        return list(tools or [])

    def render_action(self, choice: str, content: str) -> str:
        """A gym step as a message: `answer` JSON as a `<tool_call>` block, `action` as plain text."""
        if choice == "action":
            return content
        call = strict_json(content) if choice == "answer" else None
        if not isinstance(call, dict) or not isinstance(call.get("name"), str):
            raise ValueError(f"env.protocol=native_tools has no step [{choice}] {content[:80]!r}: a message either "
                             "calls one tool ({\"name\": ..., \"arguments\": {...}}) or talks to the user")
        return call_block(call["name"], call.get("arguments") or {})

    def parse(self, text: str) -> ParsedTurn:
        """The message's tool calls, or its plain text for the user (`parse_native_tools`)."""
        return parse_native_tools(text)

    def read_tool_call(self, name: str, arguments: str) -> tuple[str, str] | None:
        """A `tool_calls` entry as the `answer` step it runs, or None when it is not well-formed."""
        read = any_tool_call(json.dumps({"name": name, "arguments": arguments or "{}"}))
        return None if read is None else ("answer", json.dumps({"name": read[0], "arguments": read[1]}))

    def episode_metrics(self, trajectories: Sequence[Trajectory]) -> dict[str, dict[str, float]]:
        """MUA-RL's metrics (userrl.mua_metrics)."""
        from userrl.mua_metrics import mua_metrics

        return {"mua": mua_metrics(trajectories)}

    def env_kwargs(self, env_cls: type[MultiTurnEnv]) -> dict[str, Any]:
        """The gym's own native rules (`MultiTurnEnv.native_tools_kwargs`)."""
        return dict(env_cls.native_tools_kwargs)

    def check_solvers(self, gyms: list[str]) -> None:
        """Only a NativeToolsSolver plays without `search tools` and `finish`."""
        from userrl.envs.registry import solver_plays_native_tools

        without = [gym for gym in gyms if not solver_plays_native_tools(gym)]
        if without:
            raise ValueError(
                f"sft.enabled=true with env.protocol=native_tools: the solvers of {without} cannot write "
                "native-tools demonstrations; set sft.source=file (your own JSONL), sft.enabled=false or "
                "env.protocol=tool_call")

    def start_demonstration(self, solver: Any, gym: str, opening: Messages, tools: list[dict[str, Any]]) -> None:
        """Ground the solver in the native opening (ValueError for a solver that cannot play it)."""
        from userrl.envs.solving import NativeToolsSolver

        if not isinstance(solver, NativeToolsSolver):
            raise ValueError(
                f"sft.enabled=true with env.protocol=native_tools: the {gym} gym's solver cannot write "
                "native-tools demonstrations (it is no NativeToolsSolver); set sft.source=file, "
                "sft.enabled=false or env.protocol=tool_call")
        solver.start_native(opening_text(opening, tools))

    def demonstration_text(self, choice: str, content: str) -> str | None:
        """A native message has no `finish` step: the plan is over but the episode is not, so it ends there."""
        return None if choice == "finish" else self.render_action(choice, content)

    def preamble_kind(self, template: str) -> str:
        """The schemas are written into the system message unless the model's template renders `tools`."""
        return "native_tools_template" if template_renders_tools(template) else "native_tools"

    def completion_calls(self, text: str, tool_names: list[str]) -> tuple[str, list[tuple[str, dict[str, Any]]]]:
        """The call the message makes: training's parser decides, and only its first well-formed call runs."""
        parsed = parse_native_tools(text)
        if parsed.speaks or not parsed.calls:
            return text, []
        first = json.loads(parsed.calls[0][1])
        return TOOL_BLOCK.sub("", text), [(first["name"], first["arguments"])]
