"""FunctionEnv: guess a hidden arithmetic function f(a, b, c, d) (docs/spec/GYMS.md §1)."""

from __future__ import annotations

import math
import re
from functools import lru_cache
from typing import Any, ClassVar

from gymnasium import spaces

from userrl.envs.base import BOOL_SPACE, MultiTurnEnv, Task
from userrl.envs.function.safe_eval import EvaluationError, Formula, RuleError

# Every feedback string of section 1, verbatim.
NEED_FOUR_NUMBERS = "Please provide exactly four numbers separated by spaces."
TEST_CASE_REFUSED = (
    "These are the test-case inputs; the function will not be computed for them. Try other numbers."
)
CANNOT_EVALUATE = "The function cannot be evaluated for these numbers. Try other numbers."
SEARCH_ONLY_TEST = "Only 'test' is allowed as search content; it returns the test case."
INVALID_NUMBER = "Your answer is not a valid number. Give a single number."
CORRECT = "Correct!"
WRONG_ANSWER = "Your answer is wrong. You may keep probing and answer again."
EPISODE_FINISHED = "Episode finished."
INVALID_ACTION = "Invalid action. Allowed choices: search, action, answer."
#: The reset text; like every reset text it is never shown to the agent (§0.3).
WELCOME = "FunctionGym: a hidden function f(a, b, c, d) is ready. Probe it, fetch the test case, then answer."

NUMBER_RE = re.compile(r"-?\d+\.?\d*")
ANSWER_TOLERANCE = 1e-6


@lru_cache(maxsize=4096)
def _formula(rule: str) -> Formula:
    # Formulas are immutable, so envs re-used across many tasks share one parse per rule.
    return Formula(rule)


def _fmt(value: float) -> str:
    """Python float formatting of round(value, 4); `+ 0.0` turns -0.0 into 0.0."""
    return str(round(value, 4) + 0.0)


class FunctionEnv(MultiTurnEnv):
    """The Function gym: probe a hidden formula, fetch the test input, answer f(test input)."""

    gym_name: ClassVar[str] = "function"
    allowed_choices: ClassVar[tuple[str, ...]] = ("search", "action", "answer")
    normalize_rewards_default: ClassVar[bool] = False

    def _configure(self, *, correct_answer_reward: float = 1.0, incorrect_answer_reward: float = 0.0) -> None:
        """Gym-specific keywords: the base rewards of a correct and a wrong answer."""
        self.correct_answer_reward = float(correct_answer_reward)
        self.incorrect_answer_reward = float(incorrect_answer_reward)

    def _observation_fields(self) -> dict[str, spaces.Space]:
        return {
            "step_count": self.count_space(),
            "episode_complete": BOOL_SPACE,
            "answered_correctly": BOOL_SPACE,
        }

    def _load_task(self, task: Task) -> None:
        data = task.data
        try:
            rule = data["rule"]
            test_case = list(data["test_case"])
            expected = float(data["expected_result"])
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(
                f"function task {task.item_key!r}: data needs rule, test_case and expected_result ({exc!r})"
            ) from exc
        if len(test_case) != 4 or not all(
            isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) for v in test_case
        ):
            raise ValueError(
                f"function task {task.item_key!r}: test_case must be 4 numbers, got {test_case!r}"
            )
        if not math.isfinite(expected):
            raise ValueError(f"function task {task.item_key!r}: expected_result must be finite")
        try:
            formula = _formula(rule)
        except RuleError as exc:
            raise ValueError(f"function task {task.item_key!r}: {exc}") from exc
        self._formula_obj = formula
        self._function_id = str(data.get("id", task.item_key))
        # "Test case: [3, 5, 5, 3]" shows the stored integers; whole floats are shown as integers too.
        self._test_case = [int(v) if float(v).is_integer() else float(v) for v in test_case]
        self._expected = expected

    def _gym_info(self) -> dict[str, Any]:
        return {
            "function_id": self._function_id,
            "rule": self._formula_obj.rule,
            "test_case": list(self._test_case),
            "expected_result": self._expected,
            "submitted_answer": self.submitted_answer,
        }

    def _reset_impl(self) -> tuple[str, dict[str, Any], dict[str, Any]]:
        self.answered_correctly = False
        self.submitted_answer: float | None = None
        return WELCOME, {"answered_correctly": False}, self._gym_info()

    async def _astep_impl(
        self, choice: str, content: str
    ) -> tuple[str, float, bool, dict[str, Any], dict[str, Any]]:
        base, terminated = 0.0, False
        if choice == "action":
            feedback = self._probe(content)
        elif choice == "search":
            feedback = (
                f"Test case: {self._test_case}" if content.strip().lower() == "test" else SEARCH_ONLY_TEST
            )
        elif choice == "answer":
            feedback, base, terminated = self._answer(content)
        elif choice == "finish":
            terminated = True
            feedback = EPISODE_FINISHED
            if not self.answered_correctly:
                feedback += f" The expected result was {self._expected}."
        else:
            feedback = INVALID_ACTION
        reward = self.shaped_reward(base, self.step_penalty * self.step_count)
        return feedback, reward, terminated, {"answered_correctly": self.answered_correctly}, self._gym_info()

    def _probe(self, content: str) -> str:
        numbers = [float(m) for m in NUMBER_RE.findall(content)]
        if len(numbers) != 4:
            return NEED_FOUR_NUMBERS
        if all(x == float(t) for x, t in zip(numbers, self._test_case, strict=True)):
            return TEST_CASE_REFUSED
        try:
            value = self._formula_obj.evaluate(numbers)
        except EvaluationError:
            return CANNOT_EVALUATE
        return f"For numbers {numbers}, the result is {_fmt(value)}."

    def _answer(self, content: str) -> tuple[str, float, bool]:
        try:
            x = float(content.strip())
        except ValueError:
            return INVALID_NUMBER, 0.0, False
        if not math.isfinite(x):
            return INVALID_NUMBER, 0.0, False
        self.submitted_answer = x
        if abs(x - self._expected) <= ANSWER_TOLERANCE:
            self.answered_correctly = True
            return CORRECT, self.correct_answer_reward, True
        return WRONG_ANSWER, self.incorrect_answer_reward, False
