"""EnvRunner: hosts many environments and plays their episodes concurrently against shared replicas."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from dataclasses import dataclass
from typing import Any

import ray

from userrl.actors.turn_timing import TurnTimings
from userrl.chat import ChatFormat
from userrl.engines.base import GenerationOutput, GenerationRequest
from userrl.envs import MultiTurnEnv, Task, make_env
from userrl.envs.llm import UserBackend
from userrl.replica_handle import REPLICA_WAIT_S, ReplicaHandle
from userrl.rollout import (
    EpisodePolicy,
    RolloutLimits,
    TokenPolicy,
    abort_trajectory,
    new_trajectory,
    run_episode,
)
from userrl.trajectory import Trajectory
from userrl.user_session import UserSession, user_session

log = logging.getLogger(__name__)


def accepts_llm(gym: str) -> bool:
    """Whether a gym has model-backed roles (its constructor takes an `llm` client)."""
    from userrl.envs.registry import uses_role_client

    return uses_role_client(gym)


def make_user_client(backend: str, llm: dict[str, Any] | None, user_replicas: list[Any] | None,
                     tokenizer_path: str | None, user_format: str = "plain", user_model: str | None = None,
                     cache: bool = False) -> UserBackend | None:
    """The client behind the gyms' simulated users and judges (None for the scripted backend); for backend
    local, the registered `user_format` (env.local_user_format) says how the user replicas are asked and
    `user_model` names their model (default: its folder). `cache`: keep the replies in an LRU of this
    process (env.user_cache)."""
    from userrl.envs.reply_cache import ReplyCache

    replies = ReplyCache() if cache else None
    if backend == "openai":
        from userrl.envs.openai_client import LLMConfig, OpenAIRoleClient

        return OpenAIRoleClient(LLMConfig.from_spec(dict(llm or {})), replies)
    if backend == "local":
        from userrl.envs.llm import UserModel
        from userrl.tokenizer import load_tokenizer
        from userrl.users import user_client_class

        if not user_replicas or tokenizer_path is None:
            raise ValueError("env.backend=local needs user replicas (started by the Algorithm)")
        return user_client_class(user_format)(user_replicas, load_tokenizer(tokenizer_path),
                                              user_model=UserModel(user_model or tokenizer_path), cache=replies)
    return None


@dataclass
class EpisodeSpec:
    """One episode to play: the task and the ids that place it in a GRPO group; `scripted_users` plays it
    against the gym's scripted users and judges whatever the runner's user backend (held-out evaluation
    against ground truth no training user saw)."""

    task: Task
    uid: str
    group_id: str
    scripted_users: bool = False


#: Error of an episode whose policy replica stayed unreachable past REPLICA_WAIT_S (the group re-runs it).
REPLICA_LOST = "replica_lost"


class ReplicaLost(RuntimeError):
    """A policy replica died and did not come back in time."""


class EpisodePlayer:
    """Plays EpisodeSpecs concurrently through one EpisodePolicy and `run_episode`, in this process.

    Builds each episode's gym with its configured kwargs and, for a gym with model roles, a UserSession of
    the user backend's client (seeded from the episode's seed and GRPO group; it records the user model and
    the calls' cost on the trajectory); a gym that cannot be built aborts only its own episode (counted, with
    the error).
    """

    def __init__(self, policy: EpisodePolicy, limits: RolloutLimits, env_kwargs: dict[str, dict[str, Any]] | None,
                 max_concurrent_episodes: int, user_backend: str = "scripted",
                 user_client: UserBackend | None = None):
        self.policy, self.limits = policy, limits
        self.env_kwargs = env_kwargs or {}
        self.max_concurrent = max_concurrent_episodes
        self.user_backend, self.user_client = user_backend, user_client
        self._gate: asyncio.Semaphore | None = None

    def _make_env(self, spec: EpisodeSpec, seed: int) -> tuple[MultiTurnEnv, UserSession | None]:
        kwargs = dict(self.env_kwargs.get(spec.task.gym, {}))
        session = None
        if spec.scripted_users:
            kwargs.pop("role_backends", None)
            kwargs["backend"] = "scripted"
        elif self.user_client is not None and accepts_llm(spec.task.gym):
            session = user_session(self.user_client, seed, spec.group_id)
            kwargs.update(llm=session, backend=self.user_backend)
        env = make_env(spec.task.gym, spec.task, **kwargs)
        if session is not None:  # the env counts the steps: step k (1, 2, ...) plays turn k - 1
            session.turn = lambda: env.step_count - 1
        return env, session

    async def play_one(self, spec: EpisodeSpec, seed: int, limits: RolloutLimits) -> Trajectory:
        """One episode; an env that cannot be built gives an aborted trajectory naming the error."""
        try:
            env, session = self._make_env(spec, seed)
        except Exception as error:  # noqa: BLE001 - a gym that cannot be built costs its own episodes
            log.warning("cannot build gym %s for episode %s: %s", spec.task.gym, spec.uid, error)
            return abort_trajectory(new_trajectory(spec.task, spec.uid, spec.group_id),
                                    f"env_construction:{type(error).__name__}: {error}")
        traj = await run_episode(env, spec.task, self.policy, limits, uid=spec.uid, group_id=spec.group_id,
                                 seed=seed)
        return session.record(traj) if session is not None else traj

    async def run(self, episodes: list[EpisodeSpec], seed: int = 0, temperature: float | None = None) -> list[Trajectory]:
        """Play all episodes concurrently (at most `max_concurrent_episodes` at once); trajectories in order."""
        limits = self.limits if temperature is None else RolloutLimits(**{**vars(self.limits), "temperature": temperature})
        if self._gate is None:
            self._gate = asyncio.Semaphore(self.max_concurrent)
        gate = self._gate

        async def play(spec: EpisodeSpec) -> Trajectory:
            async with gate:
                return await self.play_one(spec, seed, limits)

        return list(await asyncio.gather(*(play(spec) for spec in episodes)))


def named_actors(replicas: list[Any]) -> list[Any]:
    """Replicas as given: handles or in-process objects, or the names of named Ray actors (looked up here).

    The EnvRunnerGroup passes names: a restartable actor whose constructor arguments hold actor handles makes
    Ray log an error line at every start (ray-project/ray#53727), and a name is looked up again on a restart.
    """
    if not any(isinstance(replica, str) for replica in replicas):
        return list(replicas)
    return [ray.get_actor(replica) if isinstance(replica, str) else replica for replica in replicas]


class EnvRunner(EpisodePlayer):
    """Plays episodes against policy replicas; each advances on its own (no barrier per turn), so the
    replicas always have work.

    Requests go to the replica with the fewest requests outstanding from this runner. A request whose
    replica died is sent again once Ray has restarted it (the episode goes on).
    """

    def __init__(self, tokenizer_path: str, protocol: str, limits: RolloutLimits, replicas: list[Any],
                 env_kwargs: dict[str, dict[str, Any]] | None = None, max_concurrent_episodes: int = 256,
                 user_backend: str = "scripted", llm: dict[str, Any] | None = None,
                 user_replicas: list[Any] | None = None, user_tokenizer_path: str | None = None,
                 replica_wait_s: float = REPLICA_WAIT_S, user_format: str = "plain", user_model: str | None = None,
                 user_cache: bool = False):
        from userrl.tokenizer import load_tokenizer

        replicas, user_replicas = named_actors(replicas), named_actors(user_replicas or [])
        self.chat = ChatFormat(load_tokenizer(tokenizer_path), protocol)
        super().__init__(TokenPolicy(self.chat, self._generate), limits, env_kwargs, max_concurrent_episodes,
                         user_backend, make_user_client(user_backend, llm, user_replicas, user_tokenizer_path,
                                                        user_format, user_model, user_cache))
        self.replicas = [ReplicaHandle(r) for r in replicas]
        self.outstanding = [0] * len(self.replicas)
        self.affinity: dict[str, int] = {}
        self.replica_wait_s = replica_wait_s
        self.stats = {"replica_retries": 0}
        self.timings = TurnTimings()

    def _pick(self, request: GenerationRequest) -> int:
        index = min(range(len(self.replicas)), key=self.outstanding.__getitem__)
        previous = self.affinity.get(request.cache_key)
        # Stay on the replica that holds this episode's KV prefix unless it is clearly busier.
        if previous is not None and self.outstanding[previous] <= self.outstanding[index] + 4:
            index = previous
        if request.cache_key is not None:
            self.affinity[request.cache_key] = index
        return index

    async def _generate(self, request: GenerationRequest) -> GenerationOutput:
        deadline = time.monotonic() + self.replica_wait_s
        while True:
            index = self._pick(request)
            self.outstanding[index] += 1
            try:
                sent = self.timings.sending(request.cache_key)
                output = await self.replicas[index].generate(request)
                self.timings.received(request.cache_key, sent, output.timing)
                return output
            except (ray.exceptions.RayActorError, ray.exceptions.ActorUnavailableError) as error:
                # The replica died or is restarting: its cached prefix is gone, the request carries the
                # whole prompt, and its seed makes the retry sample what the first try would have.
                self.affinity.pop(request.cache_key, None)
                if time.monotonic() > deadline:
                    raise ReplicaLost(f"policy replica {index} unreachable for {self.replica_wait_s:.0f} s") from error
                self.stats["replica_retries"] += 1
                await asyncio.sleep(0.5)
            finally:
                self.outstanding[index] -= 1

    def _end_session(self, key: str) -> None:
        """Tell the replica that served the episode that it is over (it may hold its KV for a next turn)."""
        index = self.affinity.pop(key, None)
        if index is not None:
            with contextlib.suppress(ray.exceptions.RayError):
                self.replicas[index].end_session(key)

    async def play_one(self, spec: EpisodeSpec, seed: int, limits: RolloutLimits) -> Trajectory:
        """One episode on the replicas; one that lost its replica for good says so (the group re-runs it)."""
        self.timings.episode_started(spec.uid)
        try:
            traj = await super().play_one(spec, seed, limits)
        finally:
            self.timings.episode_ended(spec.uid)
            self._end_session(spec.uid)
        if traj.error == f"generate_exception:{ReplicaLost.__name__}":
            traj.error = REPLICA_LOST
        return traj

    def node_id(self) -> str:
        """The Ray node this actor runs on (hex id)."""
        return ray.get_runtime_context().get_node_id()

    def turn_timings(self, reset: bool = False) -> dict[str, float]:
        """Seconds per phase of the turns played since the last reset (userrl/actors/turn_timing.py)."""
        return self.timings.snapshot(reset)

    def ping(self) -> dict[str, int]:
        """Alive: this runner's process id and counters (replica requests sent again after a replica died)."""
        return {"pid": os.getpid(), **self.stats}
