"""Message-level episodes against any OpenAI-compatible chat endpoint (`--policy openai:MODEL@URL`).

The model sees the task's [system, user] prompt and acts through the `interact_with_env` tool: native
`tool_calls` (the request carries `tools=[TOOL_SCHEMA]`), or the same call written as `<tool_call>` text.
With the `bracket` protocol there are no tools and the model writes `[answer] 42` lines. Env stepping and
turn bookkeeping are the token-level rollout's (`userrl.rollout.run_episode`, the one episode loop); only the
front end differs.
"""

from __future__ import annotations

import json
import logging
import os
import re
from dataclasses import dataclass, field
from typing import Any

from userrl.actors.env_runner import EpisodePlayer, make_user_client
from userrl.chat import (
    BRACKET_INSTRUCTIONS,
    IGNORED_CALL_NOTICE,
    TOOL_NAME,
    TOOL_SCHEMA,
    ParsedTurn,
    parse_bracket,
    parse_tool_calls,
)
from userrl.envs import MultiTurnEnv, Task
from userrl.rollout import AgentTurn, EpisodePolicy, RolloutLimits
from userrl.trajectory import Trajectory

log = logging.getLogger(__name__)

_POLICY = re.compile(r"^openai:(?P<model>\S+?)@(?P<url>https?://\S+)$")
#: A keyless local server still needs some key for the SDK; real endpoints read $OPENAI_API_KEY.
_KEYLESS = "EMPTY"


@dataclass(frozen=True)
class OpenAIPolicySpec:
    """Where the policy lives: model name and base URL of an OpenAI-compatible API."""

    model: str
    base_url: str


def parse_policy(text: str) -> OpenAIPolicySpec:
    """Parse `openai:MODEL@URL` (ValueError naming the expected form otherwise)."""
    match = _POLICY.match(text.strip())
    if not match:
        raise ValueError(f"--policy {text!r}: expected openai:MODEL@URL, e.g. "
                         "openai:Qwen/Qwen3-8B@http://localhost:8000/v1")
    return OpenAIPolicySpec(match["model"], match["url"].rstrip("/"))


@dataclass
class Reply:
    """One assistant reply: the message to keep in the conversation and the calls found in it."""

    message: dict[str, Any]
    text: str
    parsed: ParsedTurn
    finish_reason: str
    tool_call_ids: list[str] = field(default_factory=list)
    completion_tokens: int = 0


class OpenAIPolicy(EpisodePolicy):
    """Chat-completions client for one model; turns replies into parsed interact_with_env calls."""

    def __init__(self, spec: OpenAIPolicySpec, protocol: str = "tool_call", max_tokens: int = 2048,
                 timeout_s: float = 120.0, attempts: int = 3):
        from openai import AsyncOpenAI

        if protocol not in ("tool_call", "bracket"):
            raise ValueError(f"env.protocol={protocol!r} is not one of 'bracket', 'tool_call' (an OpenAI-compatible "
                             "policy does not play native_tools episodes yet)")
        self.spec, self.protocol, self.max_tokens = spec, protocol, max_tokens
        # The key is read now, when the client is built (never logged); local servers need none.
        self.client = AsyncOpenAI(base_url=spec.base_url, api_key=os.environ.get("OPENAI_API_KEY") or _KEYLESS,
                                  timeout=timeout_s, max_retries=max(0, attempts - 1))

    def start(self, traj: Trajectory, task: Task, env: MultiTurnEnv) -> None:
        """The task's opening messages."""
        traj.messages = self.initial_messages(task.prompt)

    async def act(self, traj: Trajectory, turn: int, limits: RolloutLimits, seed: int) -> AgentTurn:
        """One chat completion over the conversation so far, kept in the transcript."""
        reply = await self.complete(traj.messages, limits.temperature, seed)
        traj.messages.append(reply.message)
        return AgentTurn(turn, reply.parsed, reply.finish_reason, reply.completion_tokens, reply=reply)

    def observe(self, traj: Trajectory, turn: AgentTurn, feedback: str, limits: RolloutLimits) -> bool:
        """The env's feedback as tool (or user) messages; the endpoint owns its context budget."""
        traj.messages.extend(self.tool_messages(turn.reply, feedback))
        return True

    def initial_messages(self, prompt: list[dict[str, str]]) -> list[dict[str, Any]]:
        """The task prompt; the bracket protocol appends its instructions (tools come with the request)."""
        messages = [dict(m) for m in prompt]
        if self.protocol == "bracket":
            messages[0]["content"] = messages[0]["content"].rstrip() + "\n\n" + BRACKET_INSTRUCTIONS
        return messages

    async def complete(self, messages: list[dict[str, Any]], temperature: float, seed: int) -> Reply:
        """One chat completion, parsed into calls (native tool_calls first, then the text protocol)."""
        kwargs: dict[str, Any] = {"tools": [TOOL_SCHEMA]} if self.protocol == "tool_call" else {}
        response = await self.client.chat.completions.create(
            model=self.spec.model, messages=messages, temperature=temperature, max_tokens=self.max_tokens,
            seed=seed, **kwargs)
        choice = response.choices[0]
        text = choice.message.content or ""
        native = list(choice.message.tool_calls or [])
        message: dict[str, Any] = {"role": "assistant", "content": text}
        tokens = response.usage.completion_tokens if response.usage else 0
        if native:
            message["tool_calls"] = [{"id": c.id, "type": "function",
                                      "function": {"name": c.function.name, "arguments": c.function.arguments}}
                                     for c in native]
            parsed = ParsedTurn(calls=[call for c in native if (call := _native_call(c)) is not None],
                                n_tool_calls=len(native))
            return Reply(message, text, parsed, choice.finish_reason or "stop", [c.id for c in native], tokens)
        parsed = parse_tool_calls(text) if self.protocol == "tool_call" else parse_bracket(text)
        return Reply(message, text, parsed, choice.finish_reason or "stop", [], tokens)

    def tool_messages(self, reply: Reply, feedback: str) -> list[dict[str, Any]]:
        """The env feedback for a reply: one tool message per native call (the first carries the feedback),
        or one user message when the calls were written as text (there is no tool_call_id to answer)."""
        if not reply.tool_call_ids:
            return [{"role": "user", "content": feedback}]
        return [{"role": "tool", "tool_call_id": call_id, "content": feedback if i == 0 else IGNORED_CALL_NOTICE}
                for i, call_id in enumerate(reply.tool_call_ids)]

    async def aclose(self) -> None:
        """Close the HTTP client."""
        await self.client.close()


def _native_call(call: Any) -> tuple[str, str] | None:
    if call.function.name != TOOL_NAME:
        return None
    try:
        arguments = json.loads(call.function.arguments or "{}")
    except json.JSONDecodeError:
        return None
    if not isinstance(arguments, dict):
        return None
    return str(arguments.get("choice", "")), str(arguments.get("content", ""))


class OpenAIEpisodePlayer(EpisodePlayer):
    """Plays EpisodeSpecs against an endpoint in this process, with at most `concurrency` in flight."""

    def __init__(self, policy: OpenAIPolicy, limits: RolloutLimits, env_kwargs: dict[str, dict[str, Any]],
                 concurrency: int, backend: str = "scripted", llm: dict[str, Any] | None = None):
        if backend == "local":
            raise ValueError("env.backend=local needs user replicas in a Ray cluster; with --policy openai:... "
                             "use env.backend=scripted or env.backend=openai")
        super().__init__(policy, limits, env_kwargs, concurrency, backend, make_user_client(backend, llm, None, None))
