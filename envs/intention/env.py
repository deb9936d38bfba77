"""IntentionEnv: uncover the hidden missing details of a vague request by asking questions (docs/spec/GYMS.md §2)."""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar, TypeVar

from gymnasium import spaces

from userrl.envs.base import BOOL_SPACE, MAX_FEEDBACK_CHARS, MultiTurnEnv, ScalarBox, Task, text_space
from userrl.envs.intention import roles
from userrl.envs.intention.roles import FALLBACK_REPLIES, JUDGE_ROLE, USER_ROLE, Judgement
from userrl.envs.intention.scripted import detail_keywords, scripted_judgement, scripted_reply
from userrl.envs.intention.tasks import MAX_DETAILS, details_of, validate_item
from userrl.envs.llm import PersonaUserClient, user_turn_context
from userrl.envs.text import content_words

# Every feedback string of section 2 that is not a user reply, verbatim.
EMPTY_QUESTION = "Please ask a clarifying question."
EPISODE_FINISHED = "Episode finished."
INVALID_ACTION = "Invalid action. Allowed choice: action (ask one clarifying question)."
#: The reset text; like every reset text it is never shown to the agent (0.3).
WELCOME = "IntentionGym: a vague request is ready. Ask clarifying questions to uncover its missing details."
GOAL = "Uncover all the missing details of the vague request by asking clarifying questions."

#: W of the reward rule: importance 3 (HIGH), 2 (MEDIUM), 1 (LOW).
IMPORTANCE_WEIGHTS: Mapping[int, float] = {3: 1.0, 2: 0.7, 1: 0.4}
MULTI_DETAIL_PENALTY = 0.2

_T = TypeVar("_T")


def base_reward(importances: Sequence[int], penalty: float = MULTI_DETAIL_PENALTY) -> float:
    """The step's base reward for the details newly covered (their importances): W[max] - penalty * (n - 1)."""
    if not importances:
        return 0.0
    # Rounded so that e.g. 0.7 - 0.4 reads 0.3, not 0.29999999999999993; the spec compares within 1e-9.
    return round(max(0.0, IMPORTANCE_WEIGHTS[max(importances)] - penalty * (len(importances) - 1)), 6)


def reward_bounds(reward_scale: float, step_penalty: float, normalize: bool) -> tuple[float, float]:
    """The range of a step reward: base in [0, 1] times the scale minus the penalty, or [0, 1] when clipped."""
    if normalize:
        return 0.0, 1.0
    # Non-question steps pay exactly 0, so 0 is always inside the range.
    ends = (0.0, -step_penalty, reward_scale - step_penalty)
    return min(ends), max(ends)


def max_return(importances: Sequence[int]) -> float:
    """The best possible episode return: every detail covered on its own."""
    return round(sum(IMPORTANCE_WEIGHTS[i] for i in importances), 6)


class IntentionEnv(MultiTurnEnv):
    """The Intention gym: each question may cover hidden details; the importance of the best one pays."""

    gym_name: ClassVar[str] = "intention"
    allowed_choices: ClassVar[tuple[str, ...]] = ("action",)
    normalize_rewards_default: ClassVar[bool] = True
    uses_role_client: ClassVar[bool] = True
    role_names: ClassVar[tuple[str, ...]] = roles.ROLES

    def _configure(
        self,
        *,
        user_sees_details: bool = True,
        multi_detail_penalty: float = MULTI_DETAIL_PENALTY,
    ) -> None:
        """Gym keywords: whether the user sees the details, and the bundling penalty."""
        # Intention has no preset-specific settings (docs/spec/GYMS.md §0.9): both presets play identically.
        if not math.isfinite(multi_detail_penalty) or multi_detail_penalty < 0:
            raise ValueError(
                f"multi_detail_penalty must be a non-negative number, got {multi_detail_penalty!r}"
            )
        self.multi_detail_penalty = float(multi_detail_penalty)
        self.user_sees_details = bool(user_sees_details)

    def _observation_fields(self) -> dict[str, spaces.Space]:
        counter = spaces.Discrete(MAX_DETAILS + 1)
        low, high = reward_bounds(self.reward_scale, self.step_penalty, self.normalize_rewards)
        return {
            "task_category": text_space(MAX_FEEDBACK_CHARS),
            "task_description": text_space(MAX_FEEDBACK_CHARS),
            "goal": text_space(len(GOAL)),
            "step_count": self.count_space(),
            "episode_complete": BOOL_SPACE,
            "total_missing_details": counter,
            "remaining_missing_details": counter,
            "coverage_ratio": ScalarBox(),
            "last_reward": ScalarBox(low, high),
        }

    def _load_task(self, task: Task) -> None:
        data = dict(task.data)
        data.setdefault("id", task.item_key)
        record = validate_item(data, f"intention task {task.item_key!r}")
        self._task_id = record["id"]
        self._task_text = record["task"]
        self._category = record["category"]
        self._details = details_of(record)
        self._task_words = frozenset(content_words(self._task_text))
        self._keywords = tuple(detail_keywords(self._task_text, d) for d in self._details)

    # ------------------------------------------------------------------ episode state

    def _reset_impl(self) -> tuple[str, dict[str, Any], dict[str, Any]]:
        self.remaining: list[int] = list(range(len(self._details)))
        self.covered: list[int] = []
        self.exchanges: list[tuple[str, str]] = []
        self.last_reward = 0.0
        # One option per detail for the scripted user, drawn up front so every sample of a GRPO group
        # (same item key, same seed) hears the same preferences whatever it asks first.
        self._option_picks = [int(self.rng.integers(len(d.options))) for d in self._details]
        return WELCOME, self._extra_obs(), self._gym_info([], None)

    def _extra_obs(self) -> dict[str, Any]:
        total = len(self._details)
        return {
            "task_category": self._category,
            "task_description": self._task_text,
            "goal": GOAL,
            "total_missing_details": total,
            "remaining_missing_details": len(self.remaining),
            "coverage_ratio": len(self.covered) / total,
            "last_reward": self.last_reward,
        }

    def _gym_info(self, newly: list[int], breakdown: dict[str, Any] | None) -> dict[str, Any]:
        covered = set(self.covered)
        return {
            "task_id": self._task_id,
            "missing_details_summary": [
                {"description": d.description, "importance": d.importance, "covered": i in covered}
                for i, d in enumerate(self._details)
            ],
            "question_history": [q for q, _ in self.exchanges],
            "conversation_history": [{"question": q, "response": a} for q, a in self.exchanges],
            "covered_details": [self._details[i].description for i in self.covered],
            "newly_covered_details": [self._details[i].description for i in newly],
            "reward_breakdown": breakdown,
        }

    def _result(
        self,
        feedback: str,
        reward: float,
        terminated: bool,
        newly: list[int],
        breakdown: dict[str, Any] | None,
    ) -> tuple[str, float, bool, dict[str, Any], dict[str, Any]]:
        self.last_reward = reward
        return feedback, reward, terminated, self._extra_obs(), self._gym_info(newly, breakdown)

    # ------------------------------------------------------------------ steps

    async def _astep_impl(
        self, choice: str, content: str
    ) -> tuple[str, float, bool, dict[str, Any], dict[str, Any]]:
        if choice in ("action", "answer"):
            if not content:
                return self._result(EMPTY_QUESTION, 0.0, False, [], None)
            return await self._ask(content)
        if choice == "finish":
            return self._result(EPISODE_FINISHED, 0.0, True, [], None)
        return self._result(INVALID_ACTION, 0.0, False, [], None)

    async def _ask(self, question: str) -> tuple[str, float, bool, dict[str, Any], dict[str, Any]]:
        # Independent roles: the judge never sees the current reply, so both run at once.
        reply, judgement = await asyncio.gather(self._user_reply(question), self._judge(question))
        positions = roles.covered_positions(judgement, len(self.remaining)) if judgement is not None else []
        newly = sorted(self.remaining[p] for p in positions)
        self.remaining = [i for i in self.remaining if i not in newly]
        self.covered.extend(newly)
        self.exchanges.append((question, reply))
        importances = [self._details[i].importance for i in newly]
        base = base_reward(importances, self.multi_detail_penalty)
        reward = self.shaped_reward(base, self.step_penalty)
        breakdown = {
            "judge_ok": judgement is not None,
            "is_task_related": None if judgement is None else judgement.is_task_related,
            "newly_covered": len(newly),
            "max_importance": max(importances) if importances else None,
            "importance_weight": IMPORTANCE_WEIGHTS[max(importances)] if importances else 0.0,
            "multi_detail_penalty": round(self.multi_detail_penalty * max(0, len(newly) - 1), 6),
            "base": base,
            "reward_scale": self.reward_scale,
            "step_penalty": self.step_penalty,
            "reward": reward,
        }
        return self._result(reply, reward, not self.remaining, newly, breakdown)

    def persona_view(self, question: str) -> tuple[str, list[dict[str, str]]]:
        """What a persona-prompted user simulator sees before answering `question`: its persona (the request and its
        preferred option per detail, whatever user_sees_details says) and the conversation, as in the
        recorded rows."""
        persona = roles.persona_prompt(self._task_text, self._category, self._details, self._option_picks)
        return persona, user_turn_context(self._task_text, self.exchanges, question)

    async def _user_reply(self, question: str) -> str:
        if self.role_backends[USER_ROLE] == "scripted":
            return scripted_reply(question, self._details, self._keywords, self._option_picks)
        if isinstance(self.llm, PersonaUserClient):  # a user simulator: its persona and the conversation
            values, call = await self.llm.complete_user(USER_ROLE, *self.persona_view(question), ("response",))
            self.record_lm_call(call.role, call.attempts, call.ok, call.latency_s)
            if values is None:
                return FALLBACK_REPLIES[int(self.rng.integers(len(FALLBACK_REPLIES)))]
            return values["response"]
        message = roles.user_message(
            self._task_text,
            self._category,
            self._details,
            self.exchanges,
            question,
            sees_details=self.user_sees_details,
        )
        value = await self._call(USER_ROLE, roles.USER_SYSTEM_PROMPT, message, roles.validate_user_reply)
        if value is None:
            return FALLBACK_REPLIES[int(self.rng.integers(len(FALLBACK_REPLIES)))]
        return value

    async def _judge(self, question: str) -> Judgement | None:
        """The verdict on the remaining details; None when the model failed (fallback: nothing covered)."""
        if self.role_backends[JUDGE_ROLE] == "scripted":
            return scripted_judgement(question, self._task_words, [self._keywords[i] for i in self.remaining])
        remaining = [self._details[i] for i in self.remaining]
        message = roles.judge_message(self._task_text, self._category, remaining, self.exchanges, question)
        return await self._call(JUDGE_ROLE, roles.JUDGE_SYSTEM_PROMPT, message, roles.validate_judgement)

    async def _call(
        self, role: str, system: str, user: str, validate: Callable[[dict[str, Any]], _T]
    ) -> _T | None:
        assert self.llm is not None  # the base refuses a model backend without a client
        value, call = await self.llm.complete_json(role, system, user, validate)
        self.record_lm_call(call.role, call.attempts, call.ok, call.latency_s)
        return value
