"""The learning curve printed and plotted at the end of `userrl train`."""

import math

from PIL import Image
from rich.console import Console

from userrl.curve import curve_table, learning_curve, mean_interval, plot_curve, wilson_interval


def _wilson(k: int, n: int, z: float = 1.959963984540054) -> tuple[float, float]:
    # The textbook formula, written out: centre and half-width of the Wilson score interval.
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return centre - half, centre + half


def test_wilson_interval_matches_the_formula():
    for k, n in [(0, 64), (13, 64), (32, 64), (64, 64), (3, 16)]:
        low, high = wilson_interval(k, n)
        expected = _wilson(k, n)
        assert abs(low - expected[0]) < 1e-9 and abs(high - expected[1]) < 1e-9


def test_mean_interval_is_students_t_from_the_population_std():
    # Returns 0, 1, 1, 2: mean 1, population std sqrt(0.5), sample std sqrt(2/3); t(0.975, 3) = 3.182446305.
    low, high = mean_interval(1.0, math.sqrt(0.5), 4)
    half = 3.182446305 * math.sqrt(2 / 3) / math.sqrt(4)
    assert abs(low - (1 - half)) < 1e-8 and abs(high - (1 + half)) < 1e-8
    assert mean_interval(0.5, 0.0, 1) == (-math.inf, math.inf)  # one episode says nothing about the spread


def test_curve_from_results_excludes_aborted_and_keeps_iteration_zero(tmp_path):
    results = [
        {"phase": "sft", "sft/step": 1},
        {"phase": "eval", "iteration": 0, "eval/success_rate": 0.25, "eval/episodes": 64.0, "eval/aborted": 0.0},
        {"phase": "rl", "iteration": 1, "rollout/success_rate": 0.375},
        # 2 of 64 episodes aborted: 31 successes over the 62 played (rates are over played episodes).
        {"phase": "rl", "iteration": 2, "rollout/success_rate": 0.5, "eval/success_rate": 31 / 62,
         "eval/episodes": 64.0, "eval/aborted": 2.0, "eval/reward_mean": 0.6, "eval/reward_std": 0.4},
    ]
    points = learning_curve(results)
    assert [p.iteration for p in points] == [0, 1, 2]
    assert points[0].rollout_success is None and points[0].heldout_success == 0.25
    assert points[1].heldout_success is None and points[1].rollout_success == 0.375
    assert points[2].heldout_episodes == 62 and abs(points[2].heldout_success - 0.5) < 1e-12
    assert (points[2].heldout_low, points[2].heldout_high) == wilson_interval(31, 62)
    assert points[2].heldout_reward == 0.6 and points[0].heldout_reward is None  # no std logged: no interval
    assert (points[2].heldout_reward_low, points[2].heldout_reward_high) == mean_interval(0.6, 0.4, 62)
    console = Console(record=True, width=120)
    console.print(curve_table(points))
    text = console.export_text()
    assert "0.250" in text and "0.500" in text and "62" in text
    path = plot_curve(points, tmp_path / "run" / "learning_curve.png", "quickstart")
    assert Image.open(path).size == (768, 480)
