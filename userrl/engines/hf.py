"""transformers engine: continuous batching of token-id requests over one KV cache, on any device.

A hand-written decode loop rather than `generate`, for three reasons: every request samples from its
own seeded generator (rollouts are reproducible whatever the batch composition), the logprob of each
sampled token under the sampling distribution comes out directly, and each step's tokens can be handed
out as they are sampled (`on_token`), which is how Serve streams. transformers' own continuous batching
(`init_continuous_batching`) has one seed for all requests, so it cannot give the first.

Requests are scheduled continuously, as vLLM does: a scheduler thread runs one decoding step at a time
for every running row; a request submitted meanwhile is prefilled before the next step and joins the
batch (its KV cache, left-padded to the batch's width, is stacked onto the running one); a row that
ends (stop token, token limit, caller gone) leaves at once and its future resolves, so a short reply
never waits for a long one, and an episode's next turn can start while other rows still decode.

Prefill is chunked while rows decode, as vLLM's chunked prefill: new rows' prompts go through the model
`prefill_chunk_tokens` tokens (rows x columns) at a time, one chunk before each decoding step, so a long
prompt delays the running rows' next token by one chunk, not by its whole prefill. With nothing decoding,
the prefill runs in one pass.
"""

from __future__ import annotations

import concurrent.futures
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from transformers import AutoModelForCausalLM, Cache
from transformers.cache_utils import DynamicLayer

from userrl.engines.base import Engine, GenerationOutput, GenerationRequest

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
KV = list[tuple[torch.Tensor, torch.Tensor]]  # per layer: keys, values of one row, (heads, tokens, head_dim)
#: `HFEngine.generate`'s token callback: (the request's row in the batch, its sampled token id), on the
#: scheduler thread as each token is sampled; returning False ends that request there, as in `submit`.
OnToken = Callable[[int, int], "bool | None"]


def _top_p_filter(logits: torch.Tensor, top_p: float) -> torch.Tensor:
    sorted_logits, order = torch.sort(logits, descending=True)
    cumulative = torch.softmax(sorted_logits, dim=-1).cumsum(-1)
    drop = cumulative - torch.softmax(sorted_logits, dim=-1) > top_p
    sorted_logits = sorted_logits.masked_fill(drop, float("-inf"))
    return torch.full_like(logits, float("-inf")).scatter(-1, order, sorted_logits)


def _pad_left(tensor: torch.Tensor, width: int, dim: int) -> torch.Tensor:
    """`tensor` with zeros prepended along `dim` up to `width`."""
    missing = width - tensor.shape[dim]
    if missing == 0:
        return tensor
    shape = list(tensor.shape)
    shape[dim] = missing
    return torch.cat([tensor.new_zeros(shape), tensor], dim)


class _AppendLayer(DynamicLayer):
    """A cache layer that appends into spare room instead of concatenating.

    transformers' DynamicLayer concatenates the whole cache with each step's new column: at 4,096 tokens that
    copy was 58 % of a decoding step of 8 rows. Here a step writes its column in place; the room grows by half
    when full (each column is copied a few times in all), and `keys`/`values` are views of the filled part.
    """

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self._length = 0
        self._room_keys: torch.Tensor | None = None
        self._room_values: torch.Tensor | None = None

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor | None = None) -> None:
        # Written out rather than delegated: transformers 4.56 takes the keys only, 5.x keys and values. Both
        # read `keys` (4.56: None until initialised) or `is_initialized` (5.x) to tell an empty layer.
        self.dtype, self.device = key_states.dtype, key_states.device
        self.keys = self.values = self._room_keys = self._room_values = key_states.new_empty(0)
        self.is_initialized = True

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs
               ) -> tuple[torch.Tensor, torch.Tensor]:
        if self._room_keys is None:
            self.lazy_initialization(key_states, value_states)
        end = self._length + key_states.shape[-2]
        if self._length == 0 or end > self._room_keys.shape[-2]:
            self._room_keys = self._grown(self._room_keys, key_states, end)
            self._room_values = self._grown(self._room_values, value_states, end)
        self._room_keys[:, :, self._length:end] = key_states
        self._room_values[:, :, self._length:end] = value_states
        self._length = end
        self.keys, self.values = self._room_keys[:, :, :end], self._room_values[:, :, :end]
        return self.keys, self.values

    def _grown(self, room: torch.Tensor, new: torch.Tensor, needed: int) -> torch.Tensor:
        batch, heads, _, dim = new.shape
        grown = new.new_empty(batch, heads, needed + max(64, needed // 2), dim)
        if self._length:
            grown[:, :, :self._length] = room[:, :, :self._length]
        return grown

    def select(self, rows: list[int], first: int) -> None:
        """Keep the cache rows `rows` and the columns from `first` on (with their spare room)."""
        self._room_keys = self._room_keys[rows, :, first:]
        self._room_values = self._room_values[rows, :, first:]
        self._length -= first
        self.keys, self.values = self._room_keys[:, :, :self._length], self._room_values[:, :, :self._length]


def _new_cache() -> Cache:
    return Cache(layer_class_to_replicate=_AppendLayer)


@dataclass
class _Row:
    """One request in the running batch."""

    request: GenerationRequest
    future: concurrent.futures.Future
    on_token: Callable[[int], bool | None] | None
    generator: torch.Generator
    output: GenerationOutput = field(default_factory=lambda: GenerationOutput([], [], "length"))
    position: int = 0  # position id of the next token fed
    done: bool = False


@dataclass
class _Prefill:
    """Admitted rows whose prompts are being prefilled, one chunk of columns at a time.

    Row layout: [pad | cached prefix | pad | new tokens]; `mask` spans all of it, `cache` holds the columns
    fed so far (`fed`, counted from the first new-token column).
    """

    rows: list[_Row]
    input_ids: torch.Tensor  # (rows, width): the new tokens, left-padded
    positions: torch.Tensor  # (rows, width)
    mask: torch.Tensor  # (rows, cached + width)
    cache: Cache
    cached: int  # columns of kept prefix KV in front
    fed: int = 0


class HFEngine(Engine):
    """Continuously batched generation with a transformers causal LM, reporting each token as sampled."""

    incremental = True

    def __init__(self, model_path: str, dtype: str = "float32", device: str = "cpu", pad_token_id: int = 0,
                 max_batch_size: int = 32, prefix_cache_size: int = 256, prefill_chunk_tokens: int = 512):
        self.device = torch.device(device)
        self.model = AutoModelForCausalLM.from_pretrained(model_path, dtype=_DTYPES[dtype]).to(self.device)
        self.model.eval()
        self.pad_token_id = pad_token_id
        self.max_batch_size = max_batch_size
        self.prefix_cache_size = prefix_cache_size
        if prefill_chunk_tokens < 1:
            raise ValueError(f"prefill_chunk_tokens must be at least 1, got {prefill_chunk_tokens}")
        self.prefill_chunk_tokens = prefill_chunk_tokens
        self._prefix: OrderedDict[str, tuple[list[int], KV]] = OrderedDict()
        self.stats = {"steps": 0, "step_rows": 0, "prompt_tokens": 0, "cached_prompt_tokens": 0,
                      "decoded_tokens": 0, "prefill_chunks": 0}
        self._waiting: deque[_Row] = deque()
        self._wake = threading.Condition()
        self._step_lock = threading.Lock()  # a step or a weight load, never both at once
        self._rows: list[_Row] = []  # the running batch, in the cache's row order
        self._cache: Cache | None = None
        self._mask: torch.Tensor | None = None  # (rows, cache width): 1 where a row has a real token
        self._prefill: _Prefill | None = None  # admitted rows not yet in the batch
        self._thread: threading.Thread | None = None
        self._closed = False

    # ------------------------------------------------------------------ the Engine interface

    def submit(self, request: GenerationRequest,
               on_token: Callable[[int], bool | None] | None = None) -> concurrent.futures.Future:
        """Queue one request; it joins the running batch before the next step. `on_token` gets each token
        on the scheduler thread as it is sampled; returning False ends the row there (its caller has gone)."""
        return self._submit([(request, on_token)])[0]

    def generate(self, requests: list[GenerationRequest], on_token: OnToken | None = None) -> list[GenerationOutput]:
        """Generate for a batch of requests, admitted together; `on_token(row, token_id)` as in `submit`."""
        sinks = [None if on_token is None else (lambda token, row=row: on_token(row, token))
                 for row in range(len(requests))]
        futures = self._submit(list(zip(requests, sinks, strict=True)))
        return [future.result() for future in futures]

    def load_state_dict(self, state_dict: dict[str, torch.Tensor]) -> None:
        """Copy new weights into the model in place, between steps (cached KV of the old weights is dropped)."""
        with self._step_lock:
            self._prefix.clear()
            if getattr(self.model.config, "tie_word_embeddings", False):
                # The head shares the embedding: loading a separate copy of it would untie the two.
                state_dict = {k: v for k, v in state_dict.items() if k != "lm_head.weight"}
            missing, unexpected = self.model.load_state_dict(state_dict, strict=False)
            missing = [k for k in missing if k != "lm_head.weight"]  # tied to the embedding
            if missing or unexpected:
                raise ValueError(f"weights do not fit the model: missing={missing[:5]} unexpected={unexpected[:5]}")
            self.model.tie_weights()

    def end_session(self, key: str) -> None:
        """The episode behind `key` has ended: drop its cached prefix (one atomic dict operation, no lock: the
        replica's event loop must not wait for a decoding step)."""
        self._prefix.pop(key, None)

    def reset_prefix_cache(self) -> bool:
        """Forget every episode's kept KV."""
        with self._step_lock:
            self._prefix.clear()
        return True

    def counters(self) -> dict[str, float]:
        """Decoding steps and their rows (sum), prompt tokens (and those reused from kept KV), decoded tokens,
        prefill passes (`prefill_chunks`); `rows_running`: the rows in the batch now."""
        return {**self.stats, "rows_running": len(self._rows)}

    def close(self) -> None:
        """Stop the scheduler thread; requests not finished fail."""
        with self._wake:
            self._closed = True
            self._wake.notify()
        if self._thread is not None:
            self._thread.join(timeout=30)

    # ------------------------------------------------------------------ scheduling

    def _submit(self, items: list[tuple[GenerationRequest, Callable[[int], bool | None] | None]]
                ) -> list[concurrent.futures.Future]:
        futures = []
        with self._wake:
            if self._closed:
                raise RuntimeError("the hf engine is closed")
            for request, on_token in items:
                future: concurrent.futures.Future = concurrent.futures.Future()
                futures.append(future)
                if request.max_new_tokens <= 0:
                    future.set_result(GenerationOutput([], [], "length", timing={"put": time.monotonic(),
                                                                                 "done": time.monotonic()}))
                    continue
                generator = torch.Generator(device="cpu")
                generator.manual_seed(request.seed if request.seed is not None else torch.seed())
                row = _Row(request, future, on_token, generator)
                row.output.timing = {"put": time.monotonic()}
                self._waiting.append(row)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="hf-engine", daemon=True)
                self._thread.start()
            self._wake.notify()
        return futures

    def _run(self) -> None:
        """The scheduler: admit waiting requests, prefill a chunk, decode one step, retire finished rows."""
        while True:
            with self._wake:
                while not (self._waiting or self._rows or self._prefill or self._closed):
                    self._wake.wait()
                if self._closed:
                    break
                admitted = []
                if self._prefill is None:  # one group prefills at a time; the rest wait for its end
                    room = self.max_batch_size - len(self._rows)
                    while self._waiting and len(admitted) < room:
                        row = self._waiting.popleft()
                        if not row.future.cancelled():  # its caller gave up while it waited
                            admitted.append(row)
            with self._step_lock, torch.inference_mode():
                running = bool(self._rows)
                try:
                    if admitted:
                        self._prefill = self._start_prefill(admitted)
                    if self._prefill is not None:
                        self._prefill_step(whole=not running)
                except Exception as error:  # noqa: BLE001 - a request that cannot be prefilled fails alone
                    for row in self._prefill.rows if self._prefill is not None else admitted:
                        _resolve(row.future, error=error)
                    self._prefill = None
                try:
                    if running and self._rows:  # running rows get their step too (new ones join it)
                        self._decode()
                except Exception as error:  # noqa: BLE001 - the batch's callers get the failure, the engine goes on
                    for row in self._rows:
                        _resolve(row.future, error=error)
                    self._rows, self._cache, self._mask = [], None, None
        with self._wake:
            prefilling = self._prefill.rows if self._prefill is not None else []
            for row in [*self._rows, *prefilling, *self._waiting]:
                _resolve(row.future, error=RuntimeError("the hf engine was closed"))
            self._rows, self._cache, self._mask, self._prefill = [], None, None, None
            self._waiting.clear()

    def _start_prefill(self, rows: list[_Row]) -> _Prefill:
        """Lay out new rows' prompts for prefill, behind their episodes' kept KV where the prompt extends it."""
        reused = [self._take_prefix(row.request) for row in rows]
        cached = max(n for n, _ in reused)
        suffixes = [row.request.prompt_ids[n:] for row, (n, _) in zip(rows, reused, strict=True)]
        width = max(len(x) for x in suffixes)
        input_ids = torch.full((len(rows), width), self.pad_token_id, dtype=torch.long)
        mask = torch.zeros((len(rows), cached + width), dtype=torch.long)
        positions = torch.zeros((len(rows), width), dtype=torch.long)
        for i, (row, (n, _), suffix) in enumerate(zip(rows, reused, suffixes, strict=True)):
            input_ids[i, width - len(suffix):] = torch.tensor(suffix)
            mask[i, cached - n: cached] = 1
            mask[i, cached + width - len(suffix):] = 1
            positions[i, width - len(suffix):] = torch.arange(n, n + len(suffix))
            row.position = len(row.request.prompt_ids)
            self.stats["prompt_tokens"] += len(row.request.prompt_ids)
            self.stats["cached_prompt_tokens"] += n
        cache = _new_cache()
        if cached:
            like = next(layers for n, layers in reused if n)
            for layer in range(len(like)):
                keys, values = [], []
                for n, layers in reused:
                    pad = like[layer][0].new_zeros(like[layer][0].shape[0], cached - n, like[layer][0].shape[2])
                    keys.append(torch.cat([pad, layers[layer][0]], 1) if n else pad)
                    values.append(torch.cat([pad, layers[layer][1]], 1) if n else pad)
                cache.update(torch.stack(keys).to(self.device), torch.stack(values).to(self.device), layer)
        return _Prefill(rows, input_ids, positions, mask, cache, cached)

    def _prefill_step(self, whole: bool) -> None:
        """Feed the next chunk of the prefilling rows' prompts (all of it when `whole`); after the last, sample
        their first tokens and let them join the batch."""
        job = self._prefill
        width = job.input_ids.shape[1]
        columns = width - job.fed if whole else max(1, self.prefill_chunk_tokens // len(job.rows))
        end = min(width, job.fed + columns)
        self.stats["prefill_chunks"] += 1
        logits = self._forward(job.input_ids[:, job.fed:end], job.mask[:, :job.cached + end],
                               job.positions[:, job.fed:end], job.cache)
        job.fed = end
        if end < width:
            return
        self._sample_rows(job.rows, logits)
        self._join(job.rows, job.cache, job.mask.to(self.device))
        self._prefill = None
        self._retire()

    def _decode(self) -> None:
        """One decoding step for every running row: feed its last token, sample the next."""
        rows = self._rows
        input_ids = torch.tensor([[row.output.token_ids[-1]] for row in rows])
        positions = torch.tensor([[row.position] for row in rows])
        self._mask = torch.cat([self._mask, self._mask.new_ones((len(rows), 1))], 1)
        logits = self._forward(input_ids, self._mask, positions, self._cache)
        for row in rows:
            row.position += 1
        self._sample_rows(rows, logits)
        self._retire()

    def _forward(self, input_ids: torch.Tensor, mask: torch.Tensor, positions: torch.Tensor,
                 cache: Cache) -> torch.Tensor:
        self.stats["steps"] += 1
        self.stats["step_rows"] += len(input_ids)
        # logits_to_keep=1: only the last column's logits are sampled from (a prefill's others cost a vocabulary
        # projection per prompt token).
        return self.model(input_ids=input_ids.to(self.device), attention_mask=mask.to(self.device),
                          position_ids=positions.to(self.device), past_key_values=cache, use_cache=True,
                          logits_to_keep=1).logits[:, -1, :].float().cpu()

    def _join(self, rows: list[_Row], cache: Cache, mask: torch.Tensor) -> None:
        """Stack new rows' cache under the running batch's, both left-padded to the wider one."""
        if not self._rows:
            self._rows, self._cache, self._mask = list(rows), cache, mask
            return
        width = max(self._mask.shape[1], mask.shape[1])
        joined = _new_cache()
        for index, (old, new) in enumerate(zip(self._cache.layers, cache.layers, strict=True)):
            joined.update(torch.cat([_pad_left(old.keys, width, 2), _pad_left(new.keys, width, 2)]),
                          torch.cat([_pad_left(old.values, width, 2), _pad_left(new.values, width, 2)]), index)
        self._rows = [*self._rows, *rows]
        self._cache, self._mask = joined, torch.cat([_pad_left(self._mask, width, 1), _pad_left(mask, width, 1)])

    def _sample_rows(self, rows: list[_Row], logits: torch.Tensor) -> None:
        for row, row_logits in zip(rows, logits, strict=True):
            if row.future.cancelled():  # the caller went away: no more tokens
                row.done = True
                continue
            token, logprob = self._sample(row_logits, row.request, row.generator)
            out = row.output
            out.token_ids.append(token)
            out.logprobs.append(logprob)
            if len(out.token_ids) == 1:
                out.timing["first"] = time.monotonic()
            self.stats["decoded_tokens"] += 1
            if token in row.request.stop_token_ids:
                out.finish_reason, row.done = "stop", True
            elif len(out.token_ids) >= row.request.max_new_tokens:
                row.done = True
            if row.on_token is not None and row.on_token(token) is False:
                row.done = True

    def _retire(self) -> None:
        """Finished rows leave the batch: their KV is kept for their episode's next turn, their future resolves."""
        if not any(row.done for row in self._rows):
            return
        for index, row in enumerate(self._rows):
            if row.done:
                self._keep_prefix(index, row)
                row.output.timing["done"] = time.monotonic()
                _resolve(row.future, result=row.output)
        keep = [i for i, row in enumerate(self._rows) if not row.done]
        if not keep:
            self._rows, self._cache, self._mask = [], None, None
            return
        self._rows = [self._rows[i] for i in keep]
        mask = self._mask[keep]
        first = int(mask.any(0).long().argmax())  # columns left of every row's first token are padding only
        self._mask = mask[:, first:]
        for layer in self._cache.layers:
            layer.select(keep, first)

    # ------------------------------------------------------------------ prefix reuse across an episode's turns

    def _take_prefix(self, request: GenerationRequest) -> tuple[int, KV]:
        """The kept KV of this request's episode, if the kept tokens are a strict prefix of its prompt."""
        entry = self._prefix.pop(request.cache_key, None) if request.cache_key else None
        if entry is None:
            return 0, []
        ids, layers = entry
        if len(ids) >= len(request.prompt_ids) or request.prompt_ids[: len(ids)] != ids:
            return 0, []
        return len(ids), layers

    def _keep_prefix(self, index: int, row: _Row) -> None:
        """Keep a keyed row's KV: its prompt and all sampled tokens but the last (never fed)."""
        if not row.request.cache_key or not row.output.token_ids or row.future.cancelled():
            return
        real = self._mask[index].bool()
        layers = [(layer.keys[index][:, real].clone(), layer.values[index][:, real].clone())
                  for layer in self._cache.layers]
        self._prefix[row.request.cache_key] = (list(row.request.prompt_ids) + row.output.token_ids[:-1], layers)
        while len(self._prefix) > self.prefix_cache_size:
            self._prefix.popitem(last=False)

    @staticmethod
    def _sample(logits: torch.Tensor, request: GenerationRequest, generator: torch.Generator) -> tuple[int, float]:
        if request.temperature <= 0:
            logprobs = torch.log_softmax(logits, dim=-1)
            token = int(torch.argmax(logits))
            return token, float(logprobs[token])
        scaled = logits / request.temperature
        logprobs = torch.log_softmax(scaled, dim=-1)
        if request.top_p < 1.0:
            scaled = _top_p_filter(scaled, request.top_p)
        probs = torch.softmax(scaled, dim=-1)
        token = int(torch.multinomial(probs, 1, generator=generator))
        return token, float(logprobs[token])


def _resolve(future: concurrent.futures.Future, result: GenerationOutput | None = None,
             error: BaseException | None = None) -> None:
    """Settle a request's future unless its caller cancelled it first."""
    try:
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(result)
    except concurrent.futures.InvalidStateError:  # cancelled meanwhile: nobody waits for it
        pass
