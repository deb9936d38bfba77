"""The answer judge of the Search gym (docs/spec/GYMS.md §4): exact match, scripted stand-in, model role."""

from __future__ import annotations

import re
from typing import Any

from userrl.envs.text import norm

JUDGE_ROLE = "answer_judge"
JUDGE_MAX_TOKENS = 512
#: The scripted judge accepts an answer with at most this many words beyond those of the gold answer.
MAX_EXTRA_WORDS = 3

JUDGE_SYSTEM_PROMPT = (
    "You grade answers to factoid questions. Decide whether the agent's answer matches the gold answer "
    "for this question. Accept exact answers and clearly equivalent ones: aliases, other spellings, "
    "abbreviations, and other date or number formats. Reject answers that are wrong, less specific than "
    "the gold answer, or that list several candidates. Then write brief feedback to the agent in the "
    'second person ("Your answer ..."); the feedback must never reveal or hint at the gold answer.\n'
    "Reply with one JSON object and nothing else:\n"
    '{"reasoning": "<one or two sentences>", "judgment": "Yes" or "No", "feedback": "<brief feedback>"}'
)
JUDGE_USER_TEMPLATE = "Question: {question}\nGold answer: {gold}\nAgent's answer: {answer}"

_WORDS = re.compile(r"[a-z0-9]+")


def exact_match(answer: str, gold: str) -> bool:
    """norm(answer) == norm(gold), for answers with at least one letter or digit."""
    return bool(norm(answer)) and norm(answer) == norm(gold)


def scripted_judge(answer: str, gold: str) -> bool:
    """The scripted stand-in: exact match, or every gold word among the answer's, with <= 3 extra words."""
    if exact_match(answer, gold):
        return True
    gold_words, answer_words = _WORDS.findall(gold.lower()), _WORDS.findall(answer.lower())
    # A gold answer without words ("?!") could be "contained" in anything: only exact match counts then.
    return (
        bool(gold_words)
        and set(gold_words) <= set(answer_words)
        and len(answer_words) <= len(gold_words) + MAX_EXTRA_WORDS
    )


def judge_user_message(question: str, gold: str, answer: str) -> str:
    """The judge role's user message."""
    return JUDGE_USER_TEMPLATE.format(question=question, gold=gold, answer=answer)


def validate_judgment(value: dict[str, Any]) -> bool:
    """The judge reply as correct/incorrect: `judgment` must be a string (or boolean); only "Yes" is correct."""
    judgment = value["judgment"]
    if isinstance(judgment, bool):
        return judgment
    if not isinstance(judgment, str):
        raise TypeError(f"judgment must be a string, got {type(judgment).__name__}")
    # Labels compare after trimming and case-folding (docs/spec/GYMS.md §0.6); anything but yes (or true)
    # is a No.
    return judgment.strip().casefold() in ("yes", "true")
