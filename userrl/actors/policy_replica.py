"""PolicyReplica: one inference engine behind an async request queue that batches concurrent requests."""

from __future__ import annotations

import asyncio
import os

from userrl.engines.base import GenerationOutput, GenerationRequest


def build_engine(engine: str, model_path: str, dtype: str, pad_token_id: int):
    """Instantiate an engine by name."""
    if engine == "hf":
        from userrl.engines.hf import HFEngine

        return HFEngine(model_path, dtype=dtype, pad_token_id=pad_token_id)
    raise ValueError(f"policy.engine={engine!r} is not available in this build; use 'hf'")


class PolicyReplica:
    """Serves `generate` for many concurrent callers by decoding their requests together.

    Requests that arrive while a batch is decoding wait and form the next batch, so the engine stays
    busy as long as episodes keep submitting turns. Runs as a Ray actor (`ray.remote(PolicyReplica)`)
    or in-process in tests.
    """

    def __init__(self, model_path: str, engine: str = "hf", dtype: str = "float32", max_batch_size: int = 32,
                 num_threads: int | None = None, pad_token_id: int = 0, batch_wait_s: float = 0.005):
        import torch

        torch.set_num_threads(num_threads or os.cpu_count() or 1)
        self.engine = build_engine(engine, model_path, dtype, pad_token_id)
        self.max_batch_size = max_batch_size
        self.batch_wait_s = batch_wait_s
        self.version = 0
        self.stats = {"requests": 0, "batches": 0, "generated_tokens": 0, "busy_s": 0.0}
        self._pending: list[tuple[GenerationRequest, asyncio.Future]] = []
        self._worker: asyncio.Task | None = None
        self._engine_lock: asyncio.Lock | None = None

    async def generate(self, request: GenerationRequest) -> GenerationOutput:
        """Queue one request and wait for its output."""
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        self._pending.append((request, future))
        if self._worker is None or self._worker.done():
            self._worker = loop.create_task(self._drain())
        return await future

    async def _drain(self) -> None:
        loop = asyncio.get_running_loop()
        while self._pending:
            await asyncio.sleep(self.batch_wait_s)  # let near-simultaneous requests join the batch
            batch, self._pending = self._pending[: self.max_batch_size], self._pending[self.max_batch_size:]
            async with self._lock():
                start = loop.time()
                try:
                    outputs = await loop.run_in_executor(None, self.engine.generate, [r for r, _ in batch])
                except Exception as error:  # noqa: BLE001 - hand the failure to every waiting caller
                    for _, future in batch:
                        if not future.done():
                            future.set_exception(error)
                    continue
                self.stats["busy_s"] += loop.time() - start
            self.stats["batches"] += 1
            self.stats["requests"] += len(batch)
            for (_, future), output in zip(batch, outputs, strict=True):
                output.policy_version = self.version
                self.stats["generated_tokens"] += len(output.token_ids)
                if not future.done():
                    future.set_result(output)

    def _lock(self) -> asyncio.Lock:
        if self._engine_lock is None:
            self._engine_lock = asyncio.Lock()
        return self._engine_lock

    async def load_weights(self, state_dict: dict, version: int) -> int:
        """Swap in new weights between batches and take the new policy version."""
        async with self._lock():
            await asyncio.get_running_loop().run_in_executor(None, self.engine.load_state_dict, state_dict)
            self.version = version
        return self.version

    def get_version(self) -> int:
        """The policy version of the weights now loaded."""
        return self.version

    def get_stats(self) -> dict:
        """Counters since start: requests, batches, generated tokens, busy seconds."""
        return dict(self.stats)
