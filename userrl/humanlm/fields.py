"""HumanLM's latent-state fields (docs/spec/ALGORITHMS.md §5.2): the s-e-b-v-g-c-r hierarchy, its thresholds and token limits."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Field:
    """One field of the hierarchy: its tag name, what it must contain, curriculum threshold, token limit."""

    name: str
    description: str
    #: The curriculum's promotion threshold (None: the last field has none).
    threshold: float | None
    max_tokens: int

    @property
    def open_tag(self) -> str:
        """`<name>`."""
        return f"<{self.name}>"

    @property
    def close_tag(self) -> str:
        """`</name>`."""
        return f"</{self.name}>"


FIELDS: tuple[Field, ...] = (
    Field(
        "stance",
        "the user's level of agreement toward an explicitly named target; at most 15 words; several "
        'allowed, separated by ";"',
        0.9,
        48,
    ),
    Field("emotion", "an emotion, its intensity and its explicit target; at most 15 words", 0.9, 48),
    Field(
        "belief",
        "a general, foundational assumption about people or the world, not advice and not tied to the "
        "event; at most 15 words",
        0.9,
        48,
    ),
    Field("value", "what the person thinks should matter or be prioritized; at most 15 words", 0.9, 48),
    Field("goal", "what the person is trying to achieve with this message; at most 15 words", 0.9, 48),
    Field("communication", "tone plus how the message is structured; at most 15 words", 0.9, 48),
    Field("response", "the actual reply text", None, 512),
)
FIELD_NAMES: tuple[str, ...] = tuple(f.name for f in FIELDS)
#: The final field: the reply itself (validation scores it alone; the ground-truth rule applies to it).
RESPONSE = "response"
#: The latent fields, i.e. every field but the response.
LATENT_FIELDS: tuple[str, ...] = FIELD_NAMES[:-1]
_BY_NAME = {f.name: f for f in FIELDS}


def get_field(name: str) -> Field:
    """The field called name; ValueError listing the fields when unknown."""
    try:
        return _BY_NAME[name]
    except (KeyError, TypeError):
        raise ValueError(f"unknown HumanLM field {name!r}; fields: {', '.join(FIELD_NAMES)}") from None


def field_level(name: str) -> int:
    """The position of a field in the hierarchy (stance 0 ... response 6)."""
    return FIELD_NAMES.index(get_field(name).name)
