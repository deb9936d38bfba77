"""The demonstration loop of the privileged scripted solvers: play one solver through one env episode."""

from __future__ import annotations

from typing import Protocol

from userrl.envs.base import MultiTurnEnv, Task, tool_call_to_action


class UngroundedTask(Exception):
    """A solver cannot reach this task's answer from what the agent would see; it writes no demonstration."""


class Solver(Protocol):
    """A scripted solver: the next (choice, content) given the last feedback (None before the first step)."""

    def next_action(self, last_feedback: str | None) -> tuple[str, str]: ...


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
