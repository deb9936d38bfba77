"""Observation-grounded scripted solver of the Tau gym, used to write SFT demonstrations.

The gold actions only choose the plan: which changes to make, which look-ups and questions lead to them.
Every value the solver puts into a tool call or tells the customer comes from the transcript: the prompt,
the tool catalogue, what the customer said, or what an earlier tool returned. Before a call it checks
each argument value against the transcript; a missing one is grounded first, by the first move that works:

1. let the customer go on (an open question: the scripted customer then tells the next sentence of its
   instruction), when a sentence still untold holds the value;
2. ask for the customer's identity (name and zip code, e-mail or user id), when the value is one of them;
3. a read-only look-up (user, order, product or reservation details, or a gold look-up) whose output
   holds the value (the solver predicts outputs on its own copy of the database: privilege, used only to
   choose the look-up);
4. ask for the order, reservation or payment-method ids, when the customer knows the value.

When none does, or the steps would run out before the last change and the closing message, the task
cannot be demonstrated from the transcript and the solver raises `UngroundedTask`. The whole instruction
is heard before the first change (when the steps allow), changes are confirmed with the customer first,
and the closing message tells the facts the customer asked for (found in the transcript, never copied
from the task's hidden outputs unchecked).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from typing import Any, ClassVar

import numpy as np

from userrl.envs.base import Task
from userrl.envs.solving import NativeToolsSolver, UngroundedTask
from userrl.envs.tau.customer import (
    MAX_SCRIPTED_REPLIES,
    CustomerFacts,
    instruction_sentences,
    to_first_person,
)
from userrl.envs.tau.database import EpisodeDB
from userrl.envs.tau.tasks import resolve_domain_data
from userrl.envs.tau.tools import offered_tools, run_tool

#: Open messages that let the customer go on; none holds a word the scripted customer reacts to.
GO_ON_MESSAGES: tuple[str, ...] = (
    "I'd be glad to help. Could you tell me more about what you need?",
    "Sure. Please tell me more about your request.",
    "Thanks. Is there anything else I should know?",
    "Got it. Please go on.",
)
IDENTITY_QUESTIONS = {
    "name_zip": (
        "Could you please tell me your name and zip code so I can find your account?",
        "Before we start, please share your first and last name and your zip code.",
    ),
    "email": ("To look up your account, may I have your email address?",),
    "user_id": (
        "Could you please give me your user id so I can pull up your profile?",
        "To get started, may I have your user id?",
    ),
}
ID_QUESTIONS = {
    "order": "Which order is this about? Please give me the order id.",
    "reservation": "Which reservation is this about? Please give me the reservation id.",
    "payment": "Which payment method should I use? Please give me its id.",
}
CLOSINGS = (
    "Everything is taken care of.",
    "All done on my side.",
    "Your request has been completed.",
)
TRANSFER_SUMMARY = "The customer needs help that I cannot give with the available tools."
#: How the confirmation message describes each write tool (kwargs fill the placeholders).
CHANGE_DESCRIPTIONS = {
    "cancel_pending_order": "cancel order {order_id} (reason: {reason})",
    "modify_pending_order_address": "change the shipping address of order {order_id}",
    "modify_pending_order_items": "change items of order {order_id}, settling the difference with {payment_method_id}",
    "modify_pending_order_payment": "pay order {order_id} with {payment_method_id} instead",
    "modify_user_address": "update the default address on your account",
    "return_delivered_order_items": "return items of order {order_id}, refunding to {payment_method_id}",
    "exchange_delivered_order_items": "exchange items of order {order_id}, settling the difference with "
    "{payment_method_id}",
    "book_reservation": "book the {cabin} flights from {origin} to {destination}",
    "cancel_reservation": "cancel reservation {reservation_id}",
    "update_reservation_flights": "change the flights of reservation {reservation_id}",
    "update_reservation_baggages": "update the bags of reservation {reservation_id}",
    "update_reservation_passengers": "update the passengers of reservation {reservation_id}",
    "send_certificate": "send you a certificate of {amount}",
}
#: Free-text arguments the agent writes in its own words (never a fact to look up).
OWN_WORDS = frozenset({"summary", "thought"})
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")
_ORDER_ID = re.compile(r"#W\d+")
_JSON_ID = re.compile(r'"(product_id|reservation_id|user_id|order_id)": "([^"]+)"')
_RESERVATIONS = re.compile(r'"reservations": \[([^\]]*)\]')


def describe_change(action: Mapping[str, Any]) -> str:
    """A short description of one write action for the confirmation message."""
    template = CHANGE_DESCRIPTIONS.get(action["name"], "make the requested change")
    try:
        return template.format(**(action.get("kwargs") or {}))
    except (KeyError, IndexError, ValueError):
        return "make the requested change"


def tool_call_content(action: Mapping[str, Any]) -> str:
    """The answer content of one tool call."""
    return json.dumps({"name": action["name"], "arguments": action.get("kwargs") or {}})


def _plain(text: str) -> str:
    return " ".join(text.lower().split())


def leaf_values(value: Any, key: str = "") -> Iterator[tuple[str, Any]]:
    """(argument name, value) of every scalar inside a tool call's arguments."""
    if isinstance(value, Mapping):
        for k, v in value.items():
            yield from leaf_values(v, str(k))
    elif isinstance(value, list | tuple):
        for v in value:
            yield from leaf_values(v, key)
    else:
        yield key, value


def number_in(value: float, text: str) -> bool:
    """Whether the number occurs in text as a number (12 matches '12' or '12.0', not '112')."""
    return any(float(n) == float(value) for n in _NUMBER.findall(text.replace(",", "")))


def grounded(key: str, value: Any, transcript: str) -> bool:
    """Whether one argument value is justified by the transcript (lower-cased, whitespace-collapsed)."""
    if value is None or isinstance(value, bool) or key in OWN_WORDS:
        return True
    if isinstance(value, int | float):
        return number_in(value, transcript)
    text = _plain(str(value))
    if not text:
        return True
    if key == "expression":  # a calculation: every number in it must be known
        return all(number_in(float(n), transcript) for n in _NUMBER.findall(text))
    return text in transcript


def missing_values(kwargs: Mapping[str, Any], transcript: str) -> list[tuple[str, Any]]:
    """The argument values of a call that the transcript does not justify."""
    return [(k, v) for k, v in leaf_values(kwargs) if not grounded(k, v, transcript)]


class TauSolver(NativeToolsSolver):
    """Plays one Tau episode: tools, hear the customer out, look up, confirm, change, report, close."""

    #: Plans within the episode's step budget: the registry passes max_steps (env.max_steps).
    uses_step_budget: ClassVar[bool] = True

    def __init__(self, task: Task, rng: np.random.Generator, max_steps: int = 16) -> None:
        data = task.data
        self._task = task.item_key
        self.rng = rng
        self.max_steps = max_steps
        self.domain = data["domain"]
        self.tools = offered_tools(self.domain, data.get("tools"))  # never a tool the agent was not offered
        self.outputs = [str(o) for o in data["outputs"]]
        actions = [a for a in data["actions"] if a["name"] not in ("think",)]
        self._transfer = next((a for a in actions if self.tools[a["name"]].terminal), None)
        self._actions = [a for a in actions if not self.tools[a["name"]].terminal]
        self.writes = [a for a in self._actions if self.tools[a["name"]].writes]
        # Privileged, to choose moves only: the customer's sentences and facts, and a shadow database.
        self._sentences = [to_first_person(s) for s in instruction_sentences(str(data["instruction"]))]
        self._told = 0
        self._shadow = EpisodeDB(resolve_domain_data(data))
        user_id = data["user_id"]
        user = self._shadow.get("users", user_id) if self._shadow.contains("users", user_id) else None
        self._facts = CustomerFacts.from_task(user_id, user, data["actions"])
        self.transcript = _plain(" ".join(m["content"] for m in task.prompt))
        self._messages = 0
        self._steps = 0
        self._cursor = 0
        self._writes_done = 0
        self._confirmed = not self.writes
        self._gold_reads = len(self._actions) - len(self.writes)
        # The sentences up to the last one holding a value of a gold call or an output must be heard.
        values = [_plain(str(v)) for a in self._actions for _, v in leaf_values(a.get("kwargs") or {})]
        values += [_plain(o) for o in self.outputs]
        holding = [i for i, s in enumerate(self._sentences) if any(v and v in _plain(s) for v in values)]
        self._needed_told = max(holding, default=0) + 1
        self._asked: set[str] = set()
        self._done_reads: set[str] = set()
        self._shown_tools = False
        self._closed = False

    # ------------------------------------------------------------------ the step loop

    def next_action(self, last_feedback: str | None) -> tuple[str, str]:
        """The next (choice, content), read off the transcript so far."""
        if last_feedback is not None:
            self.transcript += " " + _plain(last_feedback)
        choice, content = self._decide()
        self._steps += 1
        if choice == "action":
            self._messages += 1
        return choice, content

    def start_native(self, opening: str) -> None:
        """Play a native-tools episode: the transcript is the agent's opening (policy, tool schemas, first message)."""
        if self._steps:
            raise RuntimeError(f"tau task {self._task!r}: start_native comes before the first move")
        # The native agent never read the choice protocol's prompt; the schemas stand in for `search tools`.
        self.transcript = _plain(opening)
        self._shown_tools = True

    def _decide(self) -> tuple[str, str]:
        if not self._shown_tools:
            self._shown_tools = True
            return "search", "tools"
        if self._closed:
            return "finish", ""
        # Hear the customer out first: every sentence that holds a fact of the task, then the rest while
        # the steps allow (a look-up is kept in reserve for each gold look-up).
        hear = self._cursor == 0 and self._told < len(self._sentences) and self._can_message()
        if hear and (self._told < self._needed_told or self._spare_steps() > self._gold_reads):
            return self._go_on()
        while self._cursor < len(self._actions):
            action = self._actions[self._cursor]
            name, kwargs = action["name"], action.get("kwargs") or {}
            is_write = self.tools[name].writes
            if is_write:
                # Ground every change before confirming them together; then make them one by one.
                move = self._ground(self.writes[self._writes_done :] if self._confirmed else self.writes)
                if move is not None:
                    return move
                if not self._confirmed:
                    self._confirmed = True
                    changes = "; ".join(describe_change(a) for a in self.writes)
                    return "action", f"Here is what I will do: {changes}. Would you like me to proceed?"
                self._cursor += 1
                self._writes_done += 1
                return self._call(name, kwargs)
            self._cursor += 1
            # A gold look-up: made when its arguments are known and a step can be spared, else skipped.
            known = not missing_values(kwargs, self.transcript)
            if known and self._spare_steps() > 0 and tool_call_content({"name": name, "kwargs": kwargs}) not in self._done_reads:
                return self._call(name, kwargs)
        for output in self.outputs:
            if not grounded("", output, self.transcript):
                return self._ground_value("", output)
        self._closed = True
        if self._transfer is not None:
            return self._call(self._transfer["name"], {"summary": TRANSFER_SUMMARY})
        return "action", self._closing()

    # ------------------------------------------------------------------ budgets

    def _mandatory(self) -> tuple[int, int]:
        """(steps, customer messages) still needed for the changes, their confirmation and the closing."""
        confirm = 0 if self._confirmed else 1
        closing_message = 0 if self._transfer is not None else 1
        return len(self.writes) - self._writes_done + confirm + 1, confirm + closing_message

    def _spare_steps(self) -> int:
        return self.max_steps - self._steps - self._mandatory()[0]

    def _can_message(self) -> bool:
        """Whether a step and a customer reply can be spared for one more message."""
        return self._spare_steps() > 0 and MAX_SCRIPTED_REPLIES - self._messages - self._mandatory()[1] > 0

    # ------------------------------------------------------------------ grounding moves

    def _ground(self, actions: list[Mapping[str, Any]]) -> tuple[str, str] | None:
        """A move grounding the first missing value of the actions, or None when nothing is missing."""
        for action in actions:
            for key, value in missing_values(action.get("kwargs") or {}, self.transcript):
                return self._ground_value(key, value)
        return None

    def _ground_value(self, key: str, value: Any) -> tuple[str, str]:
        """The first move that will put the value into the transcript; UngroundedTask when none can."""
        text = _plain(str(value))
        if self._can_message():
            for i in range(self._told, len(self._sentences)):
                if text in _plain(self._sentences[i]) or self._number_in_sentence(value, i):
                    return self._go_on()
            identity = self._identity_kind(text)
            if identity is not None and identity not in self._asked:
                self._asked.add(identity)
                options = IDENTITY_QUESTIONS[identity]
                return "action", options[int(self.rng.integers(len(options)))]
        if self._spare_steps() > 0:
            lookup = self._lookup_for(text, value)
            if lookup is not None:
                return self._call(*lookup)
        if self._can_message():
            for kind, ids in (("order", self._facts.order_ids), ("reservation", self._facts.reservation_ids),
                              ("payment", self._facts.payment_ids)):  # fmt: skip
                if str(value) in ids and kind not in self._asked:
                    self._asked.add(kind)
                    return "action", ID_QUESTIONS[kind]
        raise UngroundedTask(f"tau task {self._task!r}: nothing within the steps left states {key}={value!r}")

    def _number_in_sentence(self, value: Any, i: int) -> bool:
        return isinstance(value, int | float) and not isinstance(value, bool) and number_in(value, self._sentences[i])

    def _identity_kind(self, text: str) -> str | None:
        f = self._facts
        if text in {_plain(x) for x in (f.first_name, f.last_name, f.zip) if x}:
            return "name_zip"
        if f.email and text == _plain(f.email):
            return "email"
        if text == _plain(f.user_id):
            return "user_id"
        return None

    def _lookup_for(self, text: str, value: Any) -> tuple[str, dict[str, Any]] | None:
        """A read-only call with grounded arguments whose (predicted) output states the value."""
        for name, kwargs in self._lookups():
            key = tool_call_content({"name": name, "kwargs": kwargs})
            if key in self._done_reads:
                continue
            output = _plain(run_tool(self._shadow, name, kwargs))
            if output.startswith("error") or output.startswith("unknown action"):
                continue
            if text in output or (isinstance(value, int | float) and number_in(value, output)):
                return name, kwargs
        return None

    def _lookups(self) -> Iterator[tuple[str, dict[str, Any]]]:
        for action in self._actions:
            kwargs = action.get("kwargs") or {}
            if not self.tools[action["name"]].writes and not missing_values(kwargs, self.transcript):
                yield action["name"], kwargs
        found = _JSON_ID.findall(self.transcript)
        ids: dict[str, list[str]] = {"user_id": [], "order_id": [], "product_id": [], "reservation_id": []}
        for kind, value in found:
            ids[kind].append(value)
        ids["order_id"] += [o.upper() for o in _ORDER_ID.findall(self.transcript.upper())]
        for block in _RESERVATIONS.findall(self.transcript):
            ids["reservation_id"] += [r.strip(' "').upper() for r in block.split(",") if r.strip(' "')]
        if grounded("", self._facts.user_id, self.transcript):
            ids["user_id"].append(self._facts.user_id)
        tool_for = {"user_id": "get_user_details", "order_id": "get_order_details",
                    "product_id": "get_product_details", "reservation_id": "get_reservation_details"}  # fmt: skip
        for kind, values in ids.items():
            if tool_for[kind] in self.tools:
                for value in dict.fromkeys(values):
                    yield tool_for[kind], {kind: value}

    def _go_on(self) -> tuple[str, str]:
        self._told += 1
        return "action", GO_ON_MESSAGES[int(self.rng.integers(len(GO_ON_MESSAGES)))]

    def _call(self, name: str, kwargs: Mapping[str, Any]) -> tuple[str, str]:
        content = tool_call_content({"name": name, "kwargs": kwargs})
        if not self.tools[name].writes:
            self._done_reads.add(content)
        run_tool(self._shadow, name, dict(kwargs))  # keep the shadow database in step with the episode
        return "answer", content

    def _closing(self) -> str:
        text = CLOSINGS[int(self.rng.integers(len(CLOSINGS)))]
        if self.outputs:
            text += " Here is the information you asked for: " + "; ".join(self.outputs) + "."
        return text + " Is there anything else I can help you with?"

