"""Privileged scripted solver of the Search gym, used to write SFT demonstrations."""

from __future__ import annotations

import numpy as np

from userrl.envs.base import MultiTurnEnv, Task
from userrl.envs.solving import play_episode


class SearchSolver:
    """Searches one query per supporting document (options picked with rng), then gives the gold answer.

    Builtin tasks carry a search plan whose every query finds its document among the top results. Tasks
    without one (source "userrl") search the question itself once.
    """

    def __init__(self, task: Task, rng: np.random.Generator) -> None:
        plan = task.data.get("search_plan") or [[task.data["question"]]]
        self._plan: list[tuple[str, str]] = [
            ("search", str(options[int(rng.integers(len(options)))])) for options in plan
        ]
        self.answer = str(task.data["answer"])
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
    return play_episode(env, task, SearchSolver(task, rng))
