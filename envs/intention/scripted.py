"""Scripted stand-ins of the Intention user and coverage judge (docs/spec/GYMS.md §2, "Scripted backend")."""

from __future__ import annotations

from collections.abc import Sequence

from userrl.envs.intention.roles import Judgement
from userrl.envs.intention.tasks import Detail
from userrl.envs.text import content_words

NOT_SURE_REPLY = (
    "I'm not sure that matters for my request. Could you ask about something more specific to it?"
)
#: The scripted reply to a question about a detail: description in lower case, then the drawn option.
DETAIL_REPLY = "For {description}, I'd go with {option}."


def detail_keywords(task: str, detail: Detail) -> frozenset[str]:
    """K_d: content words of description, inquiry and options, minus the words of the request itself."""
    text = " ".join([detail.description, detail.inquiry, *detail.options])
    # Every detail shares the request's words, so they cannot tell details apart.
    return frozenset(content_words(text) - content_words(task))


def covers(question_words: set[str] | frozenset[str], keywords: frozenset[str]) -> bool:
    """Whether a question (as content words) covers a detail: |Q ∩ K_d| >= min(2, |K_d|) and K_d non-empty."""
    return bool(keywords) and len(question_words & keywords) >= min(2, len(keywords))


def scripted_judgement(
    question: str, task_words: frozenset[str], remaining_keywords: Sequence[frozenset[str]]
) -> Judgement:
    """The coverage judge's verdict: 1-based indices into the remaining details, like the model's."""
    q = content_words(question)
    related = bool(q & task_words) or any(q & k for k in remaining_keywords)
    indices = [i + 1 for i, k in enumerate(remaining_keywords) if covers(q, k)] if related else []
    overlaps = [len(q & k) for k in remaining_keywords]
    analysis = f"scripted: question words {sorted(q)}; overlap with remaining details {overlaps}"
    return Judgement(analysis, related, indices)


def scripted_reply(
    question: str,
    details: Sequence[Detail],
    keywords: Sequence[frozenset[str]],
    option_picks: Sequence[int],
) -> str:
    """The user's reply: the drawn option of the detail (covered or not) sharing most words with the question."""
    q = content_words(question)
    best, best_overlap = -1, 0
    for i, k in enumerate(keywords):
        overlap = len(q & k)
        if overlap > best_overlap:  # strict: ties keep the earlier detail (file order)
            best, best_overlap = i, overlap
    if best < 0:
        return NOT_SURE_REPLY
    detail = details[best]
    return DETAIL_REPLY.format(
        description=detail.description.strip().lower(), option=detail.options[option_picks[best]].strip()
    )
