"""The simulated customer: the llm role's prompts and the deterministic scripted stand-in.

Spec: docs/spec/GYMS.md §5.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from userrl.envs.json_extract import strip_think

STOP_TOKEN = "###STOP###"
#: The agent's fixed greeting that opens the simulator's side of the conversation.
GREETING = "Hi! How can I help you today?"
#: The llm role's fallback when every attempt failed or the reply was empty.
FALLBACK_REPLY = "Sorry, could you say that again?"

GOAL_REACHED_REPLY = f"Thank you, that's all I needed. {STOP_TOKEN}"
CONFIRM_REPLY = "Yes, please go ahead."
GIVE_UP_REPLY = f"I'll stop here. {STOP_TOKEN}"
NOTHING_TO_ADD_REPLY = "I don't have anything else to add."
UNKNOWN_FACT_REPLY = "Sorry, I don't have that information."
#: After this many scripted replies without the goal being reached, the next reply gives up.
MAX_SCRIPTED_REPLIES = 10

CUSTOMER_SYSTEM_PROMPT = """You are a customer talking to a customer-service agent. Play the customer described here:

{instruction}

Rules:
- Write one short line per turn, like a real customer. Do not reveal everything at once: give information only when it is needed or asked for.
- Never invent facts that are not in the description above (for example an order id you were not given); say that you do not know instead.
- Do not copy the description word for word; say things in your own words.
- Stay in character: keep the persona, goals and constraints of the description.
- When your goal is fully met, reply with ###STOP### alone and nothing else."""

CONFIRM_WORDS = ("confirm", "proceed", "shall i", "would you like me to", "yes or no")
ORDER_WORDS = ("order",)
RESERVATION_WORDS = ("reservation",)
PAYMENT_WORDS = ("payment",)

# Longest alternatives first, so "you are" wins over "you" and "yourself" over "your".
_SECOND_PERSON = re.compile(r"\b(yourself|you\s+are|you['’]re|you['’]ve|your|you)\b", re.IGNORECASE)
_FIRST_PERSON = {
    "yourself": "myself",
    "you are": "I am",
    "you're": "I'm",
    "you've": "I've",
    "your": "my",
    "you": "I",
}


def to_first_person(sentence: str) -> str:
    """Whole-word 'you are'->'I am', 'your'->'my', 'you'->'I', 'yourself'->'myself', first-letter case kept."""

    def swap(match: re.Match[str]) -> str:
        word = match.group(0)
        replacement = _FIRST_PERSON[re.sub(r"\s+", " ", word.lower()).replace("’", "'")]
        return replacement[0].upper() + replacement[1:] if word[0].isupper() else replacement

    return _SECOND_PERSON.sub(swap, sentence)


def instruction_sentences(instruction: str) -> list[str]:
    """The instruction split on '. ', each sentence ending in punctuation."""
    sentences = []
    for piece in instruction.split(". "):
        piece = piece.strip()
        if piece:
            sentences.append(piece if piece[-1] in ".!?" else piece + ".")
    return sentences


def _unique(values: Iterable[Any]) -> tuple[str, ...]:
    seen: dict[str, None] = {}
    for value in values:
        if isinstance(value, str) and value:
            seen.setdefault(value, None)
    return tuple(seen)


def _join(ids: Sequence[str]) -> str:
    return ids[0] if len(ids) == 1 else ", ".join(ids[:-1]) + " and " + ids[-1]


@dataclass(frozen=True)
class CustomerFacts:
    """What the scripted customer knows: identity from the user record, ids from the gold actions."""

    user_id: str
    first_name: str | None = None
    last_name: str | None = None
    zip: str | None = None
    email: str | None = None
    order_ids: tuple[str, ...] = ()
    reservation_ids: tuple[str, ...] = ()
    payment_ids: tuple[str, ...] = ()

    @classmethod
    def from_task(
        cls, user_id: str, user_record: Mapping[str, Any] | None, actions: Sequence[Mapping[str, Any]]
    ) -> CustomerFacts:
        """Collect the facts of a task; a missing user record leaves the identity fields empty."""
        record = user_record or {}
        name = record.get("name") or {}
        kwargs = [a.get("kwargs") or {} for a in actions]
        payments = []
        for kw in kwargs:
            payments += [kw.get("payment_method_id"), kw.get("payment_id")]
            methods = kw.get("payment_methods")
            if isinstance(methods, list):
                payments += [m.get("payment_id") for m in methods if isinstance(m, Mapping)]
        return cls(
            user_id=user_id,
            first_name=name.get("first_name"),
            last_name=name.get("last_name"),
            zip=(record.get("address") or {}).get("zip"),
            email=record.get("email"),
            order_ids=_unique(kw.get("order_id") for kw in kwargs),
            reservation_ids=_unique(kw.get("reservation_id") for kw in kwargs),
            payment_ids=_unique(payments),
        )


class ScriptedCustomer:
    """The deterministic customer: fixed reply rules over the agent message (docs/spec/GYMS.md §5)."""

    def __init__(self, instruction: str, facts: CustomerFacts):
        self.facts = facts
        self.sentences = instruction_sentences(instruction)
        self.next_sentence = 0
        self.replies = 0

    def reply(self, message: str, goal_reached: bool) -> str:
        """The reply to one agent message; goal_reached = database at the gold state and all outputs said."""
        self.replies += 1
        if goal_reached:
            return GOAL_REACHED_REPLY
        if self.replies > MAX_SCRIPTED_REPLIES:
            return GIVE_UP_REPLY
        text = message.lower()
        if any(word in text for word in CONFIRM_WORDS):
            return CONFIRM_REPLY
        identity = self._identity(text)
        if identity:
            return identity
        ids = self._ids(text)
        if ids is not None:
            return ids
        return self._next_instruction_sentence()

    def _identity(self, text: str) -> str | None:
        f = self.facts
        asked = []
        if "name" in text:
            asked.append(f"My name is {f.first_name} {f.last_name}." if f.first_name else None)
        if "zip" in text:
            asked.append(f"My zip code is {f.zip}." if f.zip else None)
        if "email" in text:
            asked.append(f"My email is {f.email}." if f.email else None)
        if "user id" in text:
            asked.append(f"My user id is {f.user_id}.")
        if not asked:
            return None
        known = [a for a in asked if a]
        return " ".join(known) if known else UNKNOWN_FACT_REPLY

    def _ids(self, text: str) -> str | None:
        f = self.facts
        parts, asked = [], False
        for words, ids, what in (
            (ORDER_WORDS, f.order_ids, "order"),
            (RESERVATION_WORDS, f.reservation_ids, "reservation"),
            (PAYMENT_WORDS, f.payment_ids, "payment method"),
        ):
            if any(word in text for word in words):
                asked = True
                if ids:
                    plural = "s are" if len(ids) > 1 else " is"
                    parts.append(f"My {what} id{plural} {_join(ids)}.")
        if not asked:
            return None
        return " ".join(parts) if parts else UNKNOWN_FACT_REPLY

    def _next_instruction_sentence(self) -> str:
        if self.next_sentence >= len(self.sentences):
            return NOTHING_TO_ADD_REPLY
        sentence = self.sentences[self.next_sentence]
        self.next_sentence += 1
        return to_first_person(sentence)


def customer_messages(instruction: str, turns: Sequence[tuple[str, str]]) -> tuple[str, list[dict[str, str]]]:
    """The system prompt and the conversation of one llm customer call, seen from the customer's side
    (docs/spec/GYMS.md §5, as MUA-RL's simulator sees it): the agent's messages as `user`, the customer's own
    as `assistant`, ("agent" | "customer", text) turns oldest first, ending with the agent's latest message."""
    system = CUSTOMER_SYSTEM_PROMPT.format(instruction=instruction)
    return system, [{"role": "user" if who == "agent" else "assistant", "content": text} for who, text in turns]


def clean_reply(text: str | None) -> str | None:
    """A usable customer reply (think blocks dropped, stripped), or None when there is none."""
    if not isinstance(text, str):
        return None
    text = strip_think(text).strip()
    return text or None
