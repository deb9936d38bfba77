"""Seeded generator of our own retail tasks over the builtin database (instruction, gold actions, outputs).

Each kind of task picks a suitable user and order, writes the customer's hidden instruction in the
second person (τ-bench style, one fact per sentence so the scripted customer can reveal them one by one),
the customer's opening message, the gold tool calls (look-ups first, then the change) and the facts the
agent must say. `generate.py` replays every task and drops none silently: a task whose gold actions fail
is a generator bug.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

from userrl.envs.tau.generate_db import make_address

PERSONAS = (
    "polite and patient",
    "direct and a little impatient",
    "friendly and chatty",
    "careful and detail-oriented",
    "busy and brief",
    "calm and logical",
)
CANCEL_REASONS = {
    "no longer needed": "you no longer need it",
    "ordered by mistake": "you ordered it by mistake",
}
OPENINGS = {
    "cancel": (
        "Hi, I'd like to cancel an order I placed recently.",
        "Hello, can you help me cancel an order?",
    ),
    "order_address": (
        "Hello, I need to change the shipping address on one of my orders.",
        "Hi, one of my orders is going to the wrong address.",
    ),
    "user_address": (
        "Hi, I moved recently and need to update my address.",
        "Hello, I'd like to change the address on my account.",
    ),
    "payment": (
        "Hi there, can I change how I'm paying for an order?",
        "Hello, I want to use a different payment method for an order.",
    ),
    "items": (
        "Hi, I want to change an item in an order that hasn't shipped yet.",
        "Hello, I'd like to swap something in my pending order.",
    ),
    "return": (
        "Hello, I'd like to return something I received.",
        "Hi, I need to send back an item from a delivered order.",
    ),
    "exchange": (
        "Hi, I received my order and want to exchange an item.",
        "Hello, something I got isn't quite right and I'd like a different one.",
    ),
    "info": ("Hi, I have a question about one of my orders.", "Hello, could you look something up for me?"),
    "combo": (
        "Hi, I need help with a couple of my orders.",
        "Hello, I have two things to sort out with my orders.",
    ),
}
#: Tasks per kind of the full set, difficulty 1 (80 in all).
KIND_COUNTS = {
    "cancel": 12,
    "order_address": 8,
    "user_address": 6,
    "payment": 8,
    "items": 10,
    "return": 12,
    "exchange": 10,
    "info": 8,
    "combo": 6,
}
TEST_FRACTION = 0.2
#: The easy tier (difficulty 0) for small models: the customer identifies by e-mail (one look-up), then one
#: change (a cancellation after reading the order, or the account's address), and only the tier's tools are
#: offered, which cuts a native-tools prompt to a third (SmolLM2: about 1,000 tokens against 3,000 with all 16).
EASY_KIND_COUNTS = {"cancel": 48, "user_address": 32}
EASY_TOOLS = ("find_user_id_by_email", "get_order_details", "cancel_pending_order", "modify_user_address")
EASY_TEST_FRACTION = 0.25


def amount_text(value: float) -> str:
    """An amount as the agent would say it, minimal: 54, 1463.7, 12.05 (a prefix of '1463.70')."""
    return f"{value:.2f}".rstrip("0").rstrip(".")


def options_text(options: dict[str, str]) -> str:
    """'size M, color red' from an options dict."""
    return ", ".join(f"{k} {v}" for k, v in options.items())


def address_kwargs(a: dict[str, str]) -> dict[str, str]:
    """The address arguments of the address-changing tools, in their parameter order."""
    return {k: a[k] for k in ("address1", "address2", "city", "state", "country", "zip")}


def address_text(a: dict[str, str]) -> str:
    """An address on one line, without sentence breaks."""
    line = a["address1"] + (f", {a['address2']}" if a["address2"] else "")
    return f"{line}, {a['city']}, {a['state']} {a['zip']}, {a['country']}"


def method_text(method: dict[str, Any]) -> str:
    """How a customer names a payment method."""
    if method["source"] == "credit_card":
        return f"{method['brand']} credit card ending in {method['last_four']}"
    return "gift card" if method["source"] == "gift_card" else "PayPal account"


class TaskFactory:
    """Builds tasks of each kind from the database; one random generator, used in a fixed order."""

    #: How often a cancellation also asks for the refund (a fact the agent must read and say).
    refund_question: float = 0.4

    def __init__(self, db: dict[str, dict[str, Any]], rnd: random.Random):
        self.db = db
        self.rnd = rnd
        self.used: set[tuple[str, str]] = set()

    # ------------------------------------------------------------------ shared pieces

    def _identity(self, user_id: str) -> tuple[str, dict[str, Any]]:
        """The identity sentence and the matching look-up action (email or name + zip)."""
        user = self.db["users"][user_id]
        name = user["name"]
        if self.rnd.random() < 0.5:
            return f"Your email is {user['email']}.", {
                "name": "find_user_id_by_email",
                "kwargs": {"email": user["email"]},
            }
        sentence = f"Your name is {name['first_name']} {name['last_name']} and your zip code is {user['address']['zip']}."
        action = {
            "name": "find_user_id_by_name_zip",
            "kwargs": {
                "first_name": name["first_name"],
                "last_name": name["last_name"],
                "zip": user["address"]["zip"],
            },
        }
        return sentence, action

    def _persona(self) -> str:
        return f"You are {self.rnd.choice(PERSONAS)}."

    def _orders(
        self, status: str, kind: str, check: Callable[[dict[str, Any]], bool] = lambda o: True
    ) -> list[str]:
        """Ids of orders with a status not yet used by this kind of task, in file order."""
        return [
            oid
            for oid, order in self.db["orders"].items()
            if order["status"] == status and (kind, oid) not in self.used and check(order)
        ]

    def _pick(self, candidates: list[str], kind: str) -> str | None:
        if not candidates:
            return None
        oid = self.rnd.choice(candidates)
        self.used.add((kind, oid))
        return oid

    def _task(
        self, kind: str, user_id: str, sentences: list[str], actions: list[dict[str, Any]], outputs: list[str]
    ) -> dict[str, Any]:
        identity, lookup = self._identity(user_id)
        return {
            "kind": kind,
            "user_id": user_id,
            "obs": self.rnd.choice(OPENINGS[kind]),
            "instruction": " ".join([identity, self._persona(), *sentences]),
            "actions": [lookup, *actions],
            "outputs": outputs,
        }

    def _swaps(self, order: dict[str, Any]) -> list[tuple[dict[str, Any], list[dict[str, Any]]]]:
        """Items with a name unique in the order, each with the other available variants of its product."""
        names = [item["name"] for item in order["items"]]
        found = []
        for item in order["items"]:
            variants = self.db["products"][item["product_id"]]["variants"]
            others = [v for vid, v in variants.items() if vid != item["item_id"] and v["available"]]
            if names.count(item["name"]) == 1 and others:
                found.append((item, others))
        return found

    def _user_methods(self, order: dict[str, Any]) -> dict[str, Any]:
        return self.db["users"][order["user_id"]]["payment_methods"]

    # ------------------------------------------------------------------ kinds

    def cancel(self) -> dict[str, Any] | None:
        oid = self._pick(self._orders("pending", "cancel"), "cancel")
        if oid is None:
            return None
        order = self.db["orders"][oid]
        reason = self.rnd.choice(list(CANCEL_REASONS))
        sentences = [f"You want to cancel order {oid} because {CANCEL_REASONS[reason]}."]
        outputs = []
        if self.refund_question and self.rnd.random() < self.refund_question:
            sentences.append("You also want to know how much money will be refunded.")
            outputs = [amount_text(order["payment_history"][0]["amount"])]
        actions = [
            {"name": "get_order_details", "kwargs": {"order_id": oid}},
            {"name": "cancel_pending_order", "kwargs": {"order_id": oid, "reason": reason}},
        ]
        return self._task("cancel", order["user_id"], sentences, actions, outputs)

    def order_address(self) -> dict[str, Any] | None:
        oid = self._pick(self._orders("pending", "order_address"), "order_address")
        if oid is None:
            return None
        order = self.db["orders"][oid]
        new = make_address(self.rnd)
        sentences = [
            f"You want the shipping address of order {oid} changed.",
            f"The new address is {address_text(new)}.",
        ]
        kwargs = {
            "order_id": oid,
            **address_kwargs(new),
        }
        actions = [
            {"name": "get_order_details", "kwargs": {"order_id": oid}},
            {"name": "modify_pending_order_address", "kwargs": kwargs},
        ]
        return self._task("order_address", order["user_id"], sentences, actions, [])

    def user_address(self) -> dict[str, Any] | None:
        users = [uid for uid in self.db["users"] if ("user_address", uid) not in self.used]
        user_id = self.rnd.choice(users)
        self.used.add(("user_address", user_id))
        new = make_address(self.rnd)
        sentences = [
            "You want to update the default address on your account.",
            f"Your new address is {address_text(new)}.",
            "You do not want to change the address of any existing order.",
        ]
        kwargs = {
            "user_id": user_id,
            **address_kwargs(new),
        }
        actions = [
            {"name": "get_user_details", "kwargs": {"user_id": user_id}},
            {"name": "modify_user_address", "kwargs": kwargs},
        ]
        return self._task("user_address", user_id, sentences, actions, [])

    def payment(self) -> dict[str, Any] | None:
        def switchable(order: dict[str, Any]) -> bool:
            return any(self._payment_target(order, mid) for mid in self._user_methods(order))

        oid = self._pick(self._orders("pending", "payment", switchable), "payment")
        if oid is None:
            return None
        order = self.db["orders"][oid]
        methods = self._user_methods(order)
        new_id = self.rnd.choice([mid for mid in methods if self._payment_target(order, mid)])
        old = methods[order["payment_history"][0]["payment_method_id"]]
        sentences = [
            f"You paid for order {oid} with your {method_text(old)}.",
            f"You want to pay for it with your {method_text(methods[new_id])} instead.",
        ]
        actions = [
            {"name": "get_order_details", "kwargs": {"order_id": oid}},
            {"name": "get_user_details", "kwargs": {"user_id": order["user_id"]}},
            {
                "name": "modify_pending_order_payment",
                "kwargs": {"order_id": oid, "payment_method_id": new_id},
            },
        ]
        return self._task("payment", order["user_id"], sentences, actions, [])

    def _payment_target(self, order: dict[str, Any], method_id: str) -> bool:
        method = self._user_methods(order)[method_id]
        amount = order["payment_history"][0]["amount"]
        return method_id != order["payment_history"][0]["payment_method_id"] and (
            method["source"] != "gift_card" or method["balance"] >= amount
        )

    def _change_items(self, kind: str, status: str) -> dict[str, Any] | None:
        oid = self._pick(self._orders(status, kind, lambda o: bool(self._swaps(o))), kind)
        if oid is None:
            return None
        order = self.db["orders"][oid]
        old, others = self.rnd.choice(self._swaps(order))
        new = self.rnd.choice(others)
        diff = round(new["price"] - old["price"], 2)
        methods = self._user_methods(order)
        usable = [mid for mid, m in methods.items() if m["source"] != "gift_card" or m["balance"] >= diff]
        if kind == "exchange":  # keep it simple for the customer: the original payment method when usable
            original = order["payment_history"][0]["payment_method_id"]
            usable = [original] if original in usable else usable
        method_id = self.rnd.choice(usable)
        verb = "change" if kind == "items" else "exchange"
        sentences = [
            f"In order {oid} you want to {verb} the {old['name']} ({options_text(old['options'])}).",
            f"You want the one with {options_text(new['options'])} instead.",
            f"Any price difference should go through your {method_text(methods[method_id])}.",
        ]
        outputs = []
        if self.rnd.random() < 0.3:
            sentences.append("You want to know the price difference.")
            outputs = [amount_text(abs(diff))]
        tool = "modify_pending_order_items" if kind == "items" else "exchange_delivered_order_items"
        actions = [
            {"name": "get_order_details", "kwargs": {"order_id": oid}},
            {"name": "get_product_details", "kwargs": {"product_id": old["product_id"]}},
            {
                "name": tool,
                "kwargs": {
                    "order_id": oid,
                    "item_ids": [old["item_id"]],
                    "new_item_ids": [new["item_id"]],
                    "payment_method_id": method_id,
                },
            },
        ]
        return self._task(kind, order["user_id"], sentences, actions, outputs)

    def items(self) -> dict[str, Any] | None:
        return self._change_items("items", "pending")

    def exchange(self) -> dict[str, Any] | None:
        return self._change_items("exchange", "delivered")

    def return_(self) -> dict[str, Any] | None:
        def unique_names(order: dict[str, Any]) -> bool:
            names = [item["name"] for item in order["items"]]
            return len(set(names)) == len(names)

        oid = self._pick(self._orders("delivered", "return", unique_names), "return")
        if oid is None:
            return None
        order = self.db["orders"][oid]
        chosen = self.rnd.sample(order["items"], self.rnd.randint(1, min(2, len(order["items"]))))
        methods = self._user_methods(order)
        original = order["payment_history"][0]["payment_method_id"]
        targets = [original] + [mid for mid in methods if "gift_card" in mid and mid != original]
        method_id = self.rnd.choice(targets)
        names = " and the ".join(item["name"] for item in chosen)
        sentences = [
            f"You want to return the {names} from order {oid}.",
            f"You want the refund to go to your {method_text(methods[method_id])}.",
        ]
        outputs = []
        if self.rnd.random() < 0.4:
            sentences.append("You want to know the total amount that will be refunded.")
            outputs = [amount_text(sum(item["price"] for item in chosen))]
        actions = [
            {"name": "get_order_details", "kwargs": {"order_id": oid}},
            {
                "name": "return_delivered_order_items",
                "kwargs": {
                    "order_id": oid,
                    "item_ids": [i["item_id"] for i in chosen],
                    "payment_method_id": method_id,
                },
            },
        ]
        return self._task("return", order["user_id"], sentences, actions, outputs)

    def info(self) -> dict[str, Any] | None:
        status = self.rnd.choice(["processed", "delivered"])
        oid = self._pick(self._orders(status, "info"), "info")
        if oid is None:
            return None
        order = self.db["orders"][oid]
        if self.rnd.random() < 0.5:
            sentences = [f"You want to know the tracking number of order {oid}."]
            outputs = [order["fulfillments"][0]["tracking_id"][0]]
        else:
            sentences = [f"You want to know the total amount you paid for order {oid}."]
            outputs = [amount_text(order["payment_history"][0]["amount"])]
        sentences.append("You do not want to change anything.")
        actions = [{"name": "get_order_details", "kwargs": {"order_id": oid}}]
        return self._task("info", order["user_id"], sentences, actions, outputs)

    def combo(self) -> dict[str, Any] | None:
        """Cancel one pending order and change the address of another pending order of the same user."""
        for user_id, user in self.rnd.sample(list(self.db["users"].items()), len(self.db["users"])):
            pending = [o for o in user["orders"] if self.db["orders"][o]["status"] == "pending"]
            if len(pending) < 2 or ("combo", user_id) in self.used:
                continue
            self.used.add(("combo", user_id))
            cancel_id, move_id = self.rnd.sample(pending, 2)
            reason = self.rnd.choice(list(CANCEL_REASONS))
            new = make_address(self.rnd)
            sentences = [
                f"You want to cancel order {cancel_id} because {CANCEL_REASONS[reason]}.",
                f"You also want order {move_id} shipped to {address_text(new)}.",
            ]
            kwargs = {
                "order_id": move_id,
                **address_kwargs(new),
            }
            actions = [
                {"name": "get_user_details", "kwargs": {"user_id": user_id}},
                {"name": "cancel_pending_order", "kwargs": {"order_id": cancel_id, "reason": reason}},
                {"name": "modify_pending_order_address", "kwargs": kwargs},
            ]
            return self._task("combo", user_id, sentences, actions, [])
        return None


class EasyTaskFactory(TaskFactory):
    """The easy tier's tasks: identity by e-mail, at most two look-ups, one change, no facts to report."""

    refund_question = 0.0

    def _identity(self, user_id: str) -> tuple[str, dict[str, Any]]:
        email = self.db["users"][user_id]["email"]
        return f"Your email is {email}.", {"name": "find_user_id_by_email", "kwargs": {"email": email}}

    def user_address(self) -> dict[str, Any] | None:
        task = super().user_address()
        if task is not None:  # the user id comes from the e-mail look-up: no second look-up is needed
            task["actions"] = [a for a in task["actions"] if a["name"] != "get_user_details"]
        return task


def _tier_records(factory: TaskFactory, counts: dict[str, int], test_fraction: float, prefix: str,
                  extra: dict[str, Any]) -> list[dict[str, Any]]:
    """One tier's tasks, kind by kind, ids <prefix>-<kind>-<nn>, with a deterministic per-kind split."""
    records = []
    for kind, count in counts.items():
        make = getattr(factory, "return_" if kind == "return" else kind)
        made = [make() for _ in range(count)]
        if any(task is None for task in made):
            raise RuntimeError(f"the builtin database has too few candidates for {count} {kind!r} tasks")
        test = set(factory.rnd.sample(range(count), max(1, round(count * test_fraction))))
        for index, task in enumerate(made):
            split = "test" if index in test else "train"
            records.append({"id": f"{prefix}-{kind.replace('_', '-')}-{index:02d}", "split": split, **extra, **task})
    return records


def generate_task_records(db: dict[str, dict[str, Any]], seed: int) -> list[dict[str, Any]]:
    """All builtin tasks: the full set (difficulty 1, ids tau-retail-<kind>-<nn>), then the easy tier
    (difficulty 0, ids tau-retail-easy-<kind>-<nn>, its tools named), each from a random generator of its own."""
    factory = TaskFactory(db, random.Random(f"{seed}-tasks"))
    full = _tier_records(factory, KIND_COUNTS, TEST_FRACTION, "tau-retail", {"difficulty": 1})
    easy_factory = EasyTaskFactory(db, random.Random(f"{seed}-easy"))
    easy_factory.used = set(factory.used)  # no order or account of the full set again: no request twice
    easy = _tier_records(easy_factory, EASY_KIND_COUNTS, EASY_TEST_FRACTION, "tau-retail-easy",
                         {"difficulty": 0, "tools": list(EASY_TOOLS)})
    return full + easy
