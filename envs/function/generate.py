"""Seeded generator of the builtin Function task set; `python -m userrl.envs.function.generate` rewrites it.

Rules are built as strings and accepted only after the safe evaluator parses them, they evaluate to a
whole number of size <= 1e6 at the test case and they can be evaluated at every probe input of the
scripted solver. Levels 0-2 hold 400 tasks each (80 held out for testing): enough test tasks to measure
a change in success rate; levels 3 and 4 hold 130.
"""

from __future__ import annotations

import random
import sys
from collections.abc import Callable
from typing import Any

from userrl.envs.function.safe_eval import VARIABLES, EvaluationError, Formula
from userrl.envs.function.solver import PROBE_POOL
from userrl.envs.function.tasks import BUILTIN_TASKS_PATH
from userrl.envs.generate_cli import leveled_main, leveled_tasks, render_item_lines

GENERATOR_SEED = 20250611
PER_LEVEL = {0: 400, 1: 400, 2: 400, 3: 130, 4: 130}
TEST_FRACTION = 0.2
MAX_ABS_RESULT = 1e6
#: Level-4 rules are capped like the original data.
MAX_LEVEL4_CHARS = 23
_TEST_CASE_TRIES = 60

_PREC = {"+": 1, "-": 1, "*": 2, "/": 2, "**": 3}
_ATOM = 4


def whole_result(formula: Formula, values: tuple[int, ...]) -> float | None:
    """f(values) if it is a whole number of size <= 1e6, else None."""
    try:
        value = formula.evaluate(values)
    except EvaluationError:
        return None
    if not value.is_integer() or abs(value) > MAX_ABS_RESULT:
        return None
    return value


def _combine(
    op: str, left: tuple[str, int], right: tuple[str, int], rnd: random.Random, extra_parens: float
) -> tuple[str, int]:
    """Render `left op right` with the parentheses Python precedence needs, plus some redundant ones."""
    (ls, lp), (rs, rp) = left, right
    p = _PREC[op]
    # `**` is right-associative, so a power on its left needs parentheses; `-` and `/` on the right too.
    if lp < p or (op == "**" and lp == p) or (lp < _ATOM and rnd.random() < extra_parens):
        ls = f"({ls})"
    if rp < p or (rp == p and op in ("-", "/")) or (rp < _ATOM and rnd.random() < extra_parens):
        rs = f"({rs})"
    return f"{ls} {op} {rs}", p


def _tree(leaves: list[tuple[str, int]], ops: dict[str, int], rnd: random.Random, extra_parens: float) -> str:
    """Join leaves left to right into one expression, merging a random adjacent pair each time."""
    nodes = list(leaves)
    names, weights = list(ops), list(ops.values())
    while len(nodes) > 1:
        i = rnd.randrange(len(nodes) - 1)
        op = rnd.choices(names, weights)[0]
        nodes[i : i + 2] = [_combine(op, nodes[i], nodes[i + 1], rnd, extra_parens)]
    return nodes[0][0]


def rule_level0(rnd: random.Random) -> str:
    """A single variable: `c`."""
    return rnd.choice(VARIABLES)


def rule_level1(rnd: random.Random) -> str:
    """One variable, one operation, a small constant: `a + 3`, `2 * b`, `d - 1`."""
    v, op = rnd.choice(VARIABLES), rnd.choice(["+", "-", "*"])
    k = rnd.randint(2, 9) if op == "*" else rnd.randint(1, 9)
    return f"{v} {op} {k}" if rnd.random() < 0.6 else f"{k} {op} {v}"


def rule_level2(rnd: random.Random) -> str:
    """Two variables, one operation: `a + b`, `c * d` (exact divisions only survive the checks)."""
    x, y = rnd.sample(VARIABLES, 2)
    return f"{x} {rnd.choices(['+', '-', '*', '/'], [3, 3, 3, 1])[0]} {y}"


def rule_level3(rnd: random.Random) -> str:
    """Two or three of + - * over distinct variables, sometimes with one small constant."""
    n_ops = rnd.choice([2, 3])
    leaves = [(v, _ATOM) for v in rnd.sample(VARIABLES, n_ops + 1)]
    if rnd.random() < 0.3:
        leaves[rnd.randrange(len(leaves))] = (str(rnd.randint(2, 5)), _ATOM)
    return _tree(leaves, {"+": 4, "-": 3, "*": 3}, rnd, extra_parens=0.1)


def rule_level4(rnd: random.Random) -> str:
    """The original mix: all four variables once, three operations of + - * / **, squares, parentheses."""
    leaves = [
        (f"{v} ** 2", _PREC["**"]) if rnd.random() < 0.15 else (v, _ATOM) for v in rnd.sample(VARIABLES, 4)
    ]
    return _tree(leaves, {"+": 25, "-": 22, "*": 28, "/": 13, "**": 12}, rnd, extra_parens=0.2)


LEVELS: dict[int, Callable[[random.Random], str]] = {
    0: rule_level0,
    1: rule_level1,
    2: rule_level2,
    3: rule_level3,
    4: rule_level4,
}
#: Levels 0-2 have fewer distinct rules (4, 208 and 48) than tasks, so there a task is unique by
#: (rule, test_case); levels 3 and 4 have unique rules.
UNIQUE_BY_RULE = {3, 4}


def _unevaluable(formula: Formula, values: tuple[int, ...]) -> bool:
    try:
        return abs(formula.evaluate(values)) > MAX_ABS_RESULT
    except EvaluationError:
        return True


def _test_case(formula: Formula, rnd: random.Random) -> tuple[tuple[int, ...], float] | None:
    """A random test case in 1..10 (never a probe input) where the rule is a whole number, if one is found."""
    for _ in range(_TEST_CASE_TRIES):
        case = tuple(rnd.randint(1, 10) for _ in VARIABLES)
        if case in PROBE_POOL:
            continue
        value = whole_result(formula, case)
        if value is not None:
            return case, value
    return None


def generate_level(level: int, count: int, rnd: random.Random) -> list[dict[str, Any]]:
    """`count` validated tasks of one level (without ids or splits)."""
    make_rule = LEVELS[level]
    seen: set[Any] = set()
    out: list[dict[str, Any]] = []
    for _ in range(count * 500):
        if len(out) == count:
            return out
        rule = make_rule(rnd)
        if level == 4 and len(rule) > MAX_LEVEL4_CHARS:
            continue
        formula = Formula(rule)  # validation through the safe evaluator: raises on any bad rule
        if level == 4 and formula.variables != set(VARIABLES):
            continue
        if level in UNIQUE_BY_RULE and rule in seen:
            continue
        if any(_unevaluable(formula, probe) for probe in PROBE_POOL):
            continue
        found = _test_case(formula, rnd)
        if found is None:
            continue
        case, value = found
        key = rule if level in UNIQUE_BY_RULE else (rule, case)
        if key in seen:
            continue
        seen.add(key)
        out.append(
            {"rule": rule, "test_case": list(case), "expected_result": round(value, 4), "difficulty": level}
        )
    raise RuntimeError(f"level {level}: found only {len(out)} of {count} tasks")


def generate_tasks(seed: int = GENERATOR_SEED, per_level: int | None = None) -> list[dict[str, Any]]:
    """The whole builtin task set: per level, ids fn-<level>-<nnn> and a deterministic 80/20 split."""
    return leveled_tasks(
        "fn", LEVELS, seed, lambda level, rnd: generate_level(level, per_level or PER_LEVEL[level], rnd), TEST_FRACTION
    )


def render(tasks: list[dict[str, Any]], seed: int) -> str:
    """The tasks.json text: a small header, then one task per line (readable diffs)."""
    return render_item_lines("function", "tasks", seed, tasks)


def main(argv: list[str] | None = None) -> int:
    """Write (or, with --check, compare against) the builtin tasks file."""
    return leveled_main(
        argv, __doc__.splitlines()[0], BUILTIN_TASKS_PATH, GENERATOR_SEED, generate_tasks, render,
        None, "tasks per level (default: PER_LEVEL)",
    )


if __name__ == "__main__":
    sys.exit(main())
