"""Seeded fictional fact base behind the builtin Search corpus: countries, places, people and their works.

Everything is made up on purpose: an agent cannot answer from memory and has to search. The world is
built from a private `random.Random`, so a seed always gives the same world.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field

FEMALE_NAMES = (
    "Ada", "Agnes", "Astrid", "Beatrix", "Clara", "Dagny", "Edda", "Elin", "Freya", "Greta", "Helena",
    "Hilde", "Ilsa", "Ingrid", "Johanna", "Katrin", "Linnea", "Liv", "Maren", "Mira", "Nora", "Orla",
    "Petra", "Runa", "Sigrid", "Thea", "Vera", "Wilma", "Yara", "Zofia",
)  # fmt: skip
MALE_NAMES = (
    "Anton", "Aurel", "Bertil", "Bruno", "Casimir", "Conrad", "Dmitri", "Edvard", "Emil", "Felix",
    "Florian", "Gustav", "Henrik", "Ivo", "Jonas", "Karl", "Leopold", "Lorenz", "Magnus", "Matthias",
    "Nils", "Oskar", "Otto", "Pavel", "Rasmus", "Roland", "Stefan", "Tobias", "Viktor", "Wendel",
)  # fmt: skip

# Name parts per kind; every generated one-word name is unique across all kinds, so a name in a question
# points at exactly one entity.
COUNTRY_PARTS = (
    ("Veld", "Arn", "Cask", "Drav", "Ess", "Gald", "Hesk", "Ivr", "Lusk", "Morv", "Nerr", "Plav", "Sarn"),
    ("oria", "ovia", "and", "enia", "aria", "ith"),
)
CITY_PARTS = (
    ("Ash", "Bram", "Cal", "Dor", "El", "Fen", "Gar", "Hal", "Ist", "Kel", "Lor", "Mar", "Nor", "Pel",
     "Quen", "Ros", "Sel", "Tor", "Ul", "Val", "Wes", "Yar", "Zan", "Bel", "Cor", "Dun", "Hest", "Lin"),
    ("ford", "haven", "mere", "wick", "dale", "stead", "holm", "bury", "port", "gate", "moor", "ton",
     "brook", "crest", "field", "by"),
)  # fmt: skip
RIVER_PARTS = (
    ("Sav", "Lun", "Myr", "Tam", "Ven", "Esk", "Ori", "Bel", "Dra", "Ily", "Cor", "Ama", "Nes", "Rho"),
    ("ra", "ene", "ava", "ish", "ond", "ela", "ine", "ur"),
)
MOUNTAIN_PARTS = (
    ("Kel", "Thar", "Gro", "Vask", "Hal", "Ost", "Brun", "Zar", "Eld", "Mor", "Tys", "Ald", "Krag", "Sil"),
    ("var", "dun", "gar", "horn", "mark", "rim", "tor", "vik"),
)
SURNAME_PARTS = (
    ("Mar", "Hol", "Bren", "Cast", "Dun", "Fal", "Grev", "Kess", "Lind", "Mor", "Ost", "Pell", "Quill",
     "Rook", "Sten", "Thorn", "Var", "Wick", "Ald", "Bask", "Dray", "Ev", "Hart", "Ros"),
    ("row", "ley", "wick", "ford", "mont", "ane", "ell", "by", "holt", "stone", "ard", "en", "is", "mann"),
)  # fmt: skip
COMPANY_PARTS = (
    ("Corv", "Brask", "Alt", "Ferr", "Gild", "Hask", "Jorv", "Lom", "Nord", "Parr", "Rask", "Selv", "Tull",
     "Ungar", "Wend", "Orb", "Vint"),
    ("ane", "ex", "ion", "ar", "is", "ova", "ent"),
)  # fmt: skip
INDUSTRIES = (
    "Textiles", "Ironworks", "Instruments", "Engineering", "Optics", "Chemicals", "Shipbuilding",
    "Printing", "Glassworks", "Machine Works",
)  # fmt: skip
CURRENCIES = (
    "crown", "mark", "florin", "ducat", "thaler", "guilder", "shilling", "dinar", "riksdal", "sovereign",
    "groat", "penning", "solidus",
)  # fmt: skip
WATERS = (
    "Sea of Ostra", "Pale Sea", "Lake Venmoor", "Gulf of Arden", "Sea of Kerrow", "Lake Ismara",
    "Bay of Tallis", "Grey Ocean",
)  # fmt: skip
LANDMARK_PARTS = (
    ("Glass", "Iron", "Salt", "Copper", "Stone", "Bell", "Weaver", "Falcon", "Rope", "Tin", "Wool", "Oak"),
    ("Bridge", "Gate", "Market", "Tower", "Cathedral", "Citadel", "Library", "Arcade", "Fountain", "Hall"),
)
UNIVERSITY_SUBJECTS = (
    "law", "medicine", "engineering", "astronomy", "music", "painting", "mathematics", "navigation",
    "chemistry", "architecture", "geology", "literature",
)  # fmt: skip
#: Device -> what it does; an invention is "<adjective> <device>".
DEVICES = {
    "loom": "weaves patterned cloth without a second operator",
    "pump": "lifts water out of deep mine shafts",
    "lamp": "burns whale oil with a steady, smokeless flame",
    "compass": "stays steady on the deck of a rolling ship",
    "clock": "keeps time to within a second a week",
    "press": "prints both sides of a sheet in one pass",
    "telegraph": "sends coded messages along a single wire",
    "kiln": "fires bricks with half the usual fuel",
    "lens": "lets lighthouse keepers throw a beam far out to sea",
    "winch": "lets one dock worker raise a loaded crate",
    "plough": "turns heavy clay soil with a single horse",
    "barometer": "warns sailors of storms a day in advance",
    "sextant": "measures the height of stars at night",
    "valve": "keeps steam boilers from bursting",
    "furnace": "melts iron ore at a steady heat",
    "bellows": "feeds air to a forge without pause",
}
DEVICE_ADJECTIVES = (
    "tidal", "spiral", "pneumatic", "folding", "magnetic", "rotary", "lunar", "double", "floating", "twin",
    "chain", "crank", "mirror", "vapour",
)  # fmt: skip
WORK_KINDS = {"painting": "painter", "novel": "novelist", "symphony": "composer"}
WORK_ADJECTIVES = (
    "Amber", "Crimson", "Distant", "Frozen", "Golden", "Quiet", "Broken", "Northern", "Wandering",
    "Evening", "Pale", "Last",
)  # fmt: skip
WORK_NOUNS = (
    "Harbour", "Orchard", "Meadow", "Tide", "Garden", "Voyage", "Winter", "Mirror", "Shore", "Lighthouse",
    "Vineyard", "Horizon",
)  # fmt: skip

N_CITIES_PER_COUNTRY = 5


@dataclass
class Country:
    """A country: its capital, currency and year of independence."""

    name: str
    currency: str
    independence: int
    capital: str = ""
    cities: list[str] = field(default_factory=list)


@dataclass
class Mountain:
    """A mountain (name without "Mount"), its country, height and first ascent."""

    name: str
    country: str
    height: int
    climber: str = ""
    ascent_year: int = 0
    rivers: list[str] = field(default_factory=list)


@dataclass
class River:
    """A river (name without "River"): where it rises, how long it is and where it ends."""

    name: str
    source: str
    mouth: str
    length: int
    cities: list[str] = field(default_factory=list)


@dataclass
class City:
    """A city: its country, river, founding year, landmark and population."""

    name: str
    country: str
    river: str
    founded: int
    landmark: str
    population: int
    is_capital: bool = False


@dataclass
class University:
    """The University of <city>."""

    name: str
    city: str
    founded: int
    subject: str


@dataclass
class Person:
    """A person; `role` is inventor, founder, climber or one of the artist professions."""

    name: str
    gender: str
    role: str
    birth_city: str
    birth_year: int
    university: str
    later_city: str
    achievement: str = ""  # the invention, company, work or mountain the person is known for


@dataclass
class Invention:
    """An invention (lower case, e.g. "spiral loom"), who made it, when, and who first manufactured it."""

    name: str
    purpose: str
    inventor: str
    year: int
    company: str = ""


@dataclass
class Company:
    """A company: founder, headquarters, founding year and the inventions it first manufactured."""

    name: str
    industry: str
    founder: str
    hq: str
    founded: int
    products: list[str] = field(default_factory=list)


@dataclass
class Work:
    """A painting, novel or symphony, its creator, year and the city where it hangs or first appeared."""

    title: str
    kind: str
    creator: str
    year: int
    venue_city: str


@dataclass
class World:
    """The whole fact base, each kind indexed by name."""

    countries: dict[str, Country]
    mountains: dict[str, Mountain]
    rivers: dict[str, River]
    cities: dict[str, City]
    universities: dict[str, University]
    people: dict[str, Person]
    inventions: dict[str, Invention]
    companies: dict[str, Company]
    works: dict[str, Work]


class _Names:
    """Draws unique one-word names from (prefixes, suffixes) tables; unique across all kinds."""

    def __init__(self, rnd: random.Random) -> None:
        self.rnd = rnd
        self.used: set[str] = set()

    def draw(self, parts: tuple[Sequence[str], Sequence[str]], count: int) -> list[str]:
        """`count` new names, each a prefix + suffix never drawn before (case-insensitively)."""
        combos = [p + s for p in parts[0] for s in parts[1]]
        self.rnd.shuffle(combos)
        out = []
        for name in combos:
            if name.lower() not in self.used:
                self.used.add(name.lower())
                out.append(name)
                if len(out) == count:
                    return out
        raise ValueError(f"name table too small for {count} names: {parts[0][:3]}...")


def _pairs(
    rnd: random.Random, first: Sequence[str], second: Sequence[str], count: int
) -> list[tuple[str, str]]:
    combos = [(a, b) for a in first for b in second]
    return rnd.sample(combos, count)


def build_world(
    seed: int | str,
    *,
    n_countries: int = 12,
    n_mountains: int = 20,
    n_rivers: int = 24,
    n_universities: int = 16,
    n_inventors: int = 40,
    n_founders: int = 30,
    n_artists: int = 30,
) -> World:
    """Build the fictional world for a seed; the climbers are one per mountain."""
    rnd = random.Random(f"search-world-{seed}")
    names = _Names(rnd)

    countries = {
        n: Country(n, c, rnd.randint(1650, 1950))
        for n, c in zip(
            names.draw(COUNTRY_PARTS, n_countries), rnd.sample(CURRENCIES, n_countries), strict=True
        )
    }
    country_names = list(countries)
    heights = rnd.sample(range(1800, 6600, 7), n_mountains)
    mountains = {
        n: Mountain(n, rnd.choice(country_names), h)
        for n, h in zip(names.draw(MOUNTAIN_PARTS, n_mountains), heights, strict=True)
    }
    # Every mountain is the source of at most two rivers, so "the mountain where X rises" is well defined.
    sources = rnd.sample(list(mountains) * 2, n_rivers)
    lengths = rnd.sample(range(80, 2400, 3), n_rivers)
    rivers = {
        n: River(n, src, rnd.choice(WATERS), length)
        for n, src, length in zip(names.draw(RIVER_PARTS, n_rivers), sources, lengths, strict=True)
    }
    for river in rivers.values():
        mountains[river.source].rivers.append(river.name)

    n_cities = n_countries * N_CITIES_PER_COUNTRY
    city_names = names.draw(CITY_PARTS, n_cities)
    # Each river gets at least two cities; the rest are spread at random.
    river_slots = list(rivers) * 2 + [rnd.choice(list(rivers)) for _ in range(n_cities - 2 * n_rivers)]
    rnd.shuffle(river_slots)
    landmarks = [f"{a} {b}" for a, b in _pairs(rnd, *LANDMARK_PARTS, n_cities)]
    cities: dict[str, City] = {}
    for i, name in enumerate(city_names):
        country = country_names[i // N_CITIES_PER_COUNTRY]
        city = City(
            name,
            country,
            river_slots[i],
            rnd.randint(600, 1650),
            landmarks[i],
            rnd.randrange(20_000, 900_000, 1000),
        )
        cities[name] = city
        countries[country].cities.append(name)
        rivers[city.river].cities.append(name)
    for country in countries.values():
        country.capital = country.cities[0]
        cities[country.capital].is_capital = True

    universities = {
        f"University of {c}": University(
            f"University of {c}", c, rnd.randint(1450, 1690), rnd.choice(UNIVERSITY_SUBJECTS)
        )
        for c in rnd.sample(city_names, n_universities)
    }

    roles = (
        ["inventor"] * n_inventors
        + ["founder"] * n_founders
        + [WORK_KINDS[k] for k in rnd.choices(list(WORK_KINDS), k=n_artists)]
        + ["climber"] * n_mountains
    )
    surnames = names.draw(SURNAME_PARTS, len(roles))
    people: dict[str, Person] = {}
    for role, surname in zip(roles, surnames, strict=True):
        gender = rnd.choice(("female", "male"))
        first = rnd.choice(FEMALE_NAMES if gender == "female" else MALE_NAMES)
        birth_city, later_city = rnd.sample(city_names, 2)
        name = f"{first} {surname}"
        people[name] = Person(
            name,
            gender,
            role,
            birth_city,
            rnd.randint(1700, 1930),
            rnd.choice(list(universities)),
            later_city,
        )

    company_roots = names.draw(COMPANY_PARTS, n_founders)
    companies: dict[str, Company] = {}
    founders = [p for p in people.values() if p.role == "founder"]
    for founder, root in zip(founders, company_roots, strict=True):
        industry = rnd.choice(INDUSTRIES)
        company = Company(
            f"{root} {industry}",
            industry,
            founder.name,
            rnd.choice(city_names),
            founder.birth_year + rnd.randint(22, 45),
        )
        companies[company.name] = company
        founder.achievement = company.name

    device_names = [f"{a} {d}" for a, d in _pairs(rnd, DEVICE_ADJECTIVES, list(DEVICES), n_inventors)]
    inventions: dict[str, Invention] = {}
    inventors = [p for p in people.values() if p.role == "inventor"]
    for inventor, inv_name in zip(inventors, device_names, strict=True):
        year = inventor.birth_year + rnd.randint(24, 50)
        # The first manufacturer existed around the time of the invention when such a company exists.
        fitting = [c for c in companies.values() if year - 40 <= c.founded <= year + 10]
        company = rnd.choice(fitting or list(companies.values()))
        invention = Invention(inv_name, DEVICES[inv_name.split()[-1]], inventor.name, year, company.name)
        inventions[inv_name] = invention
        company.products.append(inv_name)
        inventor.achievement = inv_name

    titles = [f"The {a} {n}" for a, n in _pairs(rnd, WORK_ADJECTIVES, WORK_NOUNS, n_artists)]
    works: dict[str, Work] = {}
    artists = [p for p in people.values() if p.role in WORK_KINDS.values()]
    kind_of = {v: k for k, v in WORK_KINDS.items()}
    for artist, title in zip(artists, titles, strict=True):
        work = Work(
            title,
            kind_of[artist.role],
            artist.name,
            artist.birth_year + rnd.randint(20, 55),
            rnd.choice(city_names),
        )
        works[title] = work
        artist.achievement = title

    climbers = [p for p in people.values() if p.role == "climber"]
    for climber, mountain in zip(climbers, mountains.values(), strict=True):
        mountain.climber = climber.name
        mountain.ascent_year = climber.birth_year + rnd.randint(20, 40)
        climber.achievement = mountain.name

    return World(countries, mountains, rivers, cities, universities, people, inventions, companies, works)
