"""The learner's forward passes: per-token log-probabilities (and entropies) of a policy, values of a critic."""

from __future__ import annotations

import contextlib

import torch

from userrl.algorithms import token_entropy, token_logprobs
from userrl.batch import TensorBatch
from userrl.config import UserRLConfig
from userrl.fsdp import attach_token_scoring


class ForwardPass:
    """Runs sharded models on micro-batches on the learner's device (bfloat16 autocast on CPU if asked).

    `config.learners.logprob_chunk_tokens` is read at each call: the tests compare both paths on one learner.
    """

    def __init__(self, config: UserRLConfig, device: torch.device, bf16: bool):
        self.config = config
        self.device = device
        self.bf16 = bf16
        # The models that can be scored from the hidden state in chunks (a plain linear head).
        self._hidden_scoring: set[int] = set()

    def enable_hidden_scoring(self, model: torch.nn.Module) -> None:
        """Score `model`'s tokens from the hidden state in chunks where its head allows it."""
        if attach_token_scoring(model):
            self._hidden_scoring.add(id(model))

    def autocast(self) -> contextlib.AbstractContextManager:
        """bfloat16 autocast for a CPU learner in bfloat16 (FSDP2's mixed precision does it on GPU)."""
        if self.bf16 and self.device.type == "cpu":
            return torch.autocast("cpu", dtype=torch.bfloat16)
        return contextlib.nullcontext()

    def logprobs(self, model: torch.nn.Module, batch: TensorBatch, need_entropy: bool = False,
                 temperature: float = 1.0) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Per-token logprobs of input_ids[:, 1:] (and entropies) at `temperature`, aligned to positions 1..L-1.

        Every loss, KL and metric reads them under the loss mask, so only trained positions need a value.
        With learners.logprob_chunk_tokens > 0 (and a plain head) exactly those are scored, from the hidden
        state in chunks (`attach_token_scoring`), the others left 0; else every position from the first trained
        one on goes through the LM head: prompts are most of a short episode, and the head's vocabulary-wide
        matmul and softmax are the costliest part of it.
        """
        ids = batch.input_ids.to(self.device)
        chunk_tokens = self.config.learners.logprob_chunk_tokens
        if chunk_tokens and id(model) in self._hidden_scoring:
            scored = batch.loss_mask[:, 1:].to(self.device) != 0
            with self.autocast():
                picked, picked_entropy = model.score_tokens(
                    ids, batch.attention_mask.to(self.device), scored, temperature, need_entropy, chunk_tokens)
            logp = torch.zeros(scored.shape, device=self.device)
            logp[scored] = picked
            entropy = None
            if need_entropy:
                entropy = torch.zeros_like(logp)
                entropy[scored] = picked_entropy
            return logp, entropy
        width = ids.shape[1]
        trained = batch.loss_mask[:, 1:].sum(0).nonzero()
        first = int(trained[0]) if len(trained) else width - 2  # first trained target index (of ids[:, 1:])
        keep = width - first  # logits of positions first .. L-1; the last one predicts nothing
        with self.autocast():
            logits = model(input_ids=ids, attention_mask=batch.attention_mask.to(self.device),
                           logits_to_keep=keep).logits
        logits = logits[:, :-1].float()
        logp = torch.zeros(ids.shape[0], width - 1, device=self.device)
        logp[:, first:] = token_logprobs(logits, ids[:, first + 1:], temperature)
        entropy = None
        if need_entropy:
            entropy = torch.zeros_like(logp)
            entropy[:, first:] = token_entropy(logits, temperature)
        return logp, entropy

    def values(self, critic: torch.nn.Module, batch: TensorBatch) -> torch.Tensor:
        """[B, L] float32 values: V at position t is the head's output after reading tokens < t (the state in
        which token t was sampled), so position 0 has none (0)."""
        ids = batch.input_ids.to(self.device)
        with self.autocast():
            out = critic(input_ids=ids, attention_mask=batch.attention_mask.to(self.device)).logits[..., 0]
        values = torch.zeros(ids.shape, dtype=torch.float32, device=self.device)
        values[:, 1:] = out[:, :-1].float()
        return values
