"""TelepathyEnv: twenty questions about a hidden entity (docs/spec/GYMS.md §6)."""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any, ClassVar

from userrl.envs.base import Task
from userrl.envs.oracle import OracleEnv
from userrl.envs.telepathy import roles

# Every feedback string of section 6, verbatim (the judge's own wording comes from roles, the oracle's
# fallback from userrl.envs.oracle).
CORRECT_PREFIX = "Correct! "
JUDGE_FAILED = "Your guess could not be evaluated. Try again."
INVALID_ACTION = "Invalid action. Allowed choices: action (a yes/no question), answer (your guess)."
#: The reset text; like every reset text it is never shown to the agent (§0.3).
WELCOME = "TelepathyGym: the entity is chosen. Ask yes/no questions, then guess it."
ROLES = ("oracle", "judge")


class TelepathyEnv(OracleEnv):
    """The Telepathy gym: ask yes/no questions about a hidden entity, then name it."""

    gym_name: ClassVar[str] = "telepathy"
    role_names: ClassVar[tuple[str, ...]] = ROLES
    oracle_role: ClassVar[str] = roles.ORACLE_ROLE
    oracle_system_prompt: ClassVar[str] = roles.ORACLE_SYSTEM_PROMPT
    welcome: ClassVar[str] = WELCOME
    invalid_action: ClassVar[str] = INVALID_ACTION
    task_fields: ClassVar[tuple[str, ...]] = ("entity_title", "description", "goal")

    def _configure(self, *, oracle_history_turns: int = 0) -> None:
        """Gym keyword: how many past exchanges the model oracle sees."""
        self._configure_oracle(oracle_history_turns)

    def _load_task(self, task: Task) -> None:
        data = task.data
        try:
            fields = {k: data[k] for k in ("title", "description", "goal", "target_entity", "category")}
        except (KeyError, TypeError) as exc:
            raise ValueError(
                f"telepathy task {task.item_key!r}: data needs title, description, goal, target_entity "
                f"and category ({exc!r})"
            ) from exc
        if not all(isinstance(v, str) for v in fields.values()):
            raise ValueError(
                f"telepathy task {task.item_key!r}: title, description, goal, ... must be strings"
            )
        self._title, self._description, self._goal = fields["title"], fields["description"], fields["goal"]
        self._target, self._category = fields["target_entity"], fields["category"]
        self._keywords = roles.entity_keywords(self._title, self._target, self._category)

    # ------------------------------------------------------------------ episode state

    def _reset_task_state(self) -> None:
        self.response_history: list[dict[str, Any]] = []

    def _task_observation(self) -> dict[str, Any]:
        return {"entity_title": self._title, "description": self._description, "goal": self._goal}

    def _task_info(self) -> dict[str, Any]:
        return {
            "target_entity": self._target,
            "category": self._category,
            "response_history": copy.deepcopy(self.response_history),
        }

    def _record_step(self, choice: str, content: str, feedback: str) -> None:
        if choice in ("action", "answer"):
            self.response_history.append(
                {"step": self.step_count, "choice": choice, "content": content, "response": feedback}
            )

    # ------------------------------------------------------------------ roles

    def _scripted_answer(self, question: str) -> str:
        return roles.scripted_oracle(question, self._keywords)

    def _oracle_user_message(self, question: str, history: Sequence[tuple[str, str]]) -> str:
        return roles.oracle_user_message(self._target, question, history)

    async def _judge(self, guess: str) -> dict[str, Any] | None:
        """{thought, judgment: bool, feedback} from the judge role, or None when it failed."""
        if not guess.strip() or self.role_backends["judge"] == "scripted":
            right = bool(guess.strip()) and roles.scripted_judge(guess, self._title, self._target)
            return {
                "thought": "",
                "judgment": right,
                "feedback": roles.JUDGE_RIGHT if right else roles.JUDGE_WRONG,
            }
        user = roles.judge_user_message(self._target, guess)
        verdict, call = await self.llm.complete_json(
            roles.JUDGE_ROLE, roles.JUDGE_SYSTEM_PROMPT, user, roles.validate_judge_reply
        )
        self.record_lm_call(call.role, call.attempts, call.ok, call.latency_s)
        if verdict is not None and not verdict["feedback"]:
            # An empty model feedback would leave the agent with no reply at all.
            verdict["feedback"] = roles.JUDGE_RIGHT if verdict["judgment"] else roles.JUDGE_WRONG
        return verdict

    async def _judge_answer(self, guess: str) -> tuple[str, float, bool]:
        verdict = await self._judge(guess)
        self.judge_success = verdict is not None
        if verdict is None:
            score, feedback = 0.0, JUDGE_FAILED
        else:
            score = 1.0 if verdict["judgment"] else 0.0
            feedback = CORRECT_PREFIX + verdict["feedback"] if score == 1.0 else verdict["feedback"]
        reward = self._score(score, None if verdict is None else dict(verdict, guess=guess))
        return feedback, reward, score == 1.0
