"""PersuadeEnv (docs/spec/GYMS.md §3): stance ladder, rewards, feedback strings, scripted rubric, llm path."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import pytest
from gym_helpers import step

import userrl.envs.persuade  # noqa: F401  (registers userrl/Persuade-v0)
from userrl.envs import Task
from userrl.envs.json_extract import JSONExtractionError, extract_json_object
from userrl.envs.llm import RoleCall
from userrl.envs.persuade import env as penv
from userrl.envs.persuade import roles
from userrl.envs.persuade.env import (
    PersuadeEnv,
    best_improvement_reward,
    forward_delta_reward,
    tracking_score,
)
from userrl.envs.persuade.roles import STANCES, stance_index
from userrl.envs.persuade.scripted import HINTS, jaccard, score_argument
from userrl.envs.persuade.tasks import builtin_prompt
from userrl.envs.text import content_words

CLAIM = "Homework should be banned in primary schools"
ARGUMENT = (
    "Homework takes away time for play and family. Children are tired after school, and worksheets teach "
    "little. Parents argue with their kids every night about homework."
)
TOPIC = content_words(CLAIM + " " + ARGUMENT)
# Three arguments that each meet all five criteria, and stay novel against each other.
GOOD = (
    "However, research shows that short homework tasks help primary school children practise reading, and "
    "evidence from many schools suggests parents value seeing what their children learn. Banning it would "
    "remove a cheap way for families to stay involved, so a better policy is to keep homework brief and "
    "purposeful rather than ban it entirely.",
    "You claim worksheets teach little, but that is an argument for better tasks, not for a ban. Surveys of "
    "teachers report that a few minutes of times tables or spelling builds fluency that class time cannot "
    "cover. Tired children need shorter assignments and clear limits, and schools can set those limits "
    "without throwing away practice altogether.",
    "Although evenings can be stressful, a ban moves the problem elsewhere. According to tutoring firms, "
    "wealthier parents simply buy extra lessons when schools stop setting work, which widens gaps between "
    "pupils. Homework clubs held in the library after lessons give every pupil quiet space and help, so the "
    "fair answer is support, not prohibition.",
)
NO_EVIDENCE = (
    "However, homework in primary school gives children a routine and helps families see what is taught in "
    "class, so banning it would remove a useful habit. Keeping tasks short and purposeful is a more sensible "
    "policy than a complete ban on homework for young children at home."
)
OFF_TOPIC = (
    "However, research on deep sea fishing fleets suggests that quotas and satellite monitoring protect cod "
    "stocks far better than voluntary rules, and evidence from northern waters shows that catches recover "
    "within a decade when enforcement is strict and consistent across ports and vessels."
)
SHORT = "However, research on homework in primary school shows benefits for children."
WEAK = "Homework is fine."


def make_task(key: str = "PERSUADE0001") -> Task:
    data = {"id": key, "claim": CLAIM, "argument": ARGUMENT}
    return Task("persuade", key, builtin_prompt(CLAIM), data)


def started(**kwargs: Any) -> PersuadeEnv:
    env = PersuadeEnv(make_task(), **kwargs)
    env.reset()
    return env


# ---------------------------------------------------------------- fake model client


class FakeLLM:
    """A stand-in RoleClient: canned reply texts, extracted and validated like the real client."""

    def __init__(self, replies: list[str], attempts: int = 3) -> None:
        self.replies = list(replies)
        self.attempts = attempts
        self.calls: list[tuple[str, str, str]] = []

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
        for attempt in range(1, self.attempts + 1):
            await asyncio.sleep(0)
            text = self.replies.pop(0) if self.replies else "garbage"
            try:
                return validate(extract_json_object(text)), RoleCall(role, attempt, True, 0.01)
            except (JSONExtractionError, ValueError, KeyError, TypeError):
                continue
        return None, RoleCall(role, self.attempts, False, 0.03)

    async def complete_text(self, role: str, system: str, user: str, **_: Any) -> tuple[str | None, RoleCall]:
        raise AssertionError("Persuade uses a JSON role only")


def reply(stance: str, response: str = "Noted.") -> str:
    return json.dumps({"thought": "t", "response": response, "stance": stance})


def llm_env(replies: list[str], **kwargs: Any) -> tuple[PersuadeEnv, FakeLLM]:
    fake = FakeLLM(replies)
    return started(backend="openai", llm=fake, **kwargs), fake


# ---------------------------------------------------------------- stance ladder and reward rules


def test_stance_ladder() -> None:
    assert STANCES[0] == "Strongly Agree" and STANCES[3] == "Neutral" and STANCES[6] == "Strongly Disagree"
    assert [round(tracking_score(i), 4) for i in range(7)] == [0.0, 0.1667, 0.3333, 0.5, 0.6667, 0.8333, 1.0]
    assert stance_index("  partly   DISAGREE ") == 4
    assert stance_index("Partly-Disagree") is None and stance_index("") is None


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        (0, 1, 0.166667),
        (0, 2, 0.333333),
        (0, 3, 0.5),
        (2, 6, 0.666667),
        (1, 6, 0.833333),
        (0, 6, 1.0),
        (3, 3, 0.0),
        (4, 1, 0.0),
    ],
)
def test_forward_delta_reward(old: int, new: int, expected: float) -> None:
    assert forward_delta_reward(old, new) == expected


def test_best_improvement_reward() -> None:
    assert best_improvement_reward(2, 3) == 0.166667
    assert best_improvement_reward(4, 3) == 0.0 and best_improvement_reward(4, 6) == 0.333333


# ---------------------------------------------------------------- actions other than an argument


@pytest.mark.parametrize("action", ["[answer]", "[action]   "])
def test_empty_argument(action: str) -> None:
    env, fake = llm_env([])
    assert step(env, action)[:4] == ("Please make an argument.", 0.0, False, False)
    assert fake.calls == [] and env.dialogue == []


def test_finish() -> None:
    env = started()
    feedback, reward, terminated, truncated, info = step(env, "[finish]")
    assert (feedback, reward, terminated, truncated) == ("Episode finished.", 0.0, True, False)
    assert info["stance_change"] == "Strongly Agree -> Strongly Agree"
    assert step(env, "[answer] " + GOOD[0])[:3] == ("The episode has already ended.", 0.0, True)


@pytest.mark.parametrize("action", ["[search] homework studies", GOOD[0], "", "[Answer] x"])
def test_invalid_action_makes_no_model_call(action: str) -> None:
    env, fake = llm_env([])
    assert step(env, action)[:4] == (
        "Invalid action. Allowed choice: answer (make an argument).",
        0.0,
        False,
        False,
    )
    assert fake.calls == []


def test_action_is_treated_as_an_argument() -> None:
    assert step(started(), "[action] " + GOOD[0])[1] == 0.333333


# ---------------------------------------------------------------- scripted rubric


def test_rubric_criteria() -> None:
    full = score_argument(GOOD[0], TOPIC, [])
    assert (full.met, full.delta, full.hints()) == (5, 2, [])
    no_evidence = score_argument(NO_EVIDENCE, TOPIC, [])
    assert (no_evidence.evidence, no_evidence.met, no_evidence.delta) == (False, 4, 1)
    assert not score_argument(OFF_TOPIC, TOPIC, []).relevance
    assert not score_argument(SHORT, TOPIC, []).substance
    assert not score_argument(GOOD[0], TOPIC, [GOOD[0]]).novelty
    weak = score_argument(WEAK, TOPIC, [])
    assert (weak.met, weak.delta) == (1, 0)
    assert score_argument("x " * 38 + "homework", TOPIC, []).substance is False  # 39 words: too few
    assert score_argument("x " * 40, TOPIC, []).substance is True


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("but", True),
        ("You  argue that", True),
        ("YOUR ARGUMENT", True),
        ("on the contrary", True),
        ("you mention", True),
        ("you mentioned", False),
        ("we contribute to the butter", False),
        ("whereas", True),
        ("however.", True),
    ],
)
def test_rebuttal_is_a_whole_word_or_phrase(text: str, expected: bool) -> None:
    assert score_argument(text, TOPIC, []).rebuttal is expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("in 2020", True),
        ("Researchers found", True),
        ("a SURVEY", True),
        ("statistically", False),
        ("I feel", False),
    ],
)
def test_evidence_is_a_digit_or_a_term(text: str, expected: bool) -> None:
    assert score_argument(text, TOPIC, []).evidence is expected


def test_jaccard() -> None:
    assert jaccard({"a", "b"}, {"b", "c"}) == pytest.approx(1 / 3)
    assert jaccard(set(), set()) == 1.0  # two empty arguments are the same argument


@pytest.mark.parametrize(
    ("argument", "feedback", "reward"),
    [
        (GOOD[0], "You make a fair point. I am reconsidering my position.", 0.333333),
        (
            NO_EVIDENCE,
            "You make a fair point. I am reconsidering my position. I would need evidence.",
            0.166667,
        ),
        (OFF_TOPIC, "You make a fair point. I am reconsidering my position. This seems off-topic.", 0.166667),
        (
            SHORT,
            "You make a fair point. I am reconsidering my position. Please develop your reasoning.",
            0.166667,
        ),
        (WEAK, "I am not convinced yet. I would need evidence. You have not addressed my argument.", 0.0),
    ],
)
def test_scripted_replies_and_rewards(argument: str, feedback: str, reward: float) -> None:
    env = started()
    got, r, terminated, _, info = step(env, "[answer] " + argument)
    assert (got, r, terminated) == (feedback, reward, False)
    assert info["judge_success"] is True and info["json_response"]["response"] == feedback


def test_hints_follow_the_rubric_order_and_stop_at_two() -> None:
    assert [name for name, _ in HINTS] == ["evidence", "rebuttal", "relevance", "substance", "novelty"]
    env = started()
    step(env, "[answer] " + WEAK)
    # Repeated: novelty fails too, but only the first two hints (evidence, rebuttal) are given.
    assert step(env, "[answer] " + WEAK)[0] == (
        "I am not convinced yet. I would need evidence. You have not addressed my argument."
    )
    step(env, "[answer] " + GOOD[0])
    assert step(env, "[answer] " + GOOD[0])[0] == (
        "You make a fair point. I am reconsidering my position. You are repeating yourself."
    )


def test_three_strong_arguments_win_and_terminate() -> None:
    env = started()
    results = [env.step("[answer] " + a) for a in GOOD]
    assert [r[1] for r in results] == [0.333333] * 3
    assert [r[0]["current_stance"] for r in results] == [
        "Partly Agree",
        "Partly Disagree",
        "Strongly Disagree",
    ]
    assert [(r[2], r[3]) for r in results] == [(False, False), (False, False), (True, False)]
    obs, info = results[-1][0], results[-1][4]
    assert obs["current_score"] == 1.0 and obs["best_score"] == 1.0 and obs["episode_complete"] is True
    assert info["stance_change"] == "Partly Disagree -> Strongly Disagree"
    assert info["total_reward"] == pytest.approx(1.0, abs=1e-5)


def test_the_scripted_persuadee_never_moves_back_and_caps_at_the_top() -> None:
    env = started()
    step(env, "[answer] " + GOOD[0])
    assert step(env, "[answer] " + WEAK)[4]["stance_change"] == "Partly Agree -> Partly Agree"
    env.stance = 5
    assert step(env, "[answer] " + GOOD[1])[1:3] == (0.166667, True)


def test_truncation_sets_only_truncated() -> None:
    env = started(max_steps=3)
    results = [env.step("[answer] " + WEAK) for _ in range(3)]
    assert [(r[2], r[3]) for r in results] == [(False, False), (False, False), (False, True)]
    env = started(max_steps=1)
    env.stance = 4
    assert env.step("[answer] " + GOOD[0])[2:4] == (True, False)


def test_reward_scale_penalty_and_normalisation() -> None:
    assert step(started(reward_scale=4.0), "[answer] " + GOOD[0])[1] == 1.0
    assert step(started(step_penalty=0.1), "[answer] " + GOOD[0])[1] == pytest.approx(0.233333)
    assert step(started(step_penalty=0.1), "[answer] " + WEAK)[1] == 0.0
    raw = started(step_penalty=0.1, normalize_rewards=False)
    assert step(raw, "[answer] " + WEAK)[1] == pytest.approx(-0.1)
    assert step(raw, "[search] x")[1] == 0.0


# ---------------------------------------------------------------- observation and info


def test_observation_and_info() -> None:
    long_claim = "A" * 120
    task = Task(
        "persuade", "K", builtin_prompt(long_claim), {"id": "K", "claim": long_claim, "argument": ARGUMENT}
    )
    env = PersuadeEnv(task)
    obs, info = env.reset()
    assert obs == {
        "feedback": penv.WELCOME,
        "statement_title": "A" * 100,
        "statement_text": long_claim,
        "goal": penv.GOAL,
        "step_count": 0,
        "episode_complete": False,
        "current_score": 0.0,
        "best_score": 0.0,
        "current_stance": "Strongly Agree",
    }
    assert info["initial_stance"] == "Strongly Agree" and info["conversation_history"] == []
    env = started()
    obs, reward, _, _, info = env.step("[answer] " + GOOD[0])
    assert obs["current_score"] == pytest.approx(2 / 6) and obs["current_stance"] == "Partly Agree"
    assert info["stance_change"] == "Strongly Agree -> Partly Agree" and info["step_reward"] == reward
    assert info["conversation_history"] == [
        {"argument": GOOD[0], "response": obs["feedback"], "stance": "Partly Agree"}
    ]
    assert info["json_response"]["stance"] == "Partly Agree" and info["judge_success"] is True
    assert {"raw_action", "action_history", "total_reward", "error", "lm_calls"} <= set(info)
    assert info["lm_calls"] == [] and info["error"] is None
    info = env.step("[search] x")[4]
    assert info["json_response"] is None and info["judge_success"] is None and info["step_reward"] == 0.0
    assert env.observation_space.contains(obs)


def test_bad_task_data_and_configuration() -> None:
    with pytest.raises(ValueError, match="argument must be a non-empty string"):
        PersuadeEnv(Task("persuade", "K", builtin_prompt(CLAIM), {"claim": CLAIM}))
    with pytest.raises(ValueError, match="reward_mode"):
        PersuadeEnv(make_task(), reward_mode="best")


# ---------------------------------------------------------------- llm backend (fake client)


def test_llm_stance_moves_pay_forward_deltas() -> None:
    env, fake = llm_env(
        [reply("Neutral", "Fair."), reply("Agree"), reply("Disagree"), reply("strongly disagree")]
    )
    assert step(env, "[answer] a")[:2] == ("Fair.", 0.5)
    assert step(env, "[answer] b")[1:3] == (0.0, False)  # backward move: stance updates, no reward
    assert env.stance == 1
    assert step(env, "[answer] c")[1] == 0.666667
    feedback, reward, terminated, _, info = step(env, "[answer] d")
    assert (reward, terminated) == (0.166667, True)
    assert info["total_reward"] == pytest.approx(1.333334)  # oscillation can exceed 1 (forward_delta)
    assert info["lm_calls"] == [{"role": "persuadee", "attempts": 1, "ok": True, "latency_s": 0.01}]


def test_best_improvement_mode_pays_each_stance_once() -> None:
    env, _ = llm_env(
        [reply("Neutral"), reply("Agree"), reply("Disagree"), reply("Strongly Disagree")],
        reward_mode="best_improvement",
    )
    rewards = [step(env, f"[answer] {c}")[1] for c in "abcd"]
    assert rewards == [0.5, 0.0, 0.333333, 0.166667] and sum(rewards) == pytest.approx(1.0, abs=1e-5)


def test_unknown_label_keeps_the_stance() -> None:
    env, _ = llm_env([reply("Somewhat agree", "Interesting, but no.")])
    feedback, reward, terminated, _, info = step(env, "[answer] a")
    assert (feedback, reward, terminated) == ("Interesting, but no.", 0.0, False)
    assert info["stance_change"] == "Strongly Agree -> Strongly Agree" and info["judge_success"] is True
    assert info["json_response"]["stance"] == "Somewhat agree"


def test_fallback_after_every_attempt_failed() -> None:
    env, _ = llm_env(["no json", '{"response": "x"}', '{"response": "", "stance": "Agree"}'])
    feedback, reward, terminated, _, info = step(env, "[answer] a")
    assert feedback == "I'm having trouble following your argument. Could you restate it?"
    assert (reward, terminated, env.stance) == (0.0, False, 0)
    assert info["judge_success"] is False and info["json_response"] is None
    assert info["lm_calls"] == [{"role": "persuadee", "attempts": 3, "ok": False, "latency_s": 0.03}]
    assert info["conversation_history"][-1]["response"] == feedback
    unclipped, _ = llm_env([], step_penalty=0.2, normalize_rewards=False)
    assert step(unclipped, "[answer] a")[1] == 0.0  # no penalty for a failed model call


@pytest.mark.parametrize(
    "text",
    [
        "<think>they cite {no json} evidence</think>" + reply("Neutral"),
        "```json\n" + reply("Neutral") + "\n```",
        "My answer: " + reply("Neutral") + " -- end",
        '{"thought": null, "response": "Noted.", "stance": "  neutral "}',
    ],
)
def test_hard_reply_shapes(text: str) -> None:
    env, _ = llm_env([text])
    assert step(env, "[answer] a")[:2] == ("Noted.", 0.5)


def test_persuadee_message_has_the_full_dialogue() -> None:
    env, fake = llm_env([reply("Agree", f"r{i}") for i in range(5)])
    for i in range(5):
        step(env, f"[answer] argument {i}")
    role, system, message = fake.calls[-1]
    assert role == "persuadee" and system == roles.PERSUADEE_SYSTEM_PROMPT
    assert f"Claim: {CLAIM}" in message and ARGUMENT in message
    assert "Your current stance: Agree" in message
    assert "Their argument 1:\nargument 0\nYour reply 1:\nr0" in message  # the full dialogue, not a window
    assert "Their argument 4:\nargument 3\nYour reply 4:\nr3" in message
    assert message.endswith("Their latest argument:\nargument 4")
    assert "(this is their first argument)" in fake.calls[0][2]
    for label in STANCES:
        assert label in system


def test_validator_directly() -> None:
    got = roles.validate_persuadee({"response": " ok ", "stance": "Agree", "thought": 5})
    assert got == roles.PersuadeeReply("", "ok", "Agree")
    for bad in (
        {"response": "x"},
        {"stance": "Agree"},
        {"response": "x", "stance": 3},
        {"response": " ", "stance": "A"},
    ):
        with pytest.raises((KeyError, TypeError, ValueError)):
            roles.validate_persuadee(bad)
