"""Telepathy's two model roles (docs/spec/GYMS.md §6): prompts, reply validators, the scripted stand-ins."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from userrl.envs.json_extract import as_label
from userrl.envs.oracle import history_block
from userrl.envs.text import content_words, norm

ORACLE_ROLE = "telepathy_oracle"
JUDGE_ROLE = "telepathy_judge"

ORACLE_SYSTEM_PROMPT = (
    "You are playing twenty questions. You are thinking of the entity given below, and the player asks "
    "one yes/no question about it.\n"
    'Answer the question truthfully with "Yes" or "No". Use "Maybe" only when the question cannot be '
    "answered with yes or no. Never name the entity.\n"
    'Reply with one JSON object only: {"thought": "<brief reasoning>", "response": "Yes" | "No" | "Maybe"}'
)
ORACLE_USER_TEMPLATE = "Entity you are thinking of:\n{entity}\n\n{history}Question:\n{question}"

JUDGE_SYSTEM_PROMPT = (
    "You judge a guess in twenty questions. You know the entity; the player names a guess.\n"
    'Answer "Yes" only if the guess identifies the entity exactly or is a clear synonym of it. There is no '
    'partial credit: a related, broader or narrower guess gets "No".\n'
    "Give brief feedback in the second person that does not reveal the entity.\n"
    'Reply with one JSON object only: {"thought": "<brief reasoning>", "judgment": "Yes" | "No", '
    '"feedback": "<one sentence>"}'
)
JUDGE_USER_TEMPLATE = "Entity:\n{entity}\n\nThe player's guess:\n{guess}"

JUDGE_RIGHT = "Your guess is right."
JUDGE_WRONG = "Your guess is not the entity."

#: Question words that say nothing about the entity (docs/spec/GYMS.md §6, scripted oracle), in CW form.
GENERIC_QUESTION_WORDS = frozenset(content_words("entity thing something thinking guess"))
#: (category substrings, broader words): an entity whose category contains any of the substrings answers
#: Yes to the words (docs/spec/GYMS.md §6, scripted oracle).
HYPERNYMS: tuple[tuple[str, str], ...] = (
    (
        "person figure character composer artist author scientist leader musician athlete",
        "person human someone people",
    ),
    ("animal bird fish insect dog_breed creature", "animal living alive creature"),
    ("plant flower fruit tree vegetable", "plant living grow"),
    ("food dish dessert fruit beverage drink", "food eat edible"),
    (
        "place city landmark mountain park waterfall location body_of_water monument site wonder",
        "place location visit",
    ),
    ("vehicle aircraft", "vehicle transport travel"),
)


# ---------------------------------------------------------------- reply normalisation and validators


def validate_judge_reply(obj: dict[str, Any]) -> dict[str, Any]:
    """Check a judge reply {"thought", "judgment": Yes/No, "feedback"}; judgment becomes a bool."""
    judgment = as_label(obj["judgment"], ("Yes", "No"))
    feedback = obj["feedback"]
    if not isinstance(feedback, str):
        raise TypeError("'feedback' must be a string")
    thought = obj.get("thought", "")
    return {
        "thought": thought if isinstance(thought, str) else str(thought),
        "judgment": judgment == "Yes",
        "feedback": feedback.strip(),
    }


# ---------------------------------------------------------------- prompts


def oracle_user_message(entity: str, question: str, history: Sequence[tuple[str, str]]) -> str:
    """The oracle's user message; history holds the (question, answer) pairs to show (often none)."""
    return ORACLE_USER_TEMPLATE.format(entity=entity, history=history_block(history), question=question)


def judge_user_message(entity: str, guess: str) -> str:
    """The judge's user message."""
    return JUDGE_USER_TEMPLATE.format(entity=entity, guess=guess)


# ---------------------------------------------------------------- scripted stand-ins (docs/spec/GYMS.md §6)


def hypernyms(category: str) -> set[str]:
    """The broader words of every HYPERNYMS row whose substrings occur in the category (in CW form)."""
    words: set[str] = set()
    for keys, added in HYPERNYMS:
        if any(k in category for k in keys.split()):
            words |= content_words(added)
    return words


def entity_keywords(title: str, target_entity: str, category: str) -> frozenset[str]:
    """E: CW(title) | CW(target_entity) | CW(category with '_' as ' ') | hypernyms(category)."""
    return frozenset(
        content_words(title)
        | content_words(target_entity)
        | content_words(category.replace("_", " "))
        | hypernyms(category)
    )


def scripted_oracle(question: str, keywords: frozenset[str]) -> str:
    """Yes when any non-generic content word of the question is an entity keyword; Maybe without any."""
    q = content_words(question) - GENERIC_QUESTION_WORDS
    if not q:
        return "Maybe"
    return "Yes" if q & keywords else "No"


def entity_name(target_entity: str) -> str:
    """The part of target_entity before the first ' - '."""
    return target_entity.split(" - ", 1)[0]


def scripted_judge(guess: str, title: str, target_entity: str) -> bool:
    """Whether the guess names the entity: equal or containing title, equal name, or title's words."""
    g, t, n = norm(guess), norm(title), norm(entity_name(target_entity))
    # Empty normal forms are skipped: "" is a substring of everything (a title of only symbols).
    if t and (g == t or t in g):
        return True
    if n and g == n:
        return True
    title_words, guess_words = content_words(title), content_words(guess)
    # Without the non-empty check, a title of short words only ("Ox") would accept any short guess.
    return bool(title_words) and title_words <= guess_words and len(guess_words) <= len(title_words) + 2
