"""Whitelisted evaluator of Function rules (docs/spec/GYMS.md §1): parse once, walk the tree, float math."""

from __future__ import annotations

import ast
import math
import operator
from collections.abc import Callable, Mapping, Sequence

from userrl.envs.pyast import parse_expression

VARIABLES: tuple[str, ...] = ("a", "b", "c", "d")
#: Longer rules are refused before parsing (the original data never exceeds 23 characters); the cap also
#: bounds the nesting depth, so the recursive checker and walker stay far from the recursion limit.
MAX_RULE_CHARS = 200

_BINOPS: dict[type[ast.operator], Callable[[float, float], float]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.Pow: operator.pow,
}
_UNARYOPS: dict[type[ast.unaryop], Callable[[float], float]] = {
    ast.USub: operator.neg,
    ast.UAdd: operator.pos,
}


class RuleError(ValueError):
    """A rule is not a valid expression of the whitelisted grammar (raised at load time)."""


class EvaluationError(ArithmeticError):
    """A valid rule cannot be evaluated at these inputs (division by zero, overflow, complex, non-finite)."""


def _check(node: ast.AST, rule: str) -> None:
    """Reject, at load time, every node outside the whitelist of section 1."""
    if isinstance(node, ast.Expression):
        _check(node.body, rule)
    elif isinstance(node, ast.BinOp):
        if type(node.op) not in _BINOPS:
            raise RuleError(f"rule {rule!r}: operator {type(node.op).__name__} is not allowed")
        _check(node.left, rule)
        _check(node.right, rule)
    elif isinstance(node, ast.UnaryOp):
        if type(node.op) not in _UNARYOPS:
            raise RuleError(f"rule {rule!r}: unary operator {type(node.op).__name__} is not allowed")
        _check(node.operand, rule)
    elif isinstance(node, ast.Constant):
        # bool is an int subclass in Python; `True` is not a number literal here.
        if isinstance(node.value, bool) or not isinstance(node.value, int | float):
            raise RuleError(f"rule {rule!r}: constant {node.value!r} is not an int or float")
        try:
            float(node.value)
        except OverflowError as exc:
            raise RuleError(f"rule {rule!r}: constant is too large for a float") from exc
    elif isinstance(node, ast.Name):
        if node.id not in VARIABLES:
            raise RuleError(f"rule {rule!r}: unknown name {node.id!r} (allowed: a, b, c, d)")
    else:
        raise RuleError(f"rule {rule!r}: {type(node).__name__} is not allowed")


def _finite(value: float, what: str) -> float:
    # A complex result comes from a negative base with a fractional exponent; inf/nan from overflow.
    if isinstance(value, complex):
        raise EvaluationError(f"{what} gives a complex number")
    if not math.isfinite(value):
        raise EvaluationError(f"{what} gives a non-finite number")
    return value


class Formula:
    """A rule over a, b, c, d, validated once at construction and evaluated by walking its tree."""

    __slots__ = ("_tree", "rule", "variables")

    def __init__(self, rule: str) -> None:
        if not isinstance(rule, str):
            raise RuleError(f"rule must be a string, got {type(rule).__name__}")
        if len(rule) > MAX_RULE_CHARS:
            raise RuleError(f"rule is {len(rule)} characters long; at most {MAX_RULE_CHARS} are allowed")
        try:
            tree = parse_expression(rule.strip())
        except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
            raise RuleError(f"rule {rule!r} does not parse as an expression: {exc}") from exc
        _check(tree, rule)
        self.rule = rule
        self._tree = tree.body
        self.variables = frozenset(n.id for n in ast.walk(tree) if isinstance(n, ast.Name))

    def __repr__(self) -> str:
        return f"Formula({self.rule!r})"

    def evaluate(self, values: Sequence[float] | Mapping[str, float]) -> float:
        """f(values) as a float; values are (a, b, c, d) or a mapping; raises EvaluationError."""
        if isinstance(values, Mapping):
            env = {k: float(values[k]) for k in VARIABLES if k in values}
        else:
            if len(values) != len(VARIABLES):
                raise ValueError(f"expected 4 values for a, b, c, d, got {len(values)}")
            env = {k: float(v) for k, v in zip(VARIABLES, values, strict=True)}
        missing = self.variables - env.keys()
        if missing:
            raise ValueError(f"rule {self.rule!r} needs values for {sorted(missing)}")
        return _finite(self._eval(self._tree, env), f"rule {self.rule!r}")

    __call__ = evaluate

    def _eval(self, node: ast.expr, env: dict[str, float]) -> float:
        if isinstance(node, ast.BinOp):
            left = self._eval(node.left, env)
            right = self._eval(node.right, env)
            try:
                value = _BINOPS[type(node.op)](left, right)
            except ZeroDivisionError as exc:
                raise EvaluationError(f"rule {self.rule!r}: division by zero") from exc
            except OverflowError as exc:
                raise EvaluationError(f"rule {self.rule!r}: overflow") from exc
            # Checking every intermediate value stops inf/nan and complex numbers from propagating.
            return _finite(value, f"rule {self.rule!r}")
        if isinstance(node, ast.UnaryOp):
            return _UNARYOPS[type(node.op)](self._eval(node.operand, env))
        if isinstance(node, ast.Name):
            return env[node.id]
        if isinstance(node, ast.Constant):
            return float(node.value)
        # Unreachable: the tree was validated at load time.
        raise RuleError(f"rule {self.rule!r}: unexpected node {type(node).__name__}")
