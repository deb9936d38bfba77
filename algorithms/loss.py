"""Per-token log-probabilities and the actor losses (docs/spec/ALGORITHMS.md §3, Appendix A).

Every loss here returns per-token values or reduces them with ``aggregate`` over a 0/1 loss mask, so the
learner decides nothing about masking or normalization.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

AGG_MODES = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum")
KL_KINDS = ("kl", "abs", "mse", "low_var_kl")
_KL_ALIASES = {"k1": "kl", "k2": "mse", "k3": "low_var_kl"}

# exp() of a larger log-ratio overflows float32 and poisons the batch with inf/NaN (§3.1, §3.3).
_MAX_LOG_RATIO = 20.0
_MAX_LOW_VAR_KL = 10.0

# Rows of the flattened [N, V] logits handled at once: bounds the float32 copy of a bf16 chunk
# (2048 x 152k vocab x 4 bytes ~ 1.2 GB) instead of upcasting the whole [B, T, V] tensor.
_ROWS_PER_CHUNK = 2048


# ---------------------------------------------------------------------------------------------------
# Log-probabilities and entropy from logits
# ---------------------------------------------------------------------------------------------------


def token_logprobs(logits: torch.Tensor, targets: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """Float32 log-softmax(logits / temperature) gathered at targets, computed in row chunks."""
    _check_temperature(temperature)

    def chunk_logprobs(chunk: torch.Tensor, chunk_targets: torch.Tensor) -> torch.Tensor:
        scaled = _scaled_float(chunk, temperature)
        # gather - logsumexp never builds the full [rows, V] log-softmax.
        picked = scaled.gather(-1, chunk_targets[:, None]).squeeze(-1)
        return picked - torch.logsumexp(scaled, dim=-1)

    return _over_row_chunks(chunk_logprobs, logits, targets)


def token_entropy(logits: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """Float32 entropy of softmax(logits / temperature) at every position, computed in row chunks."""
    _check_temperature(temperature)

    def chunk_entropy(chunk: torch.Tensor, _: torch.Tensor) -> torch.Tensor:
        scaled = _scaled_float(chunk, temperature)
        # H = logsumexp(l) - sum_v p_v * l_v, stable for any logit offset.
        return torch.logsumexp(scaled, dim=-1) - (torch.softmax(scaled, dim=-1) * scaled).sum(dim=-1)

    placeholder = torch.zeros(logits.shape[:-1], dtype=torch.long, device=logits.device)
    return _over_row_chunks(chunk_entropy, logits, placeholder)


def linear_token_logprobs(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    targets: torch.Tensor,
    temperature: float = 1.0,
    with_entropy: bool = False,
    chunk_tokens: int = 1024,
    bias: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Float32 log-probabilities of `targets` (and entropies) under softmax((hidden @ weight.T + bias) / T).

    hidden [N, H] are the last hidden states of the scored positions, weight [V, H] the output embedding.
    The logits are built `chunk_tokens` rows at a time, in the forward pass and again in the backward pass,
    which keeps only each row's log-normalizer: at most one chunk's [rows, V] logits exist at once. The
    matmuls run in the autocast dtype where autocast is on (as the model's own head would), everything
    after them in float32.
    """
    _check_temperature(temperature)
    if chunk_tokens < 1:
        raise ValueError(f"chunk_tokens must be >= 1, got {chunk_tokens}")
    if hidden.dim() != 2 or hidden.shape[:-1] != targets.shape:
        raise ValueError(f"hidden {tuple(hidden.shape)} must be [N, H] with targets [N], got {tuple(targets.shape)}")
    device = hidden.device.type
    dtype = (torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device)
             else torch.promote_types(hidden.dtype, weight.dtype))
    logp, entropy = _LinearLogprobs.apply(hidden, weight, bias, targets.long(), temperature, with_entropy,
                                          chunk_tokens, dtype)
    return logp, (entropy if with_entropy else None)


class _LinearLogprobs(torch.autograd.Function):
    """Forward and backward of `linear_token_logprobs`, chunk by chunk.

    With l = logits / T, p = softmax(l), lse = logsumexp(l): d logp_t / d l = onehot(t) - p and
    d H / d l = -p * (log p + H); both are scaled by 1 / T on the way back to the logits.
    """

    @staticmethod
    def forward(ctx, hidden, weight, bias, targets, temperature, with_entropy, chunk_tokens, dtype):
        logps, lses, entropies = [], [], []
        with torch.autocast(hidden.device.type, enabled=False):
            w, b = _in_dtype(weight, bias, dtype)  # cast once, not per chunk
            for rows in _row_chunks(len(targets), chunk_tokens):
                scaled = _chunk_logits(hidden[rows].to(dtype), w, b, temperature)
                lse = torch.logsumexp(scaled, dim=-1)
                logps.append(scaled.gather(-1, targets[rows, None]).squeeze(-1) - lse)
                lses.append(lse)
                if with_entropy:  # H = lse - sum_v p_v l_v
                    entropies.append(lse - (torch.softmax(scaled, dim=-1) * scaled).sum(dim=-1))
        logp, lse = _cat(logps, hidden), _cat(lses, hidden)
        entropy = _cat(entropies, hidden) if with_entropy else torch.zeros_like(logp)
        ctx.save_for_backward(hidden, weight, bias, targets, lse, entropy)
        ctx.settings = (temperature, with_entropy, chunk_tokens, dtype)
        return logp, entropy

    @staticmethod
    def backward(ctx, grad_logp, grad_entropy):
        hidden, weight, bias, targets, lse, entropy = ctx.saved_tensors
        temperature, with_entropy, chunk_tokens, dtype = ctx.settings
        grad_hidden = torch.zeros_like(hidden) if ctx.needs_input_grad[0] else None
        grad_weight = torch.zeros_like(weight, dtype=torch.float32) if ctx.needs_input_grad[1] else None
        grad_bias = torch.zeros(weight.shape[0], dtype=torch.float32, device=weight.device) if (
            bias is not None and ctx.needs_input_grad[2]) else None
        w, b = _in_dtype(weight, bias, dtype)
        for rows in _row_chunks(len(targets), chunk_tokens):
            h = hidden[rows].to(dtype)
            # The gradient wrt the logits, (-g p + g at the target - g_H p (log p + H)) / T, built in place.
            g = grad_logp[rows, None].float() / temperature
            log_p = _chunk_logits(h, w, b, temperature).sub_(lse[rows, None])
            if with_entropy:
                p = log_p.exp()
                grad = log_p.add_(entropy[rows, None]).mul_(p).mul_(-grad_entropy[rows, None].float() / temperature)
                grad.sub_(p.mul_(g))
            else:
                grad = log_p.exp_().mul_(-g)
            grad = grad.scatter_add_(-1, targets[rows, None], g).to(dtype)
            if grad_hidden is not None:
                grad_hidden[rows] = (grad @ w).to(hidden.dtype)
            if grad_weight is not None:
                grad_weight += grad.T @ h
            if grad_bias is not None:
                grad_bias += grad.float().sum(0)
        return (grad_hidden, None if grad_weight is None else grad_weight.to(weight.dtype),
                None if grad_bias is None else grad_bias.to(bias.dtype), None, None, None, None, None)


def _row_chunks(rows: int, chunk: int) -> list[slice]:
    return [slice(start, min(start + chunk, rows)) for start in range(0, rows, chunk)]


def _in_dtype(weight: torch.Tensor, bias: torch.Tensor | None, dtype: torch.dtype
              ) -> tuple[torch.Tensor, torch.Tensor | None]:
    return weight.to(dtype), None if bias is None else bias.to(dtype)


def _chunk_logits(hidden: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
                  temperature: float) -> torch.Tensor:
    """Float32 logits / T of some rows (the matmul in the inputs' dtype)."""
    logits = F.linear(hidden, weight, bias).float()
    return logits.div_(temperature) if temperature != 1.0 else logits


def _cat(pieces: list[torch.Tensor], like: torch.Tensor) -> torch.Tensor:
    return torch.cat(pieces) if pieces else torch.zeros(0, dtype=torch.float32, device=like.device)


def _over_row_chunks(
    fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor], logits: torch.Tensor, targets: torch.Tensor
) -> torch.Tensor:
    if logits.shape[:-1] != targets.shape:
        raise ValueError(f"logits {tuple(logits.shape)} do not match targets {tuple(targets.shape)}")
    flat_logits = logits.reshape(-1, logits.shape[-1])
    flat_targets = targets.reshape(-1).long()
    if flat_targets.numel() == 0:
        return torch.zeros(targets.shape, dtype=torch.float32, device=logits.device)
    pieces = [
        fn(chunk, chunk_targets)
        for chunk, chunk_targets in zip(
            flat_logits.split(_ROWS_PER_CHUNK), flat_targets.split(_ROWS_PER_CHUNK), strict=True
        )
    ]
    return torch.cat(pieces).reshape(targets.shape)


def _scaled_float(chunk: torch.Tensor, temperature: float) -> torch.Tensor:
    chunk = chunk.float() if chunk.dtype in (torch.float16, torch.bfloat16) else chunk
    return chunk / temperature if temperature != 1.0 else chunk


def _check_temperature(temperature: float) -> None:
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0 to define log-probabilities, got {temperature}")


# ---------------------------------------------------------------------------------------------------
# Aggregation (§3.2)
# ---------------------------------------------------------------------------------------------------


def aggregate(
    values: torch.Tensor, mask: torch.Tensor, mode: str = "token-mean", denominator: float | None = None
) -> torch.Tensor:
    """Reduce per-token values [..., T] over a 0/1 mask to a scalar; an all-zero mask gives 0, not NaN.

    The terms are the mask-1 token values (``token-mean``), the per-sequence token means
    (``seq-mean-token-mean``) or the per-sequence token sums (``seq-mean-token-sum``). By default their
    sum is divided by their number in this batch (``aggregation_count``). An explicit ``denominator``
    replaces that number: with the count of the whole batch, the pieces of a batch cut into micro-batches
    sum exactly to the aggregate of the whole.
    """
    _check_mode(mode)
    if values.shape != mask.shape:
        raise ValueError(
            f"values {tuple(values.shape)} and mask {tuple(mask.shape)} must have the same shape"
        )
    if denominator is not None and not denominator > 0:
        raise ValueError(f"denominator must be > 0, got {denominator}")
    keep = mask != 0
    # where(), not multiplication: padding positions may hold inf/NaN, and 0 * inf is NaN.
    masked = torch.where(keep, values, torch.zeros_like(values))
    counts = keep.sum(dim=-1).to(values.dtype)

    if mode == "token-mean":
        total, count = masked.sum(), counts.sum()
    else:
        per_seq = masked.sum(dim=-1)
        if mode == "seq-mean-token-mean":
            per_seq = per_seq / counts.clamp(min=1)
        # Sequences without loss tokens (padding rows of a micro-batch) are not counted in the mean.
        total, count = per_seq.sum(), (counts > 0).sum().to(values.dtype)
    if denominator is not None:
        return total / denominator
    return total / count.clamp(min=1)


def aggregation_count(mask: torch.Tensor, mode: str = "token-mean") -> float:
    """How many terms ``aggregate`` averages over ``mask``: mask-1 tokens (``token-mean``) or sequences
    with at least one mask-1 token (``seq-mean-*``)."""
    _check_mode(mode)
    keep = mask != 0
    return float(keep.sum()) if mode == "token-mean" else float(keep.reshape(-1, keep.shape[-1]).any(-1).sum())


def _check_mode(mode: str) -> None:
    if mode not in AGG_MODES:
        raise ValueError(f"unknown loss aggregation {mode!r}; valid: {', '.join(AGG_MODES)}")


def masked_token_mean(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean of values over mask-1 tokens (0 if there are none)."""
    return aggregate(values, mask, "token-mean")


# ---------------------------------------------------------------------------------------------------
# Policy loss (§3.1) and metrics (§3.7)
# ---------------------------------------------------------------------------------------------------


def policy_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    clip_ratio_low: float = 0.2,
    clip_ratio_high: float = 0.2,
    clip_ratio_c: float = 3.0,
    agg: str = "token-mean",
    denominator: float | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """PPO clipped surrogate with dual clip, aggregated over the mask; metrics are detached scalars.

    ``denominator``: see ``aggregate`` (the metrics stay means over this batch's mask).
    """
    if clip_ratio_c <= 1.0:
        raise ValueError(
            f"clip_ratio_c must be > 1 so the dual clip only bounds large losses, got {clip_ratio_c}"
        )

    log_ratio = torch.clamp(logp - old_logp, -_MAX_LOG_RATIO, _MAX_LOG_RATIO)
    ratio = torch.exp(log_ratio)
    loss_unclipped = -advantages * ratio
    loss_clipped = -advantages * torch.clamp(ratio, 1.0 - clip_ratio_low, 1.0 + clip_ratio_high)
    loss_ppo = torch.maximum(loss_unclipped, loss_clipped)
    # Dual clip: a negative-advantage token whose ratio exploded must not dominate the batch.
    loss_dual = torch.minimum(loss_ppo, -advantages * clip_ratio_c)
    per_token = torch.where(advantages < 0, loss_dual, loss_ppo)

    with torch.no_grad():
        dual_clipped = (advantages < 0) & (loss_ppo > -advantages * clip_ratio_c)
        metrics = {
            "pg_clipfrac": masked_token_mean((loss_clipped > loss_unclipped).float(), mask),
            "pg_clipfrac_dual": masked_token_mean(dual_clipped.float(), mask),
            "approx_kl": masked_token_mean(old_logp - logp, mask),
        }
    return aggregate(per_token, mask, agg, denominator), metrics


# ---------------------------------------------------------------------------------------------------
# KL to a reference policy (§3.3) and SFT (Appendix A)
# ---------------------------------------------------------------------------------------------------


def kl_penalty(logp: torch.Tensor, ref_logp: torch.Tensor, kind: str = "low_var_kl") -> torch.Tensor:
    """Per-token KL estimate between policy and reference: kl (k1), abs, mse (k2) or low_var_kl (k3)."""
    kind = _KL_ALIASES.get(kind, kind)
    if kind not in KL_KINDS:
        raise ValueError(f"unknown KL estimator {kind!r}; valid: {', '.join(KL_KINDS)} (aliases: k1, k2, k3)")
    diff = logp - ref_logp
    if kind == "kl":
        return diff
    if kind == "abs":
        return diff.abs()
    if kind == "mse":
        return 0.5 * diff.square()
    d = torch.clamp(-diff, -_MAX_LOG_RATIO, _MAX_LOG_RATIO)
    return torch.clamp(torch.exp(d) - d - 1.0, -_MAX_LOW_VAR_KL, _MAX_LOW_VAR_KL)


def sft_loss(
    logp: torch.Tensor, mask: torch.Tensor, agg: str = "token-mean", denominator: float | None = None
) -> torch.Tensor:
    """Negative log-likelihood of the mask-1 (assistant) tokens (``denominator``: see ``aggregate``)."""
    return aggregate(-logp, mask, agg, denominator)
