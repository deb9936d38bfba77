"""Privileged scripted solver of the Function gym, used to write SFT demonstrations."""

from __future__ import annotations

import math

import numpy as np

from userrl.envs.base import MultiTurnEnv, Task
from userrl.envs.solving import play_episode

#: The probe inputs the solver draws from. Each vector is a divisibility chain (later values divide
#: earlier ones), so most rules with `/` still give whole numbers there; the generator rejects every
#: builtin rule that is not a whole number of size <= 1e6 at all of them.
PROBE_POOL: tuple[tuple[int, int, int, int], ...] = (
    (4, 2, 2, 1),
    (6, 3, 3, 1),
    (8, 4, 2, 2),
    (6, 2, 3, 1),
    (10, 5, 5, 1),
    (2, 1, 2, 1),
)


def format_number(value: float) -> str:
    """'8' for whole numbers, Python float formatting otherwise."""
    if math.isfinite(value) and float(value).is_integer():
        return str(int(value))
    return repr(float(value))


class FunctionSolver:
    """Plays one Function episode perfectly: 1-2 probes from PROBE_POOL, `search test`, then the answer."""

    def __init__(self, task: Task, rng: np.random.Generator) -> None:
        test_case = [float(v) for v in task.data["test_case"]]
        candidates = [p for p in PROBE_POOL if [float(v) for v in p] != test_case]
        n_probes = int(rng.integers(1, 3))
        picks = rng.choice(len(candidates), size=n_probes, replace=False)
        self._plan: list[tuple[str, str]] = [
            ("action", " ".join(str(v) for v in candidates[int(i)])) for i in picks
        ]
        self._plan.append(("search", "test"))
        self.answer = format_number(float(task.data["expected_result"]))
        self._plan.append(("answer", self.answer))
        self._step = 0

    def next_action(self, last_feedback: str | None) -> tuple[str, str]:
        """The next (choice, content); after the plan it keeps giving the answer."""
        action = self._plan[self._step] if self._step < len(self._plan) else ("answer", self.answer)
        self._step += 1
        return action


def solve_episode(
    env: MultiTurnEnv, task: Task, rng: np.random.Generator
) -> list[tuple[str, str, str, float]]:
    """Reset env on task and play the solver to the end: one (choice, content, feedback, reward) per step."""
    return play_episode(env, task, FunctionSolver(task, rng))
