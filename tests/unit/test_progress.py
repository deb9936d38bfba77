"""Progress bars (userrl/progress.py): plain lines when not a terminal; a bar with total and ETA on one."""

from io import StringIO
from typing import Any

from rich.console import Console

from userrl import cli
from userrl.progress import progress_bars
from userrl.trainer import progress_event

LINES = ["sft epoch 0 step   1  loss 1.5208  30.9s", "iter   1  reward 0.250±0.433  success 0.25"]


class Clock:
    """A settable clock for rich (Progress reads its console's get_time)."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def terminal(clock: Clock) -> Console:
    return Console(force_terminal=True, file=StringIO(), width=120, get_time=clock, color_system=None)


def test_without_a_terminal_the_output_is_the_plain_lines() -> None:
    plain, with_bars = Console(file=StringIO(), width=120), Console(file=StringIO(), width=120)
    assert not with_bars.is_terminal
    for line in LINES:
        plain.print(line)
    with progress_bars(with_bars) as bars:
        assert bars.progress is None
        for done, line in enumerate(LINES, start=1):
            bars.update("iterations", done - 1, 3, rate_from_now=True)
            with_bars.print(line)
            bars.update("iterations", done, 3)
    assert with_bars.file.getvalue() == plain.file.getvalue() == "\n".join(LINES) + "\n"
    with progress_bars(None) as bars:  # evaluation without a console
        bars.update("episodes", 1, 2)


def test_on_a_terminal_a_bar_shows_done_of_total_elapsed_and_eta() -> None:
    clock = Clock()
    console = terminal(clock)
    with progress_bars(console) as bars:
        bars.update("eval episodes", 0, 10, rate_from_now=True)
        clock.now = 10.0
        bars.update("eval episodes", 2, 10)  # 0.2 episodes/s: 8 left take 40 s
        console.print(LINES[0])  # printed above the bar, which is drawn again under it
        out = console.file.getvalue()
    assert LINES[0] in out
    assert "eval episodes" in out and "2/10" in out
    assert "elapsed 0:00:10" in out and "eta 0:00:40" in out


def test_the_rate_leaves_out_the_first_update_unless_the_work_began_then() -> None:
    clock = Clock()
    console = terminal(clock)
    with progress_bars(console) as bars:
        bars.update("iterations", 0, 4)  # the learners started: loading and SFT come before iteration 1
        clock.now = 100.0
        bars.update("iterations", 1, 4)
        console.print("after 1")
        first = console.file.getvalue()
        clock.now = 110.0
        bars.update("iterations", 2, 4)  # 10 s per iteration, not 55
        console.print("after 2")
        second = console.file.getvalue()[len(first):]
    assert "1/4" in first and "eta -:--:--" in first
    assert "2/4" in second and "eta 0:00:20" in second


def test_a_bar_goes_when_done_and_starts_again_when_done_goes_back() -> None:
    console = terminal(Clock())
    with progress_bars(console) as bars:
        bars.update("eval episodes", 3, 3)
        assert not bars.progress.tasks
        bars.update("iterations", 5, 10)
        bars.update("iterations", 2, 10)  # a learner restart goes on from an older checkpoint
        assert [(t.description, t.completed) for t in bars.progress.tasks] == [("iterations", 2)]
        bars.update("iterations", 10, 10)
        assert not bars.progress.tasks


def test_progress_events_of_the_learners_messages() -> None:
    assert progress_event({"phase": "start", "iteration": 3, "checkpoint": "x"}, 10) == {
        "of": "rl", "done": 3, "total": 10}
    assert progress_event({"phase": "sft", "sft/step": 2, "sft/steps": 6, "sft/loss": 1.0}, 10) == {
        "of": "sft", "done": 2, "total": 6}
    assert progress_event({"phase": "progress", "of": "eval", "done": 4, "total": 8}, 10) == {
        "of": "eval", "done": 4, "total": 8}
    assert progress_event({"phase": "eval", "iteration": 0}, 10) is None


class FakeAlgo:
    """Sends what Trainer.fit sends: progress events and results."""

    def fit(self, on_result: Any, on_progress: Any) -> list[dict[str, Any]]:
        on_progress({"of": "rl", "done": 0, "total": 5})
        on_progress({"of": "eval", "done": 0, "total": 4})
        on_progress({"of": "eval", "done": 2, "total": 4})
        on_result({"phase": "eval", "iteration": 0, "eval/reward_mean": 0.5})
        return []


def test_train_draws_the_bars_of_fits_progress_events_under_its_lines(monkeypatch) -> None:
    console = terminal(Clock())
    monkeypatch.setattr(cli, "console", console)
    cli._fit(FakeAlgo(), cli._progress)
    out = console.file.getvalue()
    assert "eval at iteration 0: reward 0.500" in out
    assert "iterations" in out and "0/5" in out and "eval episodes" in out and "2/4" in out

    monkeypatch.setattr(cli, "console", Console(file=StringIO(), width=200))  # not a terminal
    cli._fit(FakeAlgo(), cli._progress)
    assert cli.console.file.getvalue() == "eval at iteration 0: reward 0.500  success nan  valid nan\n"
