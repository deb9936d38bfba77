"""The loss of one micro-batch, one class per kind (RLlib's `Learner.compute_loss_for_module`).

A loss is bound to one mini-batch (its per-trajectory targets) and one trained module. The learner's single
micro-batch loop (`Learner._step`) asks it for the mini-batch's count of loss terms, for each micro-batch's
share of the loss (its sum of terms divided by that count, so the shares add up to the mini-batch loss
whatever the ranks and micro-batch cuts) with metric sums, and at the end for the logged metrics.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence

import torch

from userrl.algorithms import (
    aggregate,
    kl_penalty,
    masked_token_mean,
    policy_loss,
    sft_loss,
    value_loss,
    value_loss_mask,
)
from userrl.algorithms.loss import aggregation_count
from userrl.batch import TensorBatch
from userrl.config import UserRLConfig
from userrl.forward import ForwardPass


def _fill(values: Sequence[torch.Tensor], rows: Sequence[int], into: torch.Tensor) -> torch.Tensor:
    """`into` with the leading positions of row k set to values[rows[k]] (the rest keep their fill)."""
    for k, i in enumerate(rows):
        into[k, : len(values[i])] = values[i].to(into.device)
    return into


class MicroBatchLoss(ABC):
    """The loss of one micro-batch for `module`, and the metrics of its mini-batch."""

    # The metric sums a micro-batch adds up (besides "loss"); every rank reduces them in this order.
    sum_keys: tuple[str, ...] = ()

    def __init__(self, module: torch.nn.Module, forward: ForwardPass):
        self.module = module
        self.forward = forward

    @abstractmethod
    def denominator(self, whole: TensorBatch) -> float:
        """The mini-batch's count of loss terms (> 0): every micro-batch divides its sum of terms by it."""

    @abstractmethod
    def __call__(self, batch: TensorBatch, rows: Sequence[int], denominator: float
                 ) -> tuple[torch.Tensor, dict[str, float]]:
        """This micro-batch's share of the mini-batch loss and its metric sums (batch row k is the mini-batch's
        trajectory rows[k])."""

    @abstractmethod
    def metrics(self, totals: dict[str, float], grad_norm: float) -> dict[str, float]:
        """The logged metrics, from the loss and metric sums over the learner group."""


class TokenLoss(MicroBatchLoss):
    """A loss of the policy over its trained tokens: shared forward metrics and token-mean reporting."""

    sum_keys = ("pg_clipfrac", "approx_kl", "importance_ratio_mean", "entropy", "sampler_logprob_gap",
                "trained_tokens", "processed_tokens")

    def __init__(self, module: torch.nn.Module, forward: ForwardPass, config: UserRLConfig):
        super().__init__(module, forward)
        self.training = config.training

    def denominator(self, whole: TensorBatch) -> float:
        """Tokens, or sequences, of the mini-batch's loss mask (training.loss_agg_mode)."""
        return max(aggregation_count(whole.loss_mask[:, 1:], self.training.loss_agg_mode), 1.0)

    @abstractmethod
    def token_loss(self, batch: TensorBatch, rows: Sequence[int], mask: torch.Tensor, denominator: float
                   ) -> tuple[torch.Tensor, torch.Tensor, dict[str, float]]:
        """The micro-batch's loss share, the policy's logprobs [B, L-1] and the kind's own metric sums."""

    def __call__(self, batch: TensorBatch, rows: Sequence[int], denominator: float
                 ) -> tuple[torch.Tensor, dict[str, float]]:
        """The kind's loss share and metric sums, plus the token counts and the gap to the sampler."""
        mask = batch.loss_mask[:, 1:].to(self.forward.device)
        loss, logp, sums = self.token_loss(batch, rows, mask, denominator)
        gap = (batch.sampler_logprobs[:, 1:].to(self.forward.device) - logp.detach()).abs() * mask
        sums.update(sampler_logprob_gap=float(gap.sum()), trained_tokens=float(mask.sum()),
                    processed_tokens=float(batch.attention_mask.sum()))
        return loss, sums

    def metrics(self, totals: dict[str, float], grad_norm: float) -> dict[str, float]:
        """The mini-batch's loss (its shares summed over ranks); the other metrics are token means over it."""
        tokens = max(totals["trained_tokens"], 1.0)
        means = {k: v / tokens for k, v in totals.items() if k != "loss" and not k.endswith("_tokens")}
        return {"loss": totals["loss"], **means, "trained_tokens": totals["trained_tokens"],
                "processed_tokens": totals["processed_tokens"], "grad_norm": grad_norm}


class SFTLoss(TokenLoss):
    """Cross-entropy on demonstrations (Appendix A), at temperature 1."""

    def token_loss(self, batch: TensorBatch, rows: Sequence[int], mask: torch.Tensor, denominator: float
                   ) -> tuple[torch.Tensor, torch.Tensor, dict[str, float]]:
        """Negative log-likelihood of the trained tokens."""
        logp, _ = self.forward.logprobs(self.module, batch)
        return sft_loss(logp, mask, self.training.loss_agg_mode, denominator), logp, {}


class PPOPolicyLoss(TokenLoss):
    """The clipped policy loss (docs/spec/ALGORITHMS.md §3.1) of GRPO-multiturn and of the GAE estimators'
    actor, with the KL to a reference (§3.3) and the entropy bonus where configured.

    `advantages[i]` is aligned with trajectory i's input_ids; `old[i]` (None: on policy, ratio 1) with its
    input_ids[1:].
    """

    def __init__(self, module: torch.nn.Module, forward: ForwardPass, config: UserRLConfig,
                 temperature: float, advantages: Sequence[torch.Tensor], old: Sequence[torch.Tensor] | None,
                 reference: torch.nn.Module | None):
        super().__init__(module, forward, config)
        self.temperature = temperature
        self.advantages = [a[1:] for a in advantages]  # of the targets input_ids[1:], like the logprobs
        self.old = old
        self.reference = reference
        # The dual clip's share of the tokens, and with a reference the KL estimate the loss penalises.
        self.sum_keys = (*TokenLoss.sum_keys, "pg_clipfrac_dual", *(("kl",) if reference is not None else ()))

    def token_loss(self, batch: TensorBatch, rows: Sequence[int], mask: torch.Tensor, denominator: float
                   ) -> tuple[torch.Tensor, torch.Tensor, dict[str, float]]:
        """PPO surrogate, KL and entropy terms, each aggregated over the mini-batch's count."""
        tc = self.training
        logp, entropy = self.forward.logprobs(self.module, batch, tc.entropy_coeff > 0, self.temperature)
        adv = _fill(self.advantages, rows, torch.zeros_like(logp))
        old_logp = logp.detach().clone()
        if self.old is not None:
            _fill(self.old, rows, old_logp)
        loss, stats = policy_loss(logp, old_logp, adv, mask, tc.clip_ratio_low, tc.clip_ratio_high,
                                  tc.clip_ratio_c, tc.loss_agg_mode, denominator)
        with torch.no_grad():
            stats["importance_ratio_mean"] = masked_token_mean(
                torch.exp(torch.clamp(logp - old_logp, max=20.0)), mask)
        if self.reference is not None:
            with torch.no_grad():
                ref_logp, _ = self.forward.logprobs(self.reference, batch, temperature=self.temperature)
            kl = kl_penalty(logp, ref_logp, tc.kl_loss_type)
            loss = loss + tc.kl_loss_coef * aggregate(kl, mask, tc.loss_agg_mode, denominator)
            stats["kl"] = masked_token_mean(kl.detach(), mask)
        if entropy is not None:
            loss = loss - tc.entropy_coeff * aggregate(entropy, mask, tc.loss_agg_mode, denominator)
        # Token sums of the micro-batch's token means; `metrics` divides by the mini-batch's tokens.
        n = float(mask.sum())
        sums = {key: float(stats[key]) * n for key in self.sum_keys if key in stats}
        if entropy is not None:
            sums["entropy"] = float((entropy.detach() * mask).sum())
        return loss, logp, sums


class ClippedValueLoss(MicroBatchLoss):
    """The critic's clipped value loss (docs/spec/ALGORITHMS.md §4.7) over its positions (critic.mask_obs)."""

    sum_keys = ("vf_clipfrac", "value_tokens")

    def __init__(self, module: torch.nn.Module, forward: ForwardPass, config: UserRLConfig,
                 old_values: Sequence[torch.Tensor], returns: Sequence[torch.Tensor]):
        super().__init__(module, forward)
        self.critic = config.critic
        self.old_values = old_values
        self.returns = returns

    def _mask(self, batch: TensorBatch) -> torch.Tensor:
        return value_loss_mask(batch.loss_mask, self.critic.mask_obs, batch.attention_mask)

    def denominator(self, whole: TensorBatch) -> float:
        """The mini-batch's critic positions."""
        return max(float(self._mask(whole).sum()), 1.0)

    def __call__(self, batch: TensorBatch, rows: Sequence[int], denominator: float
                 ) -> tuple[torch.Tensor, dict[str, float]]:
        """The value loss share against the returns, clipped around the values before the update."""
        values = self.forward.values(self.module, batch)
        old = _fill(self.old_values, rows, torch.zeros_like(values))
        target = _fill(self.returns, rows, torch.zeros_like(values))
        mask = self._mask(batch).to(self.forward.device)
        loss, stats = value_loss(values, old, target, mask, self.critic.cliprange_value, denominator)
        n = float(mask.sum())
        return loss, {"vf_clipfrac": float(stats["vf_clipfrac"]) * n, "value_tokens": n}

    def metrics(self, totals: dict[str, float], grad_norm: float) -> dict[str, float]:
        """The critic's metrics, under `critic/`."""
        return {"critic/value_loss": totals["loss"],
                "critic/vf_clipfrac": totals["vf_clipfrac"] / max(totals["value_tokens"], 1.0),
                "critic/grad_norm": grad_norm}
