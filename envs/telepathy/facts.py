"""Structured entity facts of the builtin Telepathy set and how they render into the gym's text fields."""

from __future__ import annotations

from typing import Any

#: Attribute name -> how its values are introduced in the one-line description. The connectors are
#: stopwords ("of", "in", "from", "with", "for") or rare words ("noted"), so the scripted oracle's keyword
#: match answers about the values, not about the template ("Is it made of metal?" must not match "made").
ATTRIBUTE_CONNECTORS: dict[str, str] = {
    "kind": "",
    "size": "",
    "colors": "",
    "materials": "of",
    "found_in": "in",
    "origin": "from",
    "era": "of the",
    "features": "with",
    "known_for": "noted for",
    "uses": "for",
}
ATTRIBUTE_KEYS: tuple[str, ...] = tuple(ATTRIBUTE_CONNECTORS)

#: Category -> (noun phrase of the teaser, "who" or "what"). Persons share one phrase, so the teaser does
#: not give their field away.
_PERSON = ("a famous person", "who")
CATEGORY_NOUNS: dict[str, tuple[str, str]] = {
    "animal": ("an animal", "what"),
    "bird": ("an animal", "what"),
    "fish": ("an animal", "what"),
    "insect": ("an animal", "what"),
    "fruit": ("a fruit", "what"),
    "vegetable": ("a vegetable", "what"),
    "flower": ("a plant", "what"),
    "tree": ("a plant", "what"),
    "plant": ("a plant", "what"),
    "dish": ("a dish", "what"),
    "dessert": ("a dessert", "what"),
    "beverage": ("a drink", "what"),
    "musical_instrument": ("a musical instrument", "what"),
    "vehicle": ("a vehicle", "what"),
    "aircraft": ("a vehicle", "what"),
    "landmark": ("a famous landmark", "what"),
    "city": ("a city", "what"),
    "mountain": ("a famous place in nature", "what"),
    "body_of_water": ("a famous place in nature", "what"),
    "waterfall": ("a famous place in nature", "what"),
    "natural_site": ("a famous place in nature", "what"),
    "natural_phenomenon": ("a natural phenomenon", "what"),
    "celestial_body": ("an object in space", "what"),
    "scientist": _PERSON,
    "historical_figure": _PERSON,
    "artist": _PERSON,
    "composer": _PERSON,
    "musician": _PERSON,
    "author": _PERSON,
    "athlete": _PERSON,
    "fictional_character": ("a fictional character", "who"),
    "household_object": ("an everyday object", "what"),
    "tool": ("a tool", "what"),
    "invention": ("an invention", "what"),
    "sport": ("a sport or game", "what"),
    "material": ("a material", "what"),
}


def validate_attributes(attributes: Any, where: str) -> dict[str, list[str]]:
    """Check an attribute map: known keys only, each a list of non-empty strings, a non-empty 'kind'."""
    if not isinstance(attributes, dict):
        raise ValueError(f"{where}: 'attributes' must be an object")
    unknown = sorted(set(attributes) - set(ATTRIBUTE_KEYS))
    if unknown:
        raise ValueError(f"{where}: unknown attributes {unknown}; known: {list(ATTRIBUTE_KEYS)}")
    out: dict[str, list[str]] = {}
    for key in ATTRIBUTE_KEYS:
        values = attributes.get(key, [])
        if not isinstance(values, list) or not all(isinstance(v, str) and v.strip() for v in values):
            raise ValueError(f"{where}: attribute {key!r} must be a list of non-empty strings")
        if values:
            out[key] = list(values)
    if not out.get("kind"):
        raise ValueError(f"{where}: attribute 'kind' must name at least one kind")
    return out


def article(word: str) -> str:
    """'an' before a vowel sound (by its first letter), else 'a'."""
    return "an" if word[:1].lower() in "aeiou" else "a"


def join_and(items: list[str]) -> str:
    """'a', 'a and b', 'a, b and c'."""
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def describe(attributes: dict[str, list[str]]) -> str:
    """The one-line description: 'a large mammal, big cat and predator, golden and tan, in ...'."""
    head = join_and(attributes["kind"])
    if attributes.get("size"):
        head = f"{attributes['size'][0]} {head}"
    clauses = [f"{article(head)} {head}"]
    for key in ATTRIBUTE_KEYS[2:]:
        values = attributes.get(key)
        if values:
            connector = ATTRIBUTE_CONNECTORS[key]
            clauses.append(f"{connector} {join_and(values)}" if connector else join_and(values))
    return ", ".join(clauses)


def target_entity(title: str, attributes: dict[str, list[str]]) -> str:
    """'<title> - <one-line description>', the format of the original data."""
    return f"{title} - {describe(attributes)}"


def teaser(category: str) -> tuple[str, str]:
    """(description, goal) shown for an entity of this category."""
    if category not in CATEGORY_NOUNS:
        raise ValueError(f"unknown builtin category {category!r}; known: {sorted(CATEGORY_NOUNS)}")
    noun, pronoun = CATEGORY_NOUNS[category]
    description = f"I am thinking of {noun}. Try to guess {pronoun} it is by asking yes/no questions!"
    bare = noun.split(" ", 1)[1]
    return description, f"Guess the {bare} I am thinking of."
