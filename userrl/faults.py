"""Fault injection for the reliability tests and `bench/reliability.py`: kill a learner at a chosen point.

`USERRL_FAULT` in the driver's environment names one fault. `Trainer.fit` reads it there and hands
it to the learners in their loop config, because the learner processes belong to a Ray that may have
started before the variable was set. Forms (`<iteration>` is the number the iteration's result carries,
i.e. iterations done after it):

- `update:<iteration>[:<rank>]`: SIGKILL learner `<rank>` (default 1, or 0 in a group of one) in the
  update of that iteration, after its backward passes and before the optimizer step;
- `checkpoint:<iteration>`: SIGKILL rank 0 after it has written `iter_<iteration>.tmp`, before the rename.

A fault fires once per `fit`: the process creates a marker file under `<run_dir>/faults/` before it
kills itself, so the learner group Ray Train restarts runs through the same point.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

ENV = "USERRL_FAULT"
POINTS = ("update", "checkpoint")


def parse(spec: str) -> tuple[str, int, int | None]:
    """`point:iteration[:rank]` -> (point, iteration, rank or None); ValueError names a bad spec."""
    parts = spec.split(":")
    sizes = (2, 3) if parts[0] == "update" else (2,)  # only rank 0 writes checkpoints
    if parts[0] not in POINTS or len(parts) not in sizes or not all(p.isdigit() for p in parts[1:]):
        raise ValueError(f"{ENV}={spec!r}: expected update:<iteration>[:<rank>] or checkpoint:<iteration>")
    return parts[0], int(parts[1]), int(parts[2]) if len(parts) == 3 else None


class FaultInjector:
    """Kills this learner process at the point `spec` names (once per fit); a no-op without a spec."""

    def __init__(self, spec: str | None, rank: int, world_size: int, marker_dir: Path, fit_id: str, start: int):
        self.spec = spec
        self.point, self.iteration, rank_wanted = parse(spec) if spec else ("", -1, None)
        if rank_wanted is None:
            rank_wanted = 0 if self.point == "checkpoint" or world_size == 1 else 1
        self.armed = bool(spec) and rank == rank_wanted
        self.marker = marker_dir / f"{fit_id}-{self.point}-{self.iteration}"
        self.done = start  # iterations completed, from the results this rank reported

    def observing(self, report: Callable[[dict[str, Any]], None]) -> Callable[[dict[str, Any]], None]:
        """Wrap a reporter so the injector knows which iteration's update is in progress."""
        def wrapped(result: dict[str, Any]) -> None:
            if result.get("phase") == "rl":
                self.done = int(result["iteration"])
            report(result)
        return wrapped

    def __call__(self, point: str, iteration: int | None = None) -> None:
        """Called at `point`; `iteration` is the checkpoint's (the update's is the one in progress)."""
        if not self.armed or point != self.point:
            return
        if (self.done + 1 if iteration is None else iteration) != self.iteration:
            return
        self.marker.parent.mkdir(parents=True, exist_ok=True)
        try:
            self.marker.open("x").close()
        except FileExistsError:  # fired before this restart: let the re-run pass
            self.armed = False
            return
        os.kill(os.getpid(), signal.SIGKILL)
