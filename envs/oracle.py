"""The yes/no oracle of the question-asking gyms (Telepathy, Turtle): reply normalisation and history."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

#: How earlier exchanges are shown to a model oracle (only when the env is asked to show some).
ORACLE_HISTORY_TEMPLATE = "Earlier questions and your answers:\n{lines}\n\n"
_LABELS = {"yes": "Yes", "no": "No", "maybe": "Maybe"}


def normalize_yes_no(value: Any) -> str:
    """The oracle's reply as "Yes", "No" or "Maybe": its first word, case-insensitively; else "Maybe"."""
    if isinstance(value, bool):
        return "Yes" if value else "No"
    if not isinstance(value, str) or not value.split():
        return "Maybe"
    first = value.split()[0].strip(".,;:!?\"'*`()[]").casefold()
    return _LABELS.get(first, "Maybe")


def validate_oracle_reply(obj: dict[str, Any]) -> str:
    """Check an oracle reply {"thought", "response"}; the value is the normalised answer."""
    if "response" not in obj:
        raise KeyError("the oracle reply has no 'response'")
    return normalize_yes_no(obj["response"])


def history_block(history: Sequence[tuple[str, str]]) -> str:
    """The oracle prompt's block of earlier (question, answer) pairs; empty without any."""
    if not history:
        return ""
    return ORACLE_HISTORY_TEMPLATE.format(lines="\n".join(f"Q: {q}\nA: {a}" for q, a in history))
