"""Action protocols: the interface every protocol implements, and their registry (as envs/registry.py registers gyms).

An action protocol is how the policy acts in an episode: what its first context holds, how its messages are
parsed into env steps and rendered for demonstrations, how feedback is filed, and how an OpenAI-compatible
endpoint (`--policy openai:...`, `userrl serve`, `userrl export`'s chat template) speaks it. Each protocol is
one module owning all of that: a subclass of ActionProtocol registered under its `name`. Callers ask the
protocol object (`get_protocol(config.env.protocol)`), never compare its name.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cache
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from userrl.envs import MultiTurnEnv, Task, tool_call_to_action
from userrl.plugins import load_plugins

if TYPE_CHECKING:
    from userrl.trajectory import Trajectory

Messages = list[dict[str, Any]]
#: The opening of a `<tool_call>{json}</tool_call>` block (tool_call and native_tools write calls so).
TOOL_CALL_OPEN = "<tool_call>"


def template_renders_tools(template: str | None) -> bool:
    """Whether a chat template renders the `tools` argument itself (else schemas go into the system message)."""
    return "tools" in (template or "")


def with_system_text(prompt: Messages, extra: str) -> Messages:
    """The [system, ...] prompt, copied, with `extra` appended to its system message."""
    system, *rest = prompt
    return [{"role": "system", "content": system["content"].rstrip() + "\n\n" + extra}, *map(dict, rest)]


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


class ActionProtocol(ABC):
    """One action protocol: everything that depends on how the policy acts (subclass, then register_protocol)."""

    #: The registry name, the value of `env.protocol`.
    name: ClassVar[str]
    #: Texts that end an assistant message (kept in it); the token engines stop on tokens only.
    stop_strings: ClassVar[tuple[str, ...]] = ()
    #: Whether the model is offered tool schemas (a chat template that renders `tools` gets them).
    offers_tools: ClassVar[bool] = False
    #: The tool message that answers each call of a message after the one executed.
    ignored_call_notice: ClassVar[str] = ""
    #: Whether an OpenAI-compatible policy (`--policy openai:MODEL@URL`) can play it.
    plays_openai: ClassVar[bool] = True
    #: Whether the policy writes a simulated user's replies (a user simulator) rather than an agent's actions.
    user_replies: ClassVar[bool] = False
    #: Whether it plays only gyms that expose their own tools (`MultiTurnEnv.exposes_tools`).
    needs_gym_tools: ClassVar[bool] = False
    #: The userrl chat-template preambles (userrl.chat_template.MARKERS) that already render it.
    preamble_kinds: ClassVar[tuple[str, ...]] = ("tool_call",)
    #: Texts that may begin a tool call in a reply (`userrl serve` holds streamed content back from there).
    call_markers: ClassVar[tuple[str, ...]] = (TOOL_CALL_OPEN,)

    # ---- episodes (training's ChatFormat and the OpenAI-compatible policy)

    @abstractmethod
    def instructions(self, prompt: Messages, tools: list[dict[str, Any]] | None = None, *,
                     tools_rendered: bool = False) -> Messages:
        """The [system, user] prompt with this protocol's instructions appended to the system message.

        `tools` are the gym's function schemas; `tools_rendered`: the schemas reach the model some other way (a
        chat template that renders `tools`, or an OpenAI request's `tools`), so they are not written out here.
        """

    @abstractmethod
    def opening(self, task: Task, env: MultiTurnEnv, *, tools_rendered: bool = False) -> tuple[Messages, list]:
        """An episode's first messages and the gym's tool schemas to offer with them ([] when none)."""

    def tool_schemas(self, tools: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
        """The tool schemas offered to the model, given the episode's gym tools (none by default)."""
        return []

    @abstractmethod
    def render_action(self, choice: str, content: str) -> str:
        """Assistant text that performs one gym step (choice, content) in this protocol (demonstrations)."""

    @abstractmethod
    def parse(self, text: str) -> ParsedTurn:
        """The calls of one assistant message, as the rollout executes them."""

    def feedback_messages(self, parsed: ParsedTurn, feedback: str) -> Messages:
        """One tool message per call: the executed one carries the feedback, the others the ignored notice.

        A message that spoke to the user gets the user's reply as one user message instead.
        """
        if parsed.speaks:
            return [{"role": "user", "content": feedback}]
        ignored = [{"role": "tool", "content": self.ignored_call_notice}] * (max(1, parsed.n_tool_calls) - 1)
        return [{"role": "tool", "content": feedback}, *map(dict, ignored)]

    def chat_api_feedback(self, parsed: ParsedTurn, feedback: str) -> Messages:
        """The feedback to an OpenAI endpoint's reply whose calls were written as text (no tool_call_id)."""
        return self.feedback_messages(parsed, feedback)

    def read_tool_call(self, name: str, arguments: str) -> tuple[str, str] | None:
        """The (choice, content) step of one OpenAI `tool_calls` entry, or None when it is not one (no tools)."""
        return None

    def episode_metrics(self, trajectories: Sequence[Trajectory]) -> dict[str, dict[str, float]]:
        """This protocol's own metrics of played episodes, by group name (none by default)."""
        return {}

    # ---- gyms and demonstrations (config checks, env kwargs, SFT)

    def env_kwargs(self, env_cls: type[MultiTurnEnv]) -> dict[str, Any]:
        """Constructor arguments this protocol adds to a gym's env (the config's own kwargs win)."""
        return {}

    def check_solvers(self, gyms: list[str]) -> None:
        """Raise ValueError when the scripted solvers of `gyms` cannot write this protocol's demonstrations
        (sft.source=solver); every solver writes the choice protocols'."""
        return None  # nothing to check or prepare by default

    def start_demonstration(self, solver: Any, gym: str, opening: Messages, tools: list[dict[str, Any]]) -> None:
        """Prepare a scripted solver to play this protocol's episode that opens with `opening` and `tools`."""
        return None  # nothing to check or prepare by default

    def demonstration_text(self, choice: str, content: str) -> str | None:
        """The assistant text of one solver step, or None when that step ends the demonstration."""
        return self.render_action(choice, content)

    # ---- chat templates and `userrl serve`

    def preamble_kind(self, template: str) -> str:
        """The userrl chat-template preamble (userrl.chat_template) that renders this protocol on `template`."""
        return self.preamble_kinds[0]

    def check_request_tools(self, names: list[str]) -> None:
        """Raise ValueError when a Serve request offers tools this model cannot call (`names`, non-empty)."""
        return None  # nothing to check or prepare by default

    def calls_as_text(self, arguments: list[str]) -> str | None:
        """An incoming assistant message's tool_calls (their JSON arguments) as the text this protocol writes
        them in, or None to leave them to the chat template's preamble; ValueError for arguments it cannot."""
        return None

    def template_inputs(self, messages: Messages, tools: list[dict[str, Any]]) -> tuple[Messages, list]:
        """A Serve request's messages and tools (empty when none are in play) as the chat template takes them."""
        return messages, tools

    def completion_calls(self, text: str, tool_names: list[str]) -> tuple[str, list[tuple[str, dict[str, Any]]]]:
        """A completion's text left for `content` and the (name, arguments) tool calls it makes (none here)."""
        return text, []


_P = TypeVar("_P", bound=type[ActionProtocol])

#: Registry name -> protocol class.
PROTOCOL_CLASSES: dict[str, type[ActionProtocol]] = {}


def register_protocol(cls: _P) -> _P:
    """Class decorator: register an ActionProtocol subclass under its `name` (re-registering replaces it)."""
    PROTOCOL_CLASSES[cls.name] = cls
    _instance.cache_clear()
    return cls


def protocol_names() -> tuple[str, ...]:
    """Every known protocol name (the built-ins and the plug-ins'), sorted."""
    load_plugins()
    return tuple(sorted(PROTOCOL_CLASSES))


@cache
def _instance(name: str) -> ActionProtocol:
    return PROTOCOL_CLASSES[name]()


def get_protocol(name: str) -> ActionProtocol:
    """The protocol registered under `name` (ValueError naming the known ones when there is none)."""
    if name not in PROTOCOL_CLASSES:
        load_plugins()  # a plug-in's protocol is registered on the first lookup of a name not built in
    if name not in PROTOCOL_CLASSES:
        raise ValueError(f"unknown action protocol {name!r}; known: {', '.join(protocol_names())}")
    return _instance(name)
