"""SokobanEnv: RAGEN's Sokoban text game: push every box onto a target in a small walled room.

The board is text (see `board`): # wall, _ floor, O target, X box, √ box on a target, P player, S player
on a target; cells are separated by spaces, the top row first. The game is deterministic.

Actions (the format of docs/spec/GYMS.md §0.2.2): `[action] <moves>` with one to MAX_MOVES_PER_TURN (3)
moves among up,
down, left and right, any case, separated by commas or blanks ("left", "Up", "right, down, down"). The
moves are made in order within one step. Walking into a box pushes it if the cell behind it is floor or
a target; a wall, or a box that cannot move, leaves the player in place. Once every box is on a target
the remaining moves are dropped. Feedback: one sentence per move ("You moved left.", "You pushed a box
up.", "The box is on a target.", "A wall blocks the way."), then the new board. Content that is not such
a list gets INVALID_MOVES; any other choice than action (and [finish]) gets INVALID_ACTION; both count a
step and change nothing. `[finish]` gives up (terminates, reward 0). There is no deadlock detection: a
stuck room simply runs until max_steps, as in RAGEN.

Rewards (RAGEN-style): `success_reward` (1.0) times reward_scale on the step that puts the last box on
its target, which terminates the episode. Optional shaping, off by default: `box_reward` for every box
pushed onto a target, minus the same for every box pushed off one (RAGEN used 1 per box); every step
subtracts `step_penalty` (RAGEN: 0.1; 0 by default). Episodes truncate at max_steps.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

from userrl.envs.grid import GridGameEnv
from userrl.envs.sokoban.board import BLOCKED, BUMPED, PUSHED
from userrl.envs.sokoban.tasks import check_room

GAVE_UP = "Episode finished. The puzzle is not solved."
ON_TARGET = "The box is on a target."
OFF_TARGET = "The box left its target."
SOLVED = "Every box is on a target. You solved the puzzle!"
#: The reset text; like every reset text it is never shown to the agent (§0.3). The board follows it.
WELCOME = "SokobanGym: the room is ready."


class SokobanEnv(GridGameEnv):
    """The Sokoban gym: push every box onto a target, a few moves per step."""

    gym_name: ClassVar[str] = "sokoban"
    gave_up: ClassVar[str] = GAVE_UP

    def _configure(self, *, success_reward: float = 1.0, box_reward: float = 0.0) -> None:
        """Gym keywords: the reward of solving the room, and the optional shaping per box on a target."""
        if not math.isfinite(success_reward) or not math.isfinite(box_reward):
            raise ValueError(f"success_reward and box_reward must be finite, got {success_reward!r}, {box_reward!r}")
        self.success_reward = float(success_reward)
        self.box_reward = float(box_reward)

    def _load_map(self, raw: Any, where: str) -> None:
        self._start = check_room(raw, where)

    # ------------------------------------------------------------------ episode

    def _board(self) -> str:
        return self.room.render()

    def _extra(self) -> tuple[dict[str, Any], dict[str, Any]]:
        obs = {"board": self._board(), "success": self.success}
        info = {
            "room_id": self._task_id,
            "player": list(self.room.player),
            "boxes_on_targets": len(self.room.boxes & self.room.targets),
            "boxes": len(self.room.boxes),
            "moves_made": self.moves_made,
            "pushes": self.pushes,
            "success": self.success,
        }
        return obs, info

    def _reset_impl(self) -> tuple[str, dict[str, Any], dict[str, Any]]:
        self.room = self._start
        self.success = False
        self.moves_made = 0
        self.pushes = 0
        obs, info = self._extra()
        return f"{WELCOME}\n{self._board()}", obs, info

    def _move(self, move: str) -> tuple[list[str], float, bool]:
        """One move by the room's rules: its sentences (box events included) and the box shaping earned."""
        before = self.room
        self.room, outcome = before.move(move)
        shaping = 0.0
        if outcome == BUMPED:
            events = [f"A wall blocks the way {move}."]
        elif outcome == BLOCKED:
            events = [f"The box cannot move {move}: a wall or another box is behind it."]
        elif outcome == PUSHED:
            self.pushes += 1
            events = [f"You pushed a box {move}."]
            on_before = len(before.boxes & before.targets)
            on_after = len(self.room.boxes & self.room.targets)
            if on_after > on_before:
                events.append(ON_TARGET)
            elif on_after < on_before:
                events.append(OFF_TARGET)
            shaping = self.box_reward * (on_after - on_before)
        else:
            events = [f"You moved {move}."]
        if self.room.solved:
            self.success = True
            events.append(SOLVED)
        return events, shaping, self.room.solved
