"""Turtle's two model roles (docs/spec/GYMS.md §8): prompts, reply validators and the scripted stand-ins."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from userrl.envs.json_extract import as_float
from userrl.envs.oracle import history_block
from userrl.envs.text import content_words

ORACLE_ROLE = "turtle_oracle"
GRADER_ROLE = "turtle_grader"

ORACLE_SYSTEM_PROMPT = (
    "You host a lateral-thinking puzzle. You know its surface (the short, puzzling story the player sees) "
    "and its bottom (the hidden full story). The player asks one yes/no question about the hidden story.\n"
    'Answer "Yes" if the bottom supports it. Answer "No" if the bottom contradicts it or the question is '
    'far off. Answer "Maybe" only if the bottom cannot decide it or the question is irrelevant; use "Maybe" '
    "rarely. Never reveal more of the story than the single word.\n"
    'Reply with one JSON object only: {"thought": "<brief reasoning>", "response": "Yes" | "No" | "Maybe"}'
)
ORACLE_USER_TEMPLATE = (
    "Surface:\n{surface}\n\nBottom (hidden from the player):\n{bottom}\n\n{history}Question:\n{question}"
)

GRADER_SYSTEM_PROMPT = (
    "You grade a player's solution to a lateral-thinking puzzle. You get the puzzle surface, the true "
    "hidden story (bottom), the player's story, and a numbered list of key statements.\n"
    "Score every statement by how well the player's story covers it: 1 = fully covered (different but "
    "logically equivalent details count as covered), 0.5 = partly covered, 0 = not covered.\n"
    "Reply with one JSON object only, with exactly one entry per statement, in the given order:\n"
    '{"scores": [{"statement": "<statement>", "thought": "<brief reasoning>", "score": 0 | 0.5 | 1}, ...], '
    '"feedback": "<one sentence>"}'
)
GRADER_USER_TEMPLATE = (
    "Surface:\n{surface}\n\nBottom (the true story):\n{bottom}\n\nPlayer's story:\n{story}\n\n"
    "Key statements:\n{statements}"
)

#: Rubric words that describe the grading rather than the story (docs/spec/GYMS.md §8, scripted grader),
#: in CW form.
GRADER_GENERIC_WORDS = frozenset(
    content_words(
        "story reveal revealed include included explain explained protagonist mention mentioned "
        "logically justifiable original different"
    )
)
_SNAP_POINTS = (0.0, 0.5, 1.0)


# ---------------------------------------------------------------- reply normalisation and validators


def snap_score(value: Any) -> float:
    """A grader score (number or numeric string) clamped to [0, 1] and snapped to 0, 0.5 or 1."""
    x = min(1.0, max(0.0, as_float(value)))
    # Ties (0.25, 0.75) go to the lower point: no credit the grader did not clearly give.
    return min(_SNAP_POINTS, key=lambda p: (abs(p - x), p))


def grader_validator(statements: Sequence[str]) -> Callable[[dict[str, Any]], list[dict[str, Any]]]:
    """A validator of grader replies for this rubric: one entry per statement, scores snapped."""

    def validate(obj: dict[str, Any]) -> list[dict[str, Any]]:
        scores = obj["scores"]
        if not isinstance(scores, list):
            raise TypeError("'scores' must be a list")
        if len(scores) != len(statements):
            raise ValueError(f"'scores' has {len(scores)} entries for {len(statements)} statements")
        out = []
        for statement, item in zip(statements, scores, strict=True):
            if not isinstance(item, dict):
                raise TypeError("every 'scores' entry must be an object")
            thought = item.get("thought", "")
            out.append(
                {
                    "statement": statement,
                    "thought": thought if isinstance(thought, str) else str(thought),
                    "score": snap_score(item["score"]),
                }
            )
        return out  # the model's own 'feedback' is ignored: the gym writes the feedback

    return validate


# ---------------------------------------------------------------- prompts


def oracle_user_message(surface: str, bottom: str, question: str, history: Sequence[tuple[str, str]]) -> str:
    """The oracle's user message; history holds the (question, answer) pairs to show (often none)."""
    return ORACLE_USER_TEMPLATE.format(
        surface=surface, bottom=bottom, history=history_block(history), question=question
    )


def grader_user_message(surface: str, bottom: str, story: str, statements: Sequence[str]) -> str:
    """The grader's user message: the rubric statements in order, without their weights."""
    numbered = "\n".join(f"{i}. {s}" for i, s in enumerate(statements, start=1))
    return GRADER_USER_TEMPLATE.format(surface=surface, bottom=bottom, story=story, statements=numbered)


# ---------------------------------------------------------------- scripted stand-ins (docs/spec/GYMS.md §8)


def scripted_oracle(question: str, surface_words: set[str], bottom_words: set[str]) -> str:
    """Yes when at least half (and at least one) of the question's new words occur in the bottom."""
    q = content_words(question) - surface_words
    if not q:
        return "Maybe"
    return "Yes" if len(q & bottom_words) >= max(1, math.ceil(len(q) / 2)) else "No"


def statement_keys(statement: str, surface_words: set[str]) -> frozenset[str]:
    """K_i: the statement's content words minus the surface's and the generic rubric words."""
    words = content_words(statement)
    keys = words - surface_words - GRADER_GENERIC_WORDS
    return frozenset(keys or words)


def scripted_grade(keys: Sequence[frozenset[str]], story: str) -> list[float]:
    """Per statement: 1.0 when >= 60% of its key words occur in the story, 0.5 when >= 30%, else 0."""
    story_words = content_words(story)
    scores = []
    for k in keys:
        frac = len(k & story_words) / len(k) if k else 0.0
        scores.append(1.0 if frac >= 0.6 else 0.5 if frac >= 0.3 else 0.0)
    return scores
