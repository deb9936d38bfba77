"""Policy loss, aggregation, KL, entropy and SFT loss (docs/spec/ALGORITHMS.md §3, Appendix A)."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from userrl.algorithms import (
    AGG_MODES,
    KL_KINDS,
    aggregate,
    kl_penalty,
    linear_token_logprobs,
    policy_loss,
    sft_loss,
    token_entropy,
    token_logprobs,
)
from userrl.algorithms import loss as loss_module

# ---------------------------------------------------------------------------------------------------
# Worked example 3.6 (eps = 0.2, c_dual = 3)
# ---------------------------------------------------------------------------------------------------

# (A, rho, L_pg, L2 > L1, dual clip active)
TABLE_3_6 = [
    (+1.0, 1.5, -1.2, True, False),
    (+2.0, 0.7, -1.4, False, False),
    (-1.0, 5.0, 3.0, False, True),
    (-1.0, 0.5, 0.8, True, False),
    (-0.5, 1.1, 0.55, False, False),
]


def _table_tensors() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    advantages = torch.tensor([[row[0] for row in TABLE_3_6]], dtype=torch.float64)
    logp = torch.log(torch.tensor([[row[1] for row in TABLE_3_6]], dtype=torch.float64))
    return logp, torch.zeros_like(logp), advantages


@pytest.mark.parametrize(("advantage", "rho", "expected", "clipped", "dual"), TABLE_3_6)
def test_table_3_6_row(advantage, rho, expected, clipped, dual):
    logp = torch.tensor([[math.log(rho)]], dtype=torch.float64)
    loss, metrics = policy_loss(
        logp, torch.zeros_like(logp), torch.tensor([[advantage]], dtype=torch.float64), torch.ones(1, 1)
    )
    assert float(loss) == pytest.approx(expected, abs=1e-12)
    assert float(metrics["pg_clipfrac"]) == float(clipped)
    assert float(metrics["pg_clipfrac_dual"]) == float(dual)


def test_table_3_6_token_mean_and_metrics():
    logp, old_logp, advantages = _table_tensors()
    mask = torch.tensor([[1, 1, 1, 1, 0]])
    loss, metrics = policy_loss(logp, old_logp, advantages, mask)
    assert float(loss) == pytest.approx(0.3, abs=1e-12)
    assert float(metrics["pg_clipfrac"]) == pytest.approx(2 / 4)
    assert float(metrics["pg_clipfrac_dual"]) == pytest.approx(1 / 4)
    expected_kl = -sum(math.log(row[1]) for row in TABLE_3_6[:4]) / 4
    assert float(metrics["approx_kl"]) == pytest.approx(expected_kl, abs=1e-12)
    assert all(value.dim() == 0 and not value.requires_grad for value in metrics.values())


def test_asymmetric_clip_range():
    logp = torch.log(torch.tensor([[1.5]]))
    loss, _ = policy_loss(
        logp, torch.zeros_like(logp), torch.ones(1, 1), torch.ones(1, 1), clip_ratio_high=0.28
    )
    assert float(loss) == pytest.approx(-1.28, abs=1e-6)


def test_huge_log_ratio_stays_finite():
    logp = torch.tensor([[0.0, 0.0]], requires_grad=True)
    old_logp = torch.tensor([[-1000.0, 1000.0]])
    loss, _ = policy_loss(logp, old_logp, torch.tensor([[-1.0, 1.0]]), torch.ones(1, 2))
    loss.backward()
    assert torch.isfinite(loss) and torch.all(torch.isfinite(logp.grad))
    # Token 1: the ratio is capped at e^20 and the dual clip bounds its loss at 3; token 2: rho ~ e^-20.
    assert loss.item() == pytest.approx(3.0 / 2, abs=1e-6)


def test_dual_clip_constant_must_exceed_one():
    logp = torch.zeros(1, 1)
    with pytest.raises(ValueError, match="clip_ratio_c"):
        policy_loss(logp, logp, logp, torch.ones(1, 1), clip_ratio_c=1.0)


@pytest.mark.parametrize("advantage", [1.0, -1.0])
def test_gradient_step_moves_logp_with_the_advantage(advantage):
    torch.manual_seed(0)
    logits = torch.randn(1, 3, 7, requires_grad=True)
    targets = torch.tensor([[2, 5, 1]])
    mask = torch.tensor([[0, 1, 0]])
    old_logp = token_logprobs(logits, targets).detach()
    advantages = torch.full((1, 3), advantage)

    loss, _ = policy_loss(token_logprobs(logits, targets), old_logp, advantages, mask)
    loss.backward()
    with torch.no_grad():
        new_logp = token_logprobs(logits - 0.1 * logits.grad, targets)
    change = float(new_logp[0, 1] - old_logp[0, 1])
    assert change * advantage > 0
    assert logits.grad[0, 0].abs().sum() == 0 and logits.grad[0, 2].abs().sum() == 0


# ---------------------------------------------------------------------------------------------------
# Aggregation (§3.2)
# ---------------------------------------------------------------------------------------------------

VALUES = torch.tensor([[1.0, 2.0, 3.0, 9.0], [4.0, 9.0, 9.0, 9.0], [9.0, 9.0, 9.0, 9.0]])
MASK = torch.tensor([[1, 1, 1, 0], [1, 0, 0, 0], [0, 0, 0, 0]])  # the last row is padding


@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        ("token-mean", (1 + 2 + 3 + 4) / 4),
        ("seq-mean-token-mean", (2 + 4) / 2),
        ("seq-mean-token-sum", (6 + 4) / 2),
    ],
)
def test_aggregation_modes(mode, expected):
    assert float(aggregate(VALUES, MASK, mode)) == pytest.approx(expected)


@pytest.mark.parametrize("mode", AGG_MODES)
def test_masked_garbage_does_not_leak(mode):
    poisoned = VALUES.clone()
    poisoned[MASK == 0] = float("nan")
    poisoned[2, 0] = float("inf")
    assert float(aggregate(poisoned, MASK, mode)) == float(aggregate(VALUES, MASK, mode))


def test_unknown_aggregation_lists_valid_modes():
    with pytest.raises(ValueError, match="'sum'") as error:
        aggregate(VALUES, MASK, "sum")
    assert "token-mean, seq-mean-token-mean, seq-mean-token-sum" in str(error.value)


@pytest.mark.parametrize("mode", AGG_MODES)
def test_empty_mask_gives_zero_loss_and_finite_gradient(mode):
    logp = torch.randn(2, 5, requires_grad=True)
    mask = torch.zeros(2, 5)
    loss, metrics = policy_loss(logp, logp.detach() - 0.1, torch.randn(2, 5), mask, agg=mode)
    loss.backward()
    assert loss.item() == 0.0
    assert torch.all(logp.grad == 0)
    assert all(float(value) == 0.0 for value in metrics.values())
    assert sft_loss(logp, mask, mode).item() == 0.0


# ---------------------------------------------------------------------------------------------------
# KL to a reference (§3.3)
# ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "expected"),
    [
        ("kl", 0.5),
        ("abs", 0.5),
        ("mse", 0.125),
        ("low_var_kl", 0.106531),
        ("k1", 0.5),
        ("k2", 0.125),
        ("k3", 0.106531),
    ],
)
def test_kl_example(kind, expected):
    kl = kl_penalty(
        torch.tensor([-1.0], dtype=torch.float64), torch.tensor([-1.5], dtype=torch.float64), kind
    )
    assert float(kl) == pytest.approx(expected, abs=1.1e-6)


def test_low_var_kl_is_clipped_and_finite():
    kl = kl_penalty(torch.tensor([-100.0, 0.0]), torch.tensor([0.0, -100.0]), "low_var_kl")
    assert kl.tolist() == [10.0, 10.0]


@pytest.mark.parametrize("kind", KL_KINDS)
def test_kl_is_zero_at_the_reference(kind):
    logp = torch.tensor([-0.3, -2.0])
    assert torch.all(kl_penalty(logp, logp.clone(), kind) == 0)


def test_unknown_kl_lists_valid_kinds():
    with pytest.raises(ValueError, match="kl, abs, mse, low_var_kl"):
        kl_penalty(torch.zeros(1), torch.zeros(1), "js")


# ---------------------------------------------------------------------------------------------------
# Log-probabilities and entropy (§1.4, §3.4)
# ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_token_logprobs_match_log_softmax(temperature):
    torch.manual_seed(0)
    logits, targets = torch.randn(2, 6, 11), torch.randint(0, 11, (2, 6))
    expected = torch.log_softmax(logits / temperature, dim=-1).gather(-1, targets[..., None]).squeeze(-1)
    assert torch.allclose(token_logprobs(logits, targets, temperature), expected, atol=1e-6)


def test_token_entropy_matches_definition():
    torch.manual_seed(0)
    logits = torch.randn(2, 6, 11) * 3
    logp = torch.log_softmax(logits / 0.5, dim=-1)
    expected = -(logp.exp() * logp).sum(-1)
    assert torch.allclose(token_entropy(logits, 0.5), expected, atol=1e-5)


def test_chunking_and_bf16_give_float32_results(monkeypatch):
    monkeypatch.setattr(loss_module, "_ROWS_PER_CHUNK", 4)
    torch.manual_seed(0)
    logits, targets = torch.randn(3, 5, 13), torch.randint(0, 13, (3, 5))
    expected = torch.log_softmax(logits.bfloat16().float(), dim=-1).gather(-1, targets[..., None]).squeeze(-1)
    logp = token_logprobs(logits.bfloat16(), targets)
    assert logp.dtype == torch.float32 and logp.shape == (3, 5)
    assert torch.allclose(logp, expected, atol=1e-6)
    assert token_entropy(logits.bfloat16()).dtype == torch.float32


def _plain_head_scores(hidden, weight, bias, targets, temperature):
    """The oracle: the whole [N, V] logits, log_softmax, gather; entropy by its definition."""
    logits = F.linear(hidden.double(), weight.double(), None if bias is None else bias.double()) / temperature
    log_probs = torch.log_softmax(logits, dim=-1)
    return log_probs.gather(-1, targets[:, None]).squeeze(-1), -(log_probs.exp() * log_probs).sum(-1)


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.detach().double() - b.detach().double()).norm() / b.detach().double().norm())


@pytest.mark.parametrize("chunk_tokens", [1, 7, 4096])
@pytest.mark.parametrize("with_bias", [False, True])
def test_linear_token_logprobs_match_full_logits_values_and_gradients(chunk_tokens, with_bias):
    torch.manual_seed(0)
    n, width, vocab, temperature = 23, 16, 97, 0.7
    hidden = torch.randn(n, width, requires_grad=True)
    weight = (torch.randn(vocab, width) * 0.5).requires_grad_()
    bias = torch.randn(vocab, requires_grad=True) if with_bias else None
    targets = torch.randint(0, vocab, (n,))
    coef_logp, coef_entropy = torch.randn(n), torch.randn(n)  # an arbitrary upstream gradient for each output

    logp, entropy = linear_token_logprobs(hidden, weight, targets, temperature, True, chunk_tokens, bias)
    assert logp.dtype == entropy.dtype == torch.float32 and logp.shape == entropy.shape == (n,)
    leaves = [hidden, weight] + ([bias] if with_bias else [])
    grads = torch.autograd.grad((coef_logp * logp).sum() + (coef_entropy * entropy).sum(), leaves)

    ref_logp, ref_entropy = _plain_head_scores(hidden, weight, bias, targets, temperature)
    ref_grads = torch.autograd.grad((coef_logp * ref_logp).sum() + (coef_entropy * ref_entropy).sum(), leaves)
    assert _rel(logp, ref_logp) < 1e-5 and _rel(entropy, ref_entropy) < 1e-5
    for grad, ref in zip(grads, ref_grads, strict=True):
        assert _rel(grad, ref) < 1e-5


def test_linear_token_logprobs_without_entropy_and_without_autograd():
    torch.manual_seed(1)
    hidden, weight, targets = torch.randn(9, 8), torch.randn(31, 8), torch.randint(0, 31, (9,))
    with torch.no_grad():
        logp, entropy = linear_token_logprobs(hidden, weight, targets, chunk_tokens=4)
    assert entropy is None and not logp.requires_grad
    assert _rel(logp, _plain_head_scores(hidden, weight, None, targets, 1.0)[0]) < 1e-6
    # No scored position: an empty result that is still on the graph of the weight (an empty micro-batch's
    # backward must run).
    empty, _ = linear_token_logprobs(torch.zeros(0, 8), weight.requires_grad_(), targets[:0])
    assert empty.shape == (0,) and empty.requires_grad
    with pytest.raises(ValueError, match="chunk_tokens"):
        linear_token_logprobs(hidden, weight, targets, chunk_tokens=0)


def test_empty_batch_and_bad_temperature():
    assert token_logprobs(torch.zeros(0, 4, 7), torch.zeros(0, 4, dtype=torch.long)).shape == (0, 4)
    with pytest.raises(ValueError, match="temperature"):
        token_logprobs(torch.zeros(1, 1, 3), torch.zeros(1, 1, dtype=torch.long), temperature=0.0)


# ---------------------------------------------------------------------------------------------------
# SFT loss (Appendix A)
# ---------------------------------------------------------------------------------------------------


def test_sft_loss_is_cross_entropy_on_assistant_tokens():
    torch.manual_seed(0)
    logits = torch.randn(2, 7, 17, requires_grad=True)
    targets = torch.randint(0, 17, (2, 7))
    mask = torch.tensor([[0, 0, 1, 1, 1, 0, 0], [0, 1, 1, 0, 1, 1, 0]])

    loss = sft_loss(token_logprobs(logits, targets), mask)
    (grad,) = torch.autograd.grad(loss, logits)
    reference = F.cross_entropy(logits[mask == 1], targets[mask == 1])
    (reference_grad,) = torch.autograd.grad(reference, logits)
    assert loss.item() == pytest.approx(reference.item(), abs=1e-6)
    assert torch.allclose(grad, reference_grad, atol=1e-7)
