"""Structured output extraction and coercions for JSON-returning model roles.

Spec: docs/spec/GYMS.md §0.6 steps 1-5.
"""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from userrl.envs.json_extract import (
    JSONExtractionError,
    as_bool,
    as_float,
    as_int,
    as_label,
    extract_json_object,
    strip_think,
)

FENCE = "```"


# ----------------------------------------------------------------------------------------- hard cases


def test_leading_think_block_is_dropped() -> None:
    reply = '<think>\nDraft: {"answer": "wrong"}\nHmm.\n</think>\n\n{"answer": "right"}'
    assert extract_json_object(reply) == {"answer": "right"}


def test_everything_up_to_the_last_closing_think_tag_is_dropped() -> None:
    # An unbalanced reply: the text before the last </think> is reasoning even without its <think>.
    reply = 'Let me see {"a": 1}</think> more {"a": 2} </think> final {"a": 3}'
    assert extract_json_object(reply) == {"a": 3}
    assert strip_think("x<think>a</think>y") == "y"
    assert strip_think("no tags here") == "no tags here"


def test_fenced_json_with_language_tag() -> None:
    reply = f'Sure, here it is:\n{FENCE}json\n{{"verdict": "yes", "score": 0.5}}\n{FENCE}\nAnything else?'
    assert extract_json_object(reply) == {"verdict": "yes", "score": 0.5}


def test_fenced_json_without_language_tag() -> None:
    reply = f'{FENCE}\n{{"verdict": "no"}}\n{FENCE}'
    assert extract_json_object(reply) == {"verdict": "no"}


def test_fenced_json_on_one_line_and_with_other_tags() -> None:
    assert extract_json_object(f'{FENCE}{{"a": 1}}{FENCE}') == {"a": 1}
    assert extract_json_object(f'{FENCE}JSON \n{{"a": 2}}\n{FENCE}') == {"a": 2}
    assert extract_json_object(f'{FENCE}json {{"a": 3}}{FENCE}') == {"a": 3}  # via the brace scan


def test_first_fenced_block_holding_an_object_wins() -> None:
    reply = (
        f"{FENCE}python\nprint('{{not json}}')\n{FENCE}\n"
        f"{FENCE}json\n[1, 2]\n{FENCE}\n"
        f'{FENCE}json\n{{"second": true}}\n{FENCE}\n'
        f'{FENCE}json\n{{"third": true}}\n{FENCE}'
    )
    assert extract_json_object(reply) == {"second": True}


def test_fenced_blocks_beat_an_earlier_bare_object() -> None:
    reply = f'The format is {{"key": "value"}}. Answer:\n{FENCE}json\n{{"key": "real"}}\n{FENCE}'
    assert extract_json_object(reply) == {"key": "real"}


def test_unclosed_fence_falls_back_to_the_brace_scan() -> None:
    # A reply cut off by max_tokens right after the object, before the closing fence.
    assert extract_json_object(f'{FENCE}json\n{{"cut": "off"}}\n') == {"cut": "off"}


def test_true_false_null() -> None:
    assert extract_json_object('{"a": true, "b": false, "c": null}') == {"a": True, "b": False, "c": None}


def test_leading_and_trailing_prose() -> None:
    reply = 'I think the user is satisfied. {"satisfied": true, "reason": "said thanks"} Hope this helps!'
    assert extract_json_object(reply) == {"satisfied": True, "reason": "said thanks"}


def test_braces_inside_strings_do_not_confuse_the_scan() -> None:
    reply = 'Result: {"text": "use } and { freely", "nested": {"deep": "}}}"}} done'
    assert extract_json_object(reply) == {"text": "use } and { freely", "nested": {"deep": "}}}"}}


def test_escaped_quotes_and_backslashes() -> None:
    reply = r'Out: {"quote": "she said \"hi {there}\"", "path": "C:\\dir\\", "tail": "}"} end'
    assert extract_json_object(reply) == {"quote": 'she said "hi {there}"', "path": "C:\\dir\\", "tail": "}"}


def test_first_parsing_span_wins_and_non_objects_are_skipped() -> None:
    reply = 'Not this {oops} nor [1, 2], but {"a": {"b": 1}} and not {"c": 2}'
    assert extract_json_object(reply) == {"a": {"b": 1}}
    # An outer span that fails to parse gives way to the first inner one that does.
    assert extract_json_object('{"broken": {"inner": 1}, }') == {"inner": 1}


@pytest.mark.parametrize(
    "garbage",
    [
        "",
        "I cannot help with that.",
        "[1, 2, 3]",
        '"just a string"',
        "{not: json}",
        "{'single': 'quotes'}",  # Python literal, not JSON: never evaluated
        '{"unterminated": "string}',
        '{"a": 1',
        '{"a": NaN}',
        '{"a": Infinity}',
        '<think>{"hidden": true}</think> nothing after',
        "{" * 5000,
        '{"deep": ' + "[" * 50_000 + "]" * 50_000 + "}",
    ],
)
def test_garbage_raises_extraction_error(garbage: str) -> None:
    with pytest.raises(JSONExtractionError):
        extract_json_object(garbage)


def test_extraction_error_is_a_value_error() -> None:
    assert issubclass(JSONExtractionError, ValueError)
    with pytest.raises(JSONExtractionError):
        extract_json_object(None)  # type: ignore[arg-type]


def test_no_code_is_ever_evaluated(monkeypatch: pytest.MonkeyPatch) -> None:
    import ast
    import builtins

    def forbidden(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("model text must never be evaluated")

    monkeypatch.setattr(builtins, "eval", forbidden)
    monkeypatch.setattr(ast, "literal_eval", forbidden)
    assert extract_json_object("{'a': __import__('os')} then {\"a\": 1}") == {"a": 1}


# ------------------------------------------------------------------------------------------ properties

_TOKENS = ["{", "}", '"', "\\", "```", "```json\n", "<think>", "</think>", ":", ",", "[", "]", "\n", "null"]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(st.sampled_from(_TOKENS), st.text(max_size=8)), max_size=40).map("".join))
def test_arbitrary_text_only_ever_raises_extraction_error(text: str) -> None:
    try:
        result = extract_json_object(text)
    except JSONExtractionError:
        return
    assert isinstance(result, dict)


_JSON_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**12), max_value=10**12),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=12),
)
_JSON_VALUES = st.recursive(
    _JSON_SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)
_JSON_OBJECTS = st.dictionaries(st.text(max_size=10), _JSON_VALUES, max_size=5)
# Prose around the object holds no braces (they could form an earlier object) and no fences or think tags.
_PROSE = st.text(st.characters(blacklist_characters="{}`<"), max_size=40)


@settings(max_examples=150, deadline=None)
@given(
    obj=_JSON_OBJECTS,
    before=_PROSE,
    after=_PROSE,
    thinking=st.text(max_size=40),
    wrapper=st.sampled_from(["bare", "fenced", "fenced-tagged", "unclosed-fence"]),
    indent=st.sampled_from([None, 2]),
    ensure_ascii=st.booleans(),
    think=st.booleans(),
)
def test_a_serialized_dict_wrapped_in_prose_is_recovered(
    obj: dict[str, Any],
    before: str,
    after: str,
    thinking: str,
    wrapper: str,
    indent: int | None,
    ensure_ascii: bool,
    think: bool,
) -> None:
    dumped = json.dumps(obj, indent=indent, ensure_ascii=ensure_ascii)
    # By design, step 1 cuts at a "</think>" and step 2 pairs fences even inside a string value.
    assume("</think>" not in dumped and FENCE not in dumped)
    body = {
        "bare": dumped,
        "fenced": f"{FENCE}\n{dumped}\n{FENCE}",
        "fenced-tagged": f"{FENCE}json\n{dumped}\n{FENCE}",
        "unclosed-fence": f"{FENCE}json\n{dumped}\n",
    }[wrapper]
    # Whatever the model thought (braces, fences, even stray tags) is dropped with the think block.
    prefix = f"<think>{thinking}</think>" if think else ""
    assert extract_json_object(f"{prefix}{before}\n{body}\n{after}") == obj


# ----------------------------------------------------------------------------------------- coercions


def test_as_bool() -> None:
    assert as_bool(True) is True and as_bool(False) is False
    for word in ("true", "TRUE", " Yes ", "yes"):
        assert as_bool(word) is True
    for word in ("false", "False", "NO", " no"):
        assert as_bool(word) is False
    for bad in (1, 0, None, "maybe", "1", "y", [], 1.0):
        with pytest.raises(ValueError, match="expected a boolean"):
            as_bool(bad)


def test_as_int() -> None:
    assert as_int(7) == 7 and as_int("42") == 42 and as_int(" -3 ") == -3 and as_int("+5") == 5
    for bad in (True, 3.0, 2.5, "3.0", "", "12a", "²", None, "1e3"):
        with pytest.raises(ValueError, match="expected an integer"):
            as_int(bad)


def test_as_float() -> None:
    assert as_float(3) == 3.0 and isinstance(as_float(3), float)
    assert as_float(0.25) == 0.25 and as_float(" -1.5e2 ") == -150.0 and as_float(".5") == 0.5
    for bad in (True, None, "abc", "", "1,5", [1]):
        with pytest.raises(ValueError, match="expected a number"):
            as_float(bad)
    for bad in ("nan", "inf", math.nan, math.inf):
        with pytest.raises(ValueError):
            as_float(bad)


def test_as_label() -> None:
    labels = ["Yes", "No", "Partially"]
    assert as_label(" yes ", labels) == "Yes"
    assert as_label("PARTIALLY", labels) == "Partially"
    assert as_label("no", ("No",)) == "No"
    for bad in ("maybe", "", None, 1, ["yes"]):
        with pytest.raises(ValueError, match="expected one of"):
            as_label(bad, labels)
