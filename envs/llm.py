"""Model-backed roles (simulated user, oracle, judge) for the gyms: the contract every backend meets.

A gym with model roles holds a `RoleClient` in `self.llm` (built from its `llm` constructor keyword)
and, for `backend="scripted"`, uses its deterministic stand-in instead. A call that still fails after
its attempts returns `None` as the value, and the gym applies that role's fallback (docs/spec/GYMS.md §0.6).

`envs/openai_client.make_role_client(spec)` builds the OpenAI-compatible backend from a gym's `llm`
keyword; structured-output helpers (extract_json_object, as_bool, as_int, as_float, as_label) live in
envs/json_extract.py.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar, runtime_checkable

T = TypeVar("T")

#: What follows the system prompt in a role call: one user message, or a conversation of user and assistant
#: messages ending with a user message (the Tau customer's role-flipped view, docs/spec/GYMS.md §5).
RoleInput = str | Sequence[Mapping[str, str]]


def role_messages(system: str, user: RoleInput) -> list[dict[str, str]]:
    """The chat messages of one role call: the system prompt, then the user message or the conversation."""
    turns = [{"role": "user", "content": user}] if isinstance(user, str) else [dict(m) for m in user]
    return [{"role": "system", "content": system}, *turns]


@dataclass
class RoleCall:
    """What one role call did, for info["lm_calls"] and the rollout's user metrics."""

    role: str
    attempts: int
    ok: bool
    latency_s: float
    #: Why the last attempt failed (e.g. "timeout", "http_500", "extraction_failed"); None when ok.
    error: str | None = None
    #: Generation requests the call made (attempts x the fields asked), those a reply cache answered, the
    #: tokens the model generated for it (0 for cached replies), and requests sent again because the
    #: replica that had them died (a restarted replica answers them with the same seed).
    requests: int = 0
    cache_hits: int = 0
    tokens: int = 0
    resent: int = 0


@dataclass(frozen=True)
class UserModel:
    """The model behind a backend's users and judges: its name, and its version (0 for a fixed model; a
    co-training sync that gives the users new weights bumps it)."""

    name: str
    version: int = 0


def attempt_seed(seed: int | None, attempt: int) -> int | None:
    """The sampling seed of attempt `attempt` (1, 2, ...) of a call seeded `seed`: a retry after a bad reply
    must not sample that reply again, and every run retries with the same seeds."""
    return None if seed is None else (seed + attempt - 1) & 0x7FFFFFFF


@runtime_checkable
class RoleClient(Protocol):
    """An async chat-completions client for gym roles."""

    async def complete_json(
        self,
        role: str,
        system: str,
        user: RoleInput,
        validate: Callable[[dict[str, Any]], T],
        *,
        max_tokens: int | None = None,
        temperature: float | None = None,
        seed: int | None = None,
    ) -> tuple[T | None, RoleCall]:
        """The system prompt + `user` (a message or a conversation); extract a JSON object (docs/spec/GYMS.md §0.6) and pass it through
        `validate` (which raises ValueError/KeyError/TypeError to reject it). Retries on failure; the
        value is None when every attempt failed. `seed` fixes the sampling (attempt k: `attempt_seed`)."""
        ...

    async def complete_text(
        self,
        role: str,
        system: str,
        user: RoleInput,
        *,
        max_tokens: int | None = None,
        temperature: float | None = None,
        seed: int | None = None,
    ) -> tuple[str | None, RoleCall]:
        """Free-text completion with the same retries and seeds; None when every attempt failed."""
        ...


@runtime_checkable
class UserBackend(RoleClient, Protocol):
    """A RoleClient that names the model behind it: the env runners' user backends, whose model and version
    every trajectory records."""

    @property
    def user_model(self) -> UserModel:
        """The model that answers, and its version."""
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
        seed: int | None = None,
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
