"""transformers engine: batched sampling from token ids with a KV cache, on any device.

A hand-written decode loop rather than `generate`, for two reasons: every request samples from its
own seeded generator (rollouts are reproducible whatever the batch composition), and the logprob of
each sampled token under the sampling distribution comes out directly.
"""

from __future__ import annotations

import torch
from transformers import AutoModelForCausalLM, DynamicCache

from userrl.engines.base import GenerationOutput, GenerationRequest

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def _top_p_filter(logits: torch.Tensor, top_p: float) -> torch.Tensor:
    sorted_logits, order = torch.sort(logits, descending=True)
    cumulative = torch.softmax(sorted_logits, dim=-1).cumsum(-1)
    drop = cumulative - torch.softmax(sorted_logits, dim=-1) > top_p
    sorted_logits = sorted_logits.masked_fill(drop, float("-inf"))
    return torch.full_like(logits, float("-inf")).scatter(-1, order, sorted_logits)


class HFEngine:
    """Batched generation with a transformers causal LM."""

    def __init__(self, model_path: str, dtype: str = "float32", device: str = "cpu", pad_token_id: int = 0):
        self.device = torch.device(device)
        self.model = AutoModelForCausalLM.from_pretrained(model_path, dtype=_DTYPES[dtype]).to(self.device)
        self.model.eval()
        self.pad_token_id = pad_token_id

    def load_state_dict(self, state_dict: dict[str, torch.Tensor]) -> None:
        """Copy new weights into the model in place."""
        if getattr(self.model.config, "tie_word_embeddings", False):
            # The head shares the embedding: loading a separate copy of it would untie the two.
            state_dict = {k: v for k, v in state_dict.items() if k != "lm_head.weight"}
        missing, unexpected = self.model.load_state_dict(state_dict, strict=False)
        missing = [k for k in missing if k != "lm_head.weight"]  # tied to the embedding
        if missing or unexpected:
            raise ValueError(f"weights do not fit the model: missing={missing[:5]} unexpected={unexpected[:5]}")
        self.model.tie_weights()

    @torch.inference_mode()
    def generate(self, requests: list[GenerationRequest]) -> list[GenerationOutput]:
        """Sample continuations for a batch of requests (left-padded, one KV cache)."""
        batch = len(requests)
        lengths = [len(r.prompt_ids) for r in requests]
        width = max(lengths)
        input_ids = torch.full((batch, width), self.pad_token_id, dtype=torch.long)
        attention = torch.zeros((batch, width), dtype=torch.long)
        for row, request in enumerate(requests):
            input_ids[row, width - lengths[row]:] = torch.tensor(request.prompt_ids)
            attention[row, width - lengths[row]:] = 1
        input_ids, attention = input_ids.to(self.device), attention.to(self.device)
        generators = []
        for request in requests:
            generator = torch.Generator(device="cpu")
            generator.manual_seed(request.seed if request.seed is not None else torch.seed())
            generators.append(generator)

        outputs = [GenerationOutput([], [], "length") for _ in requests]
        done = [r.max_new_tokens <= 0 for r in requests]
        cache = DynamicCache()
        step_ids = input_ids
        positions = (attention.cumsum(-1) - 1).clamp(min=0)
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
            step_ids = next_ids.unsqueeze(-1).to(self.device)
            attention = torch.cat([attention, torch.ones((batch, 1), dtype=torch.long, device=self.device)], -1)
            positions = positions[:, -1:] + 1
        return outputs

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
