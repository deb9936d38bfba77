"""TelepathyEnv (docs/spec/GYMS.md §6): feedback strings, rewards, termination, scripted and llm roles."""

from __future__ import annotations

import json
from typing import Any

import pytest
from gym_helpers import FakeRoleClient, step

import userrl.envs.telepathy  # noqa: F401  (registers userrl/Telepathy-v0 until discovery imports every gym)
from userrl.envs import Task
from userrl.envs.telepathy import env as tenv
from userrl.envs.telepathy import roles
from userrl.envs.telepathy.env import TelepathyEnv
from userrl.envs.telepathy.tasks import builtin_prompt

TARGET = "Lion - a large wild cat, known as king of the jungle, has a mane, lives in Africa, roars loudly"
DESCRIPTION = "I am thinking of an animal. Try to guess what it is by asking yes/no questions!"
INVALID = "Invalid action. Allowed choices: action (a yes/no question), answer (your guess)."


def make_task(title: str = "Lion", target: str = TARGET, category: str = "animal") -> Task:
    data = {
        "id": "e-1",
        "title": title,
        "description": DESCRIPTION,
        "goal": "Guess the animal I am thinking of.",
        "target_entity": target,
        "category": category,
        "attributes": {},
    }
    return Task("telepathy", title, builtin_prompt(DESCRIPTION), data)


def started(**kwargs: Any) -> TelepathyEnv:
    env = TelepathyEnv(make_task(), **kwargs)
    env.reset()
    return env


def judge_reply(judgment: Any, feedback: Any = "Nice try.") -> str:
    return json.dumps({"thought": "t", "judgment": judgment, "feedback": feedback})


def llm_env(*calls: list[str], **kwargs: Any) -> tuple[TelepathyEnv, FakeRoleClient]:
    client = FakeRoleClient(*calls)
    env = TelepathyEnv(make_task(), backend="openai", llm=client, **kwargs)
    env.reset()
    return env, client


# ---------------------------------------------------------------- action: the scripted oracle


@pytest.mark.parametrize(
    ("question", "expected"),
    [
        ("Does it have a mane?", "Yes"),
        ("Is it a cat?", "Yes"),
        ("Does it live in Africa?", "Yes"),  # "live" no, "africa" yes: any overlap
        ("Is it alive?", "Yes"),  # hypernym of the animal category
        ("Is it a creature?", "Yes"),
        ("Is it an animal?", "Yes"),  # the category itself
        ("Is it a bird?", "No"),
        ("Can you eat it?", "No"),
        ("Is it a thing?", "Maybe"),  # only generic words
        ("Is the entity something you are thinking of?", "Maybe"),
        ("", "Maybe"),
        ("???", "Maybe"),
    ],
)
def test_scripted_oracle(question: str, expected: str) -> None:
    feedback, reward, terminated, truncated, info = step(started(), f"[action] {question}")
    assert (feedback, reward, terminated, truncated) == (expected, 0.0, False, False)
    assert info["judge_success"] is None and info["lm_calls"] == []


@pytest.mark.parametrize(
    ("category", "yes", "no"),
    [
        ("famous_person", ["Is it a person?", "Is it a human?", "Are they people?"], ["Is it an animal?"]),
        ("historical_figure", ["Is it someone famous?"], ["Is it a place?"]),
        ("fruit", ["Is it a plant?", "Can it grow?", "Is it edible?", "Is it food?"], ["Is it a vehicle?"]),
        ("natural_site", ["Is it a place?", "Can I visit it?"], ["Is it a person?"]),
        ("body_of_water", ["Is it a location?"], ["Is it alive?"]),
        ("aircraft", ["Is it a vehicle?", "Is it used for transport?"], ["Is it edible?"]),
        ("dog_breed", ["Is it an animal?", "Is it alive?"], ["Is it a plant?"]),
        ("musical_instrument", ["Is it an instrument?", "Is it musical?"], ["Is it alive?", "Is it food?"]),
    ],
)
def test_scripted_oracle_hypernyms(category: str, yes: list[str], no: list[str]) -> None:
    keywords = roles.entity_keywords("Zzz", "Zzz - qqq", category)
    assert [roles.scripted_oracle(q, keywords) for q in yes] == ["Yes"] * len(yes)
    assert [roles.scripted_oracle(q, keywords) for q in no] == ["No"] * len(no)


# ---------------------------------------------------------------- answer: the scripted judge and rewards


@pytest.mark.parametrize(
    "guess", ["Lion", "lion", " LION! ", "Li-on", "a lion", "The African lion", "lion (animal)"]
)
def test_scripted_judge_accepts(guess: str) -> None:
    feedback, reward, terminated, truncated, info = step(started(), f"[answer] {guess}")
    assert (feedback, reward, terminated, truncated) == ("Correct! Your guess is right.", 1.0, True, False)
    assert (info["current_score"], info["best_score"], info["judge_success"]) == (1.0, 1.0, True)
    assert info["best_json_response"]["judgment"] is True


@pytest.mark.parametrize("guess", ["Tiger", "cat", "Leo", "", "king of the jungle"])
def test_scripted_judge_rejects(guess: str) -> None:
    feedback, reward, terminated, _, info = step(started(), f"[answer] {guess}")
    assert (feedback, reward, terminated) == ("Your guess is not the entity.", 0.0, False)
    assert info["current_score"] == 0.0 and info["judge_success"] is True


def test_scripted_judge_rules() -> None:
    target = "Great Wall of China - a long wall"
    assert roles.scripted_judge("the Great Wall of China", "Great Wall of China", target)  # substring
    assert roles.scripted_judge("China's great wall", "Great Wall of China", target)  # word set, +0 words
    assert roles.scripted_judge(
        "great wall in china, the long one", "Great Wall of China", target
    )  # +2 words
    assert not roles.scripted_judge(
        "great wall in north china the long old one", "Great Wall of China", target
    )
    assert roles.scripted_judge("Kiwi fruit", "Kiwifruit", "Kiwi fruit - green")  # equals the name part
    assert not roles.scripted_judge("Kiwi", "Kiwifruit", "Kiwi fruit - green")
    # A title without content words or letters matches nothing by the word or substring rules.
    assert not roles.scripted_judge("anything at all", "Ox", "Ox - a bovine")
    assert not roles.scripted_judge("anything", "!!", "!! - symbols")


def test_wrong_then_right() -> None:
    env = started()
    assert step(env, "[action] Does it have a mane?")[:2] == ("Yes", 0.0)
    assert step(env, "[answer] Tiger")[:3] == ("Your guess is not the entity.", 0.0, False)
    _, reward, terminated, _, info = step(env, "[answer] Lion")
    assert (reward, terminated, info["total_reward"]) == (1.0, True, 1.0)
    assert [(h["step"], h["choice"], h["response"]) for h in info["response_history"]] == [
        (1, "action", "Yes"),
        (2, "answer", "Your guess is not the entity."),
        (3, "answer", "Correct! Your guess is right."),
    ]
    assert info["best_json_response"] == {
        "thought": "",
        "judgment": True,
        "feedback": "Your guess is right.",
        "guess": "Lion",
    }


def test_step_penalty_scale_and_clipping() -> None:
    env = started(step_penalty=0.1)
    assert step(env, "[action] Is it a cat?")[1] == 0.0
    assert step(env, "[answer] Tiger")[1] == 0.0  # clipped at 0, not -0.2
    assert step(env, "[answer] Lion")[1] == pytest.approx(0.7)
    env = started(reward_scale=0.5)
    assert step(env, "[answer] Lion")[1:3] == (0.5, True)
    env = started(reward_scale=3.0, normalize_rewards=False)
    assert step(env, "[answer] Lion")[1] == 3.0


# ---------------------------------------------------------------- finish, invalid choices, limits


def test_finish() -> None:
    env = started()
    assert step(env, "[finish]")[:4] == ("Episode finished.", 0.0, True, False)
    assert step(env, "[answer] Lion")[:4] == ("The episode has already ended.", 0.0, True, False)


@pytest.mark.parametrize("action", ["[search] lion", "Lion", "", "[ANSWER] Lion", "guess: lion"])
def test_invalid_choice(action: str) -> None:
    feedback, reward, terminated, _, info = step(started(), action)
    assert (feedback, reward, terminated) == (INVALID, 0.0, False)
    assert info["response_history"] == []


def test_a_correct_guess_on_the_last_step_terminates_only() -> None:
    env = started(max_steps=2)
    env.step("[action] Is it a cat?")
    assert step(env, "[answer] Lion")[2:4] == (True, False)


# ---------------------------------------------------------------- observation and info


def test_observation_and_info_fields() -> None:
    env = TelepathyEnv(make_task())
    obs, info = env.reset()
    assert obs == {
        "feedback": tenv.WELCOME,
        "entity_title": "Lion",
        "description": DESCRIPTION,
        "goal": "Guess the animal I am thinking of.",
        "step_count": 0,
        "episode_complete": False,
        "current_score": 0.0,
        "best_score": 0.0,
    }
    assert {k: info[k] for k in ("target_entity", "category", "best_json_response", "response_history")} == {
        "target_entity": TARGET,
        "category": "animal",
        "best_json_response": None,
        "response_history": [],
    }
    _, _, _, _, info = env.step("[answer] Tiger")
    assert info["best_json_response"]["guess"] == "Tiger"
    assert {"raw_action", "action_history", "total_reward", "error", "lm_calls", "judge_success"} <= set(info)


def test_bad_task_data_is_refused() -> None:
    bad = Task("telepathy", "k", builtin_prompt("d"), {"title": "k", "description": "d"})
    with pytest.raises(ValueError, match="'k'.*target_entity"):
        TelepathyEnv(bad)


def test_keyword_validation() -> None:
    with pytest.raises(ValueError, match="oracle_history_turns"):
        TelepathyEnv(make_task(), oracle_history_turns=True)


# ---------------------------------------------------------------- the llm backend (fake client)


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        ('{"thought": "lions have manes", "response": "Yes"}', "Yes"),
        ('<think>{"response": "No"}</think>\n{"thought": "t", "response": "yes!"}', "Yes"),
        ('```json\n{"thought": "t", "response": "No."}\n```', "No"),
        ('Here you go: {"thought": null, "response": "MAYBE"}', "Maybe"),
        ('{"thought": "t", "response": "It depends"}', "Maybe"),
        ('{"thought": "t", "response": false}', "No"),
    ],
)
def test_llm_oracle_normalises_replies(reply: str, expected: str) -> None:
    env, client = llm_env([reply])
    feedback, _, _, _, info = step(env, "[action] Does it have a mane?")
    assert feedback == expected
    assert info["lm_calls"] == [{"role": "telepathy_oracle", "attempts": 1, "ok": True, "latency_s": 0.01}]
    role, system, user = client.seen[0]
    assert (role, system) == ("telepathy_oracle", roles.ORACLE_SYSTEM_PROMPT)
    # The oracle sees the target entity and the question only.
    assert user == f"Entity you are thinking of:\n{TARGET}\n\nQuestion:\nDoes it have a mane?"


def test_llm_oracle_retries_then_falls_back() -> None:
    env, _ = llm_env(["nothing", '{"answer": "Yes"}', '{"response": "No"}'])
    assert step(env, "[action] Q?")[0] == "No"
    env, _ = llm_env(["nothing", "{", "[1, 2]"])
    feedback, reward, terminated, _, info = step(env, "[action] Q?")
    assert (feedback, reward, terminated) == (
        "I could not process that question. Please ask another yes/no question.",
        0.0,
        False,
    )
    assert info["lm_calls"][0]["ok"] is False and info["lm_calls"][0]["attempts"] == 3


def test_llm_oracle_history_flag() -> None:
    answers = [['{"response": "Yes"}'], ['{"response": "No"}'], ['{"response": "No"}']]
    env, client = llm_env(*answers, oracle_history_turns=2)
    for q in ("First?", "Second?", "Third?"):
        env.step(f"[action] {q}")
    assert "Earlier questions" not in client.seen[0][2]
    assert "Q: First?\nA: Yes\nQ: Second?\nA: No\n\nQuestion:\nThird?" in client.seen[2][2]


@pytest.mark.parametrize("judgment", ["Yes", "yes", " YES "])
def test_llm_judge_correct(judgment: str) -> None:
    env, client = llm_env([judge_reply(judgment, "Well done, you got it.")])
    feedback, reward, terminated, _, info = step(env, "[answer] King of beasts")
    assert (feedback, reward, terminated) == ("Correct! Well done, you got it.", 1.0, True)
    assert info["best_json_response"]["judgment"] is True and info["judge_success"] is True
    role, system, user = client.seen[0]
    assert (role, system) == ("telepathy_judge", roles.JUDGE_SYSTEM_PROMPT)
    assert TARGET in user and user.endswith("King of beasts")


def test_llm_judge_wrong_uses_the_model_feedback() -> None:
    env, _ = llm_env([judge_reply("No", "Close, but think bigger.")])
    assert step(env, "[answer] Cat")[:3] == ("Close, but think bigger.", 0.0, False)


def test_llm_judge_empty_feedback_gets_the_scripted_wording() -> None:
    env, _ = llm_env([judge_reply("No", "  ")], [judge_reply("Yes", "")])
    assert step(env, "[answer] Cat")[0] == "Your guess is not the entity."
    assert step(env, "[answer] Lion")[0] == "Correct! Your guess is right."


def test_llm_judge_rejects_bad_replies_then_fails() -> None:
    replies = [judge_reply("Maybe"), judge_reply(True), judge_reply("Yes", None)]
    env, _ = llm_env(replies, [judge_reply("Yes")])
    feedback, reward, terminated, _, info = step(env, "[answer] Lion")
    assert (feedback, reward, terminated) == ("Your guess could not be evaluated. Try again.", 0.0, False)
    assert info["judge_success"] is False and info["current_score"] == 0.0
    assert info["lm_calls"] == [{"role": "telepathy_judge", "attempts": 3, "ok": False, "latency_s": 0.02}]
    assert step(env, "[answer] Lion")[1:3] == (1.0, True)  # the episode goes on after a judge failure


def test_empty_guess_and_question_skip_the_model() -> None:
    env, client = llm_env()
    assert step(env, "[answer]   ")[0] == "Your guess is not the entity."
    assert step(env, "[action]")[0] == "Maybe"
    assert client.seen == []


def test_role_backends_mix_scripted_and_llm() -> None:
    client = FakeRoleClient(['{"response": "No"}'])
    env = TelepathyEnv(make_task(), backend="openai", llm=client, role_backends={"judge": "scripted"})
    env.reset()
    assert step(env, "[action] Does it have a mane?")[0] == "No"  # the model says so
    assert step(env, "[answer] lion")[1:3] == (1.0, True)
    assert [role for role, _, _ in client.seen] == ["telepathy_oracle"]
