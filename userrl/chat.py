"""Chat rendering into exact token segments, and the three action protocols.

Non-generated messages are tokenized as deltas of the chat template against a fixed dummy prefix
(spec ALGORITHMS.md 1.2), so the context only ever grows by appending and the policy conditions on
exactly the tokens that training later scores.

`user_reply` (HumanLM's single-turn task, userrl/humanlm) has no action syntax: the whole message is the simulated
user's reply (tag blocks), the opening is the task's own messages, and decoding ends at a field's closing tag.

`bracket` and `tool_call` act through the gyms' choices (`[answer] 42`, or the one `interact_with_env`
tool). `native_tools` (gyms that expose tools, MUA-RL's episode of ALGORITHMS.md 5.1) offers the gym's own
tools as function schemas: each assistant message calls one tool or speaks plain text to the user. Tool
schemas reach the prompt through the chat template's `tools` argument when the template renders it, and
are otherwise written into the system message (SmolLM2's template ignores `tools`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from userrl.envs import MultiTurnEnv, Task, tool_call_to_action
from userrl.envs.json_extract import strip_think
from userrl.humanlm.format import STOP_STRINGS as HUMANLM_STOPS
from userrl.trajectory import ROLE_IDS

TOOL_NAME = "interact_with_env"
TOOL_SCHEMA: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": TOOL_NAME,
        "description": "Take one step in the current environment. Follow the system prompt for which choices are "
        "allowed and what the content must contain.",
        "parameters": {
            "type": "object",
            "properties": {
                "choice": {
                    "type": "string",
                    "enum": ["action", "answer", "search"],
                    "description": "The kind of step to take. Use only the choices the system prompt allows.",
                },
                "content": {
                    "type": "string",
                    "description": "The text of the step: the message, question, answer or search query, in the "
                    "format the system prompt defines.",
                },
            },
            "required": ["choice", "content"],
        },
    },
}
IGNORED_CALL_NOTICE = "Only one interact_with_env call is executed per turn; this call was ignored."
NATIVE_IGNORED_CALL_NOTICE = "Only the first tool call of a message is executed; this call was ignored."

BRACKET_INSTRUCTIONS = (
    "Act by writing exactly one line of the form [choice] content, for example:\n[search] test"
)
TOOL_INSTRUCTIONS = (
    "You have one tool:\n{schema}\nCall it by writing\n<tool_call>\n"
    '{{"name": "interact_with_env", "arguments": {{"choice": "...", "content": "..."}}}}\n</tool_call>'
)

# Like TOOL_INSTRUCTIONS, for a template that ignores `tools`: one schema (its "function" object) per line.
NATIVE_TOOL_INSTRUCTIONS = (
    "You have these tools, one per line:\n{schemas}\nTo use one, write exactly one call\n<tool_call>\n"
    '{{"name": "<tool name>", "arguments": {{...}}}}\n</tool_call>\n'
    "To talk to the user, write plain text without a tool call."
)

_BRACKET_LINE = re.compile(r"^[ \t]*\[(action|answer|search|finish)\]", re.MULTILINE)
TOOL_BLOCK = re.compile(r"<tool_call>(.*?)(?:</tool_call>|$)", re.DOTALL)
_DUMMY = [{"role": "system", "content": "x"}, {"role": "user", "content": "y"}]

Protocol = Literal["bracket", "tool_call", "native_tools", "user_reply"]
PROTOCOLS: tuple[str, ...] = ("bracket", "tool_call", "native_tools", "user_reply")
#: user_reply: decoding ends after the closing tag of any HumanLM field (spec 5.2 "stop strings").
USER_REPLY_STOPS: tuple[str, ...] = HUMANLM_STOPS


def template_renders_tools(template: str | None) -> bool:
    """Whether a chat template renders the `tools` argument itself (else schemas go into the system message)."""
    return "tools" in (template or "")


@dataclass
class ParsedTurn:
    """Tool calls found in one assistant message."""

    calls: list[tuple[str, str]] = field(default_factory=list)
    n_tool_calls: int = 0
    #: native_tools: the message is plain text for the user, whose reply comes back as a user message.
    speaks: bool = False

    @property
    def action(self) -> str | None:
        """The action string of the first well-formed call, or None when there is none."""
        if not self.calls:
            return None
        return tool_call_to_action(*self.calls[0])


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


def tool_call_blocks(text: str, tool_names: Sequence[str] = (TOOL_NAME,)) -> list[tuple[str, dict[str, Any]]]:
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


def parse_tool_calls(text: str) -> ParsedTurn:
    """Find `<tool_call>{json}</tool_call>` blocks; only well-formed interact_with_env calls count as calls."""
    n_blocks = sum(1 for b in TOOL_BLOCK.findall(text) if b.strip())
    calls = [(str(arguments.get("choice", "")), str(arguments.get("content", "")))
             for _, arguments in tool_call_blocks(text)]
    return ParsedTurn(calls=calls, n_tool_calls=n_blocks)


def native_tool_call(block: str) -> tuple[str, dict[str, Any]] | None:
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


def strict_json(text: str) -> Any:
    """The JSON value of text; None for invalid or non-standard JSON (NaN, Infinity) and for runaway nesting."""
    def refuse(constant: str) -> Any:
        raise ValueError(constant)

    try:
        return json.loads(text, parse_constant=refuse)
    except (ValueError, RecursionError):
        return None


def parse_native_tools(text: str) -> ParsedTurn:
    """One native-tools message: its well-formed `<tool_call>` blocks, or plain text for the user.

    A message with any `<tool_call>` block is a tool message (its other text goes nowhere); when no block
    holds a well-formed call it has no call, which ends the episode (ALGORITHMS.md 5.1). An empty plain
    message has no call either: there is nothing to send to the user.
    """
    text = strip_think(text)
    if "<tool_call>" not in text:
        message = text.strip()
        return ParsedTurn(calls=[("action", message)], speaks=True) if message else ParsedTurn()
    blocks = TOOL_BLOCK.findall(text)
    calls = [("answer", json.dumps({"name": call[0], "arguments": call[1]}))
             for block in blocks if (call := native_tool_call(block)) is not None]
    return ParsedTurn(calls=calls, n_tool_calls=len(blocks))


class ChatFormat:
    """Renders conversations into token segments for one tokenizer and action protocol."""

    def __init__(self, tokenizer: Any, protocol: Protocol = "tool_call"):
        if protocol not in PROTOCOLS:
            raise ValueError(f"env.protocol={protocol!r} is not one of {', '.join(map(repr, PROTOCOLS))}")
        self.tokenizer = tokenizer
        self.protocol = protocol
        #: Whether tool schemas go through the template's `tools` argument (else into the system message).
        self.template_tools = protocol not in ("bracket", "user_reply") and template_renders_tools(tokenizer.chat_template)
        #: Texts that end an assistant message (kept in it): the engines stop on tokens only, so TokenPolicy
        #: cuts the sampled tokens after the first of these.
        self.stop_strings: tuple[str, ...] = USER_REPLY_STOPS if protocol == "user_reply" else ()
        self.eos_text = tokenizer.eos_token
        self.stop_token_ids = sorted({tokenizer.eos_token_id, *self._extra_stop_ids()})
        self._header_ids = self._encode(self._render(_DUMMY, True)[len(self._render(_DUMMY, False)):])

    def _extra_stop_ids(self) -> list[int]:
        ids = []
        for text in ("<|im_end|>", "<|eot_id|>", "<|end|>"):
            token = self.tokenizer.convert_tokens_to_ids(text)
            if isinstance(token, int) and token != self.tokenizer.unk_token_id and token is not None:
                ids.append(token)
        return ids

    def _render(self, messages: list[dict[str, str]], generation_prompt: bool,
                tools: list[dict[str, Any]] | None = None) -> str:
        schemas = [TOOL_SCHEMA] if self.protocol == "tool_call" else list(tools or [])
        kwargs: dict[str, Any] = {"tools": schemas} if self.template_tools and schemas else {}
        return self.tokenizer.apply_chat_template(
            messages, tokenize=False, add_generation_prompt=generation_prompt, **kwargs
        )

    def _encode(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def initial_messages(self, prompt: list[dict[str, str]],
                         tools: list[dict[str, Any]] | None = None) -> list[dict[str, str]]:
        """The [system, user] messages with the protocol's instructions appended to the system message.

        `tools` are the gym's function schemas (native_tools only; written out unless the template renders them).
        """
        return with_instructions(self.protocol, prompt, tools, tools_rendered=self.template_tools)

    def episode_opening(self, task: Task, env: MultiTurnEnv) -> tuple[list[dict[str, str]], list[dict[str, Any]]]:
        """An episode's first messages and the tool schemas to render them with ([] outside native_tools)."""
        if self.protocol == "user_reply":  # the task's own messages (persona prompt + context), as they are
            return [dict(m) for m in env.native_prompt()], []
        if self.protocol != "native_tools":
            return self.initial_messages(task.prompt), []
        tools = env.tool_schemas()
        return self.initial_messages(env.native_prompt(), tools), tools

    def encode_prompt(self, messages: list[dict[str, str]],
                      tools: list[dict[str, Any]] | None = None) -> list[tuple[list[int], int]]:
        """Token segments (ids, role id) of the first context, ending with the assistant header."""
        segments, done = [], ""
        for i in range(1, len(messages) + 1):
            text = self._render(messages[:i], False, tools)
            segments.append((self._encode(text[len(done):]), ROLE_IDS[messages[i - 1]["role"]]))
            done = text
        segments.append((self._encode(self._render(messages, True, tools)[len(done):]), ROLE_IDS["assistant"]))
        return segments

    @property
    def header_ids(self) -> list[int]:
        """The assistant generation header appended before turn k > 0."""
        return list(self._header_ids)

    def encode_after_assistant(self, messages: list[dict[str, str]]) -> list[int]:
        """Tokens of non-assistant messages that follow a sampled assistant turn (the delta)."""
        base = [*_DUMMY, {"role": "assistant", "content": "z"}]
        before = self._render(base, False)
        cut = before.rindex(self.eos_text) + len(self.eos_text) if self.eos_text in before else len(before)
        after = self._render(base + messages, False)
        if not after.startswith(before[:cut]):
            raise ValueError("the chat template rewrites history; delta rendering is not possible")
        return self._encode(after[cut:])

    def render_action(self, choice: str, content: str) -> str:
        """Assistant text that performs one action in this protocol (used for demonstrations)."""
        if self.protocol == "bracket":
            return f"[{choice}] {content}"
        if self.protocol == "native_tools":
            return _render_native_action(choice, content)
        call = {"name": TOOL_NAME, "arguments": {"choice": choice, "content": content}}
        return f"<tool_call>\n{json.dumps(call)}\n</tool_call>"

    def parse(self, text: str) -> ParsedTurn:
        """Parse the tool calls of one assistant message in this protocol."""
        if self.protocol == "user_reply":  # the whole message is the reply; the group scorer parses its tags
            return ParsedTurn(calls=[("answer", text)], n_tool_calls=1)
        if self.protocol == "native_tools":
            return parse_native_tools(text)
        return parse_bracket(text) if self.protocol == "bracket" else parse_tool_calls(text)

    def tool_messages(self, parsed: ParsedTurn, feedback: str) -> list[dict[str, str]]:
        """The messages that file the env's feedback to one assistant message (`feedback_messages`)."""
        return feedback_messages(self.protocol, parsed, feedback)


def with_instructions(protocol: str, prompt: list[dict[str, str]], tools: list[dict[str, Any]] | None = None,
                      *, tools_rendered: bool = False) -> list[dict[str, str]]:
    """The [system, user] messages with the protocol's instructions appended to the system message.

    `tools` are the gym's function schemas (native_tools only). `tools_rendered`: the tool schemas reach the
    model some other way (a chat template that renders `tools`, or an OpenAI-compatible request's `tools`), so
    tool_call and native_tools append nothing; otherwise they are written out here.
    """
    system, *rest = prompt
    if protocol == "native_tools" and not tools:
        raise ValueError("env.protocol=native_tools needs the gym's tool schemas; this gym exposes none")
    if protocol == "bracket":
        extra = BRACKET_INSTRUCTIONS
    elif tools_rendered:
        return [dict(m) for m in prompt]
    elif protocol == "tool_call":
        extra = TOOL_INSTRUCTIONS.format(schema=json.dumps(TOOL_SCHEMA["function"]))
    else:
        extra = NATIVE_TOOL_INSTRUCTIONS.format(schemas="\n".join(json.dumps(t["function"]) for t in tools or []))
    return [{"role": "system", "content": system["content"].rstrip() + "\n\n" + extra}, *map(dict, rest)]


def feedback_messages(protocol: str, parsed: ParsedTurn, feedback: str) -> list[dict[str, str]]:
    """One tool message per call: the executed one carries the feedback, others the ignored notice.

    A native_tools message that spoke to the user gets the user's reply as one user message instead;
    a user_reply episode ends with its one reply, so nothing follows it.
    """
    if protocol == "user_reply":
        return []
    if parsed.speaks:
        return [{"role": "user", "content": feedback}]
    notice = NATIVE_IGNORED_CALL_NOTICE if protocol == "native_tools" else IGNORED_CALL_NOTICE
    n = max(1, parsed.n_tool_calls)
    return [{"role": "tool", "content": feedback}] + [{"role": "tool", "content": notice} for _ in range(n - 1)]


def _render_native_action(choice: str, content: str) -> str:
    """A gym step as a native_tools message: `answer` JSON as a `<tool_call>` block, `action` as plain text."""
    if choice == "action":
        return content
    call = strict_json(content) if choice == "answer" else None
    if not isinstance(call, dict) or not isinstance(call.get("name"), str):
        raise ValueError(f"env.protocol=native_tools has no step [{choice}] {content[:80]!r}: a message either "
                         "calls one tool ({\"name\": ..., \"arguments\": {...}}) or talks to the user")
    payload = {"name": call["name"], "arguments": call.get("arguments") or {}}
    return f"<tool_call>\n{json.dumps(payload)}\n</tool_call>"
