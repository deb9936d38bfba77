"""TurtleEnv (docs/spec/GYMS.md §8): feedback strings, rewards, termination, flags, scripted, llm roles."""

from __future__ import annotations

import json
from typing import Any

import pytest
from gym_helpers import FakeRoleClient, step

import userrl.envs.turtle  # noqa: F401  (registers userrl/Turtle-v0 until discovery imports every gym)
from userrl.envs import Task
from userrl.envs.turtle import env as tenv
from userrl.envs.turtle import roles
from userrl.envs.turtle.env import TurtleEnv
from userrl.envs.turtle.tasks import builtin_prompt

SURFACE = (
    "A man walks into a bar and asks for water. The bartender points a gun at him, and the man thanks him."
)
BOTTOM = (
    "The man had hiccups. The bartender scared him with the gun to cure the hiccups. "
    "The hiccups stopped, so the man thanked him and left."
)
RUBRIC = [
    ("The man had hiccups.", 0.5),
    ("The bartender scared him to cure the hiccups.", 0.3),
    ("The man thanked him because the hiccups stopped.", 0.2),
]
PARTIAL = "He had hiccups."  # statement 1 fully, statements 2 and 3 a third of their key words
FULL = "He had hiccups, so the bartender scared him to cure them; the hiccups stopped and he thanked him."
NONSENSE = "Aliens landed on the roof."
HEADER = "Your story covers these key points:"
MORE = "There may be more twists to uncover."


def make_task(rubric: list[tuple[str, float]] | None = None, key: str = "The Bar") -> Task:
    data = {
        "id": "t-1",
        "title": key,
        "surface": SURFACE,
        "bottom": BOTTOM,
        "rubric": [{"statement": s, "weight": w} for s, w in (rubric or RUBRIC)],
        "key_questions": [],
    }
    return Task("turtle", key, builtin_prompt(key, SURFACE), data)


def started(rubric: list[tuple[str, float]] | None = None, **kwargs: Any) -> TurtleEnv:
    env = TurtleEnv(make_task(rubric), **kwargs)
    env.reset()
    return env


def grader_reply(*scores: Any, feedback: str = "ignored") -> str:
    return json.dumps(
        {"scores": [{"statement": "s", "thought": "t", "score": s} for s in scores], "feedback": feedback}
    )


def llm_env(*calls: list[str], **kwargs: Any) -> tuple[TurtleEnv, FakeRoleClient]:
    client = FakeRoleClient(*calls)
    env = TurtleEnv(make_task(), backend="openai", llm=client, **kwargs)
    env.reset()
    return env, client


# ---------------------------------------------------------------- action: the scripted oracle


@pytest.mark.parametrize(
    ("question", "expected"),
    [
        ("Did he have hiccups?", "Yes"),  # Q = {hiccup}
        ("Was the water poisoned?", "No"),  # Q = {poisoned}
        ("Did the man ask for water?", "Maybe"),  # every word is in the surface
        ("Did hiccups cure someone?", "Yes"),  # 2 of 3 new words in the bottom
        ("Did hiccups frighten someone?", "No"),  # 1 of 3 < ceil(3 / 2)
        ("Hiccups or poison?", "Yes"),  # 1 of 2 >= ceil(2 / 2)
        ("", "Maybe"),
        ("?!", "Maybe"),
    ],
)
def test_scripted_oracle(question: str, expected: str) -> None:
    env = started()
    feedback, reward, terminated, truncated, info = step(env, f"[action] {question}")
    assert (feedback, reward, terminated, truncated) == (expected, 0.0, False, False)
    assert info["judge_success"] is None and info["lm_calls"] == []


# ---------------------------------------------------------------- answer: the scripted grader and rewards


def test_answers_pay_the_increase_of_the_best_score() -> None:
    env = started()
    feedback, reward, terminated, _, info = step(env, f"[answer] {PARTIAL}")
    # 0.5 * 1 + 0.3 * 0.5 + 0.2 * 0.5
    assert feedback == f"{HEADER}\n- The man had hiccups.\n{MORE}"
    assert reward == pytest.approx(0.75) and not terminated
    assert (info["current_score"], info["best_score"], info["judge_success"]) == (
        pytest.approx(0.75),
        pytest.approx(0.75),
        True,
    )
    feedback, reward, terminated, _, info = step(env, f"[answer] {NONSENSE}")
    assert (feedback, reward, terminated) == (
        "Your story does not cover any of the key points yet.",
        0.0,
        False,
    )
    assert info["current_score"] == 0.0 and info["best_score"] == pytest.approx(0.75)
    feedback, reward, terminated, truncated, info = step(env, f"[answer] {FULL}")
    assert feedback == "\n".join([HEADER, *(f"- {s}" for s, _ in RUBRIC), MORE])
    assert reward == pytest.approx(0.25) and terminated and not truncated
    assert info["total_reward"] == pytest.approx(1.0) and info["best_score"] == 1.0
    assert [h["overall"] for h in info["judge_history"]] == [pytest.approx(0.75), 0.0, 1.0]


def test_a_repeated_answer_earns_nothing() -> None:
    env = started()
    assert step(env, f"[answer] {PARTIAL}")[1] == pytest.approx(0.75)
    assert step(env, f"[answer] {PARTIAL}")[1] == 0.0


def test_empty_answer_covers_nothing() -> None:
    feedback, reward, terminated, _, info = step(started(), "[answer]")
    assert (feedback, reward, terminated) == (
        "Your story does not cover any of the key points yet.",
        0.0,
        False,
    )
    assert info["judge_success"] is True


def test_grader_keys_drop_surface_and_generic_words() -> None:
    surface_words = roles.content_words(SURFACE)
    keys = roles.statement_keys("The story reveals that the protagonist had hiccups.", surface_words)
    assert keys == {"hiccup"}
    # A statement made only of surface and generic words falls back to all of its content words.
    assert roles.statement_keys("The story reveals the bartender.", surface_words) == {
        "story",
        "reveal",
        "bartender",
    }


@pytest.mark.parametrize(
    ("story", "expected"),
    [
        ("hiccups scared cure", [1.0]),  # 3/3
        ("hiccups scared", [1.0]),  # 2/3 >= 0.6
        ("hiccups", [0.5]),  # 1/3 >= 0.3
        ("nothing", [0.0]),
    ],
)
def test_scripted_grade_thresholds(story: str, expected: list[float]) -> None:
    keys = [frozenset({"hiccup", "scared", "cure"})]
    assert roles.scripted_grade(keys, story) == expected


def test_reveal_covered_statements_off_gives_a_count() -> None:
    env = started(reveal_covered_statements=False)
    assert step(env, f"[answer] {PARTIAL}")[0] == "Your story covers 1 of 3 key points."
    assert step(env, f"[answer] {NONSENSE}")[0] == "Your story does not cover any of the key points yet."
    assert step(env, f"[answer] {FULL}")[0] == "Your story covers 3 of 3 key points."


def test_success_threshold_is_configurable() -> None:
    env = started(success_threshold=0.7)
    assert step(env, f"[answer] {PARTIAL}")[1:3] == (pytest.approx(0.75), True)
    with pytest.raises(ValueError, match="success_threshold"):
        TurtleEnv(make_task(), success_threshold=1.5)


def test_weights_summing_below_one_still_terminate() -> None:
    rubric = [(s, w) for (s, _), w in zip(RUBRIC, (0.4, 0.3, 0.2), strict=True)] + [("The man left.", 0.1)]
    assert sum(w for _, w in rubric) < 1.0  # 0.9999999999999999 in float
    env = started(rubric)
    _, reward, terminated, _, info = step(env, f"[answer] {FULL} Then the man left.")
    assert terminated and reward == pytest.approx(1.0) and reward < 1.0
    assert info["best_score"] == reward


def test_without_the_tolerance_it_would_not_terminate(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tenv, "SUCCESS_TOLERANCE", 0.0)
    rubric = [(s, w) for (s, _), w in zip(RUBRIC, (0.4, 0.3, 0.2), strict=True)] + [("The man left.", 0.1)]
    assert step(started(rubric), f"[answer] {FULL} Then the man left.")[2] is False


def test_overall_is_capped_at_one() -> None:
    env = started([(RUBRIC[0][0], 0.7), (RUBRIC[1][0], 0.6)])
    _, reward, terminated, _, info = step(env, f"[answer] {FULL}")
    assert (reward, terminated, info["current_score"]) == (1.0, True, 1.0)


def test_step_penalty_scale_and_clipping() -> None:
    env = started(step_penalty=0.1)
    assert step(env, "[action] Did he have hiccups?")[1] == 0.0  # only answers pay (and are penalised)
    assert step(env, f"[answer] {PARTIAL}")[1] == pytest.approx(0.75 - 0.2)
    assert step(env, f"[answer] {NONSENSE}")[1] == 0.0  # clipped at 0
    env = started(reward_scale=2.0)
    assert step(env, f"[answer] {PARTIAL}")[1] == 1.0  # clipped at 1
    env = started(reward_scale=2.0, normalize_rewards=False)
    assert step(env, f"[answer] {PARTIAL}")[1] == pytest.approx(1.5)


# ---------------------------------------------------------------- finish, invalid choices, limits


def test_finish() -> None:
    env = started()
    step(env, f"[answer] {PARTIAL}")
    assert step(env, "[finish]")[:4] == ("Episode finished.", 0.0, True, False)
    assert step(env, f"[answer] {FULL}")[:4] == ("The episode has already ended.", 0.0, True, False)


@pytest.mark.parametrize("action", ["[search] hiccups", "hiccups", "", "[Answer] hiccups", "answer: x"])
def test_invalid_choice(action: str) -> None:
    assert step(started(), action)[:3] == (
        "Invalid action. Allowed choices: action (a yes/no question), answer (your full story).",
        0.0,
        False,
    )


def test_a_perfect_answer_on_the_last_step_terminates_only() -> None:
    env = started(max_steps=1)
    assert step(env, f"[answer] {FULL}")[2:4] == (True, False)


# ---------------------------------------------------------------- observation and info


def test_observation_and_info_fields() -> None:
    env = TurtleEnv(make_task())
    obs, info = env.reset()
    assert obs == {
        "feedback": tenv.WELCOME,
        "story_title": "The Bar",
        "story_text": SURFACE,
        "goal": tenv.GOAL,
        "step_count": 0,
        "episode_complete": False,
        "current_score": 0.0,
        "best_score": 0.0,
    }
    assert info["total_criteria"] == 3 and info["ground_truth"] == BOTTOM
    assert info["best_json_response"] is None and info["judge_history"] == []
    _, _, _, _, info = env.step(f"[answer] {PARTIAL}")
    assert info["best_json_response"]["overall"] == pytest.approx(0.75)
    assert [s["score"] for s in info["best_json_response"]["scores"]] == [1.0, 0.5, 0.5]
    assert {"raw_action", "action_history", "total_reward", "error", "lm_calls"} <= set(info)
    env.step(f"[answer] {NONSENSE}")
    # The best response stays the best one; history entries are copies, not live state.
    _, _, _, _, info = env.step("[action] Was it raining?")
    assert info["best_json_response"]["overall"] == pytest.approx(0.75) and info["judge_success"] is None
    info["judge_history"].clear()
    assert len(env.judge_history) == 2


def test_bad_task_data_is_refused() -> None:
    bad = Task("turtle", "k", builtin_prompt("k", "s"), {"title": "k", "surface": "s", "bottom": "b"})
    with pytest.raises(ValueError, match="'k'.*rubric"):
        TurtleEnv(bad)
    negative = make_task([("x", -1.0)])
    with pytest.raises(ValueError, match="weights >= 0"):
        TurtleEnv(negative)


def test_keyword_validation() -> None:
    with pytest.raises(ValueError, match="oracle_history_turns"):
        TurtleEnv(make_task(), oracle_history_turns=-1)
    with pytest.raises(TypeError):
        TurtleEnv(make_task(), reveal=False)


# ---------------------------------------------------------------- the llm backend (fake client)


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        ('{"thought": "yes", "response": "Yes"}', "Yes"),
        (
            '<think>The bottom says hiccups. {"response": "No"}</think>{"thought": "t", "response": "yes."}',
            "Yes",
        ),
        ('```json\n{"thought": "t", "response": "NO, not at all"}\n```', "No"),
        ('Sure! Here it is: {"thought": null, "response": "maybe"}', "Maybe"),
        ('{"thought": "t", "response": "Perhaps"}', "Maybe"),
        ('{"thought": "t", "response": true}', "Yes"),
        ('{"thought": "t", "response": 3}', "Maybe"),
    ],
)
def test_llm_oracle_normalises_replies(reply: str, expected: str) -> None:
    env, client = llm_env([reply])
    feedback, reward, _, _, info = step(env, "[action] Did he have hiccups?")
    assert (feedback, reward) == (expected, 0.0)
    assert info["lm_calls"] == [{"role": "turtle_oracle", "attempts": 1, "ok": True, "latency_s": 0.01}]
    role, system, user = client.seen[0]
    assert (role, system) == ("turtle_oracle", roles.ORACLE_SYSTEM_PROMPT)
    assert SURFACE in user and BOTTOM in user and user.endswith("Did he have hiccups?")


def test_llm_oracle_retries_then_falls_back() -> None:
    env, _ = llm_env(["no json here", '{"thought": "missing response"}', '{"response": "Yes"}'])
    assert step(env, "[action] Q1?")[0] == "Yes"
    env, _ = llm_env(["garbage", "{broken", '["Yes"]'])
    feedback, reward, terminated, _, info = step(env, "[action] Q1?")
    assert (feedback, reward, terminated) == (
        "I could not process that question. Please ask another yes/no question.",
        0.0,
        False,
    )
    assert info["lm_calls"] == [{"role": "turtle_oracle", "attempts": 3, "ok": False, "latency_s": 0.02}]


def test_llm_oracle_history_flag() -> None:
    answers = [['{"response": "Yes"}'], ['{"response": "No"}'], ['{"response": "No"}']]
    env, client = llm_env(*answers)
    for q in ("First?", "Second?", "Third?"):
        env.step(f"[action] {q}")
    assert all("Earlier questions" not in user for _, _, user in client.seen)  # default: no history
    env, client = llm_env(*answers, oracle_history_turns=1)
    for q in ("First?", "Second?", "Third?"):
        env.step(f"[action] {q}")
    assert "Q: Second?\nA: No" in client.seen[2][2] and "First?" not in client.seen[2][2]


def test_llm_grader_snaps_scores_and_ignores_its_feedback() -> None:
    env, client = llm_env([grader_reply("1", 0.74, -2, feedback="You nailed it all!")])
    feedback, reward, terminated, _, info = step(env, f"[answer] {PARTIAL}")
    # 0.74 snaps to 0.5 and -2 clamps to 0: 0.5 + 0.3 * 0.5
    assert feedback == f"{HEADER}\n- The man had hiccups.\n{MORE}"
    assert reward == pytest.approx(0.65) and not terminated and info["judge_success"] is True
    role, system, user = client.seen[0]
    assert (role, system) == ("turtle_grader", roles.GRADER_SYSTEM_PROMPT)
    # The statements go in order and without their weights.
    assert "1. The man had hiccups.\n2. The bartender" in user and PARTIAL in user
    assert "0.5" not in user and "0.3" not in user and "weight" not in user


def test_llm_grader_perfect_story_terminates() -> None:
    env, _ = llm_env([grader_reply(1, "1.0", 1.7)])
    assert step(env, f"[answer] {FULL}")[1:3] == (1.0, True)


def test_llm_grader_rejects_wrong_lengths_and_bad_scores_then_fails() -> None:
    env, _ = llm_env([grader_reply(1, 1), grader_reply(1, 1, "lots"), grader_reply(1, True, 1)])
    feedback, reward, terminated, _, info = step(env, f"[answer] {FULL}")
    assert (feedback, reward, terminated) == ("Your story could not be evaluated. Try again.", 0.0, False)
    assert info["judge_success"] is False and info["current_score"] == 0.0
    assert info["best_json_response"] is None and info["judge_history"][0]["scores"] is None
    assert info["lm_calls"][0]["ok"] is False and info["lm_calls"][0]["attempts"] == 3


def test_llm_grader_failure_after_a_score_keeps_the_best() -> None:
    env, _ = llm_env([grader_reply(1, 0, 0)], ["garbage"])
    assert step(env, f"[answer] {PARTIAL}")[1] == 0.5
    _, reward, _, _, info = step(env, f"[answer] {FULL}")
    assert (reward, info["current_score"], info["best_score"]) == (0.0, 0.0, 0.5)


def test_empty_question_and_story_skip_the_model() -> None:
    env, client = llm_env()
    assert step(env, "[action]   ")[0] == "Maybe"
    assert step(env, "[answer]")[0] == "Your story does not cover any of the key points yet."
    assert client.seen == [] and env.step("[action]")[4]["lm_calls"] == []


def test_role_backends_mix_scripted_and_llm() -> None:
    client = FakeRoleClient([grader_reply(1, 1, 1)])
    env = TurtleEnv(make_task(), backend="openai", llm=client, role_backends={"oracle": "scripted"})
    env.reset()
    assert step(env, "[action] Did he have hiccups?")[0] == "Yes"  # scripted, no call
    assert step(env, f"[answer] {FULL}")[1:3] == (1.0, True)
    assert [role for role, _, _ in client.seen] == ["turtle_grader"]


@pytest.mark.parametrize(
    ("value", "expected"),
    [(0, 0.0), (0.24, 0.0), (0.25, 0.0), (0.26, 0.5), (0.75, 0.5), (0.76, 1.0), ("1", 1.0), (" 0.5 ", 0.5)],
)
def test_snap_score(value: Any, expected: float) -> None:
    assert roles.snap_score(value) == expected


@pytest.mark.parametrize("value", [True, None, "high", "nan", float("nan"), [1]])
def test_snap_score_rejects(value: Any) -> None:
    with pytest.raises((ValueError, TypeError)):
        roles.snap_score(value)
