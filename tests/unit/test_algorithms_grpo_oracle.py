"""Multi-turn GRPO (docs/spec/ALGORITHMS.md §2.2-§2.5) against an independent oracle on seeded random batches.

The oracle is a plain-Python transcription of the spec's formulas: lists, loops and float64, nothing
from ``userrl.algorithms``. The functions under test are only called; no expectation is built with
them. Every batch comes from ``numpy.random.default_rng(seed)``, so a failure reproduces from its id.
"""

from __future__ import annotations

import math
import sys

import numpy as np
import pytest
import torch

from userrl.algorithms import (
    GRPOConfig,
    broadcast_advantages,
    group_normalize,
    grpo_multiturn_advantages,
    token_credits,
    trajectory_score,
    turn_credits,
)

TOL = 1e-6  # absolute, against the float64 oracle
SCORES = ("mean", "sum", "r2g")
CREDITS = ("equalized", "r2g", "em")
GAMMAS = (0.0, 0.5, 0.8, 0.95, 1.0)
REWARD_VALUES = [k / 10 for k in range(11)]  # 0, 0.1, ..., 1.0, as the gyms give them
SEEDS = range(3)

# 16 turns whose rewards add up to 5.1, so the mean is 0.31875 up to the last bit of the sum.
TIE_REWARDS = [0.9, 0.2, 0.1, 0.0, 0.0, 0.0, 1.0, 0.0, 0.7, 0.0, 0.0, 0.9, 0.0, 0.9, 0.0, 0.4]


# ---------------------------------------------------------------------------------------------------
# The oracle
# ---------------------------------------------------------------------------------------------------


def neumaier_sum(values):
    """CPython >= 3.12's builtin ``sum`` over floats (bltinmodule.c, gh-100425), written out."""
    total, compensation = 0.0, 0.0
    for value in values:
        value = float(value)
        partial = total + value
        if abs(total) >= abs(value):
            compensation += (total - partial) + value
        else:
            compensation += (value - partial) + total
        total = partial
    if compensation != 0.0 and math.isfinite(compensation):
        total += compensation
    return total


def left_to_right_sum(values):
    """Python 3.11's builtin ``sum`` over floats: one rounding per addition."""
    total = 0.0
    for value in values:
        total += value
    return total


# The original UserRL ran on Python 3.12 (its README: conda create -n userrl python=3.12), so its
# sum(r) is the compensated one. On 3.12+ the oracle is the builtin itself.
ORIGINAL_SUM = sum if sys.version_info >= (3, 12) else neumaier_sum


def oracle_score(rewards, method, gamma, ndigits=4):
    if method == "mean":
        if not rewards:
            return 0.0
        mean = ORIGINAL_SUM(rewards) / len(rewards)
        return mean if ndigits is None else round(mean, ndigits)
    if method == "sum":
        return ORIGINAL_SUM(rewards)
    total = 0.0
    for k, reward in enumerate(rewards):
        total += gamma**k * reward
    return total


def original_r2g_score(rewards, gamma):
    """UserRL's compute_turn_credits: the last reward, then s = r + gamma * s going backwards."""
    score = 0.0
    for turn_index, reward in enumerate(reversed(rewards)):
        score = reward if turn_index == 0 else reward + gamma * score
    return score


def oracle_credits(rewards, method, gamma):
    if method == "equalized":
        return [1.0 for _ in rewards]
    if method == "r2g":
        credits = []
        for k in range(len(rewards)):
            to_go = 0.0
            for j in range(k, len(rewards)):
                to_go += gamma ** (j - k) * rewards[j]
            credits.append(to_go)
        return credits
    return [round(0.5 + 0.5 * (1 - math.exp(-2 * r)) / (1 - math.exp(-2)), 4) for r in rewards]


def oracle_groups(group_ids):
    groups = {}
    for index, group_id in enumerate(group_ids):
        groups.setdefault(group_id, []).append(index)
    return list(groups.values())


def oracle_z(scores, group_ids, norm_by_std, eps):
    z = [0.0] * len(scores)
    for members in oracle_groups(group_ids):
        values = [scores[i] for i in members]
        n = len(values)
        if n == 1:
            mu, sigma = 0.0, 1.0
        else:
            mu = sum(values) / n
            sigma = math.sqrt(sum((v - mu) ** 2 for v in values) / (n - 1))
        for i in members:
            z[i] = (scores[i] - mu) / (sigma + eps) if norm_by_std else scores[i] - mu
    return z


def oracle_advantages(mask_rows, turn_rows, credits, z):
    rows = []
    for mask, turns, row_credits, z_b in zip(mask_rows, turn_rows, credits, z, strict=True):
        a = [row_credits[turns[t]] if mask[t] else 0.0 for t in range(len(mask))]
        s = sum(a)
        n = sum(1 for value in a if value != 0)
        rows.append([value * z_b * n / s for value in a] if abs(s) > 1e-12 else [0.0] * len(a))
    return rows


def oracle_group_stats(scores, group_ids, z):
    groups = oracle_groups(group_ids)
    no_signal = sum(all(z[i] == 0 for i in g) for g in groups)
    all_success = sum(all(scores[i] == scores[g[0]] for i in g) and scores[g[0]] > 0 for g in groups)
    all_failed = sum(all(scores[i] == 0 for i in g) for g in groups)
    return {
        "frac_groups_no_signal": no_signal / len(groups),
        "frac_groups_all_success": all_success / len(groups),
        "frac_groups_all_failed": all_failed / len(groups),
    }


# ---------------------------------------------------------------------------------------------------
# Random batches
# ---------------------------------------------------------------------------------------------------


def random_rewards(rng, min_turns=1, max_turns=6):
    """Turn rewards from the gyms' 0.1 grid, half of them 0 (unrewarded turns are the common case)."""
    num_turns = int(rng.integers(min_turns, max_turns + 1))
    return [0.0 if rng.random() < 0.5 else REWARD_VALUES[int(rng.integers(0, 11))] for _ in range(num_turns)]


def random_layout(rng, num_turns):
    """One response: per turn an optional header, 1-5 sampled tokens, then 0-4 tool/user tokens."""
    mask, turns = [], []
    for k in range(num_turns):
        header = int(rng.integers(0, 3)) if k else int(rng.integers(0, 2))
        sampled = int(rng.integers(1, 6))
        tool = int(rng.integers(0, 5))
        mask += [0] * header + [1] * sampled + [0] * tool
        turns += [k] * (header + sampled + tool)
    return mask, turns


def random_batch(rng):
    """Groups of 1, 2, 3 and 8 with random rewards (some copied, so scores tie), an all-failed group with
    different turn counts, and an all-equal group; groups interleaved; right padding (mask 0, turn -1)."""
    rewards, group_ids = [], []
    for g, size in enumerate((1, 2, 3, 8)):
        members = [random_rewards(rng) for _ in range(size)]
        for i in range(1, size):
            if rng.random() < 0.25:  # a repeated outcome: same rewards, its own token layout
                members[i] = list(members[int(rng.integers(0, i))])
        rewards += members
        group_ids += [f"prompt-{g}"] * size
    rewards += [[0.0] * int(rng.integers(1, 7)) for _ in range(4)]
    group_ids += ["all-failed"] * 4
    shared = random_rewards(rng)
    rewards += [list(shared) for _ in range(3)]
    group_ids += ["all-equal"] * 3

    order = rng.permutation(len(rewards))
    rewards = [rewards[i] for i in order]
    group_ids = [group_ids[i] for i in order]
    layouts = [random_layout(rng, len(r)) for r in rewards]
    width = max(len(mask) for mask, _ in layouts) + int(rng.integers(0, 4))
    mask_rows = [mask + [0] * (width - len(mask)) for mask, _ in layouts]
    turn_rows = [turns + [-1] * (width - len(turns)) for _, turns in layouts]
    mask_dtype = (torch.int8, torch.bool, torch.long, torch.float32)[int(rng.integers(0, 4))]
    turn_dtype = (torch.int16, torch.int32, torch.long)[int(rng.integers(0, 3))]
    loss_mask = torch.tensor(mask_rows, dtype=mask_dtype)
    turn_ids = torch.tensor(turn_rows, dtype=turn_dtype)
    return rewards, group_ids, mask_rows, turn_rows, loss_mask, turn_ids


def assert_rows_close(actual: torch.Tensor, expected_rows, what):
    assert actual.shape == (len(expected_rows), len(expected_rows[0])), what
    for b, expected in enumerate(expected_rows):
        got = actual[b].double().tolist()
        worst = max(abs(x - y) for x, y in zip(got, expected, strict=True))
        assert worst <= TOL, f"{what}: row {b} is off by {worst:.3g}\n got      {got}\n expected {expected}"


# ---------------------------------------------------------------------------------------------------
# Scores (§2.2): exact, because a 4th-decimal difference in the mean decides ties within a group
# ---------------------------------------------------------------------------------------------------


def test_rounding_tie_follows_the_original_sum():
    # The exact mean is 0.31875. The original computed round(sum(r) / 16, 4) on Python 3.12, whose
    # compensated sum gives 5.1 and so 0.3187. A left-to-right sum (Python 3.11's) gives
    # 5.1000000000000005 and 0.3188.
    assert neumaier_sum(TIE_REWARDS) == 5.1
    assert left_to_right_sum(TIE_REWARDS) == 5.1000000000000005
    assert round(left_to_right_sum(TIE_REWARDS) / 16, 4) == 0.3188
    assert trajectory_score(TIE_REWARDS, "mean") == 0.3187
    assert trajectory_score(TIE_REWARDS, "sum") == 5.1
    if sys.version_info >= (3, 12):
        assert trajectory_score(TIE_REWARDS, "mean") == round(sum(TIE_REWARDS) / len(TIE_REWARDS), 4)


@pytest.mark.skipif(sys.version_info < (3, 12), reason="builtin sum is compensated from Python 3.12 on")
@pytest.mark.parametrize("seed", SEEDS)
def test_oracle_sum_is_python312_builtin_sum(seed):
    rng = np.random.default_rng(seed)
    for _ in range(2000):
        values = [
            float(v) for v in rng.choice([0.0, 0.1, 0.3, 0.7, 1.0, 1e8, -0.2], int(rng.integers(0, 30)))
        ]
        assert neumaier_sum(values) == sum(values)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("ndigits", [4, 2, None])
def test_mean_score_matches_the_original_exactly(seed, ndigits):
    # Up to 24 turns: 16 turns and more put exact ties (x.xxxx5) at the 4th decimal.
    rng = np.random.default_rng(seed)
    for _ in range(800):
        rewards = random_rewards(rng, 1, 24)
        assert trajectory_score(rewards, "mean", mean_score_round=ndigits) == oracle_score(
            rewards, "mean", 0.8, ndigits
        ), rewards


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("gamma", GAMMAS)
def test_sum_and_r2g_scores_repeat_the_originals_float_operations(seed, gamma):
    rng = np.random.default_rng(seed)
    for _ in range(300):
        rewards = random_rewards(rng, 0, 16)
        assert trajectory_score(rewards, "sum", gamma) == oracle_score(rewards, "sum", gamma), rewards
        assert trajectory_score(rewards, "r2g", gamma) == original_r2g_score(rewards, gamma), rewards
        assert trajectory_score(rewards, "r2g", gamma) == pytest.approx(
            oracle_score(rewards, "r2g", gamma), abs=1e-12
        )


@pytest.mark.parametrize(
    ("gamma", "score", "credits"),
    [
        (0.0, 0.0, [0.0, 0.5, 1.0]),
        (0.5, 0.5, [0.5, 1.0, 1.0]),  # 0.5 * 0.5 + 0.25 * 1.0; credits 0 + 0.5 * 1.0, 0.5 + 0.5 * 1.0, 1.0
        (0.8, 1.04, [1.04, 1.3, 1.0]),
        (0.95, 1.3775, [1.3775, 1.45, 1.0]),  # 0.95 * 0.5 + 0.9025 * 1.0
        (1.0, 1.5, [1.5, 1.5, 1.0]),
    ],
)
def test_gamma_hand_values(gamma, score, credits):
    rewards = [0.0, 0.5, 1.0]
    assert trajectory_score(rewards, "r2g", gamma) == pytest.approx(score, abs=1e-12)
    assert turn_credits(rewards, "r2g", gamma) == pytest.approx(credits, abs=1e-12)
    config = GRPOConfig(trajectory_score="r2g", turn_credit="r2g", gamma=gamma)
    assert config.gamma == gamma
    # Alone in its group, the trajectory's z is its score / (1 + eps), spread over credited tokens.
    loss_mask = torch.tensor([[1, 1, 0, 1, 1]])
    turn_ids = torch.tensor([[0, 0, 1, 1, 2]])
    advantages, _ = grpo_multiturn_advantages([rewards], ["solo"], loss_mask, turn_ids, config)
    a = [credits[0], credits[0], 0.0, credits[1], credits[2]]
    n, s = sum(1 for x in a if x), sum(a)
    z = score / (1 + 1e-6)
    expected = [x * z * n / s if s else 0.0 for x in a]
    assert advantages[0].double().tolist() == pytest.approx(expected, abs=TOL)


# ---------------------------------------------------------------------------------------------------
# Credits, normalization and broadcast, one step at a time (§2.3, §2.4, §2.5)
# ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("method", CREDITS)
@pytest.mark.parametrize("gamma", GAMMAS)
def test_turn_credits_match_oracle(seed, method, gamma):
    rng = np.random.default_rng(seed)
    for _ in range(100):
        rewards = random_rewards(rng, 0, 8)
        expected = oracle_credits(rewards, method, gamma)
        assert turn_credits(rewards, method, gamma) == pytest.approx(expected, abs=1e-12), rewards


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("norm_by_std", [True, False])
@pytest.mark.parametrize("eps", [1e-6, 1e-3])
def test_group_normalize_matches_oracle(seed, norm_by_std, eps):
    rng = np.random.default_rng(seed)
    for _ in range(20):
        rewards, group_ids, *_ = random_batch(rng)
        scores = [oracle_score(r, ("mean", "sum", "r2g")[int(rng.integers(0, 3))], 0.8) for r in rewards]
        z = group_normalize(scores, group_ids, norm_by_std, eps)
        assert z.tolist() == pytest.approx(oracle_z(scores, group_ids, norm_by_std, eps), abs=TOL)
        for members in oracle_groups(group_ids):
            if len(members) > 1 and len({scores[i] for i in members}) == 1:
                assert all(z[i] == 0.0 for i in members)  # exactly, not 1e-11 (§2.4)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("method", CREDITS)
def test_token_credits_and_broadcast_match_oracle(seed, method):
    rng = np.random.default_rng(seed)
    for _ in range(20):
        rewards, _, mask_rows, turn_rows, loss_mask, turn_ids = random_batch(rng)
        gamma = float(rng.choice(GAMMAS))
        credits = [oracle_credits(r, method, gamma) for r in rewards]
        z = [float(v) for v in rng.normal(0.0, 1.5, len(rewards))]
        expected_a = [
            [c[turns[t]] if mask[t] else 0.0 for t in range(len(mask))]
            for mask, turns, c in zip(mask_rows, turn_rows, credits, strict=True)
        ]
        a = token_credits(loss_mask, turn_ids, credits)
        assert a.dtype == torch.float64
        assert_rows_close(a, expected_a, "token credits")
        advantages = broadcast_advantages(loss_mask, turn_ids, credits, z)
        assert advantages.dtype == torch.float32
        assert_rows_close(advantages, oracle_advantages(mask_rows, turn_rows, credits, z), "advantages")


# ---------------------------------------------------------------------------------------------------
# The whole estimator, every score x credit x gamma x norm_adv_by_std
# ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("norm_by_std", [True, False])
@pytest.mark.parametrize("gamma", GAMMAS)
@pytest.mark.parametrize("credit", CREDITS)
@pytest.mark.parametrize("score", SCORES)
def test_grpo_multiturn_matches_oracle(seed, norm_by_std, gamma, credit, score):
    rng = np.random.default_rng(seed)
    rewards, group_ids, mask_rows, turn_rows, loss_mask, turn_ids = random_batch(rng)
    config = GRPOConfig(trajectory_score=score, turn_credit=credit, gamma=gamma, norm_adv_by_std=norm_by_std)
    advantages, stats = grpo_multiturn_advantages(rewards, group_ids, loss_mask, turn_ids, config)

    scores = [oracle_score(r, score, gamma) for r in rewards]
    z = oracle_z(scores, group_ids, norm_by_std, 1e-6)
    credits = [oracle_credits(r, credit, gamma) for r in rewards]
    expected = oracle_advantages(mask_rows, turn_rows, credits, z)

    assert advantages.dtype == torch.float32
    assert_rows_close(advantages, expected, f"{score}+{credit}, gamma {gamma}")
    for b, row in enumerate(expected):
        credited = [t for t, value in enumerate(row) if value != 0.0]
        if credited:  # 2.5: the mean over credited tokens is z_b
            assert sum(float(advantages[b, t]) for t in credited) / len(credited) == pytest.approx(
                z[b], abs=TOL
            )
        # 2.6: rewards >= 0 give credits >= 0, so every advantage has the sign of z_b.
        assert all(float(advantages[b, t]) * z[b] >= 0 for t in range(len(row)))
    # A group whose scores are all equal contributes nothing (§2.6), exactly.
    for members in oracle_groups(group_ids):
        if len(members) > 1 and len({scores[i] for i in members}) == 1:
            assert all(torch.all(advantages[i] == 0) for i in members)
    expected_stats = oracle_group_stats(scores, group_ids, [0.0 if abs(v) < 1e-9 else v for v in z])
    for key, value in expected_stats.items():
        assert stats[key] == pytest.approx(value, abs=1e-12), key
