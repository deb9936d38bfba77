"""Seeded generator of the builtin Travel scenarios; `python -m userrl.envs.travel.generate` rewrites them.

It writes one file per sub-set, `travel_<N>.json`, in exactly the schema of the original
`travelgym_data_<N>.json` files (docs/spec/GYMS.md §7), plus `splits.json`. A scenario is accepted only when
the scripted search judge accepts the solver's search of every aspect, the scripted type judge maps each of
the solver's preference questions to that preference alone, and every aspect has a unique cheapest correct
option that some wrong options undercut.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from itertools import combinations
from pathlib import Path
from typing import Any

from userrl.envs.generate_cli import sample_test_ids
from userrl.envs.travel import catalog
from userrl.envs.travel.catalog import Option, PreferenceSpec, Trip
from userrl.envs.travel.roles import scripted_search_judge, scripted_type_judge
from userrl.envs.travel.schema import ASPECT_LETTERS, ASPECTS, parse_scenario
from userrl.envs.travel.solver import QUESTION_TEMPLATES, preference_question, search_request
from userrl.envs.travel.tasks import BUILTIN_SCENARIO_FILE, BUILTIN_SPLITS_PATH, DATA_DIR, SUBSETS

GENERATOR_SEED = 20250612
COUNTS: dict[str, int] = {
    "22": 40,
    "33": 35,
    "44": 30,
    "233": 30,
    "333": 30,
    "334": 25,
    "444": 25,
    "2222": 25,
}
TEST_FRACTION = 0.2
#: Options per aspect before the env's truncation (10 wrong and 5 noise are shown).
CORRECT_RANGE = (2, 4)
WRONG_RANGE = (12, 14)
NOISE_RANGE = (6, 8)
#: Wrong options cheaper than the best one, so that "cheapest regardless of preferences" fails.
MIN_CHEAPER_WRONG = 3
_OPTION_SAMPLES = 6000
_ASPECT_TRIES = 40
_SCENARIO_TRIES = 200

PAIRS = [c for c in combinations(ASPECTS, 2) if not {"hotel", "apartment"} <= set(c)]
TRIPLES = [c for c in combinations(ASPECTS, 3) if not {"hotel", "apartment"} <= set(c)]

PERSONAS = (
    "a nurse travelling with her husband",
    "a software engineer on a work trip",
    "a retired teacher visiting old friends",
    "a photographer chasing city views",
    "a young couple on their first holiday together",
    "a father travelling with his teenage son",
    "a student meeting a group of classmates",
    "a sales manager visiting a client",
    "two sisters celebrating a birthday",
    "a chef looking for new inspiration",
)

DESCRIPTION_TEMPLATES: dict[str, tuple[str, ...]] = {
    "flight": (
        "I need a one-way flight from {origin} to {destination} on {date} for {passengers} {passenger_word}.",
        "I am flying one-way from {origin} to {destination} on {date}, {passengers} {passenger_word} in total.",
    ),
    "hotel": (
        "I will stay in a hotel in {city} from {check_in} to {check_out}, {guests} {guest_word} in total.",
        "I need a hotel in {city} from {check_in} to {check_out} for {guests} {guest_word}.",
    ),
    "apartment": (
        "I want to book an apartment in {city} from {check_in} to {check_out} for {guests} {guest_word}.",
        "I will stay in an apartment in {city} from {check_in} to {check_out}, {guests} {guest_word} in total.",
    ),
    "rental_car": (
        "I also need a rental car in {city} from {pickup_date} to {return_date}.",
        "I will rent a car in {city} from {pickup_date} to {return_date}.",
    ),
    "restaurant": (
        "I plan to have {meal} at a restaurant in {city} on {date} for {party_size} {people_word}.",
        "I would like to book a restaurant in {city} for {meal} on {date}, a table for {party_size} {people_word}.",
    ),
}


def ordinal(day: int) -> str:
    """1 -> '1st', 12 -> '12th', 22 -> '22nd'."""
    suffix = "th" if 10 <= day % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(day % 10, "th")
    return f"{day}{suffix}"


def _plural(n: int, one: str, many: str) -> str:
    return one if n == 1 else many


def make_trip(rnd: random.Random, aspects: list[str]) -> Trip:
    """Places, dates, party size and every aspect's ground-truth search arguments."""
    origin, destination = rnd.sample(list(catalog.CITIES), 2)
    month = rnd.choice(catalog.MONTHS)
    start = rnd.randint(1, 15)
    nights = rnd.randint(3, 9)
    travelers = rnd.randint(1, 4)
    trip = Trip(origin, destination, travelers, nights, catalog.direct_flight_hours(origin, destination))
    arrive, leave = f"{month} {ordinal(start)}", f"{month} {ordinal(start + nights)}"
    stay = {"city": destination, "check_in": arrive, "check_out": leave, "guests": travelers}
    pickup = start + rnd.choice([0, 0, 1])
    meal_day = f"{month} {ordinal(start + rnd.randint(1, nights - 1))}"
    table = {
        "city": destination,
        "date": meal_day,
        "meal": rnd.choice(["lunch", "dinner"]),
        "party_size": travelers,
    }
    every = {
        "flight": {"origin": origin, "destination": destination, "date": arrive, "passengers": travelers},
        "hotel": stay,
        "apartment": dict(stay),
        "rental_car": {
            "city": destination,
            "pickup_date": f"{month} {ordinal(pickup)}",
            "return_date": leave,
        },
        "restaurant": table,
    }
    trip.arguments = {a: every[a] for a in aspects}
    return trip


def initial_description(rnd: random.Random, trip: Trip) -> str:
    """The traveller's opening request: one sentence per aspect, holding every argument value verbatim."""
    sentences = []
    for aspect, args in trip.arguments.items():
        n = trip.travelers
        words = {
            "passenger_word": _plural(n, "passenger", "passengers"),
            "guest_word": _plural(n, "guest", "guests"),
            "people_word": _plural(n, "person", "people"),
        }
        sentences.append(rnd.choice(DESCRIPTION_TEMPLATES[aspect]).format(**args, **words))
    return " ".join(sentences)


def scenario_text(rnd: random.Random, trip: Trip) -> str:
    """The judges' scenario: who travels and the trip (the preferences reach the judges separately)."""
    people = _plural(trip.travelers, "person", "people")
    return (
        f"The traveller is {rnd.choice(PERSONAS)}, planning a trip to {trip.destination} for {trip.travelers} "
        f"{people} over {trip.nights} nights. They have specific preferences for every part of the trip but "
        "reveal them only when asked concretely, and among the options that satisfy all of them they want the "
        "cheapest one for each aspect."
    )


def _violations(option: Option, prefs: list[PreferenceSpec]) -> list[PreferenceSpec]:
    return [p for p in prefs if not p.check(option)]


def make_options(
    rnd: random.Random, aspect: str, trip: Trip, prefs: list[PreferenceSpec]
) -> dict[str, Any] | None:
    """The aspect's options, correct ids and best id, or None when the preferences are too hard to meet."""
    want = {
        "correct": rnd.randint(*CORRECT_RANGE),
        "wrong": rnd.randint(*WRONG_RANGE),
        "noise": rnd.randint(*NOISE_RANGE),
    }
    found: dict[str, list[tuple[Option, str]]] = {"correct": [], "wrong": [], "noise": []}
    seen: set[str] = set()
    sampler = catalog.SAMPLERS[aspect]
    for _ in range(_OPTION_SAMPLES):
        if all(len(found[c]) == n for c, n in want.items()):
            break
        option = sampler(rnd, trip)
        key = json.dumps(option, sort_keys=True)
        name = option.get("name")
        if key in seen or (name is not None and name in seen):
            continue
        violated = _violations(option, prefs)
        if not violated:
            cost = catalog.effective_cost(aspect, option, prefs)
            if any(catalog.effective_cost(aspect, o, prefs) == cost for o, _ in found["correct"]):
                continue  # the cheapest correct option must be unique
            cls, reason = "correct", "satisfies every preference"
        elif len(violated) == 1:
            cls, reason = "wrong", f"violates the {violated[0].subcategory} preference"
        else:
            cls, reason = "noise", "violates " + ", ".join(p.subcategory for p in violated)
        if len(found[cls]) < want[cls]:
            found[cls].append((option, reason))
            seen.add(key)
            if name is not None:
                seen.add(name)
    if any(len(found[c]) < n for c, n in want.items()):
        return None
    best_cost = min(catalog.effective_cost(aspect, o, prefs) for o, _ in found["correct"])
    cheaper_wrong = sum(catalog.effective_cost(aspect, o, prefs) < best_cost for o, _ in found["wrong"])
    if cheaper_wrong < MIN_CHEAPER_WRONG:
        return None
    letter = ASPECT_LETTERS[aspect]
    numbers = rnd.sample(range(1, sum(want.values()) + 1), sum(want.values()))
    options: dict[str, list[Option]] = {}
    best_id, correct_ids = "", []
    for cls in ("correct", "wrong", "noise"):
        items = []
        for option, reason in found[cls]:
            oid = f"{letter}{numbers.pop()}"
            if cls == "correct":
                correct_ids.append(oid)
                if catalog.effective_cost(aspect, option, prefs) == best_cost:
                    best_id, reason = oid, reason + " and is the cheapest of them"
            items.append({"id": oid, **option, "type": cls, "reason": reason})
        options[cls] = sorted(items, key=lambda o: int(o["id"][1:]))
    return {
        "preferences": [p.entry() for p in prefs],
        "options": options,
        "arguments": trip.arguments[aspect],
        "correct_ids": sorted(correct_ids, key=lambda i: int(i[1:])),
        "best_id": best_id,
    }


def pick_aspects(rnd: random.Random, subset: str) -> list[str]:
    """The aspects of one scenario, in canonical order (2222: flight, stay, rental_car, restaurant)."""
    if len(subset) == 2:
        return list(rnd.choice(PAIRS))
    if len(subset) == 3:
        return list(rnd.choice(TRIPLES))
    return ["flight", rnd.choice(["hotel", "apartment"]), "rental_car", "restaurant"]


def questions_target_their_preference(scenario: dict[str, Any], scenario_id: str) -> bool:
    """Each solver question (every template) makes the scripted type judge pick exactly its preference."""
    parsed = parse_scenario(scenario_id, scenario)
    for pref in parsed.preferences:
        for template in range(len(QUESTION_TEMPLATES)):
            if scripted_type_judge(preference_question(pref, template), parsed.preferences) != (2, pref.pid):
                return False
            others = [p for p in parsed.preferences if p.pid != pref.pid]
            if scripted_type_judge(preference_question(pref, template), others)[0] == 2:
                return False  # strict: no other preference may tie or come close enough to be picked
    return all(
        scripted_search_judge(search_request(a, parsed.aspects[a].arguments), parsed).label == "True"
        and scripted_search_judge(search_request(a, parsed.aspects[a].arguments), parsed).aspect == a
        for a in parsed.dimensions
    )


def generate_scenario(seed: int, subset: str, index: int) -> tuple[str, dict[str, Any]]:
    """One scenario of a sub-set: (id, scenario object in the section-7 schema)."""
    rnd = random.Random(f"{seed}-{subset}-{index}")
    for _ in range(_SCENARIO_TRIES):
        aspects = pick_aspects(rnd, subset)
        counts = [int(d) for d in subset]
        rnd.shuffle(counts)
        trip = make_trip(rnd, aspects)
        prefs: dict[str, list[PreferenceSpec]] = {}
        blocks: dict[str, dict[str, Any]] = {}
        for aspect, count in zip(aspects, counts, strict=True):
            templates = catalog.TEMPLATES[aspect]
            for _try in range(_ASPECT_TRIES):
                specs = [templates[k](rnd, trip) for k in rnd.sample(sorted(templates), count)]
                block = make_options(rnd, aspect, trip, specs)
                if block is not None:
                    prefs[aspect], blocks[aspect] = specs, block
                    break
            else:
                break
        if len(blocks) != len(aspects):
            continue
        scenario_id = "|".join(f"{a}:{c}-b{index}" for a, c in zip(aspects, counts, strict=True))
        dimensions = list(aspects)
        rnd.shuffle(dimensions)
        scenario: dict[str, Any] = {
            "scenario": scenario_text(rnd, trip),
            "dimensions": dimensions,
            "wanted_num": len(dimensions),
            "initial_description": initial_description(rnd, trip),
        }
        scenario.update((a, blocks[a]) for a in dimensions)
        if questions_target_their_preference(scenario, scenario_id):
            return scenario_id, scenario
    raise RuntimeError(f"sub-set {subset}, scenario {index}: no valid scenario in {_SCENARIO_TRIES} tries")


def generate_subset(seed: int, subset: str, count: int) -> dict[str, dict[str, Any]]:
    """`count` scenarios of one sub-set, keyed by id."""
    return dict(generate_scenario(seed, subset, i) for i in range(count))


def make_splits(seed: int, files: dict[str, dict[str, dict[str, Any]]]) -> dict[str, Any]:
    """A deterministic 80/20 train/test split per sub-set."""
    train: list[str] = []
    test: list[str] = []
    for subset, scenarios in files.items():
        ids = list(scenarios)
        picked = sample_test_ids(random.Random(f"{seed}-split-{subset}"), ids, TEST_FRACTION)
        train += [i for i in ids if i not in picked]
        test += [i for i in ids if i in picked]
    return {
        "format": "userrl-travel-splits",
        "version": 1,
        "seed": seed,
        "generator": "python -m userrl.envs.travel.generate",
        "train": train,
        "test": test,
    }


def render_scenarios(scenarios: dict[str, dict[str, Any]]) -> str:
    """A scenario file's text: one scenario per line (readable diffs, small files)."""
    lines = [
        f"{json.dumps(sid)}: {json.dumps(sc, ensure_ascii=False, separators=(',', ':'))}"
        for sid, sc in scenarios.items()
    ]
    return "{\n" + ",\n".join(lines) + "\n}\n"


def render_all(seed: int = GENERATOR_SEED, counts: dict[str, int] | None = None) -> dict[str, str]:
    """File name -> text of every builtin data file."""
    counts = counts or COUNTS
    files = {s: generate_subset(seed, s, counts[s]) for s in SUBSETS if counts.get(s)}
    out = {BUILTIN_SCENARIO_FILE.format(subset=s): render_scenarios(sc) for s, sc in files.items()}
    out[BUILTIN_SPLITS_PATH.name] = json.dumps(make_splits(seed, files), indent=1) + "\n"
    return out


def main(argv: list[str] | None = None) -> int:
    """Write (or, with --check, compare against) the builtin scenario files."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output-dir", type=Path, default=DATA_DIR)
    parser.add_argument("--seed", type=int, default=GENERATOR_SEED)
    parser.add_argument("--check", action="store_true", help="exit 1 if any file differs from a fresh run")
    args = parser.parse_args(argv)
    texts = render_all(args.seed)
    if args.check:
        stale = [n for n, t in texts.items() if not (args.output_dir / n).is_file()
                 or (args.output_dir / n).read_text(encoding="utf-8") != t]  # fmt: skip
        print(
            f"{args.output_dir}: {'up to date' if not stale else 'differs from a fresh run: ' + ', '.join(stale)}"
        )
        return 1 if stale else 0
    args.output_dir.mkdir(parents=True, exist_ok=True)
    for name, text in texts.items():
        (args.output_dir / name).write_text(text, encoding="utf-8")
        print(f"wrote {args.output_dir / name} ({len(text)} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
