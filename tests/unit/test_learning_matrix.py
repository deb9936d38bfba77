"""bench/learning_matrix.py's verdicts: learned, RL beyond imitation and the diagnosis, from a trial's curve."""

from __future__ import annotations

import pytest
from bench_module import load_bench

from userrl.curve import CurvePoint, mean_interval, wilson_interval


@pytest.fixture(scope="module")
def bench():
    """bench/learning_matrix.py as a module (it imports its sibling learning from bench/)."""
    return load_bench("learning_matrix")


def _point(iteration, wins, n=40):
    low, high = wilson_interval(wins, n)
    return CurvePoint(iteration, heldout_success=wins / n, heldout_episodes=n, heldout_low=low, heldout_high=high)


def _runs(curve, sft_wins=None, reward_max=0.5, valid=0.9):
    trial = {"label": "gym=telepathy", "points": curve, "valid_mean": valid, "reward_max": reward_max, "minutes": 21.0}
    runs = [trial]
    if sft_wins is not None:
        runs.append({"label": "sft_only", "points": [_point(0, sft_wins)], "valid_mean": None, "reward_max": None,
                     "minutes": 20.0})
    return runs


def test_learned_means_above_the_starts_interval_and_beyond_means_a_tenth_above_imitation(bench):
    cell = bench.Cell("telepathy", 0, 2, None)
    # 8/40 -> 20/40: the start's Wilson interval tops out at 0.348, the end is 0.50
    row = bench.row(cell, _runs([_point(0, 8), _point(6, 12), _point(12, 20)], sft_wins=15))
    assert row["learned"] and row["beyond"] and row["diagnosis"] == ""  # 0.500 - 0.375 >= 0.10
    assert (row["start"].iteration, row["end"].iteration, row["minutes"]) == (0, 12, 21.0)
    row = bench.row(cell, _runs([_point(0, 8), _point(12, 20)], sft_wins=17))  # 0.500 - 0.425 < 0.10
    assert row["learned"] and not row["beyond"]
    row = bench.row(cell, _runs([_point(0, 8), _point(12, 13)], sft_wins=None))  # 0.325 <= 0.348: inside
    assert row["learned"] is False and row["beyond"] is None and row["sft"] is None
    assert row["diagnosis"] == "inside the start's interval after 12 iterations (n=40)"


@pytest.mark.parametrize(("start", "end", "reward_max", "valid", "diagnosis"), [
    (0, 0, 0.0, 0.9, "rollout reward 0 in every iteration: no group had a signal"),
    (0, 0, 0.03, 0.9, "no held-out score before or after, rollout reward at most 0.03 per iteration: almost no "
                      "group had a signal"),
    (4, 4, 0.2, 0.3, "valid actions 30% of the rollout's turns"),
    (40, 40, 1.0, 1.0, "the warm start is at the ceiling"),
    (20, 10, 0.8, 0.9, "fell from 0.50 to 0.25"),
])
def test_a_trial_that_did_not_learn_says_why(bench, start, end, reward_max, valid, diagnosis):
    row = bench.row(bench.Cell("telepathy", 0, 2, None),
                    _runs([_point(0, start), _point(12, end)], reward_max=reward_max, valid=valid))
    assert row["learned"] is False and row["diagnosis"] == diagnosis


def test_a_trial_without_two_evaluations_has_no_verdict(bench):
    row = bench.row(bench.Cell("telepathy", 0, 2, None), _runs([_point(0, 8)]))
    assert row["learned"] is None and row["end"] is None and row["diagnosis"] == ""


def _graded_point(iteration, mean, std, n=16):
    low, high = mean_interval(mean, std, n)
    return CurvePoint(iteration, heldout_success=0.0, heldout_episodes=n, heldout_low=0.0, heldout_high=0.21,
                      heldout_reward=mean, heldout_reward_low=low, heldout_reward_high=high)


def test_a_graded_gym_is_judged_on_its_mean_return_not_on_success(bench):
    # Intention's agent covers details without ever finishing: success 0 throughout, mean return 0.30 -> 0.54.
    # Start 0.30 with std 0.30 over 16: t(15) = 2.1314 gives half-width 2.1314 * 0.30 / sqrt(15) = 0.165.
    runs = _runs([_graded_point(0, 0.30, 0.30), _graded_point(12, 0.54, 0.50)], reward_max=0.42)
    runs.append({"label": "sft_only", "points": [_graded_point(0, 0.40, 0.40)], "valid_mean": None,
                 "reward_max": None, "minutes": 20.0})
    row = bench.row(bench.Cell("intention", 0, 3, None), runs)
    assert row["metric"] == "mean return" and abs(row["start"].high - (0.30 + 0.165)) < 1e-3
    assert row["learned"] and row["beyond"]  # 0.54 > 0.465; 0.54 - 0.40 >= 0.10
    # The same curve on a 0/1 gym is read as success: 0 -> 0, no verdict of learning.
    row = bench.row(bench.Cell("telepathy", 0, 2, None), runs)
    assert row["metric"] == "success" and row["learned"] is False and row["end"].value == 0.0


def test_with_the_original_data_a_small_test_split_gains_the_originals_held_out(bench, tmp_path):
    (plain,) = bench.cells(["intention"], [1], [])
    (held,) = bench.cells(["intention"], [1], [], tmp_path)
    assert (plain.name, plain.overrides, held.name) == ("learn_intention_s1", (), "learn_intention_s1_orig")
    trained, original = held.config.env.gyms
    assert (trained.name, trained.source, trained.weight) == ("intention", "builtin", 1.0)
    assert (original.name, original.source, original.weight) == ("intention", "userrl", 0.0)
    assert held.config.env.data_root == str(tmp_path) and held.config.evaluation.num_tasks == 40
    assert held.config.experiment.seed == 1 and held.config.env.max_turns == plain.config.env.max_turns
    (function,) = bench.cells(["function"], [0], [], tmp_path)  # 160 test tasks already: nothing added
    assert function.overrides == () and function.name == "learn_function_s0"


def test_an_arm_stopped_and_run_again_is_read_from_its_finished_run(bench):
    runs = _runs([_point(0, 8), _point(12, 20)])
    stopped = {"label": "sft_only (8e445e)", "status": "FAILED", "points": [], "valid_mean": None, "reward_max": None,
               "minutes": 37.0}
    again = {"label": "sft_only (df275c)", "status": "FINISHED", "points": [_point(0, 15)], "valid_mean": None,
             "reward_max": None, "minutes": 12.0}
    row = bench.row(bench.Cell("telepathy", 0, 2, None), [runs[0], stopped, again])
    assert row["sft"].value == 0.375 and row["sft_minutes"] == 12.0 and row["beyond"]  # 0.500 - 0.375
