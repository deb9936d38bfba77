"""transformers engine: batched sampling from token ids with a KV cache, on any device.

A hand-written decode loop rather than `generate`, for three reasons: every request samples from its
own seeded generator (rollouts are reproducible whatever the batch composition), the logprob of each
sampled token under the sampling distribution comes out directly, and each step's tokens can be handed
out as they are sampled (`on_token`), which is how Serve streams.

Streaming is a callback of the same batched loop, not transformers' `TextIteratorStreamer` on a thread
per request: the streamer serves one `generate` call of one sequence, so concurrent streamed requests
would each decode alone (or one batch would need one streamer per row, which it does not support),
while here streamed and non-streamed requests that arrive together still decode as one batch, sampled
exactly as without streaming. The cost: a request that arrives while a batch decodes waits for that
batch to finish before its first token (no continuous batching in this engine; the vllm engine has it).
"""

from __future__ import annotations

from collections import OrderedDict

import torch
from transformers import AutoModelForCausalLM, DynamicCache

from userrl.engines.base import Engine, GenerationOutput, GenerationRequest, OnToken

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def _top_p_filter(logits: torch.Tensor, top_p: float) -> torch.Tensor:
    sorted_logits, order = torch.sort(logits, descending=True)
    cumulative = torch.softmax(sorted_logits, dim=-1).cumsum(-1)
    drop = cumulative - torch.softmax(sorted_logits, dim=-1) > top_p
    sorted_logits = sorted_logits.masked_fill(drop, float("-inf"))
    return torch.full_like(logits, float("-inf")).scatter(-1, order, sorted_logits)


class HFEngine(Engine):
    """Batched generation with a transformers causal LM, reporting each token as it is sampled."""

    incremental = True

    def __init__(self, model_path: str, dtype: str = "float32", device: str = "cpu", pad_token_id: int = 0,
                 prefix_cache_size: int = 256):
        self.device = torch.device(device)
        self.model = AutoModelForCausalLM.from_pretrained(model_path, dtype=_DTYPES[dtype]).to(self.device)
        self.model.eval()
        self.pad_token_id = pad_token_id
        self.prefix_cache_size = prefix_cache_size
        self._prefix: OrderedDict[str, tuple[list[int], list[tuple[torch.Tensor, torch.Tensor]]]] = OrderedDict()

    def load_state_dict(self, state_dict: dict[str, torch.Tensor]) -> None:
        """Copy new weights into the model in place (cached KV of the old weights is dropped)."""
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
        """The episode behind `key` has ended: drop its cached prefix."""
        self._prefix.pop(key, None)

    def _take_prefix(self, request: GenerationRequest) -> tuple[int, list[tuple[torch.Tensor, torch.Tensor]]]:
        """The cached KV of this request's episode, if the cached tokens are a strict prefix of its prompt."""
        entry = self._prefix.pop(request.cache_key, None) if request.cache_key else None
        if entry is None:
            return 0, []
        ids, layers = entry
        if len(ids) >= len(request.prompt_ids) or request.prompt_ids[: len(ids)] != ids:
            return 0, []
        return len(ids), layers

    def _store_prefix(self, key: str, ids: list[int], layers: list[tuple[torch.Tensor, torch.Tensor]]) -> None:
        self._prefix[key] = (ids, layers)
        while len(self._prefix) > self.prefix_cache_size:
            self._prefix.popitem(last=False)

    @torch.inference_mode()
    def generate(self, requests: list[GenerationRequest], on_token: OnToken | None = None) -> list[GenerationOutput]:
        """Sample continuations for a batch of requests: left-padded rows sharing one KV cache.

        `on_token(row, token_id)` is called for every token right after it is sampled, before the next
        decoding step; when it returns False that row ends there (finish_reason "length", its caller
        has gone) and the others go on.

        A request with a `cache_key` reuses the KV of the same key's previous request when its tokens
        are a prefix of the new prompt (the next turn of an episode), so only the new tokens are
        prefilled. Row layout: [pad | cached prefix | pad | new tokens]; the mask hides the pads.
        """
        batch = len(requests)
        reused = [self._take_prefix(r) for r in requests]
        cached = max(n for n, _ in reused)
        suffixes = [r.prompt_ids[n:] for r, (n, _) in zip(requests, reused, strict=True)]
        width = max(len(x) for x in suffixes)
        input_ids = torch.full((batch, width), self.pad_token_id, dtype=torch.long)
        attention = torch.zeros((batch, cached + width), dtype=torch.long)
        positions = torch.zeros((batch, width), dtype=torch.long)
        for row, ((n, _), suffix) in enumerate(zip(reused, suffixes, strict=True)):
            input_ids[row, width - len(suffix):] = torch.tensor(suffix)
            attention[row, cached - n: cached] = 1
            attention[row, cached + width - len(suffix):] = 1
            positions[row, width - len(suffix):] = torch.arange(n, n + len(suffix))
        cache = DynamicCache()
        if cached:
            for layer in range(len(next(layers for n, layers in reused if n))):
                keys, values = [], []
                for n, layers in reused:
                    like = next(layers for m, layers in reused if m)[layer][0]
                    pad = like.new_zeros(like.shape[0], cached - n, like.shape[2])
                    keys.append(torch.cat([pad, layers[layer][0]], 1) if n else pad)
                    values.append(torch.cat([pad, layers[layer][1]], 1) if n else pad)
                cache.update(torch.stack(keys), torch.stack(values), layer)
        generators = []
        for request in requests:
            generator = torch.Generator(device="cpu")
            generator.manual_seed(request.seed if request.seed is not None else torch.seed())
            generators.append(generator)

        outputs = [GenerationOutput([], [], "length") for _ in requests]
        done = [r.max_new_tokens <= 0 for r in requests]
        step_ids, attention = input_ids.to(self.device), attention.to(self.device)
        positions = positions.to(self.device)
        for step in range(max(r.max_new_tokens for r in requests)):
            if all(done):
                break
            logits = self.model(
                input_ids=step_ids, attention_mask=attention, position_ids=positions,
                past_key_values=cache, use_cache=True,
            ).logits[:, -1, :].float().cpu()
            next_ids = torch.full((batch,), self.pad_token_id, dtype=torch.long)
            for row, request in enumerate(requests):
                if done[row]:
                    continue
                token, logprob = self._sample(logits[row], request, generators[row])
                next_ids[row] = token
                outputs[row].token_ids.append(token)
                outputs[row].logprobs.append(logprob)
                if token in request.stop_token_ids:
                    outputs[row].finish_reason = "stop"
                    done[row] = True
                elif step + 1 >= request.max_new_tokens:
                    done[row] = True
                if on_token is not None and on_token(row, token) is False:
                    done[row] = True
            step_ids = next_ids.unsqueeze(-1).to(self.device)
            attention = torch.cat([attention, torch.ones((batch, 1), dtype=torch.long, device=self.device)], -1)
            positions = positions[:, -1:] + 1
        self._keep_prefixes(requests, outputs, cache, attention, cached + width)
        return outputs

    def _keep_prefixes(self, requests: list[GenerationRequest], outputs: list[GenerationOutput],
                       cache: DynamicCache, attention: torch.Tensor, prompt_width: int) -> None:
        """Cache each keyed row's KV for its prompt and all sampled tokens but the last (never fed)."""
        width = cache.get_seq_length()
        for row, (request, out) in enumerate(zip(requests, outputs, strict=True)):
            if not request.cache_key or not out.token_ids:
                continue
            keep = torch.zeros(width, dtype=torch.bool, device=attention.device)
            keep[:prompt_width] = attention[row, :prompt_width].bool()
            keep[prompt_width: prompt_width + len(out.token_ids) - 1] = True  # rows that stopped early fed fewer
            layers = [(layer.keys[row][:, keep].clone(), layer.values[row][:, keep].clone())
                      for layer in cache.layers]
            self._store_prefix(request.cache_key, list(request.prompt_ids) + out.token_ids[:-1], layers)

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
