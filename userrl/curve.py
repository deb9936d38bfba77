"""The learning curve of one training run: rollout and held-out success per iteration, as a table and a PNG."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.table import Table
from scipy.stats import binomtest
from scipy.stats import t as student_t


@dataclass(frozen=True)
class CurvePoint:
    """One iteration: rollout success (sampled, training tasks), held-out greedy success and mean return, each
    with its 95% CI."""

    iteration: int
    rollout_success: float | None = None
    heldout_success: float | None = None
    heldout_episodes: int = 0
    heldout_low: float | None = None
    heldout_high: float | None = None
    heldout_reward: float | None = None
    heldout_reward_low: float | None = None
    heldout_reward_high: float | None = None


def wilson_interval(successes: int, episodes: int) -> tuple[float, float]:
    """The 95% Wilson score interval of a success rate (good at small n and near 0 or 1)."""
    ci = binomtest(successes, episodes).proportion_ci(confidence_level=0.95, method="wilson")
    return float(ci.low), float(ci.high)


def mean_interval(mean: float, std: float, episodes: int) -> tuple[float, float]:
    """The 95% Student t interval of a mean from its population std (`np.std`, ddof 0) over `episodes` values."""
    if episodes < 2:
        return -math.inf, math.inf
    half = float(student_t.ppf(0.975, episodes - 1)) * std / math.sqrt(episodes - 1)  # std * sqrt(n / (n-1)) / sqrt(n)
    return mean - half, mean + half


def learning_curve(results: Iterable[dict[str, Any]]) -> list[CurvePoint]:
    """Points from a run's results (RL iterations, and the held-out evaluation before RL as iteration 0)."""
    points: dict[int, dict[str, Any]] = {}
    for result in results:
        if result.get("phase") not in ("rl", "eval"):
            continue
        point = points.setdefault(int(result["iteration"]), {"iteration": int(result["iteration"])})
        if "rollout/success_rate" in result:
            point["rollout_success"] = float(result["rollout/success_rate"])
        if "eval/success_rate" in result:
            # The rate is over played episodes: aborted ones are failures of the system, not of the agent.
            episodes = int(result["eval/episodes"] - result.get("eval/aborted", 0.0))
            rate = float(result["eval/success_rate"])
            low, high = wilson_interval(round(rate * episodes), episodes) if episodes else (None, None)
            point.update(heldout_success=rate, heldout_episodes=episodes, heldout_low=low, heldout_high=high)
            if "eval/reward_std" in result:
                mean = float(result["eval/reward_mean"])
                low, high = mean_interval(mean, float(result["eval/reward_std"]), episodes)
                point.update(heldout_reward=mean, heldout_reward_low=low, heldout_reward_high=high)
    return [CurvePoint(**points[i]) for i in sorted(points)]


def curve_table(points: list[CurvePoint]) -> Table:
    """A rich table of the curve, one row per iteration."""
    table = Table(title="learning curve")
    for column in ("iteration", "rollout success", "held-out success", "95% interval", "held-out episodes"):
        table.add_column(column, justify="right")
    for p in points:
        table.add_row(
            str(p.iteration),
            "" if p.rollout_success is None else f"{p.rollout_success:.2f}",
            "" if p.heldout_success is None else f"{p.heldout_success:.3f}",
            "" if p.heldout_low is None else f"[{p.heldout_low:.2f}, {p.heldout_high:.2f}]",
            str(p.heldout_episodes) if p.heldout_episodes else "",
        )
    return table


def plot_curve(points: list[CurvePoint], path: Path, title: str) -> Path:
    """Write the curve as a PNG: held-out success with its interval, and rollout success."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    rollout = [p for p in points if p.rollout_success is not None]
    heldout = [p for p in points if p.heldout_success is not None]
    ax.plot([p.iteration for p in rollout], [p.rollout_success for p in rollout], color="0.6", marker=".",
            label="rollout success (sampled, train tasks)")
    if heldout:
        xs = [p.iteration for p in heldout]
        ax.fill_between(xs, [p.heldout_low for p in heldout], [p.heldout_high for p in heldout], alpha=0.2,
                        color="C0")
        ax.plot(xs, [p.heldout_success for p in heldout], color="C0", marker="o",
                label=f"held-out success (greedy, {heldout[-1].heldout_episodes} test tasks, 95% CI)")
    ax.set(xlabel="iteration", ylabel="success rate", ylim=(0, 1), title=title)
    ax.grid(alpha=0.3)
    ax.legend(loc="upper left", fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
