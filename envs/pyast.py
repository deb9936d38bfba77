"""`ast.parse` for the gyms' expression evaluators (Function rules, Tau's calculator), safe under threads."""

from __future__ import annotations

import ast

#: Attempts at one parse. CPython 3.11 (gh-106905) can raise a spurious SystemError "AST constructor
#: recursion depth mismatch" when another thread builds an AST at the same time (e.g. a Jinja chat template
#: compiled in a replica's thread); the same source parses on the next attempt.
PARSE_ATTEMPTS = 3


def parse_expression(source: str, filename: str = "<unknown>") -> ast.Expression:
    """`ast.parse(source, mode="eval")`, retried on CPython's spurious recursion-depth SystemError."""
    for attempt in range(PARSE_ATTEMPTS):
        try:
            return ast.parse(source, filename=filename, mode="eval")
        except SystemError as error:
            if "recursion depth mismatch" not in str(error) or attempt == PARSE_ATTEMPTS - 1:
                raise
    raise AssertionError("unreachable")
