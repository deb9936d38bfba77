"""The expression parser retries CPython 3.11's spurious AST SystemError (gh-106905), and only that."""

import ast

import pytest

from userrl.envs import pyast

MISMATCH = SystemError("AST constructor recursion depth mismatch (before=135, after=183)")


def _parse_failing(times: int, error: Exception, monkeypatch) -> list[int]:
    calls: list[int] = []
    real = ast.parse

    def parse(*args, **kwargs):
        calls.append(1)
        if len(calls) <= times:
            raise error
        return real(*args, **kwargs)

    monkeypatch.setattr(pyast.ast, "parse", parse)
    return calls


def test_a_spurious_mismatch_is_parsed_again(monkeypatch):
    calls = _parse_failing(2, MISMATCH, monkeypatch)
    tree = pyast.parse_expression("a * 2 + 1")
    assert len(calls) == 3 and ast.unparse(tree) == "a * 2 + 1"


def test_a_lasting_mismatch_or_another_system_error_is_raised(monkeypatch):
    calls = _parse_failing(99, MISMATCH, monkeypatch)
    with pytest.raises(SystemError, match="recursion depth mismatch"):
        pyast.parse_expression("1")
    assert len(calls) == pyast.PARSE_ATTEMPTS
    calls = _parse_failing(99, SystemError("something else"), monkeypatch)
    with pytest.raises(SystemError, match="something else"):
        pyast.parse_expression("1")
    assert len(calls) == 1
