"""Privileged scripted solver of the Turtle gym, used to write SFT demonstrations."""

from __future__ import annotations

import numpy as np

from userrl.envs.base import MultiTurnEnv, Task
from userrl.envs.solving import play_episode


class TurtleSolver:
    """Asks one or more of the story's key questions (when it has some), then tells the hidden bottom story.

    Should the grader still find points missing, it finishes instead of repeating the same story.
    """

    def __init__(self, task: Task, rng: np.random.Generator) -> None:
        questions = [q["question"] for q in task.data.get("key_questions", [])]
        plan: list[tuple[str, str]] = []
        if questions:
            n_questions = int(rng.integers(1, len(questions) + 1))
            picks = rng.choice(len(questions), size=n_questions, replace=False)
            plan = [("action", questions[int(i)]) for i in picks]
        self.story = str(task.data["bottom"])
        plan.append(("answer", self.story))
        self._plan = plan
        self._step = 0

    def next_action(self, last_feedback: str | None) -> tuple[str, str]:
        """The next (choice, content); after the plan it finishes."""
        action = self._plan[self._step] if self._step < len(self._plan) else ("finish", "")
        self._step += 1
        return action


def solve_episode(
    env: MultiTurnEnv, task: Task, rng: np.random.Generator
) -> list[tuple[str, str, str, float]]:
    """Reset env on task and play the solver to the end: one (choice, content, feedback, reward) per step."""
    return play_episode(env, task, TurtleSolver(task, rng))
