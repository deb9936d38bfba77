"""One episode's view of the run's user backend: seeds every user and judge call and adds up what they cost.

The env runner builds one UserSession per episode around its shared role client and hands it to the gym as
its `llm`. Call k of turn t is seeded `request_seed(seed, f"{group_id}/user{k}", t)`: the episode's seed and
its GRPO group, not the episode, so two episodes of a group that send the same agent messages get the same
user replies (also at temperature > 0) and a group's differences come from the agent. The session then
records on the trajectory which user model and version answered and what the calls cost.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from userrl.envs.llm import PersonaUserClient, RoleCall, RoleInput, UserBackend, UserModel
from userrl.rollout import request_seed
from userrl.trajectory import Trajectory

T = TypeVar("T")


@dataclass
class UserUsage:
    """What one episode's user and judge calls cost, summed over its RoleCalls."""

    requests: int = 0
    cache_hits: int = 0
    tokens: int = 0
    resent: int = 0
    #: Seconds during which at least one of the episode's role calls was waiting for its reply.
    wait_s: float = 0.0

    def add(self, call: RoleCall) -> None:
        """Count one finished call."""
        self.requests += call.requests
        self.cache_hits += call.cache_hits
        self.tokens += call.tokens
        self.resent += call.resent


class UserSession:
    """A RoleClient for one episode that seeds and counts the calls it passes on to the run's client."""

    def __init__(self, client: UserBackend, seed: int, group_id: str, turn: Callable[[], int] = lambda: 0):
        self.client, self.seed, self.group_id = client, seed, group_id
        #: The episode's current turn; the env runner points it at the gym's step count once the gym exists.
        self.turn = turn
        self.usage = UserUsage()
        self._turn_seen, self._calls_in_turn = -1, 0
        self._in_flight, self._waiting_since = 0, 0.0

    @property
    def user_model(self) -> UserModel:
        """The model the run's client asks, and its version."""
        return self.client.user_model

    def next_seed(self) -> int:
        """The seed of the next call: from the episode's seed, its group, the turn and the call's index in it."""
        turn = self.turn()
        if turn != self._turn_seen:
            self._turn_seen, self._calls_in_turn = turn, 0
        index, self._calls_in_turn = self._calls_in_turn, self._calls_in_turn + 1
        return request_seed(self.seed, f"{self.group_id}/user{index}", turn)

    async def _call(self, ask: Callable[[int], Any]) -> tuple[Any, RoleCall]:
        """Run one call with the next seed, timing the episode's wait (overlapping calls count once)."""
        seed = self.next_seed()  # taken before the first await: calls started together keep their order
        if self._in_flight == 0:
            self._waiting_since = time.perf_counter()
        self._in_flight += 1
        try:
            value, call = await ask(seed)
        finally:
            self._in_flight -= 1
            if self._in_flight == 0:
                self.usage.wait_s += time.perf_counter() - self._waiting_since
        self.usage.add(call)
        return value, call

    async def complete_json(self, role: str, system: str, user: RoleInput, validate: Callable[[dict[str, Any]], T], *,
                            max_tokens: int | None = None, temperature: float | None = None,
                            seed: int | None = None) -> tuple[T | None, RoleCall]:
        """RoleClient.complete_json with the session's seed (a `seed` given here is ignored)."""
        return await self._call(lambda s: self.client.complete_json(
            role, system, user, validate, max_tokens=max_tokens, temperature=temperature, seed=s))

    async def complete_text(self, role: str, system: str, user: RoleInput, *, max_tokens: int | None = None,
                            temperature: float | None = None, seed: int | None = None) -> tuple[str | None, RoleCall]:
        """RoleClient.complete_text with the session's seed (a `seed` given here is ignored)."""
        return await self._call(lambda s: self.client.complete_text(
            role, system, user, max_tokens=max_tokens, temperature=temperature, seed=s))

    def record(self, traj: Trajectory) -> Trajectory:
        """Write the user model, its version and the calls' cost on the episode's trajectory."""
        model, usage = self.user_model, self.usage
        traj.user_model, traj.user_version = model.name, model.version
        traj.user_requests, traj.user_cache_hits = usage.requests, usage.cache_hits
        traj.user_tokens, traj.user_resent, traj.user_wait_s = usage.tokens, usage.resent, usage.wait_s
        return traj


class PersonaUserSession(UserSession):
    """A UserSession around a PersonaUserClient (a user simulator), which the gyms ask with `complete_user`."""

    async def complete_user(self, role: str, persona: str, context: Sequence[Mapping[str, str]],
                            fields: Sequence[str], seed: int | None = None) -> tuple[dict[str, str] | None, RoleCall]:
        """PersonaUserClient.complete_user with the session's seed (a `seed` given here is ignored)."""
        client: Any = self.client
        return await self._call(lambda s: client.complete_user(role, persona, context, fields, seed=s))


def configured_user_model(backend: str, local_user_model: str, llm: Mapping[str, Any]) -> UserModel | None:
    """The user model a run's env section names (None for scripted users): what the env runners' clients
    report, for the MLflow run (`user_model`, `user_version` tags) before any episode is played."""
    if backend == "local":
        return UserModel(local_user_model)
    if backend == "openai":
        from userrl.envs.openai_client import LLMConfig

        return UserModel(LLMConfig.from_spec(llm).model)
    return None


def user_session(client: UserBackend, seed: int, group_id: str) -> UserSession:
    """The session class that keeps the client's interface: the gyms tell a persona client by its methods."""
    cls = PersonaUserSession if isinstance(client, PersonaUserClient) else UserSession
    return cls(client, seed, group_id)
