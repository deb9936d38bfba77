"""Renders the fictional fact base (world.py) as short encyclopedia-style documents, one per entity."""

from __future__ import annotations

import random

from userrl.envs.search.corpus import Document
from userrl.envs.search.world import (
    WORK_KINDS,
    City,
    Company,
    Country,
    Invention,
    Mountain,
    Person,
    River,
    World,
)

_VENUE = {
    "painting": "It hangs in the city gallery of {city}.",
    "novel": "It was first published in {city}.",
    "symphony": "It was first performed in {city}.",
}
_MADE = {"painting": "painted", "novel": "written", "symphony": "composed"}


def river_title(name: str) -> str:
    """Document title of a river."""
    return f"{name} River"


def mountain_title(name: str) -> str:
    """Document title of a mountain."""
    return f"Mount {name}"


def invention_title(name: str) -> str:
    """Document title of an invention ("Spiral loom")."""
    return name[0].upper() + name[1:]


def water(name: str) -> str:
    """A body of water with its article: "the Sea of Ostra", "Lake Venmoor"."""
    return name if name.startswith("Lake ") else f"the {name}"


def _a(word: str) -> str:
    return f"an {word}" if word[0] in "aeiou" else f"a {word}"


def _listing(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def country_doc(c: Country) -> Document:
    """A country: capital, currency, independence and its other cities."""
    others = [x for x in c.cities if x != c.capital]
    return Document(
        c.name,
        f"{c.name} is a country whose capital is {c.capital}. Its currency is the {c.currency}. "
        f"{c.name} became independent in {c.independence}. "
        f"Other cities of {c.name} include {_listing(others)}.",
    )


def city_doc(c: City, rnd: random.Random) -> Document:
    """A city: country, river, founding year, landmark, population (and capital status)."""
    opening = rnd.choice(
        (
            f"{c.name} is a city in {c.country} on the banks of the {c.river} River.",
            f"{c.name} is a city in {c.country}; the {c.river} River flows through it.",
        )
    )
    capital = f" It is the capital of {c.country}." if c.is_capital else ""
    return Document(
        c.name,
        f"{opening}{capital} It was founded in {c.founded} and is known for the {c.landmark}. "
        f"About {c.population} people live there.",
    )


def river_doc(r: River) -> Document:
    """A river: source mountain, length, mouth and the cities on it."""
    return Document(
        river_title(r.name),
        f"The {r.name} River rises on Mount {r.source} and flows for {r.length} kilometres before emptying "
        f"into {water(r.mouth)}. Cities on the {r.name} include {_listing(r.cities)}.",
    )


def mountain_doc(m: Mountain) -> Document:
    """A mountain: country, height, first ascent and the rivers rising there."""
    rivers = ""
    if m.rivers:
        verb = "rises" if len(m.rivers) == 1 else "rise"
        rivers = f" The {_listing([river_title(r) for r in m.rivers])} {verb} on its slopes."
    return Document(
        mountain_title(m.name),
        f"Mount {m.name} is a mountain in {m.country} that rises to {m.height} metres. "
        f"It was first climbed by {m.climber} in {m.ascent_year}.{rivers}",
    )


def university_doc(name: str, world: World) -> Document:
    """A university: city, founding year and its best-known school."""
    u = world.universities[name]
    return Document(
        name,
        f"The {name} is a university in {u.city}, founded in {u.founded}. "
        f"It is best known for its school of {u.subject}.",
    )


def person_doc(p: Person, world: World) -> Document:
    """A person: birth city and year, university, later home and the one thing they are known for."""
    she, her = ("She", "Her") if p.gender == "female" else ("He", "His")
    if p.role == "inventor":
        inv = world.inventions[p.achievement]
        known = f"{she} is best known for inventing the {inv.name} in {inv.year}."
    elif p.role == "founder":
        company = world.companies[p.achievement]
        known = f"In {company.founded} {she.lower()} founded {company.name}."
    elif p.role == "climber":
        mountain = world.mountains[p.achievement]
        known = f"In {mountain.ascent_year} {she.lower()} made the first ascent of Mount {mountain.name}."
    else:
        work = world.works[p.achievement]
        known = f"{her} best-known {work.kind} is {work.title}, {_MADE[work.kind]} in {work.year}."
    role = "mountaineer" if p.role == "climber" else "businessperson" if p.role == "founder" else p.role
    return Document(
        p.name,
        f"{p.name} was a {role} born in {p.birth_city} in {p.birth_year}. {she} studied at the "
        f"{p.university} and later lived in {p.later_city}. {known}",
    )


def invention_doc(inv: Invention) -> Document:
    """An invention: what it does, who invented it and when, and its first manufacturer."""
    return Document(
        invention_title(inv.name),
        f"The {inv.name} is a device that {inv.purpose}. It was invented by {inv.inventor} in {inv.year}. "
        f"It was first manufactured by {inv.company}.",
    )


def company_doc(c: Company) -> Document:
    """A company: industry, headquarters, founder, founding year and its first products."""
    products = f" It was the first maker of the {_listing(c.products)}." if c.products else ""
    return Document(
        c.name,
        f"{c.name} is {_a(c.industry.lower())} company headquartered in {c.hq}. "
        f"It was founded by {c.founder} in {c.founded}.{products}",
    )


def work_doc(title: str, world: World) -> Document:
    """A painting, novel or symphony: creator, year and where it hangs or first appeared."""
    w = world.works[title]
    creator = world.people[w.creator]
    return Document(
        title,
        f"{title} is a {w.kind} by the {WORK_KINDS[w.kind]} {creator.name}, {_MADE[w.kind]} in {w.year}. "
        + _VENUE[w.kind].format(city=w.venue_city),
    )


def render_documents(world: World, seed: int | str) -> list[Document]:
    """Every entity of the world as one document, grouped by kind in a fixed order."""
    rnd = random.Random(f"search-documents-{seed}")
    docs: list[Document] = []
    docs += [country_doc(c) for c in world.countries.values()]
    docs += [city_doc(c, rnd) for c in world.cities.values()]
    docs += [river_doc(r) for r in world.rivers.values()]
    docs += [mountain_doc(m) for m in world.mountains.values()]
    docs += [university_doc(u, world) for u in world.universities]
    docs += [person_doc(p, world) for p in world.people.values()]
    docs += [invention_doc(i) for i in world.inventions.values()]
    docs += [company_doc(c) for c in world.companies.values()]
    docs += [work_doc(t, world) for t in world.works]
    titles = [d.title for d in docs]
    if len(set(titles)) != len(titles):
        raise ValueError("document titles must be unique")
    return docs
