"""FrozenLakeEnv: RAGEN's FrozenLake text game on top of gymnasium's `FrozenLake-v1` dynamics.

The agent walks from S to G on a lake with holes. The board is text (see `board`): P you, _ frozen ice,
O hole, G goal, X you in a hole, √ you on the goal; cells are separated by spaces, the top row first.

Actions (the format of docs/spec/GYMS.md §0.2.2): `[action] <moves>` with one to MAX_MOVES_PER_TURN (3)
moves among up,
down, left and right, any case, separated by commas or blanks ("left", "Up", "right, down, down"). The
moves are made in order within one step; a move off the edge leaves the player in place; once the
player falls into a hole or reaches the goal the remaining moves are dropped. Feedback: one sentence per
move ("You moved left.", "You fell into a hole.", "You reached the goal!"), then the new board. Content
that is not such a list gets INVALID_MOVES; any other choice than action (and [finish]) gets
INVALID_ACTION; both count a step and change nothing. `[finish]` gives up (terminates, reward 0).

Rewards: `success_reward` (1.0) times reward_scale on the step that reaches the goal, 0 otherwise; every
step also subtracts `step_penalty` (0 by default). The episode terminates on the goal or a hole and
truncates at max_steps.

Slippery ice (gym keyword `slippery`, default off): gymnasium's slippery dynamics, where a move goes the
intended way with probability `slip_success_rate` (1/3 as in gymnasium) and to either side otherwise;
the feedback says when the player slipped. The draws come from the env's private generator (0.3.1), so
an episode is deterministic given the task and the env's seed.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

from gymnasium.envs.toy_text.frozen_lake import FrozenLakeEnv as GymnasiumFrozenLake

from userrl.envs.frozenlake.board import MOVES, render_board, step_cell
from userrl.envs.frozenlake.tasks import check_map
from userrl.envs.grid import GridGameEnv

GAVE_UP = "Episode finished. You did not reach the goal."
FELL = "You fell into a hole."
REACHED = "You reached the goal!"
#: The reset text; like every reset text it is never shown to the agent (§0.3). The board follows it.
WELCOME = "FrozenLakeGym: the lake is ready."


class FrozenLakeEnv(GridGameEnv):
    """The FrozenLake gym: reach the goal across a lake with holes, a few moves per step."""

    gym_name: ClassVar[str] = "frozenlake"
    gave_up: ClassVar[str] = GAVE_UP

    def _configure(
        self, *, slippery: bool = False, slip_success_rate: float = 1.0 / 3.0, success_reward: float = 1.0
    ) -> None:
        """Gym keywords: slippery ice (off by default), its success rate, the reward of reaching the goal."""
        if not isinstance(slippery, bool):
            raise ValueError(f"slippery must be true or false, got {slippery!r}")
        if not math.isfinite(slip_success_rate) or not 0.0 < slip_success_rate <= 1.0:
            raise ValueError(f"slip_success_rate must be in (0, 1], got {slip_success_rate!r}")
        if not math.isfinite(success_reward):
            raise ValueError(f"success_reward must be a finite number, got {success_reward!r}")
        self.slippery = slippery
        self.slip_success_rate = float(slip_success_rate)
        self.success_reward = float(success_reward)

    def _load_map(self, raw: Any, where: str) -> None:
        self._desc = check_map(raw, where)
        self._size = (len(self._desc), len(self._desc[0]))
        self._lake = GymnasiumFrozenLake(
            desc=self._desc, is_slippery=self.slippery, success_rate=self.slip_success_rate
        )

    # ------------------------------------------------------------------ episode

    def _cell(self) -> tuple[int, int]:
        return divmod(int(self._lake.s), self._size[1])

    def _board(self) -> str:
        return render_board(self._desc, self._cell())

    def _extra(self) -> tuple[dict[str, Any], dict[str, Any]]:
        obs = {"board": self._board(), "success": self.success}
        info = {
            "map_id": self._task_id,
            "player": list(self._cell()),
            "moves_made": self.moves_made,
            "success": self.success,
            "fell_in_hole": self.fell,
            "slippery": self.slippery,
        }
        return obs, info

    def _reset_impl(self) -> tuple[str, dict[str, Any], dict[str, Any]]:
        # gymnasium's generator is seeded from the env's own, so slips replay with the env's seed.
        self._lake.reset(seed=int(self.rng.integers(2**63)))
        self.success = False
        self.fell = False
        self.moves_made = 0
        obs, info = self._extra()
        return f"{WELCOME}\n{self._board()}", obs, info

    def _move(self, move: str) -> tuple[list[str], float, bool]:
        """One move through gymnasium's step: a sentence for it, and one more when it ends the episode."""
        before = self._cell()
        intended = step_cell(before, move, self._size)
        state, _, done, _, _ = self._lake.step(MOVES.index(move))
        after = divmod(int(state), self._size[1])
        if after == intended:
            events = [f"You moved {move}." if after != before else
                      f"You tried to move {move}, but the edge of the lake stopped you."]
        elif after == before:
            events = [f"You tried to move {move}, but slipped against the edge and stayed in place."]
        else:
            went = next(m for m in MOVES if step_cell(before, m, self._size) == after)
            events = [f"You tried to move {move}, but slipped and moved {went}."]
        if done:
            letter = self._desc[after[0]][after[1]]
            self.fell, self.success = letter == "H", letter == "G"
            events.append(REACHED if self.success else FELL)
        return events, 0.0, bool(done)
