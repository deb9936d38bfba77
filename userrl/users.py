"""The `local` user backend: simulated users and judges served by PolicyReplica actors in the cluster, asked
with the gyms' own prompts (ReplicaRoleClient) or in a registered user format (`env.local_user_format`, e.g. a
plug-in's user simulator asked in the format it was trained on).

Every request carries its call's seed (the episode's UserSession derives it), goes through the optional reply
cache, and is sent again, with the same seed, when its replica died: Ray restarts user replicas as it does
policy replicas (`max_restarts`), and a restarted one serves its model folder's weights at once."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any, ClassVar, TypeVar

from userrl.engines.base import GenerationOutput, GenerationRequest
from userrl.envs.json_extract import extract_json_object, strip_think
from userrl.envs.llm import RoleCall, RoleInput, UserModel, attempt_seed, role_messages
from userrl.envs.reply_cache import ReplyCache
from userrl.plugins import registered
from userrl.replica_handle import REPLICA_WAIT_S, ReplicaHandle

T = TypeVar("T")


def resolve_user_model(name: str, user_format: str = "plain") -> str:
    """The folder of env.local_user_model: a model name or folder (userrl.models.resolve_model), or a
    user simulator's checkpoint folder (its model/). A checkpoint trained on user replies asked in a format
    that asks no user simulator (the gyms' plain prompts) is refused (its meta.json, or an exported folder's
    userrl.json, says it was trained on user replies): it was taught a simulator's format, which
    env.local_user_format names."""
    import contextlib
    import json
    from pathlib import Path

    from userrl.checkpoint import checkpoint_of_model, model_folder
    from userrl.models import resolve_model
    from userrl.protocols import get_protocol

    folder = Path(model_folder(name)).expanduser()
    if not user_client_class(user_format).asks_user_simulator:
        trained_as = None  # the protocol it was trained with; an unknown one is no user simulator's
        with contextlib.suppress(OSError, ValueError, KeyError, TypeError, AttributeError):
            if (folder / "userrl.json").is_file():  # a `userrl export` folder
                trained_as = get_protocol(json.loads((folder / "userrl.json").read_text())["protocol"])
            elif checkpoint := checkpoint_of_model(folder):  # a checkpoint's model/
                trained_as = get_protocol(checkpoint.protocol)
        if trained_as is not None and trained_as.user_replies:
            fitting = [n for n, client in USER_FORMATS.items() if client.asks_user_simulator]
            raise ValueError(f"env.local_user_model={name} is a user simulator trained on user replies (protocol "
                             f"{trained_as.name}); set env.local_user_format={' or '.join(fitting)}")
    return resolve_model(str(folder) if folder.is_dir() else name)


class ReplicaRoleClient:
    """A RoleClient (envs/llm.py) whose completions come from a replica actor, rendered with its chat template."""

    #: Whether this format asks a user simulator trained on user replies (the plain prompts do not).
    asks_user_simulator: ClassVar[bool] = False

    def __init__(self, replicas: list[Any], tokenizer: Any, *, max_tokens: int = 512, temperature: float = 0.0,
                 attempts: int = 3, timeout_s: float = 120.0, user_model: UserModel | None = None,
                 cache: ReplyCache | None = None, replica_wait_s: float = REPLICA_WAIT_S):
        self.replicas, self.tokenizer = [ReplicaHandle(r) for r in replicas], tokenizer
        self._next = 0
        self.max_tokens, self.temperature = max_tokens, temperature
        self.attempts, self.timeout_s, self.replica_wait_s = attempts, timeout_s, replica_wait_s
        #: Which model answers (recorded on the trajectories; part of every cache key).
        self.user_model = user_model or UserModel(str(getattr(tokenizer, "name_or_path", "") or "local"))
        self.cache = cache

    async def generate(self, request: GenerationRequest, call: RoleCall) -> GenerationOutput:
        """One request, counted in `call`: from the cache when it has it, else from a replica (sent again,
        with the same seed, while a dead replica is restarted)."""
        call.requests += 1
        if self.cache is None or request.seed is None:
            output = await self._send(request, call)
        else:
            key = (self.user_model, tuple(request.prompt_ids), request.max_new_tokens, request.temperature,
                   request.top_p, tuple(request.stop_token_ids), request.seed)
            output, hit = await self.cache.get(key, lambda: self._send(request, call))
            if hit:
                call.cache_hits += 1
                return output
        call.tokens += len(output.token_ids)
        return output

    async def _send(self, request: GenerationRequest, call: RoleCall) -> GenerationOutput:
        # Ray's exceptions, imported when a request is sent: registering a user format stays free of Ray.
        from ray.exceptions import ActorUnavailableError, RayActorError

        deadline = time.monotonic() + self.replica_wait_s
        while True:
            replica = self.replicas[self._next % len(self.replicas)]
            self._next += 1
            try:
                return await asyncio.wait_for(replica.generate(request), self.timeout_s)
            except (RayActorError, ActorUnavailableError):
                if time.monotonic() > deadline:
                    raise
                call.resent += 1
                await asyncio.sleep(0.5)

    async def _complete(self, system: str, user: RoleInput, max_tokens: int | None, temperature: float | None,
                        seed: int | None, call: RoleCall) -> str:
        ids = self.tokenizer.apply_chat_template(
            role_messages(system, user), tokenize=True, add_generation_prompt=True, return_dict=True)["input_ids"]
        request = GenerationRequest(list(ids), max_tokens or self.max_tokens,
                                    self.temperature if temperature is None else temperature, seed=seed,
                                    stop_token_ids=[self.tokenizer.eos_token_id])
        out = await self.generate(request, call)
        return strip_think(self.tokenizer.decode(out.token_ids, skip_special_tokens=True)).strip()

    async def _retry(self, role: str, seed: int | None, temperature: float | None,
                     attempt_once: Callable[[int | None, RoleCall], Awaitable[T]]) -> tuple[T | None, RoleCall]:
        """Up to `attempts` tries, attempt k with `attempt_seed(seed, k)`; a greedy reply that could not be
        used is not asked for again (the replica would decode the same tokens: only their cost would repeat)."""
        greedy = (self.temperature if temperature is None else temperature) == 0
        start = time.perf_counter()
        call = RoleCall(role, 0, False, 0.0)
        for attempt in range(1, self.attempts + 1):
            call.attempts = attempt
            try:
                value = await attempt_once(attempt_seed(seed, attempt), call)
            except (ValueError, TypeError, KeyError):  # the reply could not be used
                if greedy:
                    break
                continue
            except Exception:  # noqa: BLE001 - a timeout or a replica that stayed down: a failed attempt
                continue
            call.ok, call.latency_s = True, time.perf_counter() - start
            return value, call
        call.latency_s = time.perf_counter() - start
        return None, call

    async def complete_text(self, role: str, system: str, user: RoleInput, *, max_tokens: int | None = None,
                            temperature: float | None = None, seed: int | None = None) -> tuple[str | None, RoleCall]:
        """Free text; an empty reply counts as a failed attempt."""
        async def once(attempt_seed: int | None, call: RoleCall) -> str:
            text = await self._complete(system, user, max_tokens, temperature, attempt_seed, call)
            if not text:
                raise ValueError("empty reply")
            return text

        return await self._retry(role, seed, temperature, once)

    async def complete_json(self, role: str, system: str, user: RoleInput, validate: Callable[[dict[str, Any]], T], *,
                            max_tokens: int | None = None, temperature: float | None = None,
                            seed: int | None = None) -> tuple[T | None, RoleCall]:
        """A JSON object extracted per docs/spec/GYMS.md §0.6 and passed through `validate`."""
        async def once(attempt_seed: int | None, call: RoleCall) -> T:
            text = await self._complete(system, user, max_tokens, temperature, attempt_seed, call)
            return validate(extract_json_object(text))

        return await self._retry(role, seed, temperature, once)


#: Registry name (`env.local_user_format`) -> the RoleClient class that asks the local user replicas that way.
USER_FORMATS: dict[str, type[ReplicaRoleClient]] = {"plain": ReplicaRoleClient}


def register_user_format(name: str, client: type[ReplicaRoleClient]) -> None:
    """Add a user format (re-registering a name replaces it)."""
    USER_FORMATS[name] = client


def user_client_class(name: str) -> type[ReplicaRoleClient]:
    """The RoleClient class of user format `name` (ValueError naming the known ones); plug-ins' formats are
    registered on the first lookup of a name not built in."""
    return registered(USER_FORMATS, name, "env.local_user_format")
