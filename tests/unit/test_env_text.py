"""Shared text helpers of the scripted backends (docs/spec/GYMS.md §0.7)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from userrl.envs.text import content_words, norm, stopwords


def test_stopword_list_is_about_150_function_words() -> None:
    words = stopwords()
    assert 130 <= len(words) <= 180
    assert {"the", "and", "which", "would"} <= words
    assert all(w == w.lower() and w.isalpha() for w in words)


def test_content_words() -> None:
    text = "I would like to plan TRIPS to Paris next month, with 2 kids and 10 bags!"
    assert content_words(text) == {"plan", "trip", "pari", "next", "month", "kid", "bag"}


def test_content_words_rules() -> None:
    # Tokens of length <= 2 go; "s" is stripped only from tokens longer than 3, after the stopword check.
    assert content_words("go to bus gas cats") == {"bus", "gas", "cat"}
    assert content_words("hotel-booking_2024 e-mail") == {"hotel", "booking", "2024", "mail"}
    assert content_words("") == set()


def test_norm() -> None:
    assert norm("The Eiffel Tower!") == "theeiffeltower"
    assert norm("Ça va? 12-B") == "ava12b"


@settings(max_examples=200, deadline=None)
@given(st.text())
def test_helpers_never_crash(text: str) -> None:
    words = content_words(text)
    assert all(len(w) >= 3 and w.isascii() for w in words)
    assert set(norm(text)) <= set("abcdefghijklmnopqrstuvwxyz0123456789")
