"""Scripted persuadee of the Persuade gym (docs/spec/GYMS.md §3, "Scripted backend"): a fixed five-point rubric."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from userrl.envs.persuade.roles import STANCES, PersuadeeReply
from userrl.envs.text import content_words

EVIDENCE_TERMS: tuple[str, ...] = (
    "study",
    "studies",
    "research",
    "data",
    "evidence",
    "survey",
    "report",
    "percent",
    "statistics",
    "according",
)
REBUTTAL_TERMS: tuple[str, ...] = (
    "however",
    "but",
    "although",
    "whereas",
    "contrary",
    "you argue",
    "you claim",
    "your argument",
    "you said",
    "you mention",
)
# Whole words or phrases; a phrase matches across any run of whitespace ("you  argue").
_REBUTTAL_RE = re.compile(
    r"\b(?:" + "|".join(r"\s+".join(map(re.escape, t.split())) for t in REBUTTAL_TERMS) + r")\b"
)
MIN_SHARED_WORDS = 3
MIN_WORDS = 40
NOVELTY_LIMIT = 0.6

FAIR_POINT = "You make a fair point. I am reconsidering my position."
NOT_CONVINCED = "I am not convinced yet."
#: One hint per unmet criterion, in the order they are given (c2, c3, c1, c4, c5); at most MAX_HINTS.
HINTS: tuple[tuple[str, str], ...] = (
    ("evidence", "I would need evidence."),
    ("rebuttal", "You have not addressed my argument."),
    ("relevance", "This seems off-topic."),
    ("substance", "Please develop your reasoning."),
    ("novelty", "You are repeating yourself."),
)
MAX_HINTS = 2


@dataclass(frozen=True)
class Rubric:
    """Which of the five criteria an argument meets, and the stance move they earn."""

    relevance: bool
    evidence: bool
    rebuttal: bool
    substance: bool
    novelty: bool

    @property
    def met(self) -> int:
        """k, the number of criteria met."""
        return sum((self.relevance, self.evidence, self.rebuttal, self.substance, self.novelty))

    @property
    def delta(self) -> int:
        """Stance steps earned: 2 for all five criteria, 1 for three or four, else 0."""
        return 2 if self.met == 5 else 1 if self.met >= 3 else 0

    def hints(self) -> list[str]:
        """The hints of the unmet criteria, in rubric order, at most MAX_HINTS."""
        return [text for name, text in HINTS if not getattr(self, name)][:MAX_HINTS]


def jaccard(a: set[str], b: set[str]) -> float:
    """|a ∩ b| / |a ∪ b|; two empty sets count as identical (1.0)."""
    union = a | b
    return len(a & b) / len(union) if union else 1.0


def score_argument(argument: str, topic_words: set[str] | frozenset[str], earlier: Iterable[str]) -> Rubric:
    """The rubric of one argument; topic_words = CW(claim + " " + initial argument)."""
    words = content_words(argument)
    lowered = argument.lower()
    return Rubric(
        relevance=len(words & topic_words) >= MIN_SHARED_WORDS,
        # Plain containment, as the spec words it ("percentage" and "researchers" count too).
        evidence=any(ch.isdigit() for ch in argument) or any(t in lowered for t in EVIDENCE_TERMS),
        rebuttal=_REBUTTAL_RE.search(lowered) is not None,
        substance=len(argument.split()) >= MIN_WORDS,
        novelty=all(jaccard(words, content_words(e)) < NOVELTY_LIMIT for e in earlier),
    )


def scripted_persuadee(
    argument: str, topic_words: set[str] | frozenset[str], earlier: Sequence[str], stance: int
) -> tuple[PersuadeeReply, Rubric]:
    """The scripted persuadee's turn: it moves forward by the rubric's delta and never moves back."""
    rubric = score_argument(argument, topic_words, earlier)
    new = min(len(STANCES) - 1, stance + rubric.delta)
    response = " ".join([FAIR_POINT if rubric.delta > 0 else NOT_CONVINCED, *rubric.hints()])
    unmet = [name for name, _ in HINTS if not getattr(rubric, name)]
    thought = f"scripted rubric: {rubric.met}/5 criteria met; unmet: {', '.join(unmet) or 'none'}"
    return PersuadeeReply(thought, response, STANCES[new]), rubric
