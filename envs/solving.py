"""The scripted solvers' common parts: the Solver protocol, planned solvers, and the demonstration loop."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Protocol

from userrl.envs.base import MultiTurnEnv, Task, tool_call_to_action

#: What a solver does once its plan is played out.
FINISH: tuple[str, str] = ("finish", "")


class UngroundedTask(Exception):
    """A solver cannot reach this task's answer from what the agent would see; it writes no demonstration."""


class Solver(Protocol):
    """A scripted solver: the next (choice, content) given the last feedback (None before the first step)."""

    def next_action(self, last_feedback: str | None) -> tuple[str, str]: ...


class NativeToolsSolver(ABC):
    """A solver that can also play a native-tools episode (`env.protocol: native_tools`).

    Spec: docs/spec/ALGORITHMS.md §5.1.

    There the agent's first context already holds the tools, and each message either calls one tool or speaks
    to the user: after `start_native`, every move is `answer` (one tool call as JSON, {"name", "arguments"}) or
    `action` (plain text for the user); `finish` means the plan is over without the episode having ended (a
    native episode has no such step, so the demonstration ends there, unrewarded).
    """

    @abstractmethod
    def next_action(self, last_feedback: str | None) -> tuple[str, str]:
        """The next (choice, content) given the last feedback (None before the first step)."""

    @abstractmethod
    def start_native(self, opening: str) -> None:
        """Play a native-tools episode whose agent first reads `opening` (its prompt and the tool schemas, as text).

        Called once, before the first `next_action`: the solver grounds its values in this opening instead of
        the task's choice-protocol prompt, and never looks the tools up.
        """


class PlannedSolver:
    """A solver that plays a plan of (choice, content) steps in order, then finishes.

    Subclasses fill `plan` (or compute it as a property from what they observed), and may override
    `observe` (read each feedback) and `approve` (raise UngroundedTask when the transcript does not
    justify the next step).
    """

    plan: Sequence[tuple[str, str]] = ()

    def __init__(self) -> None:
        self._step = 0

    def observe(self, last_feedback: str | None) -> None:
        """Read the feedback of the last step (None before the first); the default ignores it."""

    def approve(self, action: tuple[str, str], last_feedback: str | None) -> None:
        """Check the next planned step against the transcript; the default accepts every step."""

    def next_action(self, last_feedback: str | None) -> tuple[str, str]:
        """The next (choice, content) of the plan; `finish` once it is played out."""
        self.observe(last_feedback)
        plan = self.plan
        if self._step >= len(plan):
            return FINISH
        action = plan[self._step]
        self.approve(action, last_feedback)
        self._step += 1
        return action


def play_episode(env: MultiTurnEnv, task: Task, solver: Solver) -> list[tuple[str, str, str, float]]:
    """Reset env on task and play the solver to the end: one (choice, content, feedback, reward) per step."""
    env.reset(options={"task": task})
    feedback: str | None = None
    steps: list[tuple[str, str, str, float]] = []
    while True:
        choice, content = solver.next_action(feedback)
        # Through the same tool-call conversion as a model's actions, so demonstrations match rollouts.
        obs, reward, terminated, truncated, _ = env.step(tool_call_to_action(choice, content))
        feedback = obs["feedback"]
        steps.append((choice, content, feedback, float(reward)))
        if terminated or truncated:
            return steps
