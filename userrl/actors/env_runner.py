"""EnvRunner: hosts many environments and plays their episodes concurrently against shared replicas."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from userrl.chat import ChatFormat
from userrl.engines.base import GenerationOutput, GenerationRequest
from userrl.envs import Task, make_env
from userrl.rollout import RolloutLimits, run_episode
from userrl.trajectory import Trajectory


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
                 env_kwargs: dict[str, dict[str, Any]] | None = None, max_concurrent_episodes: int = 256):
        from transformers import AutoTokenizer

        self.chat = ChatFormat(AutoTokenizer.from_pretrained(tokenizer_path), protocol)
        self.limits = limits
        self.replicas = list(replicas)
        self.outstanding = [0] * len(self.replicas)
        self.env_kwargs = env_kwargs or {}
        self.max_concurrent = max_concurrent_episodes

    async def _generate(self, request: GenerationRequest) -> GenerationOutput:
        index = min(range(len(self.replicas)), key=self.outstanding.__getitem__)
        self.outstanding[index] += 1
        try:
            replica = self.replicas[index]
            call = replica.generate.remote if hasattr(replica.generate, "remote") else replica.generate
            return await call(request)
        finally:
            self.outstanding[index] -= 1

    async def run(self, episodes: list[EpisodeSpec], seed: int = 0, temperature: float | None = None) -> list[Trajectory]:
        """Play all episodes concurrently and return their trajectories in order."""
        limits = self.limits if temperature is None else RolloutLimits(**{**vars(self.limits), "temperature": temperature})
        gate = asyncio.Semaphore(self.max_concurrent)

        async def play(spec: EpisodeSpec) -> Trajectory:
            async with gate:
                env = make_env(spec.task.gym, spec.task, **self.env_kwargs.get(spec.task.gym, {}))
                return await run_episode(env, spec.task, self.chat, self._generate, limits,
                                         uid=spec.uid, group_id=spec.group_id, seed=seed)

        return list(await asyncio.gather(*(play(spec) for spec in episodes)))
