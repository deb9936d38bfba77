"""The Persuade model role (docs/spec/GYMS.md §3): the persuadee, its prompt, message and reply validator."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

PERSUADEE_ROLE = "persuadee"
ROLES: tuple[str, ...] = (PERSUADEE_ROLE,)

#: The stance ladder, index 0 to 6; the tracking score of index i is i / 6.
STANCES: tuple[str, ...] = (
    "Strongly Agree",
    "Agree",
    "Partly Agree",
    "Neutral",
    "Partly Disagree",
    "Disagree",
    "Strongly Disagree",
)
#: The persuadee fallback after every attempt failed; the stance stays where it was.
FALLBACK_REPLY = "I'm having trouble following your argument. Could you restate it?"

PERSUADEE_SYSTEM_PROMPT = f"""\
You are in a persuasion dialogue. You hold a position on a claim, and the other party argues against it.

- Respond thoughtfully. Change your stance only when the reasoning or evidence is compelling.
- Be respectful but critical, and point out logical fallacies.
- Your stance is always exactly one of: {", ".join(STANCES)}.
- Keep your response to about 200 tokens at most, and address the other party as "you".

Reply with one JSON object and nothing else:
{{"thought": "<your private reasoning>", "response": "<your reply to them>", "stance": "<one of the seven \
stance labels>"}}"""


@dataclass(frozen=True)
class PersuadeeReply:
    """A persuadee turn; `stance` is the label as given (it may not be one of the seven)."""

    thought: str
    response: str
    stance: str

    def as_dict(self) -> dict[str, str]:
        """The reply as the JSON object the role returns."""
        return {"thought": self.thought, "response": self.response, "stance": self.stance}


def persona_prompt(claim: str) -> str:
    """The persuadee as a persona: the system prompt of the rows a user simulator is trained on when recorded
    from this gym, and of such a simulator playing it (a PersonaUserClient, envs/llm.py)."""
    return (
        f'You hold a firm opinion on the claim "{claim}". When this conversation began you strongly agreed '
        "with it, and you wrote the first message to defend it. You change your mind only for good "
        "arguments: relevant, backed by evidence, answering your points, well developed and not repeated."
    )


_STANCE_IN_TEXT = re.compile(
    r"\b(" + "|".join(r"\s+".join(s.split()) for s in sorted(STANCES, key=len, reverse=True)) + r")\b",
    re.IGNORECASE,
)


def stance_in_text(text: str) -> str | None:
    """The first stance label written in a text (a user simulator's <stance> block, e.g. 'Partly Agree toward the
    claim "..."; moved from Agree' gives 'Partly Agree'), the longer label winning at one position; None
    when the text names none."""
    match = _STANCE_IN_TEXT.search(text)
    return None if match is None else STANCES[stance_index(match.group(1))]


def stance_index(label: str) -> int | None:
    """The ladder index of a label, matched case-insensitively with whitespace trimmed and collapsed."""
    key = " ".join(label.split()).casefold()
    for index, stance in enumerate(STANCES):
        if stance.casefold() == key:
            return index
    return None


def persuadee_message(
    claim: str, argument: str, stance: str, dialogue: Sequence[tuple[str, str]], latest: str
) -> str:
    """The persuadee's message: claim, initial argument, current stance, the full dialogue, latest argument."""
    if dialogue:
        turns = "\n\n".join(
            f"Their argument {i}:\n{a}\nYour reply {i}:\n{r}" for i, (a, r) in enumerate(dialogue, start=1)
        )
    else:
        turns = "(this is their first argument)"
    return "\n\n".join(
        [
            f"Claim: {claim}",
            f"Your initial argument for the claim:\n{argument}",
            f"Your current stance: {stance}",
            f"Dialogue so far:\n{turns}",
            f"Their latest argument:\n{latest}",
        ]
    )


def validate_persuadee(value: dict[str, Any]) -> PersuadeeReply:
    """A non-empty string `response` and a string `stance` (an unknown label is handled by the env)."""
    response, stance = value["response"], value["stance"]
    if not isinstance(response, str) or not response.strip():
        raise ValueError(f"response must be a non-empty string, got {response!r:.60}")
    if not isinstance(stance, str):
        raise TypeError(f"stance must be a string, got {type(stance).__name__}")
    thought = value.get("thought")
    return PersuadeeReply(thought if isinstance(thought, str) else "", response.strip(), stance)
