"""Model-backed roles (simulated user, oracle, judge) for the gyms: the contract every backend meets.

A gym with model roles holds a `RoleClient` in `self.llm` (built from its `llm` constructor keyword)
and, for `backend="scripted"`, uses its deterministic stand-in instead. A call that still fails after
its attempts returns `None` as the value, and the gym applies that role's fallback (GYMS.md 0.6).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

T = TypeVar("T")


@dataclass
class RoleCall:
    """What one role call did, for info["lm_calls"]."""

    role: str
    attempts: int
    ok: bool
    latency_s: float


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
