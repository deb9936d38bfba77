"""RAGEN's GAE estimators, whitening, critic loss and group filter (docs/spec/ALGORITHMS.md §4.1-§4.9).

Expectations come from the spec's worked numbers (§4.6, §4.8), from hand computations written out in the
tests, or from the plain-Python oracles below: lists, loops and float64, transcribed from the spec's
pseudo-code without anything from ``userrl.algorithms``.
"""

from __future__ import annotations

import bisect
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from userrl.algorithms import (
    ADV_ESTIMATORS,
    GAE_ESTIMATORS,
    MT_GAE_RETURNS,
    GAEConfig,
    bilevel_gae,
    explained_variance,
    gae_advantages,
    high_variance_groups,
    multiturn_gae,
    value_loss,
    value_loss_mask,
    vanilla_gae,
    weighted_bilevel_gae,
    whiten,
)

TABLE_TOL = 1e-5  # the spec prints six decimals
ORACLE_TOL = 1e-9  # float64 inputs against the float64 oracle


# ---------------------------------------------------------------------------------------------------
# The oracle: the spec's pseudo-code on lists of floats
# ---------------------------------------------------------------------------------------------------


def oracle_vanilla(r, v, gamma, lam):
    """4.2."""
    T = len(r)
    V = list(v) + [0.0]  # V_T := 0
    A = [0.0] * (T + 1)  # A_T := 0
    for t in range(T - 1, -1, -1):
        delta = r[t] + gamma * V[t + 1] - V[t]
        A[t] = delta + gamma * lam * A[t + 1]
    return A[:T], [A[t] + V[t] for t in range(T)]


def oracle_multiturn(r, v, m, gamma, lam, returns="adv_plus_value"):
    """4.3, masked form, both return options."""
    T = len(r)
    M = list(m) + [1]  # m_T := 1
    V = list(v) + [0.0]  # V_T := 0
    A = [0.0] * (T + 1)  # A_T := 0
    g = [gamma if m[t] == 1 else 1.0 for t in range(T)]
    lo = [lam if m[t] == 1 else 1.0 for t in range(T)]
    v_skip = 0.0
    for t in range(T - 1, -1, -1):
        v_skip = (1 - M[t + 1]) * v_skip + M[t + 1] * V[t + 1]
        delta = m[t] * (r[t] + g[t] * v_skip - V[t])
        A[t] = delta + g[t] * lo[t] * A[t + 1]
    if returns == "adv_plus_value":
        R = [A[t] + V[t] for t in range(T)]
    else:
        G = [0.0] * (T + 1)  # G_T := 0
        for t in range(T - 1, -1, -1):
            G[t] = g[t] * G[t + 1] + m[t] * r[t]
        R = G[:T]
    return A[:T], R


def oracle_index_form(r, v, m, gamma, lam):
    """4.3, index form: the GAE recurrence over the agent positions only; 0 elsewhere."""
    P = [t for t in range(len(m)) if m[t] == 1]
    A = [0.0] * len(m)
    a_next = 0.0
    for i in range(len(P) - 1, -1, -1):
        v_next = v[P[i + 1]] if i + 1 < len(P) else 0.0
        a_next = r[P[i]] + gamma * v_next - v[P[i]] + gamma * lam * a_next
        A[P[i]] = a_next
    return A


def oracle_bilevel(r, v, m, gamma, lam, gamma_H, lam_H):
    """4.4; R_k sums r over [s_k, s_{k+1}) (s_N = T)."""
    T = len(r)
    S = [t for t in range(T) if m[t] == 1 and (t == 0 or m[t - 1] == 0)]
    N = len(S)
    bounds = S + [T]
    turn_reward = [sum(r[bounds[k] : bounds[k + 1]]) for k in range(N)]
    V_S = [v[s] for s in S] + [0.0]  # V_{s_N} := 0
    A_H = [0.0] * (N + 1)  # A_H[N] := 0
    for k in range(N - 1, -1, -1):
        delta_H = turn_reward[k] + gamma_H * V_S[k + 1] - V_S[k]
        A_H[k] = delta_H + gamma_H * lam_H * A_H[k + 1]

    P = [t for t in range(T) if m[t] == 1]
    K = len(P)
    A, R = [0.0] * T, [0.0] * T
    run = 0.0
    for i in range(K - 1, -1, -1):
        p = P[i]
        k = bisect.bisect_right(S, p) - 1  # the turn of p
        if i == K - 1:
            run = 0.0
            delta = turn_reward[k] - v[p]
        elif P[i + 1] in S:
            run = A_H[k + 1]
            delta = turn_reward[k] + gamma * v[P[i + 1]] - v[p]
        else:
            delta = gamma * v[P[i + 1]] - v[p]
        A[p] = delta + gamma * lam * run
        run = A[p]
        R[p] = A[p] + v[p]
    return A, R, A_H[:N]


def oracle_weighted(r, v, m, gamma, lam, gamma_H, lam_H, w):
    """4.5."""
    A, R, A_H = oracle_bilevel(r, v, m, gamma, lam, gamma_H, lam_H)
    S = [t for t in range(len(m)) if m[t] == 1 and (t == 0 or m[t - 1] == 0)]
    for p in range(len(m)):
        if m[p] == 1:
            k = bisect.bisect_right(S, p) - 1
            A[p] = (1 - w) * A[p] + w * A_H[k]
    return A, R


def ragen_final_form(outcome, v, m, gamma, lam, gamma_H, lam_H):
    """RAGEN's bi-level GAE for one outcome reward, written after its loops (not after the spec's §4.4).

    RAGEN finds turn starts as 0 -> 1 transitions of the mask from position 1 on, reads the outcome from
    the row's end, uses no turn reward before the last turn, and looks up the turn-level advantage by
    the next token's position. Trajectories here start with a mask-0 part, where the two starts agree.
    """
    T = len(m)
    starts = [t for t in range(1, T) if m[t] == 1 and m[t - 1] == 0]
    turn_adv = {}
    last = 0.0
    for i in range(len(starts) - 1, -1, -1):
        pos = starts[i]
        if i < len(starts) - 1:
            delta = 0 + gamma_H * v[starts[i + 1]] - v[pos]
        else:
            delta = outcome + gamma_H * 0.0 - v[pos]
        last = delta + gamma_H * lam_H * last
        turn_adv[pos] = last

    A, R = [0.0] * T, [0.0] * T
    valid = [t for t in range(T) if m[t] == 1]
    last = 0.0
    for i in range(len(valid) - 1, -1, -1):
        pos = valid[i]
        if pos >= starts[-1]:
            if i != len(valid) - 1:
                delta = 0 + gamma * v[valid[i + 1]] - v[pos]
            else:
                last = 0.0
                delta = outcome + gamma * 0.0 - v[pos]
        else:
            nxt = valid[i + 1]
            if nxt in turn_adv:
                last = turn_adv[nxt]
            delta = 0 + gamma * v[nxt] - v[pos]
        last = delta + gamma * lam * last
        A[pos] = last
        R[pos] = last + v[pos]
    return A, R


def oracle_whiten(a, m, eps=1e-8):
    """4.6; mask-0 positions unchanged, only centred below two mask-1 positions."""
    sel = [a[i] for i in range(len(a)) if m[i]]
    n = len(sel)
    if n == 0:
        return list(a)
    mu = sum(sel) / n
    scale = math.sqrt(sum((x - mu) ** 2 for x in sel) / (n - 1) + eps) if n >= 2 else 1.0
    return [(a[i] - mu) / scale if m[i] else a[i] for i in range(len(a))]


def oracle_row(r, v, m, config):
    """One row of the batch dispatch: the trajectory starts at the first mask-1 position."""
    T = len(m)
    if 1 not in m:
        return [0.0] * T, [0.0] * T
    f = m.index(1)
    r, v, m = r[f:], v[f:], m[f:]
    c = config
    if c.estimator == "gae":
        A, R = oracle_vanilla(r, v, c.gamma, c.lam)
    elif c.estimator == "gae_multiturn":
        A, R = oracle_multiturn(r, v, m, c.gamma, c.lam, c.mt_gae_returns)
    elif c.estimator == "gae_bilevel":
        A, R, _ = oracle_bilevel(r, v, m, c.gamma, c.lam, c.gamma_H, c.lam_H)
    else:
        A, R = oracle_weighted(r, v, m, c.gamma, c.lam, c.gamma_H, c.lam_H, c.turn_level_weight)
    return [0.0] * f + A, [0.0] * f + R


def t64(xs):
    return torch.tensor(xs, dtype=torch.float64)


def close(actual, expected, tol):
    torch.testing.assert_close(actual, torch.as_tensor(expected, dtype=actual.dtype), atol=tol, rtol=tol)


# ---------------------------------------------------------------------------------------------------
# 4.8: the worked example
# ---------------------------------------------------------------------------------------------------

GAMMA, LAM, GAMMA_H, LAM_H = 0.9, 0.8, 0.95, 0.9
MASK = [0, 1, 1, 0, 0, 1, 1]
VALUES = [0.1, 0.5, 0.6, 0.2, 0.3, 0.7, 0.8]
TURN_REWARDS = [0, 0, 0.5, 0, 0, 0, 1.0]
OUTCOME_REWARDS = [0, 0, 0, 0, 0, 0, 1.0]

# rewards -> estimator -> (A, R); A_H of the bi-level rows separately.
TABLES = {
    "turn": {
        "vanilla": (
            [0.566816, 0.301133, 0.362685, 0.392618, 0.448080, 0.164, 0.2],
            [0.666816, 0.801133, 0.962685, 0.592618, 0.748080, 0.864, 1.0],
        ),
        "adv_plus_value": (
            [0.506618, 0.506618, 0.648080, 0.164, 0.164, 0.164, 0.2],
            [0.606618, 1.006618, 1.248080, 0.364, 0.464, 0.864, 1.0],
        ),
        "cumulative": (
            [0.506618, 0.506618, 0.648080, 0.164, 0.164, 0.164, 0.2],
            [1.179, 1.179, 1.31, 0.9, 0.9, 0.9, 1.0],
        ),
        "bilevel": (
            [0, 0.57712, 0.746, 0, 0, 0.164, 0.2],
            [0, 1.07712, 1.346, 0, 0, 0.864, 1.0],
        ),
        "weighted": (
            [0, 0.611558, 0.76355, 0, 0, 0.1776, 0.21],
            [0, 1.07712, 1.346, 0, 0, 0.864, 1.0],
        ),
    },
    "outcome": {
        "vanilla": (
            [0.307616, -0.058867, -0.137315, 0.392618, 0.448080, 0.164, 0.2],
            [0.407616, 0.441133, 0.462685, 0.592618, 0.748080, 0.864, 1.0],
        ),
        "adv_plus_value": (
            [0.146618, 0.146618, 0.148080, 0.164, 0.164, 0.164, 0.2],
            [0.246618, 0.646618, 0.748080, 0.364, 0.464, 0.864, 1.0],
        ),
        "cumulative": (
            [0.146618, 0.146618, 0.148080, 0.164, 0.164, 0.164, 0.2],
            [0.729, 0.729, 0.81, 0.9, 0.9, 0.9, 1.0],
        ),
        "bilevel": (
            [0, 0.21712, 0.246, 0, 0, 0.164, 0.2],
            [0, 0.71712, 0.846, 0, 0, 0.864, 1.0],
        ),
        "weighted": (
            [0, 0.237558, 0.26355, 0, 0, 0.1776, 0.21],
            [0, 0.71712, 0.846, 0, 0, 0.864, 1.0],
        ),
    },
}
A_H_TABLE = {"turn": [0.9215, 0.3], "outcome": [0.4215, 0.3]}
REWARDS = {"turn": TURN_REWARDS, "outcome": OUTCOME_REWARDS}


def run_estimator(name, rewards, values, mask):
    if name == "vanilla":
        return vanilla_gae(rewards, values, mask, GAMMA, LAM)
    if name in MT_GAE_RETURNS:
        return multiturn_gae(rewards, values, mask, GAMMA, LAM, returns=name)
    if name == "bilevel":
        return bilevel_gae(rewards, values, mask, GAMMA, LAM, GAMMA_H, LAM_H)[:2]
    return weighted_bilevel_gae(rewards, values, mask, GAMMA, LAM, GAMMA_H, LAM_H, 0.1)


@pytest.mark.parametrize("case", ["turn", "outcome"])
@pytest.mark.parametrize("name", ["vanilla", "adv_plus_value", "cumulative", "bilevel", "weighted"])
def test_worked_example_tables(case, name):
    rewards = torch.tensor(REWARDS[case], dtype=torch.float32)
    values = torch.tensor(VALUES, dtype=torch.float32)
    mask = torch.tensor(MASK, dtype=torch.int8)
    advantages, returns = run_estimator(name, rewards, values, mask)
    expected_a, expected_r = TABLES[case][name]
    assert advantages.dtype == returns.dtype == torch.float32
    close(advantages, expected_a, TABLE_TOL)
    close(returns, expected_r, TABLE_TOL)


@pytest.mark.parametrize("case", ["turn", "outcome"])
def test_worked_example_turn_level_advantages(case):
    _, _, adv_turn = bilevel_gae(
        t64(REWARDS[case]), t64(VALUES), torch.tensor(MASK), GAMMA, LAM, GAMMA_H, LAM_H
    )
    close(adv_turn, A_H_TABLE[case], TABLE_TOL)


def test_worked_example_hand_check_of_bilevel_token_two_and_one():
    # 4.8: A_2 = 0.53 + 0.72 * A_H[1] = 0.746; A_1 = 0.04 + 0.72 * 0.746 = 0.57712.
    advantages, _, adv_turn = bilevel_gae(
        t64(TURN_REWARDS), t64(VALUES), torch.tensor(MASK), GAMMA, LAM, GAMMA_H, LAM_H
    )
    assert float(adv_turn[1]) == pytest.approx(1.0 - 0.7)
    assert float(advantages[2]) == pytest.approx(0.5 + 0.9 * 0.7 - 0.6 + 0.72 * 0.3)
    assert float(advantages[1]) == pytest.approx(0.9 * 0.6 - 0.5 + 0.72 * 0.746)


def test_worked_example_through_the_batch_dispatch_keeps_the_prompt_at_zero():
    # Position 0 (mask 0) comes before the first agent token, so the dispatch treats it as prompt.
    mask = torch.tensor(MASK)
    config = GAEConfig("gae_multiturn", gamma=GAMMA, lam=LAM)
    (advantages,), (returns,) = gae_advantages(
        [t64(TURN_REWARDS)], [t64(VALUES)], [mask], config, whiten_advantages=False
    )
    close(advantages, [0] + TABLES["turn"]["adv_plus_value"][0][1:], TABLE_TOL)
    close(returns, [0] + TABLES["turn"]["adv_plus_value"][1][1:], TABLE_TOL)


# ---------------------------------------------------------------------------------------------------
# 4.6 whitening
# ---------------------------------------------------------------------------------------------------


def test_whiten_spec_example():
    out = whiten(torch.tensor([1.0, 2.0, 3.0]), torch.tensor([1, 1, 1]))
    close(out, [-1.0, 0.0, 1.0], 1e-6)


def test_whiten_uses_only_mask_positions_and_leaves_the_others():
    a = torch.tensor([[5.0, 1.0, 2.0], [3.0, -7.0, 0.0]])
    m = torch.tensor([[0, 1, 1], [1, 0, 0]])
    # Over 1, 2, 3: mean 2, unbiased var 1.
    close(whiten(a, m), [[5.0, -1.0, 0.0], [1.0, -7.0, 0.0]], 1e-6)


def test_whiten_centres_only_below_two_positions():
    close(whiten(torch.tensor([4.0, 9.0]), torch.tensor([0, 1])), [4.0, 0.0], 0)
    close(whiten(torch.tensor([4.0, 9.0]), torch.tensor([0, 0])), [4.0, 9.0], 0)
    with pytest.raises(ValueError, match="same shape"):
        whiten(torch.zeros(3), torch.ones(4))


# ---------------------------------------------------------------------------------------------------
# 4.7 critic loss
# ---------------------------------------------------------------------------------------------------

CRITIC_MASK = torch.tensor([0, 1, 1, 0])
V_NEW = torch.tensor([0.9, 1.2, 0.55, 0.1], dtype=torch.float64)
V_OLD = torch.tensor([0.2, 0.5, 0.0, 0.3], dtype=torch.float64)
CRITIC_RETURNS = torch.tensor([0.0, 0.3, 1.0, 0.0], dtype=torch.float64)


def test_value_loss_spec_example():
    loss_obs, stats_obs = value_loss(V_NEW, V_OLD, CRITIC_RETURNS, value_loss_mask(CRITIC_MASK, True), 0.5)
    loss_all, stats_all = value_loss(V_NEW, V_OLD, CRITIC_RETURNS, value_loss_mask(CRITIC_MASK, False), 0.5)
    assert float(loss_obs) == pytest.approx(0.265, abs=1e-6)
    assert float(loss_all) == pytest.approx(0.178333, abs=1e-6)
    # Only t = 2 has the clipped term strictly larger (0.25 > 0.2025).
    assert float(stats_obs["vf_clipfrac"]) == pytest.approx(1 / 2)
    assert float(stats_all["vf_clipfrac"]) == pytest.approx(1 / 3)
    assert float(stats_obs["value_mean"]) == pytest.approx((1.2 + 0.55) / 2)
    assert float(stats_all["value_mean"]) == pytest.approx((1.2 + 0.55 + 0.1) / 3)


@pytest.mark.parametrize(("t", "l_t"), [(0, 0.81), (1, 0.81), (2, 0.25), (3, 0.01)])
def test_value_loss_per_position_terms(t, l_t):
    one_hot = torch.zeros(4)
    one_hot[t] = 1
    loss, _ = value_loss(V_NEW, V_OLD, CRITIC_RETURNS, one_hot, 0.5)
    assert 2 * float(loss) == pytest.approx(l_t, abs=1e-9)


def test_value_loss_global_denominator_splits_exactly_and_padding_is_ignored():
    values = torch.tensor([[0.9, 1.2, 0.55, 0.1], [0.3, -0.2, 0.4, float("inf")]], requires_grad=True)
    old = torch.tensor([[0.2, 0.5, 0.0, 0.3], [0.0, 0.0, 0.0, 0.0]])
    returns = torch.tensor([[0.0, 0.3, 1.0, 0.0], [1.0, 1.0, 1.0, float("nan")]])
    mask = torch.tensor([[0, 1, 1, 1], [1, 1, 1, 0]])
    whole, _ = value_loss(values, old, returns, mask, 0.5)
    # l: row 0 -> 0.81, 0.25, 0.01; row 1 -> (0.3-1)^2, (-0.2-1)^2, (0.4-1)^2 (no clipping within 0.5).
    hand = 0.5 * (0.81 + 0.25 + 0.01 + 0.49 + 1.44 + 0.36) / 6
    assert whole.item() == pytest.approx(hand, abs=1e-6)
    pieces = [
        value_loss(values[i : i + 1], old[i : i + 1], returns[i : i + 1], mask[i : i + 1], 0.5, 6.0)[0]
        for i in range(2)
    ]
    assert sum(pieces).item() == pytest.approx(whole.item(), abs=1e-7)
    whole.backward()
    assert torch.isfinite(values.grad).all()
    assert float(values.grad[1, 3]) == 0.0 and float(values.grad[0, 0]) == 0.0
    with pytest.raises(ValueError, match="denominator"):
        value_loss(values, old, returns, mask, 0.5, 0.0)


def test_value_loss_empty_mask_is_zero_not_nan():
    loss, stats = value_loss(V_NEW, V_OLD, CRITIC_RETURNS, torch.zeros(4), 0.5)
    assert float(loss) == 0.0 and float(stats["vf_clipfrac"]) == 0.0 and float(stats["value_mean"]) == 0.0


def test_value_loss_mask_batched_with_padding():
    loss_mask = torch.tensor([[0, 0, 1, 1, 0, 1, 0, 0], [0, 1, 0, 0, 0, 0, 0, 0], [0, 0, 0, 0, 0, 0, 0, 0]])
    valid = torch.tensor([[1, 1, 1, 1, 1, 1, 1, 0], [1, 1, 1, 1, 0, 0, 0, 0], [1, 1, 0, 0, 0, 0, 0, 0]])
    assert value_loss_mask(loss_mask, True).tolist() == loss_mask.tolist()
    assert value_loss_mask(loss_mask, False).tolist() == [
        [0, 0, 1, 1, 1, 1, 1, 1],
        [0, 1, 1, 1, 1, 1, 1, 1],
        [0, 0, 0, 0, 0, 0, 0, 0],
    ]
    assert value_loss_mask(loss_mask, False, valid).tolist() == [
        [0, 0, 1, 1, 1, 1, 1, 0],
        [0, 1, 1, 1, 0, 0, 0, 0],
        [0, 0, 0, 0, 0, 0, 0, 0],
    ]
    assert value_loss_mask(loss_mask, True, valid).tolist() == loss_mask.tolist()
    assert value_loss_mask(CRITIC_MASK, False).tolist() == [0, 1, 1, 1]
    assert value_loss_mask(loss_mask.float(), False).dtype == torch.float32
    with pytest.raises(ValueError, match="shape"):
        value_loss_mask(loss_mask, False, valid[:, :4])


def test_explained_variance():
    mask = torch.tensor([1, 1, 1, 0])
    returns = torch.tensor([1.0, 2.0, 3.0, 100.0])
    assert explained_variance(returns.clone(), returns, mask) == pytest.approx(1.0)
    # R - V = [1, 0, 1] (population variance 2/9) against Var[R] = 2/3.
    values = torch.tensor([0.0, 2.0, 2.0, -50.0])
    assert explained_variance(values, returns, mask) == pytest.approx(1 - (2 / 9) / (2 / 3))
    assert explained_variance(values, torch.full((4,), 0.1), mask) == 0.0
    assert explained_variance(values, returns, torch.zeros(4)) == 0.0


# ---------------------------------------------------------------------------------------------------
# Property tests against the oracle
# ---------------------------------------------------------------------------------------------------

COEFFICIENTS = st.one_of(st.sampled_from([0.0, 1.0]), st.floats(0.0, 1.0))
REAL = st.floats(-2.0, 2.0, allow_nan=False, allow_infinity=False)


@st.composite
def trajectories(draw, min_prompt=0, reward_modes=("turn", "outcome", "anywhere")):
    """(rewards, values, mask): an optional prompt, 1-6 turns, env segments short or long (none at the end)."""
    mask = [0] * draw(st.integers(min_prompt, 3))
    n_turns = draw(st.integers(1, 6))
    last_tokens = []
    for k in range(n_turns):
        mask += [1] * draw(st.integers(1, 4))
        last_tokens.append(len(mask) - 1)
        shortest = 0 if k == n_turns - 1 else 1  # turns are maximal runs: env between them
        mask += [0] * draw(st.one_of(st.integers(shortest, 3), st.integers(10, 40)))
    T = len(mask)
    values = draw(st.lists(REAL, min_size=T, max_size=T))
    mode = draw(st.sampled_from(reward_modes))
    rewards = [0.0] * T
    if mode == "turn":  # 1.6 turn mode
        for p in last_tokens:
            rewards[p] = draw(REAL)
    elif mode == "outcome":  # 1.6 outcome mode
        rewards[last_tokens[-1]] = draw(REAL)
    else:  # anywhere, env and prompt positions included: tests what each estimator drops
        rewards = draw(st.lists(st.one_of(st.just(0.0), REAL), min_size=T, max_size=T))
    return rewards, values, mask


def as_tensors(traj):
    rewards, values, mask = traj
    return t64(rewards), t64(values), torch.tensor(mask, dtype=torch.int8)


@settings(max_examples=150, deadline=None)
@given(trajectories(), COEFFICIENTS, COEFFICIENTS)
def test_vanilla_matches_oracle(traj, gamma, lam):
    A, R = vanilla_gae(*as_tensors(traj), gamma, lam)
    expected_a, expected_r = oracle_vanilla(traj[0], traj[1], gamma, lam)
    close(A, expected_a, ORACLE_TOL)
    close(R, expected_r, ORACLE_TOL)


@settings(max_examples=150, deadline=None)
@given(trajectories(), COEFFICIENTS, COEFFICIENTS, st.sampled_from(MT_GAE_RETURNS))
def test_multiturn_matches_oracle(traj, gamma, lam, returns):
    A, R = multiturn_gae(*as_tensors(traj), gamma, lam, returns)
    expected_a, expected_r = oracle_multiturn(*traj, gamma, lam, returns)
    close(A, expected_a, ORACLE_TOL)
    close(R, expected_r, ORACLE_TOL)


@settings(max_examples=100, deadline=None)
@given(trajectories(reward_modes=("turn", "outcome")), COEFFICIENTS, COEFFICIENTS)
def test_multiturn_agent_tokens_equal_the_index_form(traj, gamma, lam):
    # 4.3: with rewards on agent tokens, the index form gives the same agent-token advantages.
    A, _ = multiturn_gae(*as_tensors(traj), gamma, lam)
    index_form = oracle_index_form(*traj, gamma, lam)
    mask = traj[2]
    close(
        A[torch.tensor(mask, dtype=torch.bool)],
        [a for a, m in zip(index_form, mask, strict=True) if m],
        ORACLE_TOL,
    )


@settings(max_examples=150, deadline=None)
@given(trajectories(), COEFFICIENTS, COEFFICIENTS, COEFFICIENTS, COEFFICIENTS)
def test_bilevel_matches_oracle(traj, gamma, lam, gamma_H, lam_H):
    A, R, A_H = bilevel_gae(*as_tensors(traj), gamma, lam, gamma_H, lam_H)
    expected_a, expected_r, expected_h = oracle_bilevel(*traj, gamma, lam, gamma_H, lam_H)
    close(A, expected_a, ORACLE_TOL)
    close(R, expected_r, ORACLE_TOL)
    close(A_H, expected_h, ORACLE_TOL)
    env = torch.tensor(traj[2]) == 0
    assert (A[env] == 0).all() and (R[env] == 0).all()


@settings(max_examples=150, deadline=None)
@given(trajectories(), COEFFICIENTS, COEFFICIENTS, COEFFICIENTS, COEFFICIENTS, COEFFICIENTS)
def test_weighted_bilevel_matches_oracle(traj, gamma, lam, gamma_H, lam_H, w):
    A, R = weighted_bilevel_gae(*as_tensors(traj), gamma, lam, gamma_H, lam_H, w)
    expected_a, expected_r = oracle_weighted(*traj, gamma, lam, gamma_H, lam_H, w)
    close(A, expected_a, ORACLE_TOL)
    close(R, expected_r, ORACLE_TOL)


@settings(max_examples=150, deadline=None)
@given(
    trajectories(min_prompt=1, reward_modes=("outcome",)),
    COEFFICIENTS,
    COEFFICIENTS,
    COEFFICIENTS,
    COEFFICIENTS,
)
def test_bilevel_with_outcome_reward_is_ragen_final_form(traj, gamma, lam, gamma_H, lam_H):
    rewards, values, mask = traj
    A, R, _ = bilevel_gae(*as_tensors(traj), gamma, lam, gamma_H, lam_H)
    expected_a, expected_r = ragen_final_form(sum(rewards), values, mask, gamma, lam, gamma_H, lam_H)
    close(A, expected_a, ORACLE_TOL)
    close(R, expected_r, ORACLE_TOL)


@settings(max_examples=100, deadline=None)
@given(trajectories(reward_modes=("outcome",)), st.booleans())
def test_multiturn_undiscounted_outcome_reaches_every_agent_token(traj, zero_critic):
    # 4.3 with gamma = lam = 1 and only the last agent token rewarded: the TD errors telescope, so every
    # agent token gets A_t = outcome - V_t (R_t = A_t + V_t = outcome), the same A for all when V = 0,
    # and the cumulative return is the outcome at every position up to the last agent token.
    rewards, values, mask = traj
    if zero_critic:
        values = [0.0] * len(values)
    outcome = sum(rewards)
    r, v, m = as_tensors((rewards, values, mask))
    A, R = multiturn_gae(r, v, m, 1.0, 1.0)
    _, G = multiturn_gae(r, v, m, 1.0, 1.0, returns="cumulative")
    agent = m == 1
    close(R[agent], [outcome] * int(agent.sum()), ORACLE_TOL)
    if zero_critic:
        close(A[agent], [outcome] * int(agent.sum()), ORACLE_TOL)
    last = max(t for t in range(len(mask)) if mask[t])
    close(G[: last + 1], [outcome] * (last + 1), ORACLE_TOL)
    close(G[last + 1 :], [0.0] * (len(mask) - last - 1), ORACLE_TOL)


@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.one_of(trajectories(), st.integers(1, 5)), min_size=1, max_size=5),
    st.sampled_from(GAE_ESTIMATORS),
    st.sampled_from(MT_GAE_RETURNS),
    COEFFICIENTS,
    COEFFICIENTS,
    COEFFICIENTS,
    st.booleans(),
)
def test_gae_advantages_matches_per_row_oracle_and_batch_whitening(
    rows, estimator, returns, gamma, lam, w, white
):
    # An integer draws a row without agent tokens, of that length.
    rows = [([0.5] * row, [0.3] * row, [0] * row) if isinstance(row, int) else row for row in rows]
    config = GAEConfig(
        estimator, gamma=gamma, lam=lam, gamma_H=lam, lam_H=gamma, turn_level_weight=w, mt_gae_returns=returns
    )
    A, R = gae_advantages(
        [t64(r) for r, _, _ in rows],
        [t64(v) for _, v, _ in rows],
        [torch.tensor(m) for _, _, m in rows],
        config,
        white,
    )
    expected = [oracle_row(r, v, m, config) for r, v, m in rows]
    flat_a = [a for a_row, _ in expected for a in a_row]
    if white:
        flat_a = oracle_whiten(flat_a, [m_t for _, _, m in rows for m_t in m])
    start = 0
    for (_, r_row), (_, _, m), got_a, got_r in zip(expected, rows, A, R, strict=True):
        assert len(got_a) == len(got_r) == len(m)
        close(got_a, flat_a[start : start + len(m)], 1e-8)
        close(got_r, r_row, ORACLE_TOL)  # returns are never whitened
        if 1 in m:
            first = m.index(1)
            assert (got_a[:first] == 0).all() and (got_r[:first] == 0).all()
        else:
            assert (got_a == 0).all() and (got_r == 0).all()
        start += len(m)


def test_gae_advantages_keeps_dtype_and_handles_an_empty_batch():
    rows = [torch.tensor([0.0, 1.0, 0.0]), torch.tensor([0.0, 0.5])]
    masks = [torch.tensor([0, 1, 1]), torch.tensor([1, 1])]
    A, R = gae_advantages(rows, [torch.zeros(3), torch.zeros(2)], masks, GAEConfig())
    assert all(a.dtype == torch.float32 for a in A + R)
    assert gae_advantages([], [], [], GAEConfig()) == ([], [])


# ---------------------------------------------------------------------------------------------------
# Bad input
# ---------------------------------------------------------------------------------------------------


def test_config_names_the_valid_choices():
    assert GAEConfig().estimator == "gae" and ADV_ESTIMATORS[1:] == GAE_ESTIMATORS
    with pytest.raises(ValueError) as bad_estimator:
        GAEConfig(estimator="grpo_multiturn")
    assert all(name in str(bad_estimator.value) for name in GAE_ESTIMATORS)
    with pytest.raises(ValueError) as bad_returns:
        GAEConfig(estimator="gae_multiturn", mt_gae_returns="index")
    assert all(name in str(bad_returns.value) for name in MT_GAE_RETURNS)
    with pytest.raises(ValueError, match="gamma"):
        GAEConfig(gamma=1.5)
    with pytest.raises(ValueError, match="turn_level_weight"):
        GAEConfig(turn_level_weight=-0.1)


@pytest.mark.parametrize(
    "call",
    [
        lambda r, v, m: vanilla_gae(r, v, m, 1.0, 1.0),
        lambda r, v, m: multiturn_gae(r, v, m, 1.0, 1.0),
        lambda r, v, m: bilevel_gae(r, v, m, 1.0, 1.0, 0.95, 0.95),
        lambda r, v, m: weighted_bilevel_gae(r, v, m, 1.0, 1.0, 0.95, 0.95, 0.1),
        lambda r, v, m: gae_advantages([r], [v], [m], GAEConfig()),
    ],
)
def test_rows_must_match_and_masks_must_be_binary(call):
    with pytest.raises(ValueError, match="one length"):
        call(torch.zeros(4), torch.zeros(3), torch.ones(4))
    with pytest.raises(ValueError, match="1-D"):
        call(torch.zeros(2, 2), torch.zeros(2, 2), torch.ones(2, 2))
    with pytest.raises(ValueError, match="0 and 1"):
        call(torch.zeros(3), torch.zeros(3), torch.tensor([0, 2, 1]))


def test_batch_lists_must_match_and_multiturn_returns_are_checked():
    with pytest.raises(ValueError, match="rows"):
        gae_advantages([torch.zeros(2)], [], [torch.ones(2)], GAEConfig())
    with pytest.raises(ValueError, match="adv_plus_value"):
        multiturn_gae(torch.zeros(2), torch.zeros(2), torch.ones(2), 1.0, 1.0, returns="index")


@pytest.mark.parametrize("ratio", [0.0, -0.25, 1.5, float("nan")])
def test_filter_ratio_outside_unit_interval(ratio):
    with pytest.raises(ValueError, match=r"\(0, 1\]"):
        high_variance_groups(["a", "b"], [0.0, 1.0], ratio)


# ---------------------------------------------------------------------------------------------------
# 4.9 StarPO-S filter
# ---------------------------------------------------------------------------------------------------

# Groups interleaved; population stds: a [1, 1] -> 0, b [0, 1] -> 0.5, c [0.2, 0.6] -> 0.2, d [0, 0.8] -> 0.4.
IDS = ["a", "b", "c", "d", "a", "b", "c", "d"]
SCORES = [1.0, 0.0, 0.2, 0.0, 1.0, 1.0, 0.6, 0.8]


def test_filter_keeps_the_highest_std_groups_in_original_order():
    assert high_variance_groups(IDS, SCORES, 0.5) == [1, 3, 5, 7]  # b and d
    assert high_variance_groups(IDS, SCORES, 0.25) == [1, 5]  # b
    assert high_variance_groups(IDS, SCORES, 0.6) == [1, 2, 3, 5, 6, 7]  # ceil(2.4) = 3: b, d, c
    assert high_variance_groups(IDS, SCORES, 0.01) == [1, 5]  # at least one group
    assert high_variance_groups(IDS, SCORES, 1.0) == list(range(8))
    assert high_variance_groups([], [], 0.5) == []


def test_filter_ties_go_to_the_first_group_and_float_ratios_do_not_round_up():
    # x and y both have std 0.5; x appears first.
    assert high_variance_groups(["y", "x", "y", "x"], [0.0, 1.0, 1.0, 0.0], 0.5) == [0, 2]
    ids = [f"g{i}" for i in range(10) for _ in range(2)]
    scores = [s for i in range(10) for s in (0.0, i / 10)]
    # 0.3 * 10 groups is 3.0000000000000004 in floats: three groups (g9, g8, g7), not four.
    assert high_variance_groups(ids, scores, 0.3) == list(range(14, 20))


def test_filter_uses_the_population_std():
    # x [0, 0, 1, 1]: population std 0.5 (sample 0.577); y [0, 0.9]: population 0.45 (sample 0.636).
    ids = ["x", "x", "x", "x", "y", "y"]
    assert high_variance_groups(ids, [0.0, 0.0, 1.0, 1.0, 0.0, 0.9], 0.5) == [0, 1, 2, 3]
    with pytest.raises(ValueError, match="scores"):
        high_variance_groups(ids, [0.0], 0.5)
