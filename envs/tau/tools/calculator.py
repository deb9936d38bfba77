"""The `calculate` tool's arithmetic: Python semantics through a whitelisted AST walker, never eval.

Upstream evaluates the expression with `eval` after checking its characters. The character set
`0123456789+-*/(). ` only admits numbers, + - * / ** //, parentheses, `...` (Ellipsis), `()` (the empty
tuple) and calls such as `2(3)`; the walker gives each of them the value or error Python would.
"""

from __future__ import annotations

import ast
import operator
from collections.abc import Callable
from typing import Any

from userrl.envs.pyast import parse_expression

ALLOWED_CHARS = frozenset("0123456789+-*/(). ")
INVALID_CHARS = "Error: invalid characters in expression"

_BINARY: dict[type[ast.operator], Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Pow: operator.pow,
}
_UNARY: dict[type[ast.unaryop], Callable[[Any], Any]] = {ast.UAdd: operator.pos, ast.USub: operator.neg}
#: Integers beyond this many bits cannot become a float anyway; refusing them keeps `9**9**9` from hanging.
MAX_INT_BITS = 1 << 20


def _guard(value: Any) -> Any:
    if isinstance(value, int) and value.bit_length() > MAX_INT_BITS:
        raise OverflowError("int too large to convert to float")
    return value


def _power(base: Any, exponent: Any) -> Any:
    # Estimate the size first: computing a huge power would take minutes before failing.
    if (
        isinstance(base, int)
        and isinstance(exponent, int)
        and exponent > 0
        and abs(base) > 1
        and (abs(base).bit_length() - 1) * exponent > MAX_INT_BITS
    ):
        raise OverflowError("int too large to convert to float")
    return operator.pow(base, exponent)


def _evaluate(node: ast.AST) -> Any:
    if isinstance(node, ast.Expression):
        return _evaluate(node.body)
    if isinstance(node, ast.Constant):
        return node.value  # only int, float or Ellipsis can pass the character check
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _evaluate(node.left), _evaluate(node.right)
        if isinstance(node.op, ast.Pow):
            return _guard(_power(left, right))
        return _guard(_BINARY[type(node.op)](left, right))
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _UNARY[type(node.op)](_evaluate(node.operand))
    if isinstance(node, ast.Tuple) and not node.elts:
        return ()
    if isinstance(node, ast.Call) and not node.keywords:
        func = _evaluate(node.func)
        for arg in node.args:
            _evaluate(arg)
        # Nothing reachable from the allowed characters is callable.
        raise TypeError(f"'{type(func).__name__}' object is not callable")
    raise SyntaxError("invalid syntax")  # unreachable with the allowed characters; refuse, never run


def calculate_expression(expression: Any) -> str:
    """The `calculate` observation: str(round(float(value), 2)) or an `Error: ...` string."""
    if not all(char in ALLOWED_CHARS for char in expression):
        return INVALID_CHARS
    try:
        if not isinstance(expression, str):
            raise TypeError("eval() arg 1 must be a string, bytes or code object")
        # eval() of a string skips leading spaces and tabs; ast.parse would call them an indent.
        tree = parse_expression(expression.lstrip(" \t"), filename="<string>")
        return str(round(float(_evaluate(tree)), 2))
    except (SyntaxError, ArithmeticError, TypeError, ValueError, RecursionError, MemoryError) as exc:
        return f"Error: {exc}"
