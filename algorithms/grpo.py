"""Multi-turn GRPO advantages, the UserRL estimator (docs/spec/ALGORITHMS.md §2).

Pipeline, one function per step:

1. ``trajectory_score``  turn rewards -> one score s_b per trajectory          (§2.2)
2. ``group_normalize``   scores -> z_b, baseline and scale from the group      (§2.4)
3. ``turn_credits``      turn rewards -> a weight c_{b,k} per turn            (§2.3)
4. ``broadcast_advantages``  spread z_b over sampled tokens in proportion to c (§2.5)

``grpo_multiturn_advantages`` chains them and adds the group statistics of 3.7.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch

from .settings import TRAJECTORY_SCORES, TURN_CREDITS, GRPOConfig, check_name

# Below this |S_b| a trajectory has no credited tokens (§2.5); exact zeros are the common case.
_ZERO_CREDIT_SUM = 1e-12


def trajectory_score(
    rewards: Sequence[float],
    method: str = "mean",
    gamma: float = 0.8,
    mean_score_round: int | None = 4,
) -> float:
    """Score one trajectory from its turn rewards: mean (rounded), sum, or discounted sum (r2g)."""
    check_name("trajectory score", method, TRAJECTORY_SCORES)
    if method == "mean":
        if len(rewards) == 0:
            return 0.0
        # The original's round(sum(r) / K, 4), summed as its Python (3.12) sums: see _python_sum.
        score = _python_sum(rewards) / len(rewards)
        # Rounded as in the original, so ties within a group (and hence zero-signal groups) match UserRL.
        return round(score, mean_score_round) if mean_score_round is not None else score
    if method == "sum":
        return _python_sum(rewards)
    # The original's recursion, last turn first: s = r_k + gamma * s (the same float operations, so the
    # same bits, which matters for exact ties within a group).
    score = 0.0
    for reward in reversed(rewards):
        score = float(reward) + gamma * score
    return score


def turn_credits(rewards: Sequence[float], method: str = "equalized", gamma: float = 0.8) -> list[float]:
    """Credit of each turn: 1 (equalized), reward-to-go (r2g), or 2.3's exponential map rounded to 4 places (em)."""
    check_name("turn credit", method, TURN_CREDITS)
    if method == "equalized":
        return [1.0] * len(rewards)
    if method == "r2g":
        credits = [0.0] * len(rewards)
        to_go = 0.0
        for k in reversed(range(len(rewards))):
            to_go = rewards[k] + gamma * to_go
            credits[k] = to_go
        return credits
    return [round(0.5 + 0.5 * (1.0 - math.exp(-2.0 * r)) / (1.0 - math.exp(-2.0)), 4) for r in rewards]


def group_moments(scores: Sequence[float], group_ids: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """Per-trajectory group mean and unbiased std (§2.4); a singleton group gets mu = 0, sigma = 1."""
    if len(scores) != len(group_ids):
        raise ValueError(f"got {len(scores)} scores but {len(group_ids)} group ids")
    scores = np.asarray(scores, dtype=np.float64)
    mu, sigma = np.zeros_like(scores), np.ones_like(scores)
    for members in _group_members(group_ids).values():
        group = scores[members]
        if len(group) == 1:
            continue
        if np.all(group == group[0]):
            # Exact values: a float mean of equal scores can miss them by an ulp, leaving z ~ 1e-11.
            mu[members], sigma[members] = group[0], 0.0
        else:
            mu[members], sigma[members] = group.mean(), group.std(ddof=1)
    return mu, sigma


def group_normalize(
    scores: Sequence[float],
    group_ids: Sequence[str],
    norm_by_std: bool = True,
    eps: float = 1e-6,
) -> np.ndarray:
    """Normalize scores within their group: z = (s - mu) / (sigma + eps), or s - mu without std."""
    mu, sigma = group_moments(scores, group_ids)
    centered = np.asarray(scores, dtype=np.float64) - mu
    return centered / (sigma + eps) if norm_by_std else centered


def token_credits(
    loss_mask: torch.Tensor, turn_ids: torch.Tensor, credits: Sequence[Sequence[float]]
) -> torch.Tensor:
    """Float64 [B, T] credit a = c_{k(t)} * m_t of every token; 0 outside sampled tokens (§2.5)."""
    if loss_mask.shape != turn_ids.shape or loss_mask.dim() != 2:
        raise ValueError(
            f"loss_mask {tuple(loss_mask.shape)} and turn_ids {tuple(turn_ids.shape)} must be equal [B, T]"
        )
    if len(credits) != loss_mask.shape[0]:
        raise ValueError(f"batch has {loss_mask.shape[0]} rows but got {len(credits)} credit lists")

    credit_table = _pad_credits(credits, loss_mask.device)
    num_turns = torch.tensor([len(c) for c in credits], device=loss_mask.device)
    sampled = loss_mask != 0
    turn_ids = turn_ids.long()
    outside = sampled & ((turn_ids < 0) | (turn_ids >= num_turns[:, None]))
    if outside.any():
        row = int(outside.any(dim=1).nonzero()[0])
        raise ValueError(f"row {row} has sampled tokens outside its {len(credits[row])} turns "
                         "(see docs/spec/ALGORITHMS.md §1.5)")
    return torch.gather(credit_table, 1, turn_ids.clamp(0, credit_table.shape[1] - 1)) * sampled


def broadcast_advantages(
    loss_mask: torch.Tensor,
    turn_ids: torch.Tensor,
    credits: Sequence[Sequence[float]],
    z: Sequence[float],
) -> torch.Tensor:
    """Float32 token advantages A = a * z * N / S, so each row's mean over credited tokens is z_b (§2.5)."""
    if len(z) != loss_mask.shape[0]:
        raise ValueError(f"batch has {loss_mask.shape[0]} rows but got {len(z)} z values")
    # float64 until the end so the sixth decimal the spec tests survives.
    a = token_credits(loss_mask, turn_ids, credits)
    credit_sum = a.sum(dim=1, keepdim=True)
    num_credited = (a != 0).sum(dim=1, keepdim=True)
    z = torch.as_tensor(np.asarray(z, dtype=np.float64), device=a.device)[:, None]
    has_credit = credit_sum.abs() > _ZERO_CREDIT_SUM
    scale = torch.where(has_credit, z * num_credited / torch.where(has_credit, credit_sum, 1.0), 0.0)
    return (a * scale).to(torch.float32)


def group_statistics(
    scores: Sequence[float], group_ids: Sequence[str], z: Sequence[float]
) -> dict[str, float]:
    """Fractions of groups without signal, all successful (equal and > 0) and all failed, plus score moments."""
    scores = np.asarray(scores, dtype=np.float64)
    z = np.asarray(z, dtype=np.float64)
    groups = list(_group_members(group_ids).values())
    num_groups = max(len(groups), 1)
    no_signal = all_success = all_failed = 0
    for members in groups:
        group = scores[members]
        all_equal = bool(np.all(group == group[0]))
        # "No signal" means no token of the group can get a non-zero advantage; for groups of two or
        # more that is exactly "all scores equal", and it also covers a singleton scoring 0.
        no_signal += bool(np.all(z[members] == 0))
        all_success += all_equal and bool(group[0] > 0)
        all_failed += bool(np.all(group == 0))
    return {
        "frac_groups_no_signal": no_signal / num_groups,
        "frac_groups_all_success": all_success / num_groups,
        "frac_groups_all_failed": all_failed / num_groups,
        "score_mean": float(scores.mean()) if len(scores) else 0.0,
        "score_std": float(scores.std()) if len(scores) else 0.0,
    }


def groups_with_signal(group_ids: Sequence[str], advantages: Sequence[torch.Tensor]) -> list[int]:
    """Indices (in order) of the trajectories whose group has a non-zero advantage anywhere (DAPO's filter)."""
    if len(group_ids) != len(advantages):
        raise ValueError(f"got {len(group_ids)} group ids but {len(advantages)} advantage rows")
    teaching = {group for group, adv in zip(group_ids, advantages, strict=True) if bool(torch.any(adv != 0))}
    return [index for index, group in enumerate(group_ids) if group in teaching]


def grpo_multiturn_advantages(
    turn_rewards: Sequence[Sequence[float]],
    group_ids: Sequence[str],
    loss_mask: torch.Tensor,
    turn_ids: torch.Tensor,
    config: GRPOConfig,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Token advantages [B, T] (float32) for a batch of trajectories, plus group statistics for logging."""
    scores = [
        trajectory_score(r, config.trajectory_score, config.gamma, config.mean_score_round)
        for r in turn_rewards
    ]
    z = group_normalize(scores, group_ids, config.norm_adv_by_std, config.eps)
    credits = [turn_credits(r, config.turn_credit, config.gamma) for r in turn_rewards]
    advantages = broadcast_advantages(loss_mask, turn_ids, credits, z)
    return advantages, group_statistics(scores, group_ids, z)


def _python_sum(values: Sequence[float]) -> float:
    """``sum(values)`` as CPython >= 3.12 computes it over floats: Neumaier-compensated, not left to right.

    The mean score is ``round(sum(r) / K, 4)`` in the original UserRL, which was run on Python 3.12
    (its README: ``conda create -n userrl python=3.12``). From 3.12 on, builtin ``sum`` compensates
    float rounding (gh-100425); Python 3.11's is a plain left-to-right fold, whose last bit moves the
    4th decimal in about 1% of realistic reward lists (e.g. 16 turns summing to 5.1: 0.3187 here and on
    3.12, 0.3188 on 3.11). Spelled out here so the score is the same whatever Python runs this project
    (>= 3.11). ``math.fsum`` (correctly rounded) agrees on realistic lists but not bit for bit.
    """
    total = compensation = 0.0
    for value in values:
        value = float(value)
        partial = total + value
        if abs(total) >= abs(value):
            compensation += (total - partial) + value
        else:
            compensation += (value - partial) + total
        total = partial
    # CPython's guard: keep the sign of a -0.0 sum and never turn an overflowed sum into NaN.
    if compensation and math.isfinite(compensation):
        total += compensation
    return total


def _group_members(group_ids: Sequence[str]) -> dict[str, list[int]]:
    members: dict[str, list[int]] = {}
    for index, group_id in enumerate(group_ids):
        members.setdefault(group_id, []).append(index)
    return members


def _pad_credits(credits: Sequence[Sequence[float]], device: torch.device) -> torch.Tensor:
    width = max((len(c) for c in credits), default=0)
    table = torch.zeros(len(credits), max(width, 1), dtype=torch.float64, device=device)
    for row, row_credits in enumerate(credits):
        if row_credits:
            table[row, : len(row_credits)] = torch.tensor(row_credits, dtype=torch.float64)
    return table
