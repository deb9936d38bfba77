"""Observation-grounded scripted solver of the FrozenLake gym, used to write SFT demonstrations.

Every move follows from the board the agent was last shown: the solver reads the board from the task's
user message, then from each step's feedback, and walks a shortest hole-free path on that board
(breadth-first search from the goal). Among equally short first moves it prefers those whose sideways
slips cannot end in a hole, then picks with rng. It makes one move per step while the step budget allows
one per remaining path cell, otherwise ceil(path / steps left) moves (at most MAX_MOVES_PER_TURN); once
the feedback says the player slipped, it makes one move per step and replans from every new board. The
task's hidden data is never read.
"""

from __future__ import annotations

import math
from typing import ClassVar

import numpy as np

from userrl.envs.base import Task
from userrl.envs.frozenlake.board import (
    MAX_MOVES_PER_TURN,
    MOVES,
    Lake,
    goal_distances,
    parse_board,
    step_cell,
)
from userrl.envs.solving import FINISH, UngroundedTask

#: The two moves at right angles to each move: where a slippery move may go instead.
SIDEWAYS = {m: (MOVES[(i - 1) % 4], MOVES[(i + 1) % 4]) for i, m in enumerate(MOVES)}


def plan_moves(lake: Lake, count: int, rng: np.random.Generator) -> list[str]:
    """Up to count moves along a shortest hole-free path from the player to the goal (rng breaks ties)."""
    dist = goal_distances(lake.rows)
    cell, size, moves = lake.player, lake.size, []
    while len(moves) < count and dist.get(cell, 0) > 0:
        best = [m for m in MOVES if dist.get(step_cell(cell, m, size), -1) == dist[cell] - 1]
        safe = [m for m in best if all(lake.rows[n[0]][n[1]] != "H"
                                       for n in (step_cell(cell, s, size) for s in SIDEWAYS[m]))]
        move = (safe or best)[int(rng.integers(len(safe or best)))]
        moves.append(move)
        cell = step_cell(cell, move, size)
    return moves


class FrozenLakeSolver:
    """Walks a shortest path read off the last board shown; replans from every new board."""

    #: Plans within the episode's step budget: the registry passes max_steps (env.max_steps).
    uses_step_budget: ClassVar[bool] = True

    def __init__(self, task: Task, rng: np.random.Generator, max_steps: int = 16) -> None:
        lake = parse_board(task.prompt[-1]["content"])
        if lake is None or lake.player not in goal_distances(lake.rows):
            raise UngroundedTask(f"frozenlake task {task.item_key!r}: the prompt shows no solvable board")
        self._lake = lake
        self._rng = rng
        self._max_steps = max_steps
        self._steps = 0
        self._careful = False

    def next_action(self, last_feedback: str | None) -> tuple[str, str]:
        """The next (choice, content): moves along a shortest path on the last board shown."""
        if last_feedback is not None:
            lake = parse_board(last_feedback)
            if lake is not None:
                self._lake = lake
            self._careful = self._careful or "slipped" in last_feedback
        dist = goal_distances(self._lake.rows).get(self._lake.player)
        if not dist:  # on the goal, in a hole, or cut off: nothing left to walk
            return FINISH
        left = max(1, self._max_steps - self._steps)
        count = 1 if self._careful else min(MAX_MOVES_PER_TURN, max(1, math.ceil(dist / left)))
        self._steps += 1
        return "action", ", ".join(plan_moves(self._lake, count, self._rng))
