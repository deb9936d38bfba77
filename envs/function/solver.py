"""Observation-grounded scripted solver of the Function gym, used to write SFT demonstrations.

Every answer follows from the transcript: the solver fetches the test case, probes, and answers what
the simplest rules consistent with the probes give at the test case (Occam's razor over three classes,
simplest first: one variable; one variable and a constant under + - *; two variables under + - * /, the
rules of builtin levels 0-2). It answers only when every consistent rule of the simplest class that has
one agrees. The hidden task only chooses the plan (which probes, how many): the solver keeps probing
while that inference would still be wrong (a level-1 rule can look like a single variable after one
probe), so a demonstration never ends in a justified but wrong answer. Three probes of PROBE_POOL single
out every rule of the classes, whatever the test case. Rules outside them (levels 3 and 4) cannot be
pinned down by a few probes, so the solver refuses them with `UngroundedTask` rather than answer from
hidden state.
"""

from __future__ import annotations

import math
import re
from functools import lru_cache

import numpy as np

from userrl.envs.base import Task
from userrl.envs.function.safe_eval import VARIABLES, EvaluationError, Formula
from userrl.envs.solving import UngroundedTask

#: The probe inputs, in the order the solver tries them: distinct values, then two shuffles that
#: together give every rule of the classes its own results (tested exhaustively); a fourth in reserve.
#: The generator never uses one of them as a test case.
PROBE_POOL: tuple[tuple[int, int, int, int], ...] = (
    (1, 2, 3, 4),
    (3, 7, 2, 5),
    (5, 3, 7, 2),
    (10, 20, 30, 40),
)
#: The builtin levels whose rules the hypothesis class covers.
GROUNDED_LEVELS = (0, 1, 2)

_TEST_CASE_RE = re.compile(r"^Test case: \[([^\]]*)\]")
_RESULT_RE = re.compile(r"^For numbers \[[^\]]*\], the result is (\S+)\.$")


def format_number(value: float) -> str:
    """'8' for whole numbers, Python float formatting otherwise."""
    if math.isfinite(value) and float(value).is_integer():
        return str(int(value))
    return repr(float(value))


@lru_cache(maxsize=1)
def rule_classes() -> tuple[tuple[Formula, ...], ...]:
    """The solver's hypotheses, simplest class first: the rules of builtin levels 0, 1 and 2."""
    level1 = [f"{v} {op} {k}" if first else f"{k} {op} {v}"
              for v in VARIABLES for op in "+-*" for k in range(2 if op == "*" else 1, 10) for first in (1, 0)]
    level2 = [f"{x} {op} {y}" for x in VARIABLES for y in VARIABLES if x != y for op in "+-*/"]
    return tuple(tuple(Formula(rule) for rule in rules) for rules in (VARIABLES, level1, level2))


def _value(formula: Formula, inputs: list[float]) -> float | None:
    try:
        return round(formula.evaluate(inputs), 4) + 0.0
    except EvaluationError:
        return None


def implied_answer(test_case: list[float], observations: list[tuple[list[float], float]]) -> float | None:
    """f(test_case) by the simplest rules consistent with the observations, if they agree; else None."""
    for rules in rule_classes():
        consistent = [f for f in rules if all(_value(f, x) == y for x, y in observations)]
        if consistent:
            values = {_value(f, test_case) for f in consistent}
            return values.pop() if len(values) == 1 and None not in values else None
    return None


class FunctionSolver:
    """`search test`, then probes until they imply the right answer, then that answer.

    Two probe plans, chosen by the task's level (the hidden task may choose the plan, never the answer):
    level 0 zeroes one variable of the test input at a time ("does f change without a?"), so a result
    that is not 0 is already f at the test input; the other levels probe PROBE_POOL.
    """

    def __init__(self, task: Task, rng: np.random.Generator) -> None:
        # rng is unused (one plan per level); the registry's solvers all take it.
        if task.difficulty is not None and task.difficulty not in GROUNDED_LEVELS:
            raise UngroundedTask(
                f"function task {task.item_key!r} (level {task.difficulty}): only levels "
                f"{list(GROUNDED_LEVELS)} can be answered from a few probes"
            )
        self._task = task.item_key
        self._ablate = task.difficulty == 0
        # The hidden result chooses how many probes to make, never the answer.
        self._expected = float(task.data["expected_result"])
        self._test_case: list[float] | None = None
        self._observations: list[tuple[list[float], float]] = []
        self._probes: list[list[float]] = []
        self._last_probe: list[float] | None = None

    def next_action(self, last_feedback: str | None) -> tuple[str, str]:
        """The next (choice, content), read off the transcript so far."""
        self._read(last_feedback)
        if self._test_case is None:
            return "search", "test"
        answer = implied_answer(self._test_case, self._observations) if self._observations else None
        if answer is not None and abs(answer - self._expected) <= 1e-6:
            return "answer", format_number(answer)
        while self._probes:
            probe = self._probes.pop(0)
            if probe != self._test_case:  # the env refuses the test case itself
                self._last_probe = probe
                return "action", " ".join(format_number(v) for v in probe)
        raise UngroundedTask(f"function task {self._task!r}: the probes do not pin down a simple rule")

    def _read(self, feedback: str | None) -> None:
        if feedback is None:
            return
        if (match := _TEST_CASE_RE.match(feedback)) is not None:
            self._test_case = [float(v) for v in match.group(1).split(",")]
            self._probes = (ablation_probes(self._test_case) if self._ablate
                            else [[float(v) for v in probe] for probe in PROBE_POOL])
        elif self._last_probe is not None and (match := _RESULT_RE.match(feedback)) is not None:
            self._observations.append((self._last_probe, float(match.group(1))))
        self._last_probe = None


def ablation_probes(test_case: list[float]) -> list[list[float]]:
    """The test input with one variable set to 0, for a, b, c and d in turn."""
    return [[0.0 if i == j else v for j, v in enumerate(test_case)] for i in range(len(test_case))]

