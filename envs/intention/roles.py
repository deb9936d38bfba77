"""Intention model roles (docs/spec/GYMS.md §2): the simulated user and the coverage judge.

Prompts for the model backends (openai, local), the builders of their user messages, and the reply
validators (docs/spec/GYMS.md §0.6 step 5). The deterministic stand-ins live in scripted.py.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from userrl.envs.intention.tasks import Detail
from userrl.envs.json_extract import as_bool, as_int

USER_ROLE = "intention_user"
JUDGE_ROLE = "intention_judge"
ROLES: tuple[str, ...] = (USER_ROLE, JUDGE_ROLE)
#: How many completed exchanges each role sees.
HISTORY_WINDOW = 3

#: The user fallback after every attempt failed: one of these, picked with the env rng.
FALLBACK_REPLIES: tuple[str, ...] = (
    "Could you rephrase that? I'm not sure what you mean.",
    "I haven't thought about that much. What else do you need to know?",
    "I'm not sure. Can you ask me something more specific about my request?",
    "Good question, but I don't have a clear answer right now.",
    "Let's focus on my request. What else would you like to know?",
)
IMPORTANCE_LABELS = {3: "HIGH", 2: "MEDIUM", 1: "LOW"}

USER_SYSTEM_PROMPT = """\
You are role-playing a person who posted a vague request to an AI assistant. The assistant asks you \
clarifying questions about it.

Rules:
- You are the person who posted the request. Answer the assistant's question naturally, in the first \
person, in one to three sentences.
- When asked about your preferences, give realistic, specific ones that are consistent with the details \
you have in mind.
- When the question is off-topic, answer briefly and steer the conversation back to your request.
- Never propose solutions, and never list or enumerate details you have not been asked about.

Reply with one JSON object and nothing else:
{"thought": "<your private reasoning>", "response": "<what you say to the assistant>"}"""

JUDGE_SYSTEM_PROMPT = """\
You judge a clarification dialogue. A user made a vague request, and some details needed to fulfil it \
are missing. You get the details that are still missing, as a numbered list, and the assistant's latest \
question.

Decide:
1. is_task_related: whether the question concerns the user's request at all.
2. covered_detail_indices: the numbers of the listed details that the question explicitly asks about. \
A generic question such as "anything else?" covers nothing. Do not count a detail the question only \
touches on by accident.

Reply with one JSON object and nothing else:
{"analysis": "<short reasoning>", "is_task_related": true or false, "covered_detail_indices": [<numbers>]}"""


@dataclass(frozen=True)
class Judgement:
    """The coverage judge's verdict; indices are 1-based into the step's list of remaining details."""

    analysis: str
    is_task_related: bool
    indices: list[int]


def persona_prompt(task: str, category: str, details: Sequence[Detail], picks: Sequence[int]) -> str:
    """The user as a persona, its preferred option per detail included: the system prompt of the rows a user
    simulator is trained on when recorded from this gym, and of such a simulator playing it."""
    lines = [
        f"- {d.description}: {d.options[p]} (importance {IMPORTANCE_LABELS[d.importance]})"
        for d, p in zip(details, picks, strict=True)
    ]
    return (
        f'You asked an AI assistant for help: "{task}" (category: {category}). You left out details you have '
        "clear wishes about, and you share each only when asked about it:\n" + "\n".join(lines)
    )


def _exchanges_block(exchanges: Sequence[tuple[str, str]]) -> str:
    recent = list(exchanges)[-HISTORY_WINDOW:]
    if not recent:
        return "(no questions yet)"
    return "\n".join(f"Assistant: {q}\nUser: {a}" for q, a in recent)


def user_message(
    task: str,
    category: str,
    details: Sequence[Detail],
    exchanges: Sequence[tuple[str, str]],
    question: str,
    *,
    sees_details: bool = True,
) -> str:
    """The user role's message: request, (optionally) the hidden details, recent exchanges, the question."""
    parts = [f"Your request: {task}", f"Category: {category}"]
    if sees_details:
        lines = [f"- {d.description} (possible answers: {'; '.join(d.options)})" for d in details]
        parts.append("Details you have in mind (never list them unprompted):\n" + "\n".join(lines))
    else:
        parts.append("You have not written down the details of your request; answer as a realistic person.")
    parts.append("Recent conversation:\n" + _exchanges_block(exchanges))
    parts.append(f"The assistant now asks: {question}")
    return "\n\n".join(parts)


def judge_message(
    task: str,
    category: str,
    remaining: Sequence[Detail],
    exchanges: Sequence[tuple[str, str]],
    question: str,
) -> str:
    """The judge's message: request, remaining details numbered from 1, recent exchanges, the question."""
    lines = [
        f"{i}. [{IMPORTANCE_LABELS[d.importance]}] {d.description} (example question: {d.inquiry})"
        for i, d in enumerate(remaining, start=1)
    ]
    return "\n\n".join(
        [
            f"Request: {task}",
            f"Category: {category}",
            "Missing details not yet covered:\n" + "\n".join(lines),
            "Earlier conversation:\n" + _exchanges_block(exchanges),
            f"Latest question: {question}",
        ]
    )


def validate_user_reply(value: dict[str, Any]) -> str:
    """The user's `response`, a non-empty string (`thought` is not required)."""
    response = value["response"]
    if not isinstance(response, str) or not response.strip():
        raise ValueError(f"response must be a non-empty string, got {response!r:.60}")
    return response.strip()


def validate_judgement(value: dict[str, Any]) -> Judgement:
    """The judge's verdict: a boolean-like is_task_related and a list of integer-like indices."""
    related = as_bool(value["is_task_related"])
    raw = value["covered_detail_indices"]
    if not isinstance(raw, list):
        raise TypeError(f"covered_detail_indices must be a list, got {type(raw).__name__}")
    analysis = value.get("analysis")
    return Judgement(analysis if isinstance(analysis, str) else "", related, [as_int(i) for i in raw])


def covered_positions(judgement: Judgement, n_remaining: int) -> list[int]:
    """0-based positions in the remaining list: out-of-range and duplicate indices dropped, none if unrelated."""
    if not judgement.is_task_related:
        return []
    positions: list[int] = []
    for index in judgement.indices:
        if 1 <= index <= n_remaining and index - 1 not in positions:
            positions.append(index - 1)
    return positions
