"""Observation-grounded scripted solver of the Sokoban gym, used to write SFT demonstrations.

Every move follows from the board the agent was last shown: the solver reads the room from the task's
user message, then from each step's feedback, and plays a shortest solution of that room (breadth-first
search over positions; rng draws one of the shortest). It makes one move per step while the step budget
allows one per remaining move, otherwise ceil(moves left / steps left) of them (at most
MAX_MOVES_PER_TURN), and replans from every new board.
The task's hidden data is never read.
"""

from __future__ import annotations

import math
from typing import ClassVar

import numpy as np

from userrl.envs.base import Task
from userrl.envs.sokoban.board import MAX_MOVES_PER_TURN, Room, parse_board, successors
from userrl.envs.solving import FINISH, UngroundedTask

#: The solver gives up on rooms whose search grows past this many positions (none of the builtin ones).
MAX_STATES = 200_000


def random_shortest_solution(room: Room, rng: np.random.Generator) -> list[str] | None:
    """One shortest solution of room, drawn with rng among all of them; None when there is none.

    Breadth-first, layer by layer, keeping every shortest-distance predecessor of each position; once a
    layer holds solved positions, one of them is drawn and a path to it walked back through drawn parents.
    """
    start = (room.player, room.boxes)
    if room.solved:
        return []
    parents: dict[tuple, list[tuple[tuple, str]]] = {start: []}
    depth = {start: 0}
    frontier, solved, level = [room], [], 0
    while frontier and not solved and len(depth) <= MAX_STATES:
        level += 1
        nxt = []
        for current in frontier:
            key = (current.player, current.boxes)
            for move, after in successors(current):
                after_key = (after.player, after.boxes)
                if after_key not in depth:
                    depth[after_key] = level
                    parents[after_key] = [(key, move)]
                    nxt.append(after)
                    if after.solved:
                        solved.append(after_key)
                elif depth[after_key] == level:
                    parents[after_key].append((key, move))
        frontier = [r for r in nxt if not r.solved]
    if not solved:
        return None
    key, path = solved[int(rng.integers(len(solved)))], []
    while key != start:
        options = parents[key]
        key, move = options[int(rng.integers(len(options)))]
        path.append(move)
    return path[::-1]


class SokobanSolver:
    """Plays a shortest solution of the last room shown; replans from every new board."""

    #: Plans within the episode's step budget: the registry passes max_steps (env.max_steps).
    uses_step_budget: ClassVar[bool] = True

    def __init__(self, task: Task, rng: np.random.Generator, max_steps: int = 16) -> None:
        room = parse_board(task.prompt[-1]["content"])
        if room is None or room.solved:
            raise UngroundedTask(f"sokoban task {task.item_key!r}: the prompt shows no solvable room")
        self._room = room
        self._rng = rng
        self._max_steps = max_steps
        self._steps = 0

    def next_action(self, last_feedback: str | None) -> tuple[str, str]:
        """The next (choice, content): the first moves of a shortest solution of the last room shown."""
        if last_feedback is not None:
            room = parse_board(last_feedback)
            if room is not None:
                self._room = room
        path = random_shortest_solution(self._room, self._rng)
        if not path:  # solved, or stuck for good: nothing left to play
            return FINISH
        steps_left = max(1, self._max_steps - self._steps)
        count = min(MAX_MOVES_PER_TURN, max(1, math.ceil(len(path) / steps_left)))
        self._steps += 1
        return "action", ", ".join(path[:count])
