"""Message-level episodes against any OpenAI-compatible chat endpoint (`--policy openai:MODEL@URL`).

The model sees the task's [system, user] prompt and acts through the `interact_with_env` tool: native
`tool_calls` (the request carries `tools=[TOOL_SCHEMA]`), or the same call written as `<tool_call>` text.
With the `bracket` protocol there are no tools and the model writes `[answer] 42` lines. Env stepping and
turn bookkeeping are the token-level rollout's (`userrl.rollout.run_episode`, the one episode loop); only the
front end differs.

`native_tools` (MUA-RL's episode, docs/spec/ALGORITHMS.md §5.1) opens with the gym's own prompt (Tau: the
domain policy and the customer's recorded first message) and offers the gym's tools. Where the tool schemas
go is `evaluation.openai_tools` (TOOL_MODES), for tool_call as well:
* `request`: as the request's OpenAI `tools`; the server renders them and returns `tool_calls` (vLLM needs
  `--enable-auto-tool-choice --tool-call-parser ...` for this, else it answers 400). Each call's result goes
  back as a `tool` message with its `tool_call_id`.
* `prompt`: written into the system message as training writes them for a template that ignores `tools`
  (`ActionProtocol.instructions`), and read back from `<tool_call>` blocks in the reply's text: any chat server
  works, with no tool parser (SmolLM2 on vLLM). The results go back as `tool` messages without an id (the
  server only renders them), as training renders them.
Either way a reply without a call is speech to the customer (native_tools), whose reply comes back as a user
message, and a reply's text is parsed as training parses it when it carries no `tool_calls`.
"""

from __future__ import annotations

import logging
import os
import re
from dataclasses import dataclass, field
from typing import Any

from userrl.actors.env_runner import EpisodePlayer, EpisodeSpec, make_user_client
from userrl.envs import MultiTurnEnv, Task
from userrl.protocols import PROTOCOL_CLASSES, ParsedTurn, get_protocol
from userrl.rollout import AgentTurn, EpisodePolicy, RolloutLimits
from userrl.trajectory import Trajectory

log = logging.getLogger(__name__)

_POLICY = re.compile(r"^openai:(?P<model>\S+?)@(?P<url>https?://\S+)$")
#: A keyless local server still needs some key for the SDK; real endpoints read $OPENAI_API_KEY.
_KEYLESS = "EMPTY"
#: Where the tool schemas go (module docstring): the request's `tools`, or the system message.
TOOL_MODES = ("request", "prompt")


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
    """Chat-completions client for one model; turns replies into parsed calls of the protocol."""

    def __init__(self, spec: OpenAIPolicySpec, protocol: str = "tool_call", max_tokens: int = 2048,
                 timeout_s: float = 120.0, attempts: int = 3, tools: str = "request"):
        from openai import AsyncOpenAI

        self.protocol = get_protocol(protocol)
        if not self.protocol.plays_openai:
            plays = [name for name, cls in PROTOCOL_CLASSES.items() if cls.plays_openai]
            raise ValueError(f"env.protocol={protocol!r}: an OpenAI-compatible policy plays "
                             f"{', '.join(map(repr, plays))}")
        if tools not in TOOL_MODES:
            raise ValueError(f"evaluation.openai_tools={tools!r} is not one of {', '.join(map(repr, TOOL_MODES))}")
        self.spec, self.max_tokens, self.tools = spec, max_tokens, tools
        #: native_tools in request mode: each running episode's tool schemas, by uid (dropped by `forget`).
        self._episode_tools: dict[str, list[dict[str, Any]]] = {}
        # The key is read now, when the client is built (never logged); local servers need none.
        self.client = AsyncOpenAI(base_url=spec.base_url, api_key=os.environ.get("OPENAI_API_KEY") or _KEYLESS,
                                  timeout=timeout_s, max_retries=max(0, attempts - 1))

    def start(self, traj: Trajectory, task: Task, env: MultiTurnEnv) -> None:
        """The protocol's opening messages (native_tools: the gym's, with its tools, kept for the requests)."""
        traj.messages, tools = self.protocol.opening(task, env, tools_rendered=self.tools == "request")
        if self.tools == "request" and tools:
            self._episode_tools[traj.uid] = tools

    def forget(self, uid: str) -> None:
        """Drop what was kept for episode `uid` (called when it has ended)."""
        self._episode_tools.pop(uid, None)

    async def act(self, traj: Trajectory, turn: int, limits: RolloutLimits, seed: int) -> AgentTurn:
        """One chat completion over the conversation so far, kept in the transcript."""
        reply = await self.complete(traj.messages, limits.temperature, seed, self.request_tools(traj.uid))
        traj.messages.append(reply.message)
        return AgentTurn(turn, reply.parsed, reply.finish_reason, reply.completion_tokens, reply=reply)

    def observe(self, traj: Trajectory, turn: AgentTurn, feedback: str, limits: RolloutLimits) -> bool:
        """The env's feedback as tool (or user) messages; the endpoint owns its context budget."""
        traj.messages.extend(self.tool_messages(turn.reply, feedback))
        return True

    def request_tools(self, uid: str) -> list[dict[str, Any]]:
        """The `tools` of episode `uid`'s requests ([] in prompt mode and for bracket)."""
        if self.tools != "request":
            return []
        return self.protocol.tool_schemas(self._episode_tools.get(uid))

    def initial_messages(self, prompt: list[dict[str, str]]) -> list[dict[str, Any]]:
        """The task prompt with the protocol's instructions (the tool's schema too in prompt mode)."""
        return self.protocol.instructions(prompt, tools_rendered=self.tools == "request")

    async def complete(self, messages: list[dict[str, Any]], temperature: float, seed: int,
                       tools: list[dict[str, Any]] | None = None) -> Reply:
        """One chat completion, parsed into calls (native tool_calls first, then the text protocol)."""
        kwargs: dict[str, Any] = {"tools": tools} if tools else {}
        response = await self.client.chat.completions.create(
            model=self.spec.model, messages=messages, temperature=temperature, max_tokens=self.max_tokens,
            seed=seed, **kwargs)
        choice = response.choices[0]
        text = choice.message.content or ""
        native = list(choice.message.tool_calls or [])
        message: dict[str, Any] = {"role": "assistant", "content": text}
        tokens = response.usage.completion_tokens if response.usage else 0
        finish = choice.finish_reason or "stop"
        if native:
            message["tool_calls"] = [{"id": c.id, "type": "function",
                                      "function": {"name": c.function.name, "arguments": c.function.arguments}}
                                     for c in native]
            read = self.protocol.read_tool_call
            parsed = ParsedTurn(calls=[call for c in native
                                       if (call := read(c.function.name, c.function.arguments)) is not None],
                                n_tool_calls=len(native))
            return Reply(message, text, parsed, finish, [c.id for c in native], tokens)
        return Reply(message, text, self.parse(text), finish, [], tokens)

    def parse(self, text: str) -> ParsedTurn:
        """The calls written in a reply's text, as training parses them."""
        return self.protocol.parse(text)

    def tool_messages(self, reply: Reply, feedback: str) -> list[dict[str, Any]]:
        """The env feedback for a reply: one tool message per native call (the first carries the feedback).

        Calls written as text have no tool_call_id to answer: under native_tools their results are `tool`
        messages as training renders them, and a reply that spoke to the customer gets its reply as a user
        message; the choice protocols get one user message.
        """
        if reply.tool_call_ids:
            notice = self.protocol.ignored_call_notice
            return [{"role": "tool", "tool_call_id": call_id, "content": feedback if i == 0 else notice}
                    for i, call_id in enumerate(reply.tool_call_ids)]
        return self.protocol.chat_api_feedback(reply.parsed, feedback)

    async def aclose(self) -> None:
        """Close the HTTP client."""
        await self.client.close()


class OpenAIEpisodePlayer(EpisodePlayer):
    """Plays EpisodeSpecs against an endpoint in this process, with at most `concurrency` in flight."""

    def __init__(self, policy: OpenAIPolicy, limits: RolloutLimits, env_kwargs: dict[str, dict[str, Any]],
                 concurrency: int, backend: str = "scripted", llm: dict[str, Any] | None = None):
        if backend == "local":
            raise ValueError("env.backend=local needs user replicas in a Ray cluster; with --policy openai:... "
                             "use env.backend=scripted or env.backend=openai")
        super().__init__(policy, limits, env_kwargs, concurrency, backend, make_user_client(backend, llm, None, None))
        self.openai_policy = policy

    async def play_one(self, spec: EpisodeSpec, seed: int, limits: RolloutLimits) -> Trajectory:
        """One episode; what the policy kept for it is dropped when it ends."""
        try:
            return await super().play_one(spec, seed, limits)
        finally:
            self.openai_policy.forget(spec.uid)
