"""GridGameEnv: the episode both grid games (FrozenLake, Sokoban) share; each gym supplies its board and one move.

An `[action]` names 1 to MAX_MOVES_PER_TURN moves (see `moves`), made in order within one step; the
feedback is one or more sentences per move, then the new board. The move that ends the episode drops the
rest. `[finish]` gives up; any other choice gets INVALID_ACTION. The step reward is the shaping earned by
the moves plus `success_reward` on success, less `step_penalty`.
"""

from __future__ import annotations

from typing import Any, ClassVar

from gymnasium import spaces

from userrl.envs.base import BOOL_SPACE, MAX_FEEDBACK_CHARS, MultiTurnEnv, Task, text_space
from userrl.envs.moves import MAX_MOVES_PER_TURN, parse_moves

INVALID_ACTION = (
    "Invalid action. Allowed choice: action, with one to three moves (up, down, left, right), "
    "for example: right, down."
)
INVALID_MOVES = (
    f"Invalid moves. Give 1 to {MAX_MOVES_PER_TURN} moves, each up, down, left or right, separated "
    "by commas, for example: right, down."
)
DROPPED = "The remaining moves were not made."


class GridGameEnv(MultiTurnEnv):
    """Base of the grid games: a text board from the task's 'map', and `[action]` steps of a few moves.

    Subclasses set `gave_up` (the `[finish]` feedback), set `success_reward` in `_configure` and
    `success`/`moves_made` at reset, and implement `_load_map`, `_board`, `_move` and `_extra`.
    """

    allowed_choices: ClassVar[tuple[str, ...]] = ("action",)
    normalize_rewards_default: ClassVar[bool] = False
    #: The feedback of `[finish]`.
    gave_up: ClassVar[str] = ""

    success: bool
    success_reward: float
    moves_made: int

    def _observation_fields(self) -> dict[str, spaces.Space]:
        return {
            "board": text_space(MAX_FEEDBACK_CHARS),
            "step_count": self.count_space(),
            "episode_complete": BOOL_SPACE,
            "success": BOOL_SPACE,
        }

    def _load_task(self, task: Task) -> None:
        data = task.data
        where = f"{self.gym_name} task {task.item_key!r}"
        if not isinstance(data, dict):
            raise ValueError(f"{where}: data must be an object with a 'map'")
        self._load_map(data.get("map"), where)
        self._task_id = str(data.get("id", task.item_key))

    def _load_map(self, raw: Any, where: str) -> None:
        """Check the task's map (errors name `where`) and keep it for the episodes."""
        raise NotImplementedError

    def _board(self) -> str:
        """The board as the agent sees it now."""
        raise NotImplementedError

    def _move(self, move: str) -> tuple[list[str], float, bool]:
        """Make one move: its sentences, the shaping reward it earns, and whether it ends the episode."""
        raise NotImplementedError

    def _extra(self) -> tuple[dict[str, Any], dict[str, Any]]:
        """The gym's observation fields and info keys after a reset or step."""
        raise NotImplementedError

    async def _astep_impl(
        self, choice: str, content: str
    ) -> tuple[str, float, bool, dict[str, Any], dict[str, Any]]:
        base, terminated = 0.0, False
        if choice == "action":
            moves = parse_moves(content)
            if moves is None:
                feedback = INVALID_MOVES
            else:
                events, shaping, terminated = self._play(moves)
                base = shaping + (self.success_reward if self.success else 0.0)
                feedback = " ".join(events) + "\n" + self._board()
        elif choice == "finish":
            feedback, terminated = self.gave_up, True
        else:
            feedback = INVALID_ACTION
        reward = self.shaped_reward(base, self.step_penalty)
        obs, info = self._extra()
        return feedback, reward, terminated, obs, info

    def _play(self, moves: list[str]) -> tuple[list[str], float, bool]:
        """Make the moves in order: all their sentences, the shaping earned, and whether the episode ended."""
        events: list[str] = []
        shaping = 0.0
        for i, move in enumerate(moves):
            sentences, earned, ended = self._move(move)
            self.moves_made += 1
            events.extend(sentences)
            shaping += earned
            if ended:
                if i < len(moves) - 1:
                    events.append(DROPPED)
                return events, shaping, True
        return events, shaping, False
