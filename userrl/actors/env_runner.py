"""EnvRunner: hosts many environments and plays their episodes concurrently against shared replicas."""

from __future__ import annotations

import asyncio
import inspect
from dataclasses import dataclass
from typing import Any

from userrl.chat import ChatFormat
from userrl.engines.base import GenerationOutput, GenerationRequest
from userrl.envs import Task, make_env
from userrl.envs.registry import get_gym
from userrl.rollout import RolloutLimits, run_episode
from userrl.trajectory import Trajectory


def accepts_llm(gym: str) -> bool:
    """Whether a gym has model-backed roles (its constructor takes an `llm` client)."""
    from userrl.envs.registry import uses_role_client

    return uses_role_client(gym)


def make_user_client(backend: str, llm: dict[str, Any] | None, user_replicas: list[Any] | None,
                     tokenizer_path: str | None) -> Any:
    """The RoleClient behind the gyms' simulated users and judges (None for the scripted backend)."""
    if backend == "openai":
        from userrl.envs.openai_client import make_role_client

        return make_role_client(dict(llm or {}))
    if backend == "local":
        from transformers import AutoTokenizer

        from userrl.users import ReplicaRoleClient

        if not user_replicas or tokenizer_path is None:
            raise ValueError("env.backend=local needs user replicas (started by the Algorithm)")
        return ReplicaRoleClient(user_replicas, AutoTokenizer.from_pretrained(tokenizer_path))
    return None


@dataclass
class EpisodeSpec:
    """One episode to play: the task and the ids that place it in a GRPO group."""

    task: Task
    uid: str
    group_id: str


class EnvRunner:
    """Plays episodes; each advances on its own (no barrier per turn), so replicas always have work.

    Requests go to the replica with the fewest requests outstanding from this runner.
    """

    def __init__(self, tokenizer_path: str, protocol: str, limits: RolloutLimits, replicas: list[Any],
                 env_kwargs: dict[str, dict[str, Any]] | None = None, max_concurrent_episodes: int = 256,
                 user_backend: str = "scripted", llm: dict[str, Any] | None = None,
                 user_replicas: list[Any] | None = None, user_tokenizer_path: str | None = None):
        from transformers import AutoTokenizer

        self.chat = ChatFormat(AutoTokenizer.from_pretrained(tokenizer_path), protocol)
        self.user_backend = user_backend
        self.user_client = make_user_client(user_backend, llm, user_replicas, user_tokenizer_path)
        self.limits = limits
        self.replicas = list(replicas)
        self.outstanding = [0] * len(self.replicas)
        self.affinity: dict[str, int] = {}
        self.env_kwargs = env_kwargs or {}
        self.max_concurrent = max_concurrent_episodes

    async def _generate(self, request: GenerationRequest) -> GenerationOutput:
        index = min(range(len(self.replicas)), key=self.outstanding.__getitem__)
        previous = self.affinity.get(request.cache_key)
        # Stay on the replica that holds this episode's KV prefix unless it is clearly busier.
        if previous is not None and self.outstanding[previous] <= self.outstanding[index] + 4:
            index = previous
        if request.cache_key is not None:
            self.affinity[request.cache_key] = index
        self.outstanding[index] += 1
        try:
            replica = self.replicas[index]
            call = replica.generate.remote if hasattr(replica.generate, "remote") else replica.generate
            return await call(request)
        finally:
            self.outstanding[index] -= 1

    def _end_session(self, key: str) -> None:
        """Tell the replica that served the episode that it is over (it may hold its KV for a next turn)."""
        index = self.affinity.pop(key, None)
        if index is None:
            return
        end = getattr(self.replicas[index], "end_session", None)  # a replica may keep nothing per episode
        if end is None:
            return
        if hasattr(end, "remote"):
            end.remote(key)  # fire and forget: nothing waits on it
        else:
            end(key)

    async def run(self, episodes: list[EpisodeSpec], seed: int = 0, temperature: float | None = None) -> list[Trajectory]:
        """Play all episodes concurrently and return their trajectories in order."""
        limits = self.limits if temperature is None else RolloutLimits(**{**vars(self.limits), "temperature": temperature})
        gate = asyncio.Semaphore(self.max_concurrent)

        async def play(spec: EpisodeSpec) -> Trajectory:
            async with gate:
                kwargs = dict(self.env_kwargs.get(spec.task.gym, {}))
                if self.user_client is not None and accepts_llm(spec.task.gym):
                    kwargs.update(llm=self.user_client, backend=self.user_backend)
                env = make_env(spec.task.gym, spec.task, **kwargs)
                try:
                    return await run_episode(env, spec.task, self.chat, self._generate, limits,
                                             uid=spec.uid, group_id=spec.group_id, seed=seed)
                finally:
                    self._end_session(spec.uid)

        try:
            return list(await asyncio.gather(*(play(spec) for spec in episodes)))
        finally:
            self.affinity.clear()
