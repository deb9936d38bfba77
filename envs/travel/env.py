"""TravelEnv: plan a trip by searching, eliciting hidden preferences and recommending options.

Spec: docs/spec/GYMS.md §7.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
from gymnasium import spaces

from userrl.envs.base import BOOL_SPACE, MAX_FEEDBACK_CHARS, MultiTurnEnv, ScalarBox, Task, text_space
from userrl.envs.travel import roles
from userrl.envs.travel.schema import (
    ASPECT_LETTERS,
    FIELD_DESCRIPTIONS,
    LETTER_ASPECTS,
    OPTION_ID_ANYWHERE_RE,
    OPTION_ID_RE,
    Preference,
    display_option,
    parse_scenario,
)

# Every feedback string of section 7, verbatim (templates take the aspect or option id).
SEARCH_BACKEND_ISSUE = "The search backend is having temporary issues. Please try again later."
SEARCH_CORRECT = "Your search request is correct. Options for {aspect} ({fields}):"
SEARCH_ALREADY_DONE = "You have already searched {aspect}; refer to the earlier results."
SEARCH_REFINE = (
    "Please refine your request: match the user's needs, search one aspect at a time, and give exactly the "
    "required arguments."
)
TYPE3_REPLY = (
    "Good question, but I don't have a specific preference about that, or I already told you. Could you ask "
    "about other specifics?"
)
TYPE4_REPLY = "That question is too general for me. Could you ask about something more concrete?"
ONE_OPTION_ONLY = "Please recommend only one option at a time."
INVALID_OPTION_ID = "Invalid option id. Recommend exactly one id such as H11."
ASPECT_ALREADY_CHOSEN = (
    "You have already made a recommendation for this aspect. Continue with the other aspects."
)
CHOICE_BEST = "{id} is the best option for this aspect."
CHOICE_CORRECT = "{id} satisfies the preferences but is not the best option."
CHOICE_WRONG = "{id} does not satisfy the preferences."
CHOICE_RECORDED = " Your choice is recorded; do not recommend another option for this aspect. Continue with the other aspects."
INVALID_ACTION = "Invalid action. Allowed choices: search, action, answer."
#: The reply to [finish] (the spec gives none): the elicitation count, as the original reported it.
EPISODE_FINISHED = "Episode finished. You elicited {elicited} of {total} preferences."
GOAL = "Elicit travel preferences and provide appropriate recommendations."

#: Reward presets of docs/spec/GYMS.md §0.9: everything else is identical in both.
REWARD_PRESETS: dict[str, dict[str, float]] = {
    "train": {"search_correct_reward": 0.0, "preference_correct_reward": 0.8},
    "eval": {"search_correct_reward": 0.2, "preference_correct_reward": 0.6},
}
#: Upper bound of the preference counters in the observation space (the largest sub-set has 12).
MAX_PREFERENCES = 64
#: Bound of the `last_reward` space: finite (gymnasium's checker flags infinite bounds), far above any real reward.
REWARD_BOUND = 1e9
ROLE_MAX_TOKENS = 2048
ROLE_TEMPERATURE = 0.0


@dataclass
class _Choice:
    """One recorded recommendation."""

    option_id: str
    aspect: str | None
    verdict: str


def _count(value: Any, name: str, *, allow_none: bool = False, minimum: int = 0) -> int | None:
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < minimum:
        raise ValueError(
            f"{name} must be an integer >= {minimum}{' or None' if allow_none else ''}, got {value!r}"
        )
    return int(value)


class TravelEnv(MultiTurnEnv):
    """The Travel gym: search each aspect, draw out hidden preferences, recommend one option per aspect."""

    gym_name: ClassVar[str] = "travel"
    allowed_choices: ClassVar[tuple[str, ...]] = ("search", "action", "answer")
    normalize_rewards_default: ClassVar[bool] = False
    uses_role_client: ClassVar[bool] = True
    role_names: ClassVar[tuple[str, ...]] = roles.ROLES
    reward_presets: ClassVar[Mapping[str, Mapping[str, Any]]] = REWARD_PRESETS

    def _configure(
        self,
        *,
        search_correct_reward: float,
        preference_correct_reward: float,
        choice_best_reward: float = 1.0,
        choice_correct_reward: float = 0.8,
        wrong_choice_penalty: float = 0.0,
        search_failure_interval: int = 5,
        elicitation_interval: int = 3,
        wrong_choice_number: int | None = 10,
        noise_choice_number: int | None = 5,
    ) -> None:
        """Gym keywords: rewards (the two of the reward preset unless given), intervals, list sizes."""
        self.search_correct_reward = float(search_correct_reward)
        self.preference_correct_reward = float(preference_correct_reward)
        self.choice_best_reward = float(choice_best_reward)
        self.choice_correct_reward = float(choice_correct_reward)
        self.wrong_choice_penalty = float(wrong_choice_penalty)
        rewards = (
            self.search_correct_reward,
            self.preference_correct_reward,
            self.choice_best_reward,
            self.choice_correct_reward,
            self.wrong_choice_penalty,
        )
        if not all(math.isfinite(r) for r in rewards):
            raise ValueError("travel rewards must be finite numbers")
        self.search_failure_interval = _count(search_failure_interval, "search_failure_interval")
        self.elicitation_interval = _count(elicitation_interval, "elicitation_interval", minimum=1)
        self.wrong_choice_number = _count(wrong_choice_number, "wrong_choice_number", allow_none=True)
        self.noise_choice_number = _count(noise_choice_number, "noise_choice_number", allow_none=True)

    def _observation_fields(self) -> dict[str, spaces.Space]:
        counter = spaces.Discrete(MAX_PREFERENCES + 1)
        return {
            "task_description": text_space(MAX_FEEDBACK_CHARS),
            "goal": text_space(len(GOAL)),
            "step_count": self.count_space(),
            "episode_complete": BOOL_SPACE,
            "total_preferences": counter,
            "remaining_preferences": counter,
            "elicitation_ratio": ScalarBox(),
            "active_elicited_preferences": counter,
            "passive_elicited_preferences": counter,
            "last_reward": ScalarBox(-REWARD_BOUND, REWARD_BOUND),
        }

    def _load_task(self, task: Task) -> None:
        data = task.data
        if not isinstance(data, dict) or not isinstance(data.get("scenario"), dict):
            raise ValueError(f"travel task {task.item_key!r}: data needs a 'scenario' object")
        scenario = parse_scenario(str(data.get("id", task.item_key)), data["scenario"], "travel task")
        if len(scenario.preferences) > MAX_PREFERENCES:
            raise ValueError(
                f"travel task {task.item_key!r}: {len(scenario.preferences)} preferences, at most "
                f"{MAX_PREFERENCES} are supported"
            )
        self.scenario = scenario

    # ------------------------------------------------------------------ episode state

    def _reset_impl(self) -> tuple[str, dict[str, Any], dict[str, Any]]:
        sc = self.scenario
        self.displayed: dict[str, list[dict[str, Any]]] = {
            name: self._display_list(name) for name in sc.dimensions
        }
        self.search_times = 0
        self.nonpreference_times = 0
        self.unsearched: list[str] = list(sc.dimensions)
        self.remaining_best: set[str] = {sc.aspects[d].best_id for d in sc.dimensions}
        self.remaining_correct: set[str] = {i for d in sc.dimensions for i in sc.aspects[d].correct_ids}
        self.chosen_letters: set[str] = set()
        self.choices: list[_Choice] = []
        self.available_prefs: list[Preference] = list(sc.preferences)
        self.elicited: list[dict[str, Any]] = []
        self.active_elicited = 0
        self.passive_elicited = 0
        self.history: list[dict[str, Any]] = []
        self.last_reward = 0.0
        return sc.initial_description, self._extra_obs(), self._gym_info([])

    def _display_list(self, aspect: str) -> list[dict[str, Any]]:
        """The episode's option list of one aspect: all correct, some wrong and noise, shuffled (env rng)."""
        options = self.scenario.aspects[aspect].options
        wrong = [options["wrong"][i] for i in self.rng.permutation(len(options["wrong"]))]
        noise = [options["noise"][i] for i in self.rng.permutation(len(options["noise"]))]
        if self.wrong_choice_number is not None:
            wrong = wrong[: self.wrong_choice_number]
        if self.noise_choice_number is not None:
            noise = noise[: self.noise_choice_number]
        pool = list(options["correct"]) + wrong + noise
        return [display_option(pool[i]) for i in self.rng.permutation(len(pool))]

    def _extra_obs(self) -> dict[str, Any]:
        total = len(self.scenario.preferences)
        return {
            "task_description": self.scenario.scenario,
            "goal": GOAL,
            "total_preferences": total,
            "remaining_preferences": total - len(self.elicited),
            "elicitation_ratio": len(self.elicited) / total if total else 0.0,
            "active_elicited_preferences": self.active_elicited,
            "passive_elicited_preferences": self.passive_elicited,
            "last_reward": self.last_reward,
        }

    def _gym_info(self, newly: list[dict[str, Any]]) -> dict[str, Any]:
        return {
            "task_id": self.scenario.scenario_id,
            "preferences_summary": [
                f"{p.aspect}-{p.subcategory}: {p.text[:50]}..." for p in self.available_prefs
            ],
            "conversation_history": [dict(e) for e in self.history],
            "elicited_preferences": [dict(e) for e in self.elicited],
            "newly_elicited_preferences": [dict(e) for e in newly],
            "reward_preset": self.reward_preset,
            "search_times": self.search_times,
            "unsearched_aspects": list(self.unsearched),
            "choices": [vars(c).copy() for c in self.choices],
        }

    # ------------------------------------------------------------------ steps

    async def _astep_impl(
        self, choice: str, content: str
    ) -> tuple[str, float, bool, dict[str, Any], dict[str, Any]]:
        newly: list[dict[str, Any]] = []
        terminated = False
        if choice == "search":
            feedback, base = await self._search(content)
        elif choice == "action":
            feedback, base = await self._utterance(content, newly)
        elif choice == "answer":
            feedback, base = self._answer(content)
            terminated = not self.remaining_best or all(
                ASPECT_LETTERS[d] in self.chosen_letters for d in self.scenario.dimensions
            )
        elif choice == "finish":
            feedback = EPISODE_FINISHED.format(
                elicited=len(self.elicited), total=len(self.scenario.preferences)
            )
            base, terminated = 0.0, True
        else:
            feedback, base = INVALID_ACTION, 0.0
        reward = self.shaped_reward(base, self.step_penalty)
        self.last_reward = reward
        return feedback, reward, terminated, self._extra_obs(), self._gym_info(newly)

    def _log(self, role: str, content: str, note: str = "") -> None:
        self.history.append({"role": role, "content": content, "note": note})

    # search ---------------------------------------------------------------------------------------

    async def _search(self, request: str) -> tuple[str, float]:
        self.search_times += 1
        interval = self.search_failure_interval
        if interval and self.search_times % interval == 0:
            # Deliberate, as in the original: every N-th search fails, without a judge call.
            return self._search_result(request, "search: backend issue (deliberate)", SEARCH_BACKEND_ISSUE)
        judgement = await self._judge_search(request)
        if judgement is None:
            return self._search_result(request, "search: backend issue (judge failed)", SEARCH_BACKEND_ISSUE)
        aspect = judgement.aspect
        if judgement.label != "True" or aspect not in self.scenario.aspects:
            return self._search_result(request, f"search: {judgement.label.lower()}", SEARCH_REFINE)
        if aspect not in self.unsearched:
            feedback = SEARCH_ALREADY_DONE.format(aspect=aspect)
            return self._search_result(request, f"search: already searched ({aspect})", feedback)
        self.unsearched.remove(aspect)
        head = SEARCH_CORRECT.format(aspect=aspect, fields=FIELD_DESCRIPTIONS[aspect])
        lines = [json.dumps(o, ensure_ascii=False) for o in self.displayed[aspect]]
        self._log("agent", request, f"search: correct ({aspect})")
        # The judges read the history: the option list itself would only bloat their prompts.
        self._log("env", f"{head} ... ({len(lines)} options, omitted here) ...")
        return "\n".join([head, *lines]), self.search_correct_reward

    def _search_result(self, request: str, note: str, feedback: str) -> tuple[str, float]:
        self._log("agent", request, note)
        self._log("env", feedback)
        return feedback, 0.0

    async def _judge_search(self, request: str) -> roles.SearchJudgement | None:
        if self.role_backends[roles.SEARCH_JUDGE] == "scripted":
            return roles.scripted_search_judge(request, self.scenario)
        value, call = await self.llm.complete_json(
            roles.SEARCH_JUDGE,
            roles.SEARCH_JUDGE_SYSTEM,
            roles.search_judge_user(request, self.scenario),
            roles.validate_search_judgement,
            max_tokens=ROLE_MAX_TOKENS,
            temperature=ROLE_TEMPERATURE,
        )
        self.record_lm_call(call.role, call.attempts, call.ok, call.latency_s)
        if value is None:
            return None
        label, aspect = value
        return roles.SearchJudgement(label, aspect)

    # action ---------------------------------------------------------------------------------------

    async def _utterance(self, utterance: str, newly: list[dict[str, Any]]) -> tuple[str, float]:
        kind, pid = await self._judge_type(utterance)
        by_id = {p.pid: p for p in self.available_prefs}
        if kind == 2 and pid not in by_id:
            kind = 1  # type 2 needs a valid, still available preference
        if kind == 2:
            pref = by_id[pid]
            self.nonpreference_times = 0
            self.active_elicited += 1
            reply = await self._reveal(roles.PREFERENCE_REVEAL, utterance, pref)
            self._elicit(pref, "active", utterance, reply, newly)
            return reply, self.preference_correct_reward
        if self.nonpreference_times >= self.elicitation_interval and self.available_prefs:
            self.nonpreference_times = 0
            self.passive_elicited += 1
            pref = self.available_prefs[int(self.rng.integers(len(self.available_prefs)))]
            reply = await self._reveal(roles.PROACTIVE_REVEAL, utterance, pref)
            self._elicit(pref, "passive", utterance, reply, newly)
            return reply, 0.0
        self.nonpreference_times += 1
        if kind == 3:
            reply, note = TYPE3_REPLY, "type 3: asks about a preference the traveller does not have"
        elif kind == 4:
            reply, note = TYPE4_REPLY, "type 4: too general"
        else:
            reply, note = await self._natural_reply(utterance), "type 1: general conversation"
        self._log("agent", utterance, note)
        self._log("user", reply)
        return reply, 0.0

    def _elicit(
        self, pref: Preference, how: str, utterance: str, reply: str, newly: list[dict[str, Any]]
    ) -> None:
        """Bookkeeping of a revealed preference (it counts even when the reply text fell back)."""
        self.available_prefs.remove(pref)
        record = dict(pref.as_dict(), how=how, step=self.step_count)
        self.elicited.append(record)
        newly.append(record)
        self._log("agent", utterance, f"elicited {pref.pid} ({how})")
        self._log("user", reply)

    async def _judge_type(self, utterance: str) -> tuple[int, str | None]:
        if self.role_backends[roles.TYPE_JUDGE] == "scripted":
            return roles.scripted_type_judge(utterance, self.available_prefs)
        value, call = await self.llm.complete_json(
            roles.TYPE_JUDGE,
            roles.TYPE_JUDGE_SYSTEM,
            roles.type_judge_user(self.scenario, self.history, utterance, self.available_prefs),
            roles.validate_type_judgement,
            max_tokens=ROLE_MAX_TOKENS,
            temperature=ROLE_TEMPERATURE,
        )
        self.record_lm_call(call.role, call.attempts, call.ok, call.latency_s)
        return (1, None) if value is None else value

    async def _reveal(self, role: str, utterance: str, pref: Preference) -> str:
        if self.role_backends[role] == "scripted":
            return pref.implicit if role == roles.PREFERENCE_REVEAL else roles.scripted_proactive_reply(pref)
        system = (
            roles.PREFERENCE_REVEAL_SYSTEM
            if role == roles.PREFERENCE_REVEAL
            else roles.PROACTIVE_REVEAL_SYSTEM
        )
        user = roles.reveal_user(self.scenario, self.history, utterance, pref)
        return await self._reply_call(role, system, user)

    async def _natural_reply(self, utterance: str) -> str:
        if self.role_backends[roles.NATURAL_REPLY] == "scripted":
            return roles.SCRIPTED_NATURAL_REPLY
        user = roles.natural_reply_user(self.scenario, self.history, utterance)
        return await self._reply_call(roles.NATURAL_REPLY, roles.NATURAL_REPLY_SYSTEM, user)

    async def _reply_call(self, role: str, system: str, user: str) -> str:
        value, call = await self.llm.complete_json(
            role, system, user, roles.validate_reply, max_tokens=ROLE_MAX_TOKENS, temperature=ROLE_TEMPERATURE
        )
        self.record_lm_call(call.role, call.attempts, call.ok, call.latency_s)
        return roles.REPLY_FALLBACK if value is None else value

    # answer ---------------------------------------------------------------------------------------

    def _answer(self, content: str) -> tuple[str, float]:
        option_id = content.strip().upper()
        if "," in option_id or len(OPTION_ID_ANYWHERE_RE.findall(option_id)) > 1:
            return self._answer_result(content, "answer: rejected (several ids)", ONE_OPTION_ONLY, 0.0)
        if not OPTION_ID_RE.match(option_id):
            return self._answer_result(content, "answer: rejected (invalid id)", INVALID_OPTION_ID, 0.0)
        letter = option_id[0]
        if letter in self.chosen_letters:
            return self._answer_result(content, "answer: rejected (aspect done)", ASPECT_ALREADY_CHOSEN, 0.0)
        if option_id in self.remaining_best:
            self.remaining_best.discard(option_id)
            self.remaining_correct.discard(option_id)
            verdict, base, feedback = "best", self.choice_best_reward, CHOICE_BEST
        elif option_id in self.remaining_correct:
            self.remaining_correct.discard(option_id)
            verdict, base, feedback = "correct", self.choice_correct_reward, CHOICE_CORRECT
        else:
            verdict, base, feedback = "wrong", -self.wrong_choice_penalty, CHOICE_WRONG
        aspect = LETTER_ASPECTS[letter]
        self.chosen_letters.add(letter)
        self.choices.append(_Choice(option_id, aspect if aspect in self.scenario.aspects else None, verdict))
        # Once an aspect has its choice, its preferences can no longer be elicited.
        self.available_prefs = [p for p in self.available_prefs if p.dimension != aspect]
        text = feedback.format(id=option_id) + CHOICE_RECORDED
        # One id per step: the base reward of an answer stays within [0, 1] (the original could exceed 1).
        return self._answer_result(
            content, f"answer: {option_id} ({verdict})", text, min(1.0, max(0.0, base))
        )

    def _answer_result(self, content: str, note: str, feedback: str, base: float) -> tuple[str, float]:
        self._log("agent", content, note)
        self._log("env", feedback)
        return feedback, base
