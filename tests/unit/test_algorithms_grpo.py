"""Multi-turn GRPO (docs/spec/ALGORITHMS.md §1.6, §1.7, §2).

The worked example §2.7 number by number, then edge cases.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

from userrl.algorithms import (
    TRAJECTORY_SCORES,
    TURN_CREDITS,
    GRPOConfig,
    broadcast_advantages,
    group_moments,
    group_normalize,
    group_statistics,
    groups_with_signal,
    grpo_multiturn_advantages,
    place_token_rewards,
    token_credits,
    trajectory_score,
    turn_credits,
)
from userrl.config import canonical_credit_method, canonical_score_method, load_config
from userrl.estimators import make_estimator

SPEC = 1.1e-6  # the spec's tables are rounded to 6 decimals
EPS = 1e-6
GAMMA = 0.8

# ---------------------------------------------------------------------------------------------------
# Worked example 2.7: one group of three trajectories, response positions only
# ---------------------------------------------------------------------------------------------------

REWARDS = [[0.0, 0.5, 1.0], [0.0, 0.0], [0.2, 0.0, 0.0, 0.0]]
GROUP = ["g", "g", "g"]

#              a a t t | h a t t | h a a a t
T1_MASK = [1, 1, 0, 0] + [0, 1, 0, 0] + [0, 1, 1, 1, 0]
T1_TURN = [0, 0, 0, 0] + [1, 1, 1, 1] + [2, 2, 2, 2, 2]
#              a a t t | h a a a
T2_MASK = [1, 1, 0, 0] + [0, 1, 1, 1]
T2_TURN = [0, 0, 0, 0] + [1, 1, 1, 1]
#              a t t | h a t t | h a t t | h a a
T3_MASK = [1, 0, 0] + [0, 1, 0, 0] + [0, 1, 0, 0] + [0, 1, 1]
T3_TURN = [0, 0, 0] + [1, 1, 1, 1] + [2, 2, 2, 2] + [3, 3, 3]

SCORES = {"mean": [0.5, 0.0, 0.05], "sum": [1.5, 0.0, 0.2], "r2g": [1.04, 0.0, 0.2]}

MOMENTS = {  # score: (mu, sigma, [z_T1, z_T2, z_T3])
    "mean": (0.183333, 0.275379, [1.149928, -0.665748, -0.484180]),
    "sum": (0.566667, 0.814453, [1.145962, -0.695763, -0.450199]),
    "r2g": (0.413333, 0.551845, [1.135582, -0.749001, -0.386581]),
}

CREDITS = {  # credit: per trajectory (c, S, N)
    "equalized": [([1, 1, 1], 6, 6), ([1, 1], 5, 5), ([1, 1, 1, 1], 5, 5)],
    "r2g": [([1.04, 1.3, 1.0], 6.38, 6), ([0, 0], 0, 0), ([0.2, 0, 0, 0], 0.2, 1)],
    "em": [([0.5, 0.8655, 1.0], 4.8655, 6), ([0.5, 0.5], 2.5, 5), ([0.6906, 0.5, 0.5, 0.5], 2.6906, 5)],
}

TURN_ADVANTAGES = {  # (score, credit): advantage of every sampled token of turn k, per trajectory
    ("mean", "equalized"): [[1.149928] * 3, [-0.665748] * 2, [-0.484180] * 4],
    ("mean", "r2g"): [[1.124695, 1.405868, 1.081437], [0, 0], [-0.484180, 0, 0, 0]],
    ("mean", "em"): [
        [0.709030, 1.227331, 1.418060],
        [-0.665748] * 2,
        [-0.621376, -0.449881, -0.449881, -0.449881],
    ],
    ("sum", "equalized"): [[1.145962] * 3, [-0.695763] * 2, [-0.450199] * 4],
    ("sum", "r2g"): [[1.120816, 1.401020, 1.077707], [0, 0], [-0.450199, 0, 0, 0]],
    ("sum", "em"): [
        [0.706585, 1.223098, 1.413169],
        [-0.695763] * 2,
        [-0.577767, -0.418308, -0.418308, -0.418308],
    ],
    ("r2g", "equalized"): [[1.135582] * 3, [-0.749001] * 2, [-0.386581] * 4],
    ("r2g", "r2g"): [[1.110663, 1.388329, 1.067945], [0, 0], [-0.386581, 0, 0, 0]],
    ("r2g", "em"): [
        [0.700184, 1.212018, 1.400368],
        [-0.749001] * 2,
        [-0.496121, -0.359196, -0.359196, -0.359196],
    ],
}


def _batch(rows: list[tuple[list[int], list[int]]]) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-pad (mask, turn_ids) rows into [B, T] tensors: padding has mask 0 and turn -1."""
    width = max(len(mask) for mask, _ in rows)
    masks = [mask + [0] * (width - len(mask)) for mask, _ in rows]
    turns = [turn + [-1] * (width - len(turn)) for _, turn in rows]
    return torch.tensor(masks, dtype=torch.int8), torch.tensor(turns, dtype=torch.int16)


def _example_batch() -> tuple[torch.Tensor, torch.Tensor]:
    return _batch([(T1_MASK, T1_TURN), (T2_MASK, T2_TURN), (T3_MASK, T3_TURN)])


@pytest.mark.parametrize("method", TRAJECTORY_SCORES)
def test_example_scores(method):
    scores = [trajectory_score(r, method, GAMMA) for r in REWARDS]
    assert scores == pytest.approx(SCORES[method], abs=1e-12)


@pytest.mark.parametrize("method", TRAJECTORY_SCORES)
def test_example_group_moments_and_z(method):
    mu_expected, sigma_expected, z_expected = MOMENTS[method]
    mu, sigma = group_moments(SCORES[method], GROUP)
    z = group_normalize(SCORES[method], GROUP, norm_by_std=True, eps=EPS)
    assert mu == pytest.approx([mu_expected] * 3, abs=SPEC)
    assert sigma == pytest.approx([sigma_expected] * 3, abs=SPEC)
    assert z == pytest.approx(z_expected, abs=SPEC)


@pytest.mark.parametrize("method", TURN_CREDITS)
def test_example_credits_with_sum_and_count(method):
    loss_mask, turn_ids = _example_batch()
    credits = [turn_credits(r, method, GAMMA) for r in REWARDS]
    a = token_credits(loss_mask, turn_ids, credits)
    for b, (c_expected, s_expected, n_expected) in enumerate(CREDITS[method]):
        assert credits[b] == pytest.approx(c_expected, abs=1e-12)
        assert float(a[b].sum()) == pytest.approx(s_expected, abs=1e-12)
        assert int((a[b] != 0).sum()) == n_expected


@pytest.mark.parametrize(("score", "credit"), list(TURN_ADVANTAGES))
def test_example_token_advantages(score, credit):
    loss_mask, turn_ids = _example_batch()
    config = GRPOConfig(trajectory_score=score, turn_credit=credit, gamma=GAMMA, eps=EPS)
    advantages, _ = grpo_multiturn_advantages(REWARDS, GROUP, loss_mask, turn_ids, config)

    assert advantages.dtype == torch.float32
    assert advantages.shape == loss_mask.shape
    assert torch.all(advantages[loss_mask == 0] == 0)
    for b, per_turn in enumerate(TURN_ADVANTAGES[(score, credit)]):
        for k, expected in enumerate(per_turn):
            sampled = (turn_ids[b] == k) & (loss_mask[b] == 1)
            assert sampled.any()
            assert advantages[b, sampled].tolist() == pytest.approx([expected] * int(sampled.sum()), abs=SPEC)


def test_example_hand_check_mean_r2g():
    loss_mask, turn_ids = _example_batch()
    advantages, _ = grpo_multiturn_advantages(
        REWARDS, GROUP, loss_mask, turn_ids, GRPOConfig(trajectory_score="mean", turn_credit="r2g")
    )
    z_t1 = MOMENTS["mean"][2][0]
    assert float(advantages[0, 0]) == pytest.approx(1.04 * z_t1 * 6 / 6.38, abs=SPEC)
    assert float(advantages[0][loss_mask[0] == 1].double().mean()) == pytest.approx(z_t1, abs=SPEC)
    # In T3 only the single token of turn 1 has credit, and it carries exactly z_T3.
    assert float(advantages[2, 0]) == pytest.approx(MOMENTS["mean"][2][2], abs=SPEC)


# ---------------------------------------------------------------------------------------------------
# Scores and credits (§2.2, §2.3)
# ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("reward", "credit"), [(0.0, 0.5), (0.2, 0.6906), (0.5, 0.8655), (1.0, 1.0)])
def test_em_reference_values(reward, credit):
    assert turn_credits([reward], "em") == [credit]


def test_em_extrapolates_below_half_for_negative_rewards():
    assert turn_credits([-0.5], "em")[0] < 0.5


def test_mean_score_is_rounded_to_four_decimals_unless_disabled():
    rewards = [0.1, 0.2, 0.2]
    assert trajectory_score(rewards, "mean") == 0.1667
    assert trajectory_score(rewards, "mean", mean_score_round=None) == pytest.approx(0.5 / 3, abs=1e-15)
    # Only mean is rounded.
    assert trajectory_score([1 / 3], "sum") == 1 / 3


def test_mean_score_rewards_finishing_in_fewer_turns():
    assert trajectory_score([1.0], "mean") > trajectory_score([0.0, 1.0], "mean")
    assert trajectory_score([1.0, 0.0], "mean") < trajectory_score([1.0], "mean")


@pytest.mark.parametrize("method", TRAJECTORY_SCORES)
def test_no_turns_scores_zero(method):
    assert trajectory_score([], method) == 0.0


@pytest.mark.parametrize("method", TURN_CREDITS)
def test_no_turns_no_credits(method):
    assert turn_credits([], method) == []


def test_r2g_credit_is_zero_after_last_reward():
    assert turn_credits([0.0, 1.0, 0.0, 0.0], "r2g") == pytest.approx([0.8, 1.0, 0.0, 0.0])


# ---------------------------------------------------------------------------------------------------
# Group normalization edge cases (§2.4, §2.7, §1.7)
# ---------------------------------------------------------------------------------------------------


def test_singleton_group_has_no_baseline():
    assert group_normalize([0.5], ["solo"]) == pytest.approx([0.4999995], abs=1e-12)
    mu, sigma = group_moments([0.5], ["solo"])
    assert (mu[0], sigma[0]) == (0.0, 1.0)


def test_equal_scores_give_zero_advantage():
    z = group_normalize([0.3, 0.3], ["g", "g"])
    assert z.tolist() == [0.0, 0.0]
    loss_mask, turn_ids = _batch([([1, 1, 0], [0, 0, 0]), ([1, 0, 1], [0, 0, 1])])
    advantages, stats = grpo_multiturn_advantages(
        [[0.3], [0.3, 0.3]], ["g", "g"], loss_mask, turn_ids, GRPOConfig(trajectory_score="mean")
    )
    assert torch.all(advantages == 0)
    assert stats["frac_groups_no_signal"] == 1.0


def test_equal_scores_that_a_float_mean_misses_still_give_exact_zero():
    # mean([0.1] * 3) is not exactly 0.1 in floating point.
    assert group_normalize([0.1] * 3, ["g"] * 3).tolist() == [0.0, 0.0, 0.0]


def test_normalization_without_std():
    z = group_normalize(SCORES["mean"], GROUP, norm_by_std=False)
    assert z == pytest.approx([0.316667, -0.183333, -0.133333], abs=SPEC)
    assert group_normalize([0.5], ["solo"], norm_by_std=False).tolist() == [0.5]


def test_groups_are_normalized_independently():
    z = group_normalize([1.0, 0.0, 5.0, 5.0, 2.0], ["a", "a", "b", "b", "c"])
    expected_a = 0.5 / (np.std([1.0, 0.0], ddof=1) + EPS)
    assert z == pytest.approx([expected_a, -expected_a, 0.0, 0.0, 2.0 / (1 + EPS)], abs=1e-12)


def test_dropping_aborted_members_can_leave_a_singleton_group():
    scores, groups, aborted = [1.0, 0.0, 0.5], ["g", "g", "h"], [False, True, False]
    kept = [i for i, is_aborted in enumerate(aborted) if not is_aborted]
    z = group_normalize([scores[i] for i in kept], [groups[i] for i in kept])
    assert z == pytest.approx([1.0 / (1 + EPS), 0.5 / (1 + EPS)], abs=1e-12)


def test_group_statistics():
    scores = [1.0, 1.0, 0.0, 0.0, 0.2, 0.7, 0.4]
    groups = ["success", "success", "failed", "failed", "mixed", "mixed", "solo"]
    z = group_normalize(scores, groups)
    stats = group_statistics(scores, groups, z)
    assert stats["frac_groups_no_signal"] == pytest.approx(2 / 4)
    assert stats["frac_groups_all_success"] == pytest.approx(2 / 4)  # the solo 0.4 counts as all-successful
    assert stats["frac_groups_all_failed"] == pytest.approx(1 / 4)
    assert stats["score_mean"] == pytest.approx(np.mean(scores))
    assert stats["score_std"] == pytest.approx(np.std(scores))


def test_groups_with_signal_keeps_the_groups_whose_scores_differ():
    # Two turns each (one sampled token per turn); groups: all solved, all failed, mixed, mixed, a singleton.
    rewards = [[0.0, 1.0], [0.0, 1.0], [0.0, 0.0], [0.0, 0.0], [0.0, 1.0], [0.0, 0.0], [1.0, 0.0], [0.0, 1.0],
               [0.0, 1.0]]
    groups = ["solved", "solved", "failed", "failed", "mixed", "mixed", "order", "order", "solo"]
    mask, turns = _batch([([1, 0, 1, 0], [0, 0, 1, 1])] * len(rewards))
    advantages, _ = grpo_multiturn_advantages(rewards, groups, mask, turns, GRPOConfig(trajectory_score="sum"))
    rows = [advantages[i] for i in range(len(rewards))]
    # The oracle: a group teaches when its members' scores (the sums) are not all equal; a singleton has no
    # baseline (docs/spec/ALGORITHMS.md §2.4: z = s / (1 + eps)), so it teaches when its score is not 0.
    members = {g: [sum(r) for r, h in zip(rewards, groups, strict=True) if h == g] for g in groups}
    expected = [i for i, g in enumerate(groups)
                if len(set(members[g])) > 1 or (len(members[g]) == 1 and members[g][0] != 0)]
    assert expected == [4, 5, 8]  # "order": 1 + 0 and 0 + 1 are the same sum
    assert groups_with_signal(groups, rows) == expected
    assert groups_with_signal([], []) == []
    with pytest.raises(ValueError, match="2 group ids but 1 advantage rows"):
        groups_with_signal(["a", "b"], rows[:1])


def test_example_group_statistics_show_signal():
    loss_mask, turn_ids = _example_batch()
    _, stats = grpo_multiturn_advantages(REWARDS, GROUP, loss_mask, turn_ids, GRPOConfig())
    assert stats["frac_groups_no_signal"] == 0.0
    assert stats["score_mean"] == pytest.approx(np.mean(SCORES["mean"]))


# ---------------------------------------------------------------------------------------------------
# Token broadcast properties (§2.5, §2.6)
# ---------------------------------------------------------------------------------------------------


def test_equalized_gives_every_sampled_token_exactly_z():
    loss_mask, turn_ids = _example_batch()
    z = [0.7, -0.2, 0.0]
    credits = [turn_credits(r, "equalized") for r in REWARDS]
    advantages = broadcast_advantages(loss_mask, turn_ids, credits, z)
    for b in range(3):
        assert torch.all(advantages[b, loss_mask[b] == 1] == torch.tensor(z[b], dtype=torch.float32))


def test_r2g_credit_gives_failed_attempts_no_gradient():
    loss_mask, turn_ids = _example_batch()
    advantages, _ = grpo_multiturn_advantages(
        REWARDS, GROUP, loss_mask, turn_ids, GRPOConfig(turn_credit="r2g")
    )
    assert torch.all(advantages[1] == 0)  # T2 has z < 0 but no reward at all


def test_em_keeps_at_least_half_weight_on_every_turn():
    loss_mask, turn_ids = _example_batch()
    advantages, _ = grpo_multiturn_advantages(
        REWARDS, GROUP, loss_mask, turn_ids, GRPOConfig(turn_credit="em")
    )
    assert torch.all(advantages[loss_mask == 1] != 0)


def test_sampled_token_outside_every_turn_is_rejected():
    loss_mask, turn_ids = _batch([([1, 1], [0, -1])])
    with pytest.raises(ValueError, match="outside"):
        broadcast_advantages(loss_mask, turn_ids, [[1.0]], [1.0])
    with pytest.raises(ValueError, match="outside"):
        broadcast_advantages(*_batch([([1, 1], [0, 1])]), [[1.0]], [1.0])


def test_broadcast_rejects_mismatched_batch():
    loss_mask, turn_ids = _example_batch()
    with pytest.raises(ValueError, match="rows"):
        broadcast_advantages(loss_mask, turn_ids, [[1.0]], [1.0])


# ---------------------------------------------------------------------------------------------------
# Names and aliases (§2.2, §2.8)
# ---------------------------------------------------------------------------------------------------


def test_sum_alias_means_mean_and_warns():
    with pytest.warns(DeprecationWarning, match="Sum"):
        assert canonical_score_method("Sum") == "mean"
    with pytest.warns(DeprecationWarning):  # names are mapped once, by the config; the math takes canonical ones
        grpo = make_estimator(load_config(None, ["training.trajectory_score=Sum"]), 0).grpo
    assert grpo.trajectory_score == "mean"
    assert trajectory_score([0.0, 1.0], grpo.trajectory_score) == 0.5
    with pytest.raises(ValueError, match="'Sum'"):
        trajectory_score([0.0, 1.0], "Sum")


@pytest.mark.parametrize(
    ("name", "canonical"), [("mean", "mean"), ("sum", "sum"), ("r2g", "r2g"), ("R2G", "r2g")]
)
def test_score_names_without_warning(name, canonical):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert canonical_score_method(name) == canonical


def test_lowercase_sum_is_a_true_sum():
    assert trajectory_score([0.0, 1.0], "sum") == 1.0


@pytest.mark.parametrize(
    ("name", "canonical"),
    [("Equalized", "equalized"), ("equalized", "equalized"), ("R2G", "r2g"), ("EM", "em"), ("eM", "em")],
)
def test_credit_names_are_case_insensitive(name, canonical):
    assert canonical_credit_method(name) == canonical
    assert make_estimator(load_config(None, [f"training.turn_credit={name}"]), 0).grpo.turn_credit == canonical


def test_unknown_score_lists_valid_names():
    with pytest.raises(ValueError, match="'median'") as error:
        canonical_score_method("median")
    assert "mean, sum, r2g" in str(error.value)
    with pytest.raises(ValueError, match="median"):
        GRPOConfig(trajectory_score="median")


def test_unknown_credit_lists_valid_names():
    with pytest.raises(ValueError, match="'linear'") as error:
        canonical_credit_method("linear")
    assert "equalized, r2g, em" in str(error.value)


# ---------------------------------------------------------------------------------------------------
# Reward placement for token-level estimators (§1.6)
# ---------------------------------------------------------------------------------------------------


def test_turn_rewards_sit_on_last_sampled_token_of_each_turn():
    loss_mask, turn_ids = _example_batch()
    rewards = place_token_rewards(loss_mask, turn_ids, REWARDS, placement="turn")
    expected = torch.zeros_like(rewards)
    expected[0, 5], expected[0, 11] = 0.5, 1.0  # T1: turn 2 has one token, turn 3 ends at position 11
    expected[2, 0] = 0.2  # T3: turn 1 is its first token
    assert torch.equal(rewards, expected)


def test_outcome_score_sits_on_last_sampled_token():
    loss_mask, turn_ids = _example_batch()
    rewards = place_token_rewards(loss_mask, turn_ids, REWARDS, placement="outcome", scores=SCORES["r2g"])
    expected = torch.zeros_like(rewards)
    expected[0, 11], expected[2, 13] = 1.04, 0.2
    assert torch.allclose(rewards, expected)
    assert torch.all(rewards[loss_mask == 0] == 0)


def test_reward_placement_rejects_unknown_mode_and_missing_scores():
    loss_mask, turn_ids = _example_batch()
    with pytest.raises(ValueError, match="turn, outcome"):
        place_token_rewards(loss_mask, turn_ids, REWARDS, placement="every")
    with pytest.raises(ValueError, match="score"):
        place_token_rewards(loss_mask, turn_ids, REWARDS, placement="outcome")


def test_reward_without_a_sampled_token_is_rejected():
    loss_mask, turn_ids = _batch([([1, 0, 0], [0, 1, 1])])
    with pytest.raises(ValueError, match="turn 1"):
        place_token_rewards(loss_mask, turn_ids, [[0.0, 1.0]])
