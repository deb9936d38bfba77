"""Privileged scripted solver of the Tau gym (replays the gold actions), used to write SFT demonstrations."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import numpy as np

from userrl.envs.base import MultiTurnEnv, Task, tool_call_to_action
from userrl.envs.tau.tools import domain_tools

IDENTITY_QUESTIONS = {
    "retail": (
        "Could you please tell me your name and zip code so I can find your account?",
        "To look up your account, may I have your email address?",
        "Before we start, please share your first and last name and your zip code.",
    ),
    "airline": (
        "Could you please give me your user id so I can pull up your profile?",
        "To get started, may I have your user id?",
    ),
}
CLOSINGS = (
    "Everything is taken care of.",
    "All done on my side.",
    "Your request has been completed.",
)
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


def describe_change(action: Mapping[str, Any]) -> str:
    """A short description of one write action for the confirmation message."""
    template = CHANGE_DESCRIPTIONS.get(action["name"], "make the requested change")
    try:
        return template.format(**(action.get("kwargs") or {}))
    except (KeyError, IndexError, ValueError):
        return "make the requested change"


def tool_call_content(action: Mapping[str, Any]) -> str:
    """The answer content of one gold action."""
    return json.dumps({"name": action["name"], "arguments": action.get("kwargs") or {}})


class TauSolver:
    """Plays one Tau episode from the gold actions: identify, look up, confirm, change, report, close.

    Optional steps (the tool list, the identity question, the confirmation, read-only look-ups) are kept
    only while the plan fits in max_steps; the state-changing actions and the closing message always are.
    """

    def __init__(self, task: Task, rng: np.random.Generator, max_steps: int = 16) -> None:
        data = task.data
        tools = domain_tools(data["domain"])
        actions = [a for a in data["actions"] if not tools[a["name"]].terminal]
        self._transfer = next((a for a in data["actions"] if tools[a["name"]].terminal), None)
        writes = [a for a in actions if tools[a["name"]].writes]
        reads = [a for a in actions if not tools[a["name"]].writes]

        room = max_steps - len(writes) - 1
        confirm = bool(writes) and room >= 1
        room -= int(confirm)
        identity = room >= 1
        room -= int(identity)
        kept_reads = reads[: max(room, 0)]
        room -= len(kept_reads)
        show_tools = room >= 1 and bool(rng.random() < 0.5)

        plan: list[tuple[str, str]] = []
        if show_tools:
            plan.append(("search", "tools"))
        if identity:
            questions = IDENTITY_QUESTIONS[data["domain"]]
            plan.append(("action", questions[int(rng.integers(len(questions)))]))
        kept = {id(a) for a in kept_reads} | {id(a) for a in writes}
        first_write = True
        for action in actions:
            if id(action) not in kept:
                continue
            if tools[action["name"]].writes and first_write:
                first_write = False
                if confirm:
                    changes = "; ".join(describe_change(a) for a in writes)
                    plan.append(
                        ("action", f"Here is what I will do: {changes}. Would you like me to proceed?")
                    )
            plan.append(("answer", tool_call_content(action)))
        self.closing = self._closing(data["outputs"], rng)
        plan.append(("action", self.closing))
        self._plan = plan
        self._step = 0

    @staticmethod
    def _closing(outputs: list[str], rng: np.random.Generator) -> str:
        text = CLOSINGS[int(rng.integers(len(CLOSINGS)))]
        if outputs:
            text += " Here is the information you asked for: " + "; ".join(outputs) + "."
        return text + " Is there anything else I can help you with?"

    def next_action(self, last_feedback: str | None) -> tuple[str, str]:
        """The next (choice, content); after the plan: the gold transfer if any, else the closing again."""
        if self._step < len(self._plan):
            action = self._plan[self._step]
        elif self._transfer is not None:
            action = ("answer", tool_call_content(self._transfer))
        else:
            action = ("action", self.closing)
        self._step += 1
        return action


def solve_episode(
    env: MultiTurnEnv, task: Task, rng: np.random.Generator
) -> list[tuple[str, str, str, float]]:
    """Reset env on task and play the solver to the end: one (choice, content, feedback, reward) per step."""
    solver = TauSolver(task, rng, env.max_steps)
    env.reset(options={"task": task})
    feedback: str | None = None
    steps: list[tuple[str, str, str, float]] = []
    while True:
        choice, content = solver.next_action(feedback)
        obs, reward, terminated, truncated, _ = env.step(tool_call_to_action(choice, content))
        feedback = obs["feedback"]
        steps.append((choice, content, feedback, float(reward)))
        if terminated or truncated:
            return steps
