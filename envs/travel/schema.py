"""Travel scenario schema (docs/spec/GYMS.md §7): aspects, option ids, preferences, and scenario validation.

One validator serves both task sources: our generated files and the original `travelgym_data_<N>.json`
files (when present) share the per-scenario schema, so the env runs either unchanged.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

#: Canonical aspect order (also the order of the parts of a scenario id).
ASPECTS: tuple[str, ...] = ("flight", "hotel", "apartment", "rental_car", "restaurant")
ASPECT_LETTERS: dict[str, str] = {
    "flight": "F",
    "hotel": "H",
    "apartment": "A",
    "rental_car": "C",
    "restaurant": "R",
}
LETTER_ASPECTS: dict[str, str] = {letter: aspect for aspect, letter in ASPECT_LETTERS.items()}

#: What the agent sees of each aspect's options (the field table of section 7), shown with a search result.
FIELD_DESCRIPTIONS: dict[str, str] = {
    "flight": (
        "path (airports, including layovers), time (alternating flight and layover hours), company per leg, "
        "flight_number per leg, cost (USD, economy), amenities (free), service (paid extras)"
    ),
    "hotel": (
        "name, room (types with capacity), cost (per room type, whole stay, USD), rating (0-10), amenities, "
        "service"
    ),
    "apartment": (
        "name, room (bed/bath code such as 2B1B), capacity, cost (whole stay), rating, amenities, service"
    ),
    "rental_car": (
        "brand, model, categories, seats, cost (whole period), insurance (options with costs), service"
    ),
    "restaurant": ("name, cuisine, expectation (price level), rating (0-10), reviews (count per star), tags"),
}

#: Option fields removed before display (they give the answer away).
HIDDEN_OPTION_FIELDS = frozenset({"type", "reason"})
OPTION_ID_RE = re.compile(r"^[ACFHR]\d+$")
OPTION_ID_ANYWHERE_RE = re.compile(r"[ACFHR]\d+")
#: One part of a scenario id: `aspect:prefcount-index` (builtin indices start with "b").
ID_PART_RE = re.compile(r"^([a-z_]+):(\d+)-(\w+)$")
OPTION_CLASSES: tuple[str, ...] = ("correct", "wrong", "noise")


@dataclass(frozen=True)
class Preference:
    """One hidden preference, numbered P1..Pn across aspects (dimensions order, then file order)."""

    pid: str
    dimension: str
    aspect: str
    subcategory: str
    text: str
    implicit: str

    def as_dict(self) -> dict[str, str]:
        """A JSON-friendly copy for info fields."""
        return {
            "id": self.pid,
            "dimension": self.dimension,
            "aspect": self.aspect,
            "subcategory": self.subcategory,
            "preference": self.text,
            "implicit_elicitation": self.implicit,
        }


@dataclass(frozen=True)
class AspectData:
    """One aspect of a scenario: its options by class, search arguments, correct and best ids."""

    name: str
    options: dict[str, tuple[dict[str, Any], ...]]
    arguments: dict[str, Any]
    correct_ids: tuple[str, ...]
    best_id: str


@dataclass(frozen=True)
class Scenario:
    """A validated scenario: texts, aspects in `dimensions` order, and the numbered preferences."""

    scenario_id: str
    scenario: str
    initial_description: str
    dimensions: tuple[str, ...]
    aspects: dict[str, AspectData]
    preferences: tuple[Preference, ...]

    @property
    def best_ids(self) -> list[str]:
        """The best option id of every aspect, in dimensions order (the parquet ground truth)."""
        return [self.aspects[d].best_id for d in self.dimensions]


def display_option(option: Mapping[str, Any]) -> dict[str, Any]:
    """The option as the agent sees it: every field except type and reason."""
    return {k: v for k, v in option.items() if k not in HIDDEN_OPTION_FIELDS}


def parse_scenario_id(scenario_id: str) -> list[tuple[str, int]]:
    """[(aspect, preference count), ...] encoded in an id such as `flight:2-37|hotel:2-9`."""
    parts = []
    for part in scenario_id.split("|"):
        match = ID_PART_RE.match(part)
        if match is None or match.group(1) not in ASPECT_LETTERS:
            raise ValueError(f"travel scenario id {scenario_id!r}: part {part!r} is not 'aspect:count-index'")
        parts.append((match.group(1), int(match.group(2))))
    return parts


def subset_of_id(scenario_id: str) -> str:
    """The sub-set name of a scenario id: its preference counts as sorted digits (e.g. '233')."""
    return "".join(sorted(str(count) for _, count in parse_scenario_id(scenario_id)))


def best_ids_from_ground_truth(text: str) -> list[str]:
    """The option ids of a parquet `ground_truth` string such as "['H11', 'F3']" (read by regex, never evaluated)."""
    return OPTION_ID_ANYWHERE_RE.findall(text or "")


def _text(value: Any, what: str, where: str) -> str:
    if not isinstance(value, str):
        raise ValueError(f"{where}: {what} must be a string, got {type(value).__name__}")
    return value


def _parse_aspect(name: str, raw: Any, where: str) -> tuple[AspectData, list[list[Any]]]:
    """Validate one aspect object; also return its raw preference entries."""
    where = f"{where}, aspect {name!r}"
    if not isinstance(raw, Mapping):
        raise ValueError(
            f"{where}: must be an object with preferences, options, arguments, correct_ids, best_id"
        )
    prefs = raw.get("preferences")
    if not isinstance(prefs, list):
        raise ValueError(f"{where}: 'preferences' must be a list")
    options_raw = raw.get("options")
    if not isinstance(options_raw, Mapping):
        raise ValueError(f"{where}: 'options' must be an object with correct, wrong and noise lists")
    letter = ASPECT_LETTERS[name]
    options: dict[str, tuple[dict[str, Any], ...]] = {}
    seen: set[str] = set()
    for cls in OPTION_CLASSES:
        items = options_raw.get(cls, [])
        if not isinstance(items, list):
            raise ValueError(f"{where}: options.{cls} must be a list")
        for option in items:
            if not isinstance(option, Mapping):
                raise ValueError(f"{where}: every option in options.{cls} must be an object")
            oid = option.get("id")
            if not isinstance(oid, str) or not OPTION_ID_RE.match(oid) or oid[0] != letter:
                raise ValueError(f"{where}: option id {oid!r} in options.{cls} is not {letter}<digits>")
            if oid in seen:
                raise ValueError(f"{where}: duplicate option id {oid!r}")
            seen.add(oid)
        options[cls] = tuple(dict(o) for o in items)
    arguments = raw.get("arguments")
    if not isinstance(arguments, Mapping):
        raise ValueError(f"{where}: 'arguments' must be an object")
    correct_ids = raw.get("correct_ids")
    if not isinstance(correct_ids, list) or not all(isinstance(i, str) for i in correct_ids):
        raise ValueError(f"{where}: 'correct_ids' must be a list of option ids")
    best_id = raw.get("best_id")
    if not isinstance(best_id, str) or best_id not in correct_ids:
        raise ValueError(f"{where}: 'best_id' {best_id!r} must be one of correct_ids {correct_ids}")
    data = AspectData(name, options, dict(arguments), tuple(correct_ids), best_id)
    return data, prefs


def parse_scenario(scenario_id: str, raw: Any, where: str = "travel scenario") -> Scenario:
    """Validate one scenario object of the section-7 schema; ValueError names `where` and the id."""
    where = f"{where} {scenario_id!r}"
    if not isinstance(raw, Mapping):
        raise ValueError(f"{where}: must be an object")
    dimensions = raw.get("dimensions")
    if (
        not isinstance(dimensions, list)
        or not dimensions
        or any(d not in ASPECT_LETTERS for d in dimensions)
        or len(set(dimensions)) != len(dimensions)
    ):
        raise ValueError(f"{where}: 'dimensions' must be a non-empty list of distinct aspects from {ASPECTS}")
    aspects: dict[str, AspectData] = {}
    preferences: list[Preference] = []
    for name in dimensions:
        if name not in raw:
            raise ValueError(f"{where}: dimension {name!r} has no '{name}' object")
        data, raw_prefs = _parse_aspect(name, raw[name], where)
        aspects[name] = data
        for entry in raw_prefs:
            # The schema ignores entries with fewer than 4 elements (the original did too).
            if not isinstance(entry, list) or len(entry) < 4:
                continue
            aspect, subcategory, text, implicit = (str(x) for x in entry[:4])
            preferences.append(
                Preference(f"P{len(preferences) + 1}", name, aspect, subcategory, text, implicit)
            )
    return Scenario(
        scenario_id=scenario_id,
        scenario=_text(raw.get("scenario", ""), "'scenario'", where),
        initial_description=_text(raw.get("initial_description"), "'initial_description'", where),
        dimensions=tuple(dimensions),
        aspects=aspects,
        preferences=tuple(preferences),
    )
