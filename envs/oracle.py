"""The yes/no oracle of the question-asking gyms (Telepathy, Turtle): a base env, reply rules and history."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

from userrl.envs.base import MultiTurnEnv

ORACLE_FALLBACK = "I could not process that question. Please ask another yes/no question."
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


class OracleEnv(MultiTurnEnv):
    """Base of the gyms whose agent asks a yes/no oracle about something hidden, then answers.

    Subclasses set `role_names` (with "oracle"), `oracle_role` and `oracle_system_prompt`,
    call `_configure_oracle` from `_configure`, clear `oracle_history` at reset, and implement
    `_scripted_answer` and `_oracle_user_message`.
    """

    uses_role_client: ClassVar[bool] = True
    role_names: ClassVar[tuple[str, ...]] = ("oracle",)
    oracle_role: ClassVar[str] = ""
    oracle_system_prompt: ClassVar[str] = ""

    def _configure_oracle(self, oracle_history_turns: int) -> None:
        """Check and keep how many past exchanges the model oracle sees."""
        if isinstance(oracle_history_turns, bool) or not isinstance(oracle_history_turns, int):
            raise ValueError(f"oracle_history_turns must be an integer >= 0, got {oracle_history_turns!r}")
        if oracle_history_turns < 0:
            raise ValueError(f"oracle_history_turns must be an integer >= 0, got {oracle_history_turns!r}")
        self.oracle_history_turns = oracle_history_turns

    def _scripted_answer(self, question: str) -> str:
        """The model-free oracle's Yes/No/Maybe."""
        raise NotImplementedError

    def _oracle_user_message(self, question: str, history: Sequence[tuple[str, str]]) -> str:
        """The model oracle's user message; history holds the (question, answer) pairs to show."""
        raise NotImplementedError

    async def _ask(self, question: str) -> str:
        """The oracle's Yes/No/Maybe, or the fallback message when the model role fails."""
        if not question.strip():
            # Nothing to decide; the scripted rule gives Maybe too, so no model call is spent on it.
            answer: str | None = "Maybe"
        elif self.role_backends["oracle"] == "scripted":
            answer = self._scripted_answer(question)
        else:
            history = self.oracle_history[-self.oracle_history_turns :] if self.oracle_history_turns else []
            user = self._oracle_user_message(question, history)
            answer, call = await self.llm.complete_json(
                self.oracle_role, self.oracle_system_prompt, user, validate_oracle_reply
            )
            self.record_lm_call(call.role, call.attempts, call.ok, call.latency_s)
        if answer is None:
            return ORACLE_FALLBACK
        self.oracle_history.append((question, answer))
        return answer
