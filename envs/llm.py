"""Model-backed roles (simulated user, oracle, judge) for the gyms: the contract every backend meets.

A gym with model roles holds a `RoleClient` in `self.llm` (built from its `llm` constructor keyword)
and, for `backend="scripted"`, uses its deterministic stand-in instead. A call that still fails after
its attempts returns `None` as the value, and the gym applies that role's fallback (GYMS.md 0.6).

`make_role_client(spec)` builds the OpenAI-compatible backend (envs/openai_client.py) from a gym's `llm`
keyword; structured-output helpers (extract_json_object, as_bool, as_int, as_float, as_label) live in
envs/json_extract.py.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar, runtime_checkable

T = TypeVar("T")


@dataclass
class RoleCall:
    """What one role call did, for info["lm_calls"]."""

    role: str
    attempts: int
    ok: bool
    latency_s: float
    #: Why the last attempt failed (e.g. "timeout", "http_500", "extraction_failed"); None when ok.
    error: str | None = None


@runtime_checkable
class RoleClient(Protocol):
    """An async chat-completions client for gym roles."""

    async def complete_json(
        self,
        role: str,
        system: str,
        user: str,
        validate: Callable[[dict[str, Any]], T],
        *,
        max_tokens: int | None = None,
        temperature: float | None = None,
    ) -> tuple[T | None, RoleCall]:
        """One system + one user message; extract a JSON object (GYMS.md 0.6) and pass it through
        `validate` (which raises ValueError/KeyError/TypeError to reject it). Retries on failure; the
        value is None when every attempt failed."""
        ...

    async def complete_text(
        self,
        role: str,
        system: str,
        user: str,
        *,
        max_tokens: int | None = None,
        temperature: float | None = None,
    ) -> tuple[str | None, RoleCall]:
        """Free-text completion with the same retries; None when every attempt failed."""
        ...


@runtime_checkable
class PersonaUserClient(Protocol):
    """A RoleClient that plays a user from a persona and the conversation (a trained user simulator): the gyms
    that have a persona (persuade, intention) ask it this way instead of their JSON role prompt."""

    async def complete_user(
        self,
        role: str,
        persona: str,
        context: Sequence[Mapping[str, str]],
        fields: Sequence[str],
    ) -> tuple[dict[str, str] | None, RoleCall]:
        """The user's next message as one text per field (e.g. ("stance", "response")), given its
        persona and the conversation so far (`user_turn_context`); None when every attempt failed."""
        ...


def user_turn_context(opening: str, exchanges: Sequence[tuple[str, str]], latest: str) -> list[dict[str, str]]:
    """The conversation as the simulated user sees it, in a user simulator's roles (the user is the simulator, the assistant the agent):
    the user's opening message, each (agent message, user reply) exchange, then the agent's latest message.

    The rows a user simulator is trained on, when recorded from our gyms, and the simulator playing them
    both use this."""
    context = [{"role": "user", "content": opening}]
    for message, reply in exchanges:
        context += [{"role": "assistant", "content": message}, {"role": "user", "content": reply}]
    return context + [{"role": "assistant", "content": latest}]


def make_role_client(spec: Any = None) -> RoleClient:
    """A RoleClient from a gym's `llm` keyword (see envs/openai_client.make_role_client)."""
    # Imported here so that scripted-only use of this module never loads the openai SDK.
    from userrl.envs.openai_client import make_role_client as _make

    return _make(spec)
