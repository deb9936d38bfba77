"""Question templates over the fictional world: one-hop facts and two-hop chains through a bridge entity.

A candidate names its supporting documents in hop order and, per hop, the search queries a privileged
solver may use. Which candidates are kept (answer in the last document, not in the first, every hop
retrievable) is decided in generate.py against the real BM25 index.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

from userrl.envs.search.documents import invention_title, mountain_title, river_title
from userrl.envs.search.world import WORK_KINDS, World

_VERB = {"painting": "painted", "novel": "wrote", "symphony": "composed"}
_PASSIVE = {"painting": "painted", "novel": "written", "symphony": "composed"}


@dataclass(frozen=True)
class Candidate:
    """A question, its gold answer, the documents that support it and the solver's query options."""

    template: str
    question: str
    answer: str
    supporting: tuple[str, ...]
    plan: tuple[tuple[str, ...], ...]

    @property
    def hops(self) -> int:
        """Number of documents the answer needs."""
        return len(self.supporting)


def _q(name: str, *extras: str) -> tuple[str, ...]:
    """Query options for one hop: the entity name alone, then with relation words."""
    return (name, *(f"{name} {e}" for e in extras))


Template = Callable[[World], Iterator[Candidate]]


# ---------------------------------------------------------------- one hop


def person_facts(w: World) -> Iterator[Candidate]:
    """Birth city, birth year and university of a person."""
    for p in w.people.values():
        plan = (_q(p.name, "born", "biography"),)
        yield Candidate(
            "person_birth_city", f"In which city was {p.name} born?", p.birth_city, (p.name,), plan
        )
        yield Candidate(
            "person_birth_year", f"In what year was {p.name} born?", str(p.birth_year), (p.name,), plan
        )
        yield Candidate(
            "person_university", f"Which university did {p.name} attend?", p.university, (p.name,), plan
        )


def invention_facts(w: World) -> Iterator[Candidate]:
    """Inventor, year and first manufacturer of an invention."""
    for inv in w.inventions.values():
        doc = (invention_title(inv.name),)
        plan = (_q(inv.name, "inventor", "invention"),)
        yield Candidate("invention_inventor", f"Who invented the {inv.name}?", inv.inventor, doc, plan)
        yield Candidate(
            "invention_year", f"In what year was the {inv.name} invented?", str(inv.year), doc, plan
        )
        yield Candidate(
            "invention_company", f"Which company first manufactured the {inv.name}?", inv.company, doc, plan
        )


def city_facts(w: World) -> Iterator[Candidate]:
    """River, founding year, country and landmark of a city."""
    for c in w.cities.values():
        doc, plan = (c.name,), (_q(c.name, "city"),)
        yield Candidate("city_river", f"Which river flows through {c.name}?", c.river, doc, plan)
        yield Candidate("city_founded", f"In what year was {c.name} founded?", str(c.founded), doc, plan)
        yield Candidate("city_country", f"In which country is the city of {c.name}?", c.country, doc, plan)
        yield Candidate("city_landmark", f"Which landmark is {c.name} known for?", c.landmark, doc, plan)


def river_facts(w: World) -> Iterator[Candidate]:
    """Length, mouth and source of a river."""
    for r in w.rivers.values():
        title = river_title(r.name)
        doc, plan = (title,), (_q(title, "course"),)
        yield Candidate("river_length", f"How many kilometres long is the {title}?", str(r.length), doc, plan)
        yield Candidate("river_mouth", f"Into which body of water does the {title} flow?", r.mouth, doc, plan)
        yield Candidate("river_source", f"On which mountain does the {title} rise?", r.source, doc, plan)


def mountain_facts(w: World) -> Iterator[Candidate]:
    """Height, first climber and first-ascent year of a mountain."""
    for m in w.mountains.values():
        title = mountain_title(m.name)
        doc, plan = (title,), (_q(title, "height", "first ascent"),)
        yield Candidate("mountain_height", f"How many metres high is {title}?", str(m.height), doc, plan)
        yield Candidate("mountain_climber", f"Who made the first ascent of {title}?", m.climber, doc, plan)
        yield Candidate(
            "mountain_ascent_year", f"In what year was {title} first climbed?", str(m.ascent_year), doc, plan
        )


def country_facts(w: World) -> Iterator[Candidate]:
    """Capital, currency and independence year of a country."""
    for c in w.countries.values():
        doc, plan = (c.name,), (_q(c.name, "country"),)
        yield Candidate("country_capital", f"What is the capital of {c.name}?", c.capital, doc, plan)
        yield Candidate("country_currency", f"What is the currency of {c.name}?", c.currency, doc, plan)
        yield Candidate(
            "country_independence",
            f"In what year did {c.name} become independent?",
            str(c.independence),
            doc,
            plan,
        )


def company_facts(w: World) -> Iterator[Candidate]:
    """Founder, headquarters and founding year of a company."""
    for c in w.companies.values():
        doc, plan = (c.name,), (_q(c.name, "company"),)
        yield Candidate("company_founder", f"Who founded {c.name}?", c.founder, doc, plan)
        yield Candidate("company_hq", f"In which city is {c.name} headquartered?", c.hq, doc, plan)
        yield Candidate("company_founded", f"In what year was {c.name} founded?", str(c.founded), doc, plan)


def university_facts(w: World) -> Iterator[Candidate]:
    """Founding year of a university."""
    for u in w.universities.values():
        yield Candidate(
            "university_founded",
            f"In what year was the {u.name} founded?",
            str(u.founded),
            (u.name,),
            (_q(u.name, "founded"),),
        )


def work_facts(w: World) -> Iterator[Candidate]:
    """Creator and year of a painting, novel or symphony."""
    for work in w.works.values():
        doc, plan = (work.title,), (_q(work.title, work.kind),)
        yield Candidate("work_creator", f"Who {_VERB[work.kind]} {work.title}?", work.creator, doc, plan)
        yield Candidate(
            "work_year", f"In what year was {work.title} {_PASSIVE[work.kind]}?", str(work.year), doc, plan
        )


# ---------------------------------------------------------------- two hops


def invention_chains(w: World) -> Iterator[Candidate]:
    """invention -> inventor -> birth city / year; invention -> manufacturer -> founder / headquarters."""
    for inv in w.inventions.values():
        inventor, company = w.people[inv.inventor], w.companies[inv.company]
        hop1 = _q(inv.name, "inventor", "invention")
        docs_p, docs_c = (invention_title(inv.name), inventor.name), (invention_title(inv.name), company.name)
        born = _q(inventor.name, "born", "biography")
        yield Candidate(
            "inventor_birth_city",
            f"In which city was the inventor of the {inv.name} born?",
            inventor.birth_city,
            docs_p,
            (hop1, born),
        )
        yield Candidate(
            "inventor_birth_year",
            f"In what year was the inventor of the {inv.name} born?",
            str(inventor.birth_year),
            docs_p,
            (hop1, born),
        )
        maker = (*_q(inv.name, "manufacturer", "manufactured"),)
        yield Candidate(
            "manufacturer_founder",
            f"Who founded the company that first manufactured the {inv.name}?",
            company.founder,
            docs_c,
            (maker, _q(company.name, "founded", "founder")),
        )
        yield Candidate(
            "manufacturer_hq",
            f"In which city is the company that first manufactured the {inv.name} headquartered?",
            company.hq,
            docs_c,
            (maker, _q(company.name, "headquarters", "company")),
        )


def person_chains(w: World) -> Iterator[Candidate]:
    """person -> birth city -> river / country; person -> university -> founding year."""
    for p in w.people.values():
        city = w.cities[p.birth_city]
        hop1 = _q(p.name, "born", "birthplace")
        yield Candidate(
            "birthplace_river",
            f"Which river flows through the city where {p.name} was born?",
            city.river,
            (p.name, city.name),
            (hop1, _q(city.name, "river", "city")),
        )
        yield Candidate(
            "birthplace_country",
            f"In which country is the city where {p.name} was born?",
            city.country,
            (p.name, city.name),
            (hop1, _q(city.name, "country", "city")),
        )
        yield Candidate(
            "university_of_person_founded",
            f"In what year was the university attended by {p.name} founded?",
            str(w.universities[p.university].founded),
            (p.name, p.university),
            (_q(p.name, "studied", "university"), _q(p.university, "founded")),
        )


def city_chains(w: World) -> Iterator[Candidate]:
    """city -> country -> capital / currency; city -> river -> mouth."""
    for c in w.cities.values():
        country = w.countries[c.country]
        hop1 = _q(c.name, "country", "city")
        if not c.is_capital:
            yield Candidate(
                "country_of_city_capital",
                f"What is the capital of the country in which {c.name} lies?",
                country.capital,
                (c.name, country.name),
                (hop1, _q(country.name, "capital")),
            )
        yield Candidate(
            "country_of_city_currency",
            f"What currency is used in the country where {c.name} is located?",
            country.currency,
            (c.name, country.name),
            (hop1, _q(country.name, "currency")),
        )
        river = w.rivers[c.river]
        yield Candidate(
            "river_of_city_mouth",
            f"Into which body of water does the river that flows through {c.name} empty?",
            river.mouth,
            (c.name, river_title(river.name)),
            (_q(c.name, "river"), _q(river_title(river.name), "mouth", "emptying into")),
        )


def river_chains(w: World) -> Iterator[Candidate]:
    """river -> source mountain -> height / first climber."""
    for r in w.rivers.values():
        m = w.mountains[r.source]
        docs = (river_title(r.name), mountain_title(m.name))
        hop1 = _q(river_title(r.name), "rises", "source")
        yield Candidate(
            "source_mountain_height",
            f"How many metres high is the mountain on which the {river_title(r.name)} rises?",
            str(m.height),
            docs,
            (hop1, _q(mountain_title(m.name), "height", "metres")),
        )
        yield Candidate(
            "source_mountain_climber",
            f"Who first climbed the mountain on which the {river_title(r.name)} rises?",
            m.climber,
            docs,
            (hop1, _q(mountain_title(m.name), "first climbed", "first ascent")),
        )


def mountain_chains(w: World) -> Iterator[Candidate]:
    """mountain -> first climber -> birth city; mountain -> country -> capital."""
    for m in w.mountains.values():
        title, climber, country = mountain_title(m.name), w.people[m.climber], w.countries[m.country]
        yield Candidate(
            "climber_birth_city",
            f"In which city was the first person to climb {title} born?",
            climber.birth_city,
            (title, climber.name),
            (_q(title, "first ascent", "first climbed"), _q(climber.name, "born", "mountaineer")),
        )
        yield Candidate(
            "mountain_country_capital",
            f"What is the capital of the country where {title} stands?",
            country.capital,
            (title, country.name),
            (_q(title, "country"), _q(country.name, "capital")),
        )


def company_chains(w: World) -> Iterator[Candidate]:
    """company -> founder -> birth year; company -> headquarters city -> river / country."""
    for c in w.companies.values():
        founder, hq = w.people[c.founder], w.cities[c.hq]
        yield Candidate(
            "founder_birth_year",
            f"In what year was the founder of {c.name} born?",
            str(founder.birth_year),
            (c.name, founder.name),
            (_q(c.name, "founder", "founded"), _q(founder.name, "born", "businessperson")),
        )
        hop1 = _q(c.name, "headquarters", "headquartered")
        yield Candidate(
            "headquarters_river",
            f"Which river flows through the city where {c.name} has its headquarters?",
            hq.river,
            (c.name, hq.name),
            (hop1, _q(hq.name, "river", "city")),
        )
        yield Candidate(
            "headquarters_country",
            f"In which country does {c.name} have its headquarters?",
            hq.country,
            (c.name, hq.name),
            (hop1, _q(hq.name, "country", "city")),
        )


def work_chains(w: World) -> Iterator[Candidate]:
    """work -> creator -> birth city / university."""
    for work in w.works.values():
        creator = w.people[work.creator]
        role = WORK_KINDS[work.kind]
        hop1 = _q(work.title, work.kind, role)
        yield Candidate(
            "creator_birth_city",
            f"In which city was the {role} of {work.title} born?",
            creator.birth_city,
            (work.title, creator.name),
            (hop1, _q(creator.name, "born", role)),
        )
        yield Candidate(
            "creator_university",
            f"Which university did the {role} of {work.title} attend?",
            creator.university,
            (work.title, creator.name),
            (hop1, _q(creator.name, "studied", "university")),
        )


ONE_HOP: tuple[Template, ...] = (
    person_facts,
    invention_facts,
    city_facts,
    river_facts,
    mountain_facts,
    country_facts,
    company_facts,
    university_facts,
    work_facts,
)
TWO_HOP: tuple[Template, ...] = (
    invention_chains,
    person_chains,
    city_chains,
    river_chains,
    mountain_chains,
    company_chains,
    work_chains,
)
