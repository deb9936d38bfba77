"""Progress bars with elapsed time and ETA for the long phases: SFT steps, RL iterations, evaluation episodes.

`progress_bars(console)` is the one home of the bars: while the console is a terminal it draws
`rich.progress` bars under the console's output (lines printed through the console go above them, so none
is lost; the bars vanish at the end); otherwise (CI logs, `ray job` logs, pipes) it does nothing and the
output stays the plain lines. The driver draws them: a Ray Train worker's stdout is a pipe, never a
terminal (docs/ARCHITECTURE.md).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

#: Seconds of updates the ETA's rate averages over: an RL iteration can take minutes (rich's default is 30 s).
RATE_WINDOW_S = 24 * 3600.0


class ProgressBars:
    """Bars by label over a terminal console; a no-op without one (`progress` None)."""

    def __init__(self, progress: Progress | None):
        self.progress = progress
        self._bars: dict[str, tuple[TaskID, int]] = {}  # label -> (rich task, done)

    def update(self, label: str, done: int, total: int, *, rate_from_now: bool = False) -> None:
        """Show `done` of `total` on the bar `label` (made anew when `done` went back; gone at `total`).

        The ETA's rate counts from the bar's first update with `rate_from_now` (the work began then),
        otherwise from its second (what the first update counts may include start-up time).
        """
        if self.progress is None:
            return
        task, before = self._bars.pop(label, (None, -1))
        if task is not None and (done < before or done >= total):
            self.progress.remove_task(task)
            task = None
        if done < total:
            if task is None:
                task = self.progress.add_task(label, total=total, completed=done)
                if rate_from_now:
                    self.progress.advance(task, 0)  # a sample at `done`, now: the next update gives a rate
            else:
                self.progress.update(task, total=total, completed=done)
            self._bars[label] = task, done
        self.progress.refresh()  # now, not at the next tick: a line printed next has the new bars under it


@contextmanager
def progress_bars(console: Console | None) -> Iterator[ProgressBars]:
    """Bars (done/total, elapsed, ETA) on `console` while inside; a no-op unless `console` is a terminal."""
    if console is None or not console.is_terminal:
        yield ProgressBars(None)
        return
    progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                        TextColumn("elapsed"), TimeElapsedColumn(), TextColumn("eta"), TimeRemainingColumn(),
                        console=console, transient=True, speed_estimate_period=RATE_WINDOW_S)
    with progress:
        yield ProgressBars(progress)


def print_result(console: Console, result: dict[str, Any]) -> None:
    """One line per result of `fit`: an SFT step, an evaluation, or an RL iteration's rollout and update."""
    if result["phase"] == "sft":
        console.print(f"[cyan]sft[/] epoch {result['sft/epoch']} step {result['sft/step']:>3}  "
                      f"loss {result['sft/loss']:.4f}  {result['time/sft_step_s']:.1f}s  "
                      f"learner mem {result['memory/learner_rss_gb']:.1f} GB")
        return
    if result["phase"] == "eval":
        console.print(f"[magenta]eval[/] at iteration {result['iteration']}: reward "
                      f"{result.get('eval/reward_mean', math.nan):.3f}  success {result.get('eval/success_rate', math.nan):.2f}"
                      f"  valid {result.get('eval/valid_action_rate', math.nan):.2f}")
        return
    r = {"rollout/reward_mean": math.nan, "rollout/reward_std": math.nan, "rollout/success_rate": math.nan,
         "rollout/valid_action_rate": math.nan, "rollout/turns_mean": math.nan, **result}  # all aborted: no means
    console.print(
        f"[bold]iter {r['iteration']:>3}[/]  reward {r['rollout/reward_mean']:.3f}±{r['rollout/reward_std']:.3f}  "
        f"success {r['rollout/success_rate']:.2f}  valid {r['rollout/valid_action_rate']:.2f}  "
        f"turns {r['rollout/turns_mean']:.1f}  gen {r['rollout/tokens_per_s']:.0f} tok/s  "
        f"train {r['learner/tokens_per_s']:.0f} tok/s  | rollout {r['time/rollout_s']:.1f}s  "
        f"adv {r['time/advantages_s']:.2f}s  update {r['time/update_s']:.1f}s  sync {r['time/weight_sync_s']:.1f}s  "
        f"learner mem {r['memory/learner_rss_gb']:.1f} GB"
        + (f"  | eval reward {r['eval/reward_mean']:.3f}" if "eval/reward_mean" in r else "")
        + (f"  | aborted {r['rollout/aborted']:.0f}" if r.get("rollout/aborted") else "")
        + (f"  restarts {r['rollout/env_runner_restarts'] + r['rollout/replica_restarts']:.0f}, re-run "
           f"{r['rollout/rerun_episodes']:.0f}" if r.get("rollout/env_runner_restarts") or r.get("rollout/replica_restarts")
           else "")
    )
