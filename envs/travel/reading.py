"""Reading the Travel transcript as an agent would: what a traveller's reply asks of the options, which
options a search showed, and which of them is the cheapest that does what the traveller said.

Used by the grounded scripted solver (solver.py). A reply is read by its wording alone (the phrasings of
the builtin preference catalogue), never looked up in the hidden scenario, so an option recommended from
these readings is justified by the transcript. Replies in other words (a model-played traveller, the
original scenarios) are not understood: `read_reply` returns None for them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

Option = Mapping[str, Any]

#: The head line of a successful search (env.SEARCH_CORRECT), naming the aspect whose options follow.
_SEARCH_HEAD = re.compile(r"^Your search request is correct\. Options for (\w+) \(")


@dataclass(frozen=True)
class Reading:
    """What one reply asks of an aspect's options: a test, and (hotel rooms) which rooms it allows."""

    aspect: str
    what: str
    check: Callable[[Option], bool]
    room_ok: Callable[[str, int], bool] | None = None


def _has(field: str, item: str) -> Callable[[Option], bool]:
    return lambda o: item in o.get(field, ())


def _layovers(option: Option) -> list[float]:
    return list(option["time"][1::2])


def _bed_bath(option: Option) -> tuple[int, int]:
    beds, baths = str(option["room"]).rstrip("B").split("B")
    return int(beds), int(baths)


Rule = tuple[str, re.Pattern[str], Callable[[re.Match[str]], Reading]]


def _rule(aspect: str, pattern: str, make: Callable[[re.Match[str]], tuple[str, Callable[[Option], bool]]]) -> Rule:
    def build(match: re.Match[str]) -> Reading:
        what, check = make(match)
        return Reading(aspect, what, check)

    return aspect, re.compile(pattern, re.IGNORECASE), build


def _capacity_rule() -> Rule:
    def build(match: re.Match[str]) -> Reading:
        need = int(match.group(1))
        return Reading(
            "hotel",
            f"a room for at least {need}",
            lambda o: any(int(c) >= need for c in o["room"].values()),
            room_ok=lambda _name, cap: cap >= need,
        )

    return "hotel", re.compile(r"one room where (\d+) people could sleep", re.IGNORECASE), build


#: (aspect, pattern over the reply, reading) for every phrasing of the preference catalogue.
RULES: tuple[Rule, ...] = (
    # flight
    _rule("flight", r"rather board once and get off", lambda m: ("a direct flight", lambda o: len(o["path"]) == 2)),
    _rule("flight", r"can't face a journey with two or more plane changes",
          lambda m: ("at most one stop", lambda o: len(o["path"]) <= 3)),
    _rule("flight", r"can't spend more than (\d+) hours getting there",
          lambda m: (f"at most {m.group(1)} hours in all", lambda o: sum(o["time"]) <= int(m.group(1)))),
    _rule("flight", r"last time I flew with (.+?) they lost my luggage",
          lambda m: (f"no {m.group(1)} leg", lambda o: m.group(1) not in o["company"])),
    _rule("flight", r"refuse to pay extra just to get online", lambda m: ("free wifi", _has("amenities", "wifi"))),
    _rule("flight", r"don't want to pay a baggage fee", lambda m: ("a free checked bag", _has("amenities", "checked bag"))),
    _rule("flight", r"count on being fed on the plane", lambda m: ("a free meal", _has("amenities", "meal"))),
    _rule("flight", r"unless I can buy some more space", lambda m: ("extra legroom", _has("service", "extra legroom"))),
    _rule("flight", r"want to get going again quickly",
          lambda m: ("layovers of at most 2 hours", lambda o: all(h <= 2.0 for h in _layovers(o)))),
    # hotel
    _rule("hotel", r"guests rate ([\d.]+) out of 10 or better",
          lambda m: (f"a rating of at least {m.group(1)}", lambda o: o["rating"] >= float(m.group(1)))),
    _capacity_rule(),
    _rule("hotel", r"morning laps", lambda m: ("a pool", _has("amenities", "pool"))),
    _rule("hotel", r"can't function before I've eaten", lambda m: ("breakfast", _has("amenities", "breakfast"))),
    _rule("hotel", r"a ride straight from the airport", lambda m: ("an airport shuttle", _has("service", "airport shuttle"))),
    _rule("hotel", r"training for a marathon", lambda m: ("a fitness center", _has("amenities", "fitness center"))),
    _rule("hotel", r"searching the streets for a spot", lambda m: ("parking", _has("amenities", "parking"))),
    # apartment
    _rule("apartment", r"I want (\d+) separate rooms to sleep in",
          lambda m: (f"at least {m.group(1)} bedrooms", lambda o: _bed_bath(o)[0] >= int(m.group(1)))),
    _rule("apartment", r"waits for a single shower", lambda m: ("two bathrooms", lambda o: _bed_bath(o)[1] >= 2)),
    _rule("apartment", r"able to host (\d+) of us",
          lambda m: (f"room for {m.group(1)} guests", lambda o: o["capacity"] >= int(m.group(1)))),
    _rule("apartment", r"do my laundry there", lambda m: ("a washing machine", _has("amenities", "washing machine"))),
    _rule("apartment", r"cook my own food", lambda m: ("a kitchen", _has("amenities", "kitchen"))),
    _rule("apartment", r"guests rate ([\d.]+) out of 10 or better",
          lambda m: (f"a rating of at least {m.group(1)}", lambda o: o["rating"] >= float(m.group(1)))),
    _rule("apartment", r"morning coffee outside", lambda m: ("a balcony", _has("amenities", "balcony"))),
    _rule("apartment", r"I arrive at dawn", lambda m: ("early check-in", _has("service", "early check-in"))),
    _rule("apartment", r"bedroom gets warm at night",
          lambda m: ("air conditioning", _has("amenities", "air conditioning"))),
    # rental car
    _rule("rental_car", r"there will be (\d+) of us in the car",
          lambda m: (f"at least {m.group(1)} seats", lambda o: o["seats"] >= int(m.group(1)))),
    _rule("rental_car", r"rough mountain roads", lambda m: ("an SUV", _has("categories", "SUV"))),
    _rule("rental_car", r"would rather not burn any fuel", lambda m: ("an electric car", _has("categories", "electric"))),
    _rule("rental_car", r"something that sips petrol", lambda m: ("a hybrid", _has("categories", "hybrid"))),
    _rule("rental_car", r"with the roof down", lambda m: ("a convertible", _has("categories", "convertible"))),
    _rule("rental_car", r"never learned to drive with a clutch pedal",
          lambda m: ("an automatic", _has("categories", "automatic"))),
    _rule("rental_car", r"My last (.+?) broke down",
          lambda m: (f"no {m.group(1)}", lambda o: o["brand"] != m.group(1))),
    _rule("rental_car", r"protected against everything",
          lambda m: ("full coverage insurance", _has("insurance", "full coverage"))),
    _rule("rental_car", r"three-year-old is coming along", lambda m: ("a child seat", _has("service", "child seat"))),
    _rule("rental_car", r"without a built-in map", lambda m: ("GPS navigation", _has("service", "GPS navigation"))),
    _rule("rental_car", r"take turns at the wheel",
          lambda m: ("an additional driver", _has("service", "additional driver"))),
    # restaurant
    _rule("restaurant", r"craving (.+?), (.+?) or (.+?) food",
          lambda m: (f"{m.group(1)}, {m.group(2)} or {m.group(3)} food",
                     lambda o: o["cuisine"] in (m.group(1), m.group(2), m.group(3)))),
    _rule("restaurant", r"a place rated below ([\d.]+) out of 10",
          lambda m: (f"a rating of at least {m.group(1)}", lambda o: o["rating"] >= float(m.group(1)))),
    _rule("restaurant", r"doesn't eat meat", lambda m: ("vegetarian dishes", _has("tags", "vegetarian-friendly"))),
    _rule("restaurant", r"eating under the open sky", lambda m: ("outdoor seating", _has("tags", "outdoor seating"))),
    _rule("restaurant", r"hear each other without shouting", lambda m: ("a quiet room", _has("tags", "quiet"))),
    _rule("restaurant", r"I want (\d+) or more",
          lambda m: (f"at least {m.group(1)} reviews", lambda o: sum(o["reviews"].values()) >= int(m.group(1)))),
    _rule("restaurant", r"our spot guaranteed in advance",
          lambda m: ("reservations", _has("tags", "takes reservations"))),
    _rule("restaurant", r"uses a wheelchair", lambda m: ("wheelchair access", _has("tags", "wheelchair accessible"))),
)  # fmt: skip


def read_reply(aspect: str, reply: str) -> Reading | None:
    """What a traveller's reply about `aspect` asks of its options, or None when it is not understood."""
    for rule_aspect, pattern, build in RULES:
        if rule_aspect == aspect and (match := pattern.search(reply)) is not None:
            return build(match)
    return None


def read_options(feedback: str) -> tuple[str, list[dict[str, Any]]] | None:
    """(aspect, displayed options) of a successful search feedback, or None for any other feedback."""
    lines = feedback.split("\n")
    head = _SEARCH_HEAD.match(lines[0]) if lines else None
    if head is None:
        return None
    return head.group(1), [json.loads(line) for line in lines[1:] if line.strip()]


def effective_cost(aspect: str, option: Option, readings: Iterable[Reading]) -> float:
    """The price the cheapest-option rule compares: a hotel's cheapest room the readings allow."""
    if aspect == "hotel":
        allowed = [
            cost
            for name, cost in option["cost"].items()
            if all(r.room_ok is None or r.room_ok(name, int(option["room"][name])) for r in readings)
        ]
        return float(min(allowed)) if allowed else float("inf")
    if aspect == "restaurant":
        return float(option["expectation"])
    return float(option["cost"])


def cheapest(aspect: str, options: Sequence[Option], readings: Sequence[Reading]) -> str | None:
    """The id of the cheapest option that meets every reading (ties: first shown), or None if none does."""
    fitting = [o for o in options if all(r.check(o) for r in readings)]
    if not fitting:
        return None
    return str(min(fitting, key=lambda o: effective_cost(aspect, o, readings))["id"])
