"""An explicit aggregation denominator: micro-batch pieces add up to the aggregate of the whole batch."""

import pytest
import torch

from userrl.algorithms import AGG_MODES, aggregate, policy_loss, sft_loss
from userrl.algorithms.loss import aggregation_count


def _batch():
    gen = torch.Generator().manual_seed(0)
    values = torch.randn(5, 7, generator=gen, dtype=torch.float64)
    mask = torch.zeros(5, 7)
    for row, n in enumerate([7, 2, 0, 4, 1]):  # sequences of different lengths, one without loss tokens
        mask[row, :n] = 1
    return values, mask


@pytest.mark.parametrize("mode", AGG_MODES)
def test_pieces_with_the_global_denominator_sum_to_the_whole(mode):
    values, mask = _batch()
    whole = aggregate(values, mask, mode)
    count = aggregation_count(mask, mode)
    assert count == {"token-mean": 14.0, "seq-mean-token-mean": 4.0, "seq-mean-token-sum": 4.0}[mode]
    for cuts in ([[0], [1], [2], [3], [4]], [[0, 1], [2, 3, 4]], [[0, 1, 2, 3, 4]]):
        pieces = sum(aggregate(values[rows], mask[rows], mode, count) for rows in cuts)
        assert float(pieces) == pytest.approx(float(whole), rel=1e-12)
    # Without the global denominator, cutting changes the result (the bug of issue #14).
    local = sum(aggregate(values[rows], mask[rows], mode) for rows in ([0], [1, 3], [2, 4])) / 3
    assert float(local) != pytest.approx(float(whole), rel=1e-3)


def test_denominator_defaults_to_the_batch_count_and_must_be_positive():
    values, mask = _batch()
    for mode in AGG_MODES:
        assert torch.equal(aggregate(values, mask, mode), aggregate(values, mask, mode, aggregation_count(mask, mode)))
    assert float(aggregate(values, torch.zeros_like(mask), "token-mean", 3.0)) == 0.0
    with pytest.raises(ValueError, match="denominator"):
        aggregate(values, mask, "token-mean", 0.0)


def test_policy_and_sft_losses_pass_the_denominator_through():
    values, mask = _batch()
    logp = values.clone().requires_grad_()
    adv = torch.randn(values.shape, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    loss, _ = policy_loss(logp, logp.detach(), adv, mask, denominator=28.0)
    assert float(loss) == pytest.approx(float(aggregate(-adv, mask, "token-mean")) / 2)
    assert float(sft_loss(values, mask, "seq-mean-token-sum", 8.0)) == pytest.approx(
        float(aggregate(-values, mask, "seq-mean-token-sum")) / 2)
