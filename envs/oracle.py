"""The yes/no oracle of the question-asking gyms (Telepathy, Turtle): a base env, reply rules and history."""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any, ClassVar

from gymnasium import spaces

from userrl.envs.base import BOOL_SPACE, MAX_FEEDBACK_CHARS, MultiTurnEnv, ScalarBox, text_space

ORACLE_FALLBACK = "I could not process that question. Please ask another yes/no question."
EPISODE_FINISHED = "Episode finished."
#: How earlier exchanges are shown to a model oracle (only when the env is asked to show some).
ORACLE_HISTORY_TEMPLATE = "Earlier questions and your answers:\n{lines}\n\n"
_LABELS = {"yes": "Yes", "no": "No", "maybe": "Maybe"}


def normalize_yes_no(value: Any) -> str:
    """The oracle's reply as "Yes", "No" or "Maybe": its first word, case-insensitively; else "Maybe"."""
    if isinstance(value, bool):
        return "Yes" if value else "No"
    if not isinstance(value, str) or not value.split():
        return "Maybe"
    first = value.split()[0].strip(".,;:!?\"'*`()[]").casefold()
    return _LABELS.get(first, "Maybe")


def validate_oracle_reply(obj: dict[str, Any]) -> str:
    """Check an oracle reply {"thought", "response"}; the value is the normalised answer."""
    if "response" not in obj:
        raise KeyError("the oracle reply has no 'response'")
    return normalize_yes_no(obj["response"])


def history_block(history: Sequence[tuple[str, str]]) -> str:
    """The oracle prompt's block of earlier (question, answer) pairs; empty without any."""
    if not history:
        return ""
    return ORACLE_HISTORY_TEMPLATE.format(lines="\n".join(f"Q: {q}\nA: {a}" for q, a in history))


class OracleEnv(MultiTurnEnv):
    """Base of the gyms whose agent asks a yes/no oracle about something hidden, then answers.

    It owns the episode skeleton both share: `action` asks the oracle, `answer` is judged and scored,
    `[finish]` ends the episode, anything else gets `invalid_action`; the reward pays the gain of an
    answer over the best score so far. Subclasses set `role_names` (with "oracle"), `oracle_role`,
    `oracle_system_prompt`, `welcome`, `invalid_action` and `task_fields`, call `_configure_oracle` from `_configure`, and
    implement `_judge_answer`, `_scripted_answer`, `_oracle_user_message`, `_task_observation` and
    `_task_info` (plus `_reset_task_state` for their own episode records).
    """

    uses_role_client: ClassVar[bool] = True
    allowed_choices: ClassVar[tuple[str, ...]] = ("action", "answer")
    # r_final = clip(r * reward_scale - step_penalty * step_count, 0, 1) (sections 6 and 8).
    normalize_rewards_default: ClassVar[bool] = True
    role_names: ClassVar[tuple[str, ...]] = ("oracle",)
    oracle_role: ClassVar[str] = ""
    oracle_system_prompt: ClassVar[str] = ""
    #: The reset text; like every reset text it is never shown to the agent (docs/spec/GYMS.md §0.3).
    welcome: ClassVar[str] = ""
    #: The reply to an action without a choice the gym handles.
    invalid_action: ClassVar[str] = ""
    #: The text observation fields that describe the task (`_task_observation`'s keys), in order.
    task_fields: ClassVar[tuple[str, ...]] = ()

    def _observation_fields(self) -> dict[str, spaces.Space]:
        return {
            **{name: text_space(MAX_FEEDBACK_CHARS) for name in self.task_fields},
            "step_count": self.count_space(),
            "episode_complete": BOOL_SPACE,
            "current_score": ScalarBox(),
            "best_score": ScalarBox(),
        }

    def _configure_oracle(self, oracle_history_turns: int) -> None:
        """Check and keep how many past exchanges the model oracle sees."""
        if isinstance(oracle_history_turns, bool) or not isinstance(oracle_history_turns, int):
            raise ValueError(f"oracle_history_turns must be an integer >= 0, got {oracle_history_turns!r}")
        if oracle_history_turns < 0:
            raise ValueError(f"oracle_history_turns must be an integer >= 0, got {oracle_history_turns!r}")
        self.oracle_history_turns = oracle_history_turns

    def _scripted_answer(self, question: str) -> str:
        """The model-free oracle's Yes/No/Maybe."""
        raise NotImplementedError

    def _oracle_user_message(self, question: str, history: Sequence[tuple[str, str]]) -> str:
        """The model oracle's user message; history holds the (question, answer) pairs to show."""
        raise NotImplementedError

    async def _ask(self, question: str) -> str:
        """The oracle's Yes/No/Maybe, or the fallback message when the model role fails."""
        if not question.strip():
            # Nothing to decide; the scripted rule gives Maybe too, so no model call is spent on it.
            answer: str | None = "Maybe"
        elif self.role_backends["oracle"] == "scripted":
            answer = self._scripted_answer(question)
        else:
            history = self.oracle_history[-self.oracle_history_turns :] if self.oracle_history_turns else []
            user = self._oracle_user_message(question, history)
            answer, call = await self.llm.complete_json(
                self.oracle_role, self.oracle_system_prompt, user, validate_oracle_reply
            )
            self.record_lm_call(call.role, call.attempts, call.ok, call.latency_s)
        if answer is None:
            return ORACLE_FALLBACK
        self.oracle_history.append((question, answer))
        return answer

    # ------------------------------------------------------------------ episode skeleton

    def _reset_impl(self) -> tuple[str, dict[str, Any], dict[str, Any]]:
        self.current_score = 0.0
        self.best_score = 0.0
        #: Whether this step's judge gave a verdict; None on steps that judge nothing.
        self.judge_success: bool | None = None
        self.best_json_response: dict[str, Any] | None = None
        self.oracle_history: list[tuple[str, str]] = []
        self._reset_task_state()
        return self.welcome, self._extra_obs(), self._gym_info()

    def _reset_task_state(self) -> None:
        """Clear the subclass's own episode records (called at every reset)."""

    def _task_observation(self) -> dict[str, Any]:
        """The observation fields that describe the task (besides the scores)."""
        raise NotImplementedError

    def _task_info(self) -> dict[str, Any]:
        """The gym's own info keys (besides the judge and score keys)."""
        raise NotImplementedError

    def _extra_obs(self) -> dict[str, Any]:
        return {**self._task_observation(), "current_score": self.current_score, "best_score": self.best_score}

    def _gym_info(self) -> dict[str, Any]:
        return {
            "judge_success": self.judge_success,
            "current_score": self.current_score,
            "best_score": self.best_score,
            "best_json_response": copy.deepcopy(self.best_json_response),
            **self._task_info(),
        }

    async def _astep_impl(
        self, choice: str, content: str
    ) -> tuple[str, float, bool, dict[str, Any], dict[str, Any]]:
        reward, terminated = 0.0, False
        self.judge_success = None  # set only by steps that judge an answer
        if choice == "action":
            feedback = await self._ask(content)
        elif choice == "answer":
            feedback, reward, terminated = await self._judge_answer(content)
        elif choice == "finish":
            feedback, terminated = EPISODE_FINISHED, True
        else:
            feedback = self.invalid_action
        self._record_step(choice, content, feedback)
        return feedback, reward, terminated, self._extra_obs(), self._gym_info()

    async def _judge_answer(self, answer: str) -> tuple[str, float, bool]:
        """Judge an answer: (feedback, reward, whether it ends the episode); reward via `_score`."""
        raise NotImplementedError

    def _record_step(self, choice: str, content: str, feedback: str) -> None:
        """Keep a record of the step (the default keeps none beyond the oracle history)."""

    def _score(self, score: float, response: dict[str, Any] | None) -> float:
        """Record an answer's score (response None when the judge failed); the reward of its gain.

        Only answers pay: clip(gain * reward_scale - step_penalty * step_count, 0, 1) when normalized.
        """
        self.current_score = score
        gain = max(0.0, score - self.best_score)
        if response is not None and (self.best_json_response is None or score > self.best_score):
            self.best_json_response = response
        self.best_score = max(self.best_score, score)
        return self.shaped_reward(gain, self.step_penalty * self.step_count)
