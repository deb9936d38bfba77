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

from gymnasium import spaces

from userrl.envs.base import BOOL_SPACE, MAX_FEEDBACK_CHARS, MultiTurnEnv, Task, text_space
from userrl.envs.sokoban.board import BLOCKED, BUMPED, MAX_MOVES_PER_TURN, PUSHED, parse_moves
from userrl.envs.sokoban.tasks import check_room

INVALID_ACTION = (
    "Invalid action. Allowed choice: action, with one to three moves (up, down, left, right), "
    "for example: right, down."
)
INVALID_MOVES = (
    f"Invalid moves. Give 1 to {MAX_MOVES_PER_TURN} moves, each up, down, left or right, separated "
    "by commas, for example: right, down."
)
GAVE_UP = "Episode finished. The puzzle is not solved."
ON_TARGET = "The box is on a target."
OFF_TARGET = "The box left its target."
SOLVED = "Every box is on a target. You solved the puzzle!"
DROPPED = "The remaining moves were not made."
#: The reset text; like every reset text it is never shown to the agent (§0.3). The board follows it.
WELCOME = "SokobanGym: the room is ready."


class SokobanEnv(MultiTurnEnv):
    """The Sokoban gym: push every box onto a target, a few moves per step."""

    gym_name: ClassVar[str] = "sokoban"
    allowed_choices: ClassVar[tuple[str, ...]] = ("action",)
    normalize_rewards_default: ClassVar[bool] = False

    def _configure(self, *, success_reward: float = 1.0, box_reward: float = 0.0) -> None:
        """Gym keywords: the reward of solving the room, and the optional shaping per box on a target."""
        if not math.isfinite(success_reward) or not math.isfinite(box_reward):
            raise ValueError(f"success_reward and box_reward must be finite, got {success_reward!r}, {box_reward!r}")
        self.success_reward = float(success_reward)
        self.box_reward = float(box_reward)

    def _observation_fields(self) -> dict[str, spaces.Space]:
        return {
            "board": text_space(MAX_FEEDBACK_CHARS),
            "step_count": self.count_space(),
            "episode_complete": BOOL_SPACE,
            "success": BOOL_SPACE,
        }

    def _load_task(self, task: Task) -> None:
        data = task.data
        if not isinstance(data, dict):
            raise ValueError(f"sokoban task {task.item_key!r}: data must be an object with a 'map'")
        self._start = check_room(data.get("map"), f"sokoban task {task.item_key!r}")
        self._room_id = str(data.get("id", task.item_key))

    # ------------------------------------------------------------------ episode

    def _extra(self) -> tuple[dict[str, Any], dict[str, Any]]:
        obs = {"board": self.room.render(), "success": self.success}
        info = {
            "room_id": self._room_id,
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
        return f"{WELCOME}\n{self.room.render()}", obs, info

    async def _astep_impl(
        self, choice: str, content: str
    ) -> tuple[str, float, bool, dict[str, Any], dict[str, Any]]:
        base, terminated = 0.0, False
        if choice == "action":
            moves = parse_moves(content)
            if moves is None:
                feedback = INVALID_MOVES
            else:
                events, shaping = self._play(moves)
                terminated = self.success
                base = shaping + (self.success_reward if self.success else 0.0)
                feedback = " ".join(events) + "\n" + self.room.render()
        elif choice == "finish":
            feedback, terminated = GAVE_UP, True
        else:
            feedback = INVALID_ACTION
        reward = self.shaped_reward(base, self.step_penalty)
        obs, info = self._extra()
        return feedback, reward, terminated, obs, info

    def _play(self, moves: list[str]) -> tuple[list[str], float]:
        """Make the moves in order: one sentence per move and per box event, and the box shaping earned."""
        events: list[str] = []
        shaping = 0.0
        for i, move in enumerate(moves):
            before = self.room
            self.room, outcome = before.move(move)
            self.moves_made += 1
            if outcome == BUMPED:
                events.append(f"A wall blocks the way {move}.")
            elif outcome == BLOCKED:
                events.append(f"The box cannot move {move}: a wall or another box is behind it.")
            elif outcome == PUSHED:
                self.pushes += 1
                events.append(f"You pushed a box {move}.")
                on_before = len(before.boxes & before.targets)
                on_after = len(self.room.boxes & self.room.targets)
                if on_after > on_before:
                    events.append(ON_TARGET)
                elif on_after < on_before:
                    events.append(OFF_TARGET)
                shaping += self.box_reward * (on_after - on_before)
            else:
                events.append(f"You moved {move}.")
            if self.room.solved:
                self.success = True
                events.append(SOLVED)
                if i < len(moves) - 1:
                    events.append(DROPPED)
                break
        return events, shaping
