"""The `local` user backend: simulated users and judges served by PolicyReplica actors in the cluster."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any, TypeVar

from userrl.actors.policy_replica import ReplicaHandle
from userrl.engines.base import GenerationRequest
from userrl.envs.json_extract import extract_json_object, strip_think
from userrl.envs.llm import RoleCall

T = TypeVar("T")


class ReplicaRoleClient:
    """A RoleClient (envs/llm.py) whose completions come from a replica actor, rendered with its chat template."""

    def __init__(self, replicas: list[Any], tokenizer: Any, *, max_tokens: int = 512, temperature: float = 0.0,
                 attempts: int = 3, timeout_s: float = 120.0):
        self.replicas, self.tokenizer = [ReplicaHandle(r) for r in replicas], tokenizer
        self._next = 0
        self.max_tokens, self.temperature = max_tokens, temperature
        self.attempts, self.timeout_s = attempts, timeout_s

    async def _complete(self, system: str, user: str, max_tokens: int | None, temperature: float | None) -> str:
        ids = self.tokenizer.apply_chat_template(
            [{"role": "system", "content": system}, {"role": "user", "content": user}],
            tokenize=True, add_generation_prompt=True, return_dict=True)["input_ids"]
        request = GenerationRequest(list(ids), max_tokens or self.max_tokens,
                                    self.temperature if temperature is None else temperature,
                                    stop_token_ids=[self.tokenizer.eos_token_id])
        replica = self.replicas[self._next % len(self.replicas)]
        self._next += 1
        out = await asyncio.wait_for(replica.generate(request), self.timeout_s)
        return strip_think(self.tokenizer.decode(out.token_ids, skip_special_tokens=True)).strip()

    async def _retry(self, role: str, attempt_once: Callable[[], Any]) -> tuple[Any, RoleCall]:
        start = time.perf_counter()
        for attempt in range(1, self.attempts + 1):
            try:
                value = await attempt_once()
            except Exception:  # noqa: BLE001 - bad output, a timeout or a replica failure: a failed attempt
                continue
            return value, RoleCall(role, attempt, True, time.perf_counter() - start)
        return None, RoleCall(role, self.attempts, False, time.perf_counter() - start)

    async def complete_text(self, role: str, system: str, user: str, *, max_tokens: int | None = None,
                            temperature: float | None = None) -> tuple[str | None, RoleCall]:
        """Free text; an empty reply counts as a failed attempt."""
        async def once() -> str:
            text = await self._complete(system, user, max_tokens, temperature)
            if not text:
                raise ValueError("empty reply")
            return text

        return await self._retry(role, once)

    async def complete_json(self, role: str, system: str, user: str, validate: Callable[[dict[str, Any]], T], *,
                            max_tokens: int | None = None, temperature: float | None = None) -> tuple[T | None, RoleCall]:
        """A JSON object extracted per GYMS.md 0.6 and passed through `validate`."""
        async def once() -> T:
            return validate(extract_json_object(await self._complete(system, user, max_tokens, temperature)))

        return await self._retry(role, once)
