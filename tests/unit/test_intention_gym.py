"""IntentionEnv (docs/spec/GYMS.md §2): feedback strings, rewards, termination, scripted rules, llm path."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import pytest
from gym_helpers import step

import userrl.envs.intention  # noqa: F401  (registers userrl/Intention-v0)
from userrl.envs import Task
from userrl.envs.intention import env as ienv
from userrl.envs.intention import roles
from userrl.envs.intention.env import IntentionEnv, base_reward, max_return
from userrl.envs.intention.scripted import NOT_SURE_REPLY, detail_keywords, scripted_judgement
from userrl.envs.intention.tasks import builtin_prompt, details_of
from userrl.envs.json_extract import JSONExtractionError, extract_json_object
from userrl.envs.llm import RoleCall

TASK_TEXT = "Plan my trip."
# Importances as the original files store them (strings) and as ours do (ints): both are accepted.
DETAILS = [
    {
        "description": "Destination city",
        "importance": "3",
        "inquiry": "Which destination city?",
        "options": ["Paris", "Rome"],
    },
    {
        "description": "Travel budget",
        "importance": 2,
        "inquiry": "What budget range?",
        "options": ["cheap", "luxury"],
    },
    {
        "description": "Trip duration",
        "importance": 2,
        "inquiry": "How many days?",
        "options": ["weekend", "fortnight"],
    },
    {
        "description": "Hotel style",
        "importance": 1,
        "inquiry": "Which hotel style?",
        "options": ["hostel", "resort"],
    },
    {
        "description": "Companions",
        "importance": 2,
        "inquiry": "Which companions join you?",
        "options": ["alone", "family"],
    },
    {
        "description": "Dining",
        "importance": 1,
        "inquiry": "Any food preferences?",
        "options": ["vegan", "local"],
    },
]
ASK = {
    "city": "[action] Which destination city?",
    "budget": "[action] What budget range?",
    "days": "[action] How many days?",
    "hotel": "[action] Which hotel style?",
    "who": "[action] Which companions join you?",
    "food": "[action] Any food preferences?",
}


def make_task(details: list[dict[str, Any]] | None = None, key: str = "trip-1") -> Task:
    data = {
        "id": key,
        "category": "Travel",
        "task": TASK_TEXT,
        "missing_details": DETAILS if details is None else details,
    }
    return Task("intention", key, builtin_prompt("Travel", TASK_TEXT), data)


def started(details: list[dict[str, Any]] | None = None, **kwargs: Any) -> IntentionEnv:
    env = IntentionEnv(make_task(details), **kwargs)
    env.reset()
    return env


# ---------------------------------------------------------------- fake model client


class FakeLLM:
    """A stand-in RoleClient: canned reply texts per role, extracted and validated like the real client."""

    def __init__(self, replies: dict[str, list[str]], attempts: int = 3) -> None:
        self.replies = {role: list(texts) for role, texts in replies.items()}
        self.attempts = attempts
        self.calls: list[tuple[str, str, str]] = []
        self.in_flight = 0
        self.max_in_flight = 0

    async def complete_json(
        self,
        role: str,
        system: str,
        user: str,
        validate: Callable[[dict[str, Any]], Any],
        *,
        max_tokens: int | None = None,
        temperature: float | None = None,
    ) -> tuple[Any, RoleCall]:
        self.calls.append((role, system, user))
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            for attempt in range(1, self.attempts + 1):
                await asyncio.sleep(0)  # let a concurrent call start, as a real request would
                text = self.replies[role].pop(0) if self.replies.get(role) else "garbage"
                try:
                    return validate(extract_json_object(text)), RoleCall(role, attempt, True, 0.01)
                except (JSONExtractionError, ValueError, KeyError, TypeError):
                    continue
            return None, RoleCall(role, self.attempts, False, 0.03)
        finally:
            self.in_flight -= 1

    async def complete_text(self, role: str, system: str, user: str, **_: Any) -> tuple[str | None, RoleCall]:
        raise AssertionError("Intention uses JSON roles only")


def user_json(response: str) -> str:
    return json.dumps({"thought": "t", "response": response})


def judge_json(indices: str, related: str = "true") -> str:
    # Raw JSON text on purpose: the tests pass strings, booleans and malformed lists through verbatim.
    return f'{{"analysis": "a", "is_task_related": {related}, "covered_detail_indices": {indices}}}'


def llm_env(user: list[str], judge: list[str], **kwargs: Any) -> tuple[IntentionEnv, FakeLLM]:
    fake = FakeLLM({roles.USER_ROLE: user, roles.JUDGE_ROLE: judge})
    env = started(backend="openai", llm=fake, **kwargs)
    return env, fake


# ---------------------------------------------------------------- rewards


@pytest.mark.parametrize(
    ("importances", "expected"),
    [
        ([3], 1.0),
        ([2], 0.7),
        ([1], 0.4),
        ([3, 2], 0.8),
        ([2, 2, 1], 0.3),
        ([3, 1, 1, 1, 1, 1], 0.0),
        ([], 0.0),
    ],
)
def test_base_reward_examples(importances: list[int], expected: float) -> None:
    assert base_reward(importances) == pytest.approx(expected, abs=1e-9)
    assert base_reward(importances) == expected  # rounded to 6 decimals, so exact


def test_max_return_of_the_paris_example() -> None:
    assert max_return([3, 2, 2, 2, 2, 1]) == 4.2


@pytest.mark.parametrize(
    ("question", "expected_reward", "covered"),
    [
        (ASK["city"], 1.0, ["Destination city"]),
        (ASK["budget"], 0.7, ["Travel budget"]),
        (ASK["hotel"], 0.4, ["Hotel style"]),
        (
            "[action] Which destination city, and what budget range?",
            0.8,
            ["Destination city", "Travel budget"],
        ),
        (
            "[action] Budget range, how many days, and which hotel style?",
            0.3,
            ["Travel budget", "Trip duration", "Hotel style"],
        ),
        (
            "[action] Destination city, budget range, many days, hotel style, companions to join, food preferences?",
            0.0,
            [d["description"] for d in DETAILS],
        ),
    ],
)
def test_question_rewards(question: str, expected_reward: float, covered: list[str]) -> None:
    env = started()
    feedback, reward, terminated, truncated, info = step(env, question)
    assert reward == expected_reward
    assert info["newly_covered_details"] == covered
    assert terminated is (len(covered) == len(DETAILS)) and truncated is False
    assert info["reward_breakdown"]["base"] == expected_reward


def test_a_covered_detail_pays_only_once() -> None:
    env = started()
    assert step(env, ASK["city"])[1] == 1.0
    feedback, reward, _, _, info = step(env, ASK["city"])
    assert reward == 0.0 and info["newly_covered_details"] == []
    assert feedback.startswith("For destination city, I'd go with ")  # covered details still get answers


def test_reward_scale_penalty_and_normalisation() -> None:
    assert step(started(reward_scale=2.0), ASK["budget"])[1] == 1.0  # clipped to 1
    assert step(started(step_penalty=0.3), ASK["budget"])[1] == pytest.approx(0.4)
    assert step(started(step_penalty=0.3), "[action] What is the weather?")[1] == 0.0  # clipped to 0
    unclipped = started(step_penalty=0.3, reward_scale=2.0, normalize_rewards=False)
    assert step(unclipped, ASK["budget"])[1] == pytest.approx(1.1)
    assert step(unclipped, "[action] What is the weather?")[1] == pytest.approx(-0.3)
    assert unclipped.observation_space.contains(unclipped.step(ASK["city"])[0])  # last_reward within bounds
    assert step(started(multi_detail_penalty=0.1), "[action] Destination city and budget range?")[1] == 0.9


# ---------------------------------------------------------------- other actions


@pytest.mark.parametrize("action", ["[action]", "[answer]   ", "[action] \n"])
def test_empty_question(action: str) -> None:
    env = started()
    assert step(env, action)[:4] == ("Please ask a clarifying question.", 0.0, False, False)
    assert env.exchanges == []


def test_answer_is_treated_as_a_question() -> None:
    assert step(started(), "[answer] Which destination city?")[1] == 1.0


def test_finish() -> None:
    env = started()
    assert step(env, "[finish]")[:4] == ("Episode finished.", 0.0, True, False)
    assert step(env, ASK["city"])[:4] == ("The episode has already ended.", 0.0, True, False)


@pytest.mark.parametrize(
    "action", ["[search] budget", "Which destination city?", "", "[Action] budget", "action: x"]
)
def test_invalid_action(action: str) -> None:
    env = started()
    assert step(env, action)[:4] == (
        "Invalid action. Allowed choice: action (ask one clarifying question).",
        0.0,
        False,
        False,
    )


# ---------------------------------------------------------------- termination, observation, info


def test_covering_every_detail_terminates() -> None:
    env = started()
    rewards = [step(env, ASK[k])[1] for k in ("city", "budget", "days", "hotel", "who")]
    obs, reward, terminated, truncated, info = env.step(ASK["food"])
    assert rewards == [1.0, 0.7, 0.7, 0.4, 0.7] and reward == 0.4
    assert (terminated, truncated) == (True, False)
    assert obs["remaining_missing_details"] == 0 and obs["coverage_ratio"] == 1.0
    assert obs["episode_complete"] is True
    assert info["total_reward"] == pytest.approx(max_return([3, 2, 2, 1, 2, 1]))


def test_truncation_sets_only_truncated() -> None:
    env = started(max_steps=3)
    results = [env.step("[action] What is the weather like?") for _ in range(3)]
    assert [(r[2], r[3]) for r in results] == [(False, False), (False, False), (False, True)]
    # A question covering the last detail on the last step terminates instead.
    env = started([DETAILS[0]], max_steps=1)
    assert env.step(ASK["city"])[2:4] == (True, False)


def test_observation_and_info() -> None:
    env = IntentionEnv(make_task())
    obs, info = env.reset()
    assert obs == {
        "feedback": ienv.WELCOME,
        "task_category": "Travel",
        "task_description": TASK_TEXT,
        "goal": ienv.GOAL,
        "step_count": 0,
        "episode_complete": False,
        "total_missing_details": 6,
        "remaining_missing_details": 6,
        "coverage_ratio": 0.0,
        "last_reward": 0.0,
    }
    obs, reward, _, _, info = env.step("[action] Which destination city, and what budget range?")
    assert obs["remaining_missing_details"] == 4 and obs["coverage_ratio"] == pytest.approx(2 / 6)
    assert obs["last_reward"] == reward == 0.8 and obs["step_count"] == 1
    assert info["task_id"] == "trip-1"
    assert info["covered_details"] == ["Destination city", "Travel budget"]
    assert info["missing_details_summary"][0] == {
        "description": "Destination city",
        "importance": 3,
        "covered": True,
    }
    assert info["missing_details_summary"][2]["covered"] is False
    assert info["question_history"] == ["Which destination city, and what budget range?"]
    assert info["conversation_history"] == [
        {"question": info["question_history"][0], "response": obs["feedback"]}
    ]
    assert info["reward_breakdown"] == {
        "judge_ok": True,
        "is_task_related": True,
        "newly_covered": 2,
        "max_importance": 3,
        "importance_weight": 1.0,
        "multi_detail_penalty": 0.2,
        "base": 0.8,
        "reward_scale": 1.0,
        "step_penalty": 0.0,
        "reward": 0.8,
    }
    assert {"raw_action", "action_history", "total_reward", "error", "lm_calls"} <= set(info)
    assert info["lm_calls"] == [] and info["error"] is None
    assert step(env, "[search] x")[4]["reward_breakdown"] is None
    assert env.observation_space.contains(obs)


def test_bad_task_data_is_refused_at_load() -> None:
    bad = [dict(DETAILS[0], importance="4")]
    with pytest.raises(ValueError, match="importance must be 1, 2 or 3"):
        IntentionEnv(make_task(bad))
    with pytest.raises(ValueError, match="missing_details"):
        IntentionEnv(make_task([]))
    with pytest.raises(ValueError, match="options"):
        IntentionEnv(make_task([dict(DETAILS[0], options=[])]))


def test_configuration_errors() -> None:
    with pytest.raises(ValueError, match="multi_detail_penalty"):
        IntentionEnv(make_task(), multi_detail_penalty=-0.1)
    with pytest.raises(TypeError):
        IntentionEnv(make_task(), correct_reward=1.0)


# ---------------------------------------------------------------- scripted backend


def test_keywords_exclude_the_request_words() -> None:
    task = "Plan a trip to Paris."
    (detail,) = details_of({"missing_details": [dict(DETAILS[0], importance=3)]})
    assert detail_keywords(task, detail) == {"destination", "city", "rome"}


def test_coverage_needs_two_shared_words_or_all_of_fewer() -> None:
    single = [{"description": "Trip", "importance": 2, "inquiry": "Trip?", "options": ["trip", "Oslo"]}]
    # K = {oslo}: one keyword, so one shared word covers it.
    assert step(started(single), "[action] Oslo?")[1] == 0.7
    assert step(started(), "[action] Which city?")[1] == 0.0  # one of four keywords is not enough
    assert step(started(), "[action] Which city, destination?")[1] == 1.0


def test_a_detail_made_only_of_request_words_is_never_covered() -> None:
    empty = [
        {"description": "Plan", "importance": 3, "inquiry": "Plan my trip?", "options": ["trip", "plan"]}
    ]
    env = started(empty)
    assert step(env, "[action] Plan my trip?")[1:3] == (0.0, False)


def test_relatedness_of_the_scripted_judge() -> None:
    keywords = [frozenset({"budget", "range"})]
    assert scripted_judgement("What is the weather?", frozenset({"trip"}), keywords).is_task_related is False
    assert scripted_judgement("How long is the trip?", frozenset({"trip"}), keywords).is_task_related is True
    verdict = scripted_judgement("Budget range?", frozenset({"trip"}), keywords)
    assert verdict.is_task_related and verdict.indices == [1]


def test_scripted_reply_picks_the_best_matching_detail_and_a_stable_option() -> None:
    env = started()
    reply = step(env, ASK["budget"])[0]
    assert reply in {"For travel budget, I'd go with cheap.", "For travel budget, I'd go with luxury."}
    assert step(env, "[action] Tell me the budget again")[0] == reply  # drawn once per detail per episode
    # Ties go to the earlier detail: "city" (detail 1) and "budget" (detail 2) each share one word.
    assert step(env, "[action] city budget")[0].startswith("For destination city, ")
    assert step(env, "[action] What is the weather?")[0] == NOT_SURE_REPLY


def test_scripted_options_follow_the_seed() -> None:
    replies = {step(started(seed=s), ASK["city"])[0] for s in range(12)}
    assert replies == {"For destination city, I'd go with Paris.", "For destination city, I'd go with Rome."}
    assert step(started(seed=5), ASK["city"])[0] == step(started(seed=5), ASK["city"])[0]


# ---------------------------------------------------------------- llm backend (fake client)


def test_llm_reply_and_judgement() -> None:
    env, fake = llm_env([user_json("Paris, in spring.")], [judge_json("[1]")])
    feedback, reward, _, _, info = step(env, ASK["city"])
    assert (feedback, reward) == ("Paris, in spring.", 1.0)
    assert info["newly_covered_details"] == ["Destination city"]
    assert sorted(c["role"] for c in info["lm_calls"]) == ["intention_judge", "intention_user"]
    assert all(c["ok"] and c["attempts"] == 1 for c in info["lm_calls"])
    assert fake.max_in_flight == 2  # the two roles run concurrently


def test_judge_indices_refer_to_the_renumbered_remaining_list() -> None:
    env, fake = llm_env([user_json("ok")] * 2, [judge_json("[1]"), judge_json("[1, 3]")])
    step(env, ASK["city"])
    feedback, reward, _, _, info = step(env, "[action] budget and hotel?")
    # After detail 1 left the list, index 1 is the budget and 3 the hotel style.
    assert info["newly_covered_details"] == ["Travel budget", "Hotel style"] and reward == 0.5
    judge_message = [u for r, _, u in fake.calls if r == roles.JUDGE_ROLE][-1]
    assert "1. [MEDIUM] Travel budget (example question: What budget range?)" in judge_message
    assert "3. [LOW] Hotel style" in judge_message and "Destination city" not in judge_message
    assert "Assistant: Which destination city?\nUser: ok" in judge_message


@pytest.mark.parametrize(
    ("judge_reply", "covered"),
    [
        (judge_json("[2, 2, 0, 7, -1]"), ["Travel budget"]),  # duplicates and out-of-range dropped
        (judge_json('["1", "2"]'), ["Destination city", "Travel budget"]),  # digit strings coerced
        (judge_json("[1, 2]", related="false"), []),  # unrelated: nothing covered
        (judge_json("[1]", related='"yes"'), ["Destination city"]),  # boolean-like strings coerced
        (judge_json("[]"), []),
    ],
)
def test_judge_reply_parsing(judge_reply: str, covered: list[str]) -> None:
    env, _ = llm_env([user_json("fine")], [judge_reply])
    assert step(env, ASK["city"])[4]["newly_covered_details"] == covered


@pytest.mark.parametrize(
    "wrapped",
    [
        "<think>the user asks about the city {not json}</think>" + judge_json("[1]"),
        "Here is my verdict:\n```json\n" + judge_json("[1]") + "\n```",
        "Sure! " + judge_json("[1]") + " Hope that helps.",
        '{"analysis": null, "is_task_related": true, "covered_detail_indices": [1]}',
    ],
)
def test_hard_reply_shapes_are_extracted(wrapped: str) -> None:
    env, _ = llm_env([user_json("Paris.")], [wrapped])
    assert step(env, ASK["city"])[1] == 1.0


def test_retry_after_an_invalid_reply() -> None:
    env, _ = llm_env(
        ["no json here", '{"thought": "x"}', user_json("Rome.")],
        ['{"is_task_related": true, "covered_detail_indices": 1}', judge_json("[1]")],
    )
    feedback, reward, _, _, info = step(env, ASK["city"])
    assert (feedback, reward) == ("Rome.", 1.0)
    assert {c["role"]: c["attempts"] for c in info["lm_calls"]} == {"intention_user": 3, "intention_judge": 2}


def test_fallbacks_when_every_attempt_fails() -> None:
    env, _ = llm_env(["garbage"] * 3, ["[1]", '{"is_task_related": "maybe", "covered_detail_indices": [1]}'])
    feedback, reward, terminated, _, info = step(env, ASK["city"])
    assert feedback in roles.FALLBACK_REPLIES and reward == 0.0 and not terminated
    assert info["newly_covered_details"] == [] and info["reward_breakdown"]["judge_ok"] is False
    assert [c["ok"] for c in info["lm_calls"]] == [False, False]
    # The fallback reply is drawn with the env rng: reproducible for a seed, varied across seeds.
    draws = set()
    for seed in range(25):
        env, _ = llm_env([], [], seed=seed)
        draws.add(step(env, ASK["city"])[0])
    assert draws == set(roles.FALLBACK_REPLIES)


def test_user_prompt_contents() -> None:
    env, fake = llm_env([user_json(f"a{i}") for i in range(5)], [judge_json("[]")] * 5)
    for i in range(5):
        step(env, f"[action] question {i}?")
    user_message = [u for r, _, u in fake.calls if r == roles.USER_ROLE][-1]
    assert "Your request: Plan my trip." in user_message and "Category: Travel" in user_message
    assert "- Destination city (possible answers: Paris; Rome)" in user_message
    assert "question 0?" not in user_message and "Assistant: question 1?\nUser: a1" in user_message
    assert "The assistant now asks: question 4?" in user_message
    hidden, fake = llm_env([user_json("x")], [judge_json("[]")], user_sees_details=False)
    step(hidden, "[action] hello?")
    (hidden_message,) = [u for r, _, u in fake.calls if r == roles.USER_ROLE]
    assert "Destination city" not in hidden_message and "The assistant now asks: hello?" in hidden_message


def test_per_role_backend_override() -> None:
    fake = FakeLLM({roles.USER_ROLE: [user_json("Paris!")]})
    env = started(backend="openai", llm=fake, role_backends={roles.JUDGE_ROLE: "scripted"})
    feedback, reward, _, _, info = step(env, ASK["city"])
    assert (feedback, reward) == ("Paris!", 1.0)
    assert [c["role"] for c in info["lm_calls"]] == [roles.USER_ROLE]
    fake = FakeLLM({roles.JUDGE_ROLE: [judge_json("[1]")]})
    scripted_user = started(backend="openai", llm=fake, role_backends={roles.USER_ROLE: "scripted"})
    feedback, reward, _, _, info = step(scripted_user, ASK["city"])
    assert feedback.startswith("For destination city") and reward == 1.0
    assert [c["role"] for c in info["lm_calls"]] == [roles.JUDGE_ROLE]


def test_validators_directly() -> None:
    assert roles.validate_user_reply({"response": " hi "}) == "hi"
    for bad in ({"response": ""}, {"response": 3}, {"thought": "x"}):
        with pytest.raises((ValueError, KeyError)):
            roles.validate_user_reply(bad)
    verdict = roles.validate_judgement({"is_task_related": "No", "covered_detail_indices": ["3", 1]})
    assert (verdict.is_task_related, verdict.indices) == (False, [3, 1])
    assert roles.covered_positions(verdict, 5) == []
    for bad in (
        {"is_task_related": True, "covered_detail_indices": [True]},
        {"is_task_related": True, "covered_detail_indices": [1.5]},
        {"is_task_related": True, "covered_detail_indices": None},
        {"is_task_related": None, "covered_detail_indices": []},
        {"covered_detail_indices": []},
    ):
        with pytest.raises((ValueError, KeyError, TypeError)):
            roles.validate_judgement(bad)
