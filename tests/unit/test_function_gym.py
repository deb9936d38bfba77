"""FunctionEnv and its safe evaluator (docs/spec/GYMS.md §1): feedback strings, rewards, flags, spaces."""

from __future__ import annotations

from typing import Any

import pytest

import userrl.envs  # noqa: F401  (registers userrl/Function-v0)
from userrl.envs import Task, make_env
from userrl.envs.function.env import FunctionEnv
from userrl.envs.function.safe_eval import EvaluationError, Formula, RuleError
from userrl.envs.function.tasks import builtin_prompt


def make_task(rule: str = "c * (a * b) * d", test_case: list[int] | None = None, key: str = "t-1") -> Task:
    test_case = test_case or [3, 5, 5, 3]
    expected = round(Formula(rule).evaluate(test_case), 4)
    data = {"id": key, "rule": rule, "test_case": test_case, "expected_result": expected}
    return Task("function", key, builtin_prompt(), data)


def started(rule: str = "c * (a * b) * d", test_case: list[int] | None = None, **kwargs: Any) -> FunctionEnv:
    env = FunctionEnv(make_task(rule, test_case), **kwargs)
    env.reset()
    return env


def feedback(env: FunctionEnv, action: str) -> str:
    return env.step(action)[0]["feedback"]


# ---------------------------------------------------------------- safe evaluator


@pytest.mark.parametrize(
    ("rule", "values", "expected"),
    [
        ("c * (a * b) * d", [3, 5, 5, 3], 225.0),
        ("a + b * c", [1, 2, 3, 4], 7.0),
        ("2 ** 3 ** 2", [0, 0, 0, 0], 512.0),  # right-associative power
        ("-a ** 2", [3, 0, 0, 0], -9.0),  # unary minus binds looser than **
        ("a / b", [1, 2, 0, 0], 0.5),  # true division on floats
        ("+a - -b", [1, 2, 0, 0], 3.0),
        ("a ** 0.5", [9, 0, 0, 0], 3.0),
        ("d", [1, 2, 3, 4], 4.0),
    ],
)
def test_formula_evaluates(rule: str, values: list[float], expected: float) -> None:
    assert Formula(rule).evaluate(values) == expected


def test_formula_accepts_a_mapping_and_reports_its_variables() -> None:
    formula = Formula("a * b")
    assert formula.variables == {"a", "b"}
    assert formula({"a": 2, "b": 3}) == 6.0
    assert isinstance(formula({"a": 2, "b": 3}), float)
    with pytest.raises(ValueError, match="needs values"):
        formula({"a": 2})


@pytest.mark.parametrize(
    "rule",
    [
        "__import__('os').system('true')",
        "a.real",
        "a[0]",
        "abs(a)",
        "a if b else c",
        "a < b",
        "a // b",
        "a % b",
        "a and b",
        "not a",
        "~a",
        "lambda: 1",
        "'x'",
        "True",
        "1j",
        "e + 1",
        "(a, b)",
        "[a]",
        "a +",
        "",
        "a; b",
        "a = 1",
        "1" * 400,
        "a" + " + a" * 200,
    ],
)
def test_formula_rejects_at_load(rule: str) -> None:
    with pytest.raises(RuleError):
        Formula(rule)


@pytest.mark.parametrize(
    ("rule", "values"),
    [
        ("a / b", [1, 0, 0, 0]),  # division by zero
        ("a ** b", [0, -1, 0, 0]),  # zero to a negative power
        ("a ** b", [10, 400, 0, 0]),  # OverflowError
        ("a ** b", [-8, 0.5, 0, 0]),  # complex result
        ("a * b * c", [1e200, 1e200, 1e200, 0]),  # inf
        ("a - b", [float("inf"), float("inf"), 0, 0]),  # nan
        ("a", [float("inf"), 0, 0, 0]),  # non-finite result
    ],
)
def test_formula_evaluation_errors(rule: str, values: list[float]) -> None:
    with pytest.raises(EvaluationError):
        Formula(rule).evaluate(values)


# ---------------------------------------------------------------- action: probing


@pytest.mark.parametrize(
    ("rule", "action", "expected"),
    [
        ("a + b + c + d", "[action] 1 2 3 4", "For numbers [1.0, 2.0, 3.0, 4.0], the result is 10.0."),
        ("a / b", "[action] 2 3 1 1", "For numbers [2.0, 3.0, 1.0, 1.0], the result is 0.6667."),
        ("a - b", "[action] -1.5 2 0 0", "For numbers [-1.5, 2.0, 0.0, 0.0], the result is -3.5."),
        ("a - b", "[action] 2 2 1 1", "For numbers [2.0, 2.0, 1.0, 1.0], the result is 0.0."),
        ("a * b", "[action] a=2, b=3, c=1, d=1", "For numbers [2.0, 3.0, 1.0, 1.0], the result is 6.0."),
        ("a * b", "[action] 1. 2 3 4", "For numbers [1.0, 2.0, 3.0, 4.0], the result is 2.0."),
    ],
)
def test_probe(rule: str, action: str, expected: str) -> None:
    env = started(rule)
    obs, reward, terminated, truncated, _ = env.step(action)
    assert (obs["feedback"], reward, terminated, truncated) == (expected, 0.0, False, False)


@pytest.mark.parametrize(
    "action", ["[action] 1 2 3", "[action] 1 2 3 4 5", "[action]", "[action] one two three four"]
)
def test_probe_needs_four_numbers(action: str) -> None:
    assert feedback(started(), action) == "Please provide exactly four numbers separated by spaces."


@pytest.mark.parametrize("action", ["[action] 3 5 5 3", "[action] 3.0 5 5.00 3"])
def test_probe_refuses_the_test_case(action: str) -> None:
    expected = (
        "These are the test-case inputs; the function will not be computed for them. Try other numbers."
    )
    assert feedback(started(test_case=[3, 5, 5, 3]), action) == expected


@pytest.mark.parametrize(
    ("rule", "action"), [("a / b", "[action] 1 0 1 1"), ("a ** b", "[action] 10 400 1 1")]
)
def test_probe_evaluation_error(rule: str, action: str) -> None:
    expected = "The function cannot be evaluated for these numbers. Try other numbers."
    assert feedback(started(rule), action) == expected


# ---------------------------------------------------------------- search


@pytest.mark.parametrize("action", ["[search] test", "[search]  TEST ", "[search]Test"])
def test_search_test(action: str) -> None:
    env = started(test_case=[3, 5, 5, 3])
    assert env.step(action)[:4] == (
        {
            "feedback": "Test case: [3, 5, 5, 3]",
            "step_count": 1,
            "episode_complete": False,
            "answered_correctly": False,
        },
        0.0,
        False,
        False,
    )
    assert feedback(env, action) == "Test case: [3, 5, 5, 3]"  # may be repeated


@pytest.mark.parametrize("action", ["[search] tests", "[search]", "[search] the test case"])
def test_search_other(action: str) -> None:
    assert (
        feedback(started(), action) == "Only 'test' is allowed as search content; it returns the test case."
    )


# ---------------------------------------------------------------- answer


@pytest.mark.parametrize("content", ["225", "225.0", " 2.25e2 ", "225.0000001", "+225"])
def test_correct_answer(content: str) -> None:
    env = started()
    obs, reward, terminated, truncated, info = env.step(f"[answer] {content}")
    assert (obs["feedback"], reward, terminated, truncated) == ("Correct!", 1.0, True, False)
    assert obs["answered_correctly"] is True and obs["episode_complete"] is True
    assert info["submitted_answer"] == float(content)


def test_answer_before_search_and_repeated_answers_are_allowed() -> None:
    env = started()
    assert env.step("[answer] 224")[:3] == (
        {
            "feedback": "Your answer is wrong. You may keep probing and answer again.",
            "step_count": 1,
            "episode_complete": False,
            "answered_correctly": False,
        },
        0.0,
        False,
    )
    assert env.step("[answer] 224.5")[4]["submitted_answer"] == 224.5
    assert env.step("[answer] 225")[1:3] == (1.0, True)


@pytest.mark.parametrize("content", ["abc", "", "nan", "NaN", "inf", "-Infinity", "1 2", "225!", "1e999"])
def test_invalid_answer(content: str) -> None:
    env = started()
    obs, reward, terminated, _, info = env.step(f"[answer] {content}")
    assert (obs["feedback"], reward, terminated) == (
        "Your answer is not a valid number. Give a single number.",
        0.0,
        False,
    )
    assert info["submitted_answer"] is None


def test_answer_rewards_are_configurable_and_scaled() -> None:
    env = started(correct_answer_reward=0.5, incorrect_answer_reward=-0.25, reward_scale=2.0)
    assert env.step("[answer] 1")[1] == -0.5
    assert env.step("[answer] 225")[1] == 1.0


def test_step_penalty_uses_the_step_count() -> None:
    env = started(step_penalty=0.1)
    assert env.step("[search] test")[1] == pytest.approx(-0.1)
    assert env.step("[answer] 225")[1] == pytest.approx(1.0 - 0.2)


def test_normalize_rewards_clips() -> None:
    env = started(step_penalty=0.1, normalize_rewards=True)
    assert env.step("[search] test")[1] == 0.0


def test_unknown_gym_keyword_is_refused() -> None:
    with pytest.raises(TypeError):
        FunctionEnv(make_task(), correct_reward=2.0)


# ---------------------------------------------------------------- finish and invalid choices


def test_finish_without_solve() -> None:
    env = started()
    obs, reward, terminated, truncated, _ = env.step("[finish]")
    assert (obs["feedback"], reward, terminated, truncated) == (
        "Episode finished. The expected result was 225.0.",
        0.0,
        True,
        False,
    )


def test_finish_after_solve() -> None:
    env = started()
    env.step("[answer] 225")
    # A correct answer already ends the episode, so a later finish gets the after-end message ...
    assert env.step("[finish]")[:3] == (
        {
            "feedback": "The episode has already ended.",
            "step_count": 1,
            "episode_complete": True,
            "answered_correctly": True,
        },
        0.0,
        True,
    )
    # ... and the solved wording of finish is only reachable from a solved, still-open state.
    env = started()
    env.answered_correctly = True
    assert feedback(env, "[finish]") == "Episode finished."


@pytest.mark.parametrize("action", ["hello", "42", "[Answer] 225", "[answer225", "answer: 225", ""])
def test_invalid_choice(action: str) -> None:
    env = started()
    obs, reward, terminated, _, _ = env.step(action)
    assert (obs["feedback"], reward, terminated) == (
        "Invalid action. Allowed choices: search, action, answer.",
        0.0,
        False,
    )


# ---------------------------------------------------------------- episode limits, observation and info


def test_correct_answer_on_the_last_step_terminates_only() -> None:
    env = started(max_steps=2)
    env.step("[search] test")
    assert env.step("[answer] 225")[2:4] == (True, False)


def test_observation_and_info_fields() -> None:
    env = FunctionEnv(make_task(key="func-x"))
    obs, info = env.reset()
    assert set(obs) == {"feedback", "step_count", "episode_complete", "answered_correctly"}
    assert obs["step_count"] == 0 and obs["episode_complete"] is False
    _, _, _, _, info = env.step("[answer] 7")
    assert {
        k: info[k] for k in ("function_id", "rule", "test_case", "expected_result", "submitted_answer")
    } == {
        "function_id": "func-x",
        "rule": "c * (a * b) * d",
        "test_case": [3, 5, 5, 3],
        "expected_result": 225.0,
        "submitted_answer": 7.0,
    }
    assert {"raw_action", "action_history", "total_reward", "error", "lm_calls"} <= set(info)
    assert info["lm_calls"] == [] and info["error"] is None


def test_bad_task_data_is_refused_at_load() -> None:
    bad = Task(
        "function", "k", builtin_prompt(), {"rule": "a.b", "test_case": [1, 2, 3, 4], "expected_result": 1}
    )
    with pytest.raises(ValueError, match="'k'"):
        FunctionEnv(bad)
    missing = Task("function", "k", builtin_prompt(), {"rule": "a"})
    with pytest.raises(ValueError, match="test_case"):
        FunctionEnv(missing)


def test_reset_with_a_new_task() -> None:
    env = make_env("function", max_steps=4)
    env.reset(options={"task": make_task("a + b", [1, 2, 3, 4], key="x1")})
    assert feedback(env, "[answer] 3") == "Correct!"
    env.reset(options={"task": make_task("a * b", [2, 5, 1, 1], key="x2")})
    assert feedback(env, "[answer] 10") == "Correct!"
