"""Travel model roles (docs/spec/GYMS.md §7): prompts and reply validators for the model backends, and the
deterministic scripted stand-ins of the search judge, the type judge and the traveller's replies."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from userrl.envs.text import content_words
from userrl.envs.travel.schema import Preference, Scenario

# ---------------------------------------------------------------------------------------------- roles

SEARCH_JUDGE = "search_judge"
TYPE_JUDGE = "type_judge"
PREFERENCE_REVEAL = "preference_reveal"
PROACTIVE_REVEAL = "proactive_reveal"
NATURAL_REPLY = "natural_reply"
ROLES: tuple[str, ...] = (SEARCH_JUDGE, TYPE_JUDGE, PREFERENCE_REVEAL, PROACTIVE_REVEAL, NATURAL_REPLY)

#: Fallback text of the three reply roles (3-5) after every attempt failed.
REPLY_FALLBACK = "Sorry, I didn't quite get that. Could you ask again?"
#: The scripted natural reply (type 1).
SCRIPTED_NATURAL_REPLY = "I don't have anything specific in mind about that."
SCRIPTED_PROACTIVE_PREFIX = "By the way, "

SEARCH_LABELS = ("True", "False", "N/A")
UTTERANCE_TYPES = (1, 2, 3, 4)

# ---------------------------------------------------------------------------------------------- prompts

SEARCH_JUDGE_SYSTEM = """\
You judge search requests sent to a travel database. You get the agent's request and, for every travel \
aspect of the trip, the ground-truth search arguments.

Be strict. The request matches an aspect only if it clearly targets that one aspect and contains all of its \
arguments with correct values. Requests that are ambiguous, that cover several aspects at once, or that \
miss or change an argument do not match.

Reply with one JSON object and nothing else:
{"alignment_judgement": "True" | "False" | "N/A", "alignment_aspect": "<aspect name>"}
- "True": the request matches one aspect; name it in alignment_aspect.
- "False": the request targets an aspect of the trip but its arguments are missing or wrong.
- "N/A": the request matches no aspect of the trip or covers several aspects."""

SEARCH_JUDGE_USER = """\
Agent's search request:
{request}

Ground-truth search arguments per aspect:
{arguments}"""

TYPE_JUDGE_SYSTEM = """\
You classify what a travel agent just said to a traveller. You get the traveller's scenario, the \
conversation so far (with notes), the agent's latest utterance, and the traveller's preferences that are \
still unrevealed, one per line as "<id> | <aspect> | <preference>".

Classify the latest utterance as exactly one type:
1: general conversation, not an ask about the traveller's preferences.
2: a concrete, explicit ask about one of the listed preferences; give that preference's id.
3: a concrete ask about something that is not in the list.
4: a vague or general ask about preferences.

Reply with one JSON object and nothing else:
{"type": 1 | 2 | 3 | 4, "preference_id": "<Pk>" or null}
Give a preference_id only for type 2."""

TYPE_JUDGE_USER = """\
Scenario:
{scenario}

Conversation so far:
{history}

Agent's latest utterance:
{utterance}

Unrevealed preferences:
{preferences}"""

PREFERENCE_REVEAL_SYSTEM = """\
You are the traveller in a conversation with a travel agent. The agent has just asked about one of your \
preferences. Reply naturally and briefly as the traveller, and convey this preference only indirectly: \
describe your situation or needs as the implicit hint suggests, without stating the preference outright.

Reply with one JSON object and nothing else:
{"thought": "<your short reasoning>", "response": "<what the traveller says>"}"""

PROACTIVE_REVEAL_SYSTEM = """\
You are the traveller in a conversation with a travel agent. The agent has talked around your real needs \
for a while. Reply to the agent's latest utterance naturally and briefly as the traveller and, unprompted, \
hint at the preference below indirectly, as the implicit hint suggests, without stating it outright.

Reply with one JSON object and nothing else:
{"thought": "<your short reasoning>", "response": "<what the traveller says>"}"""

REVEAL_USER = """\
Scenario:
{scenario}

Conversation so far:
{history}

Agent's latest utterance:
{utterance}

Preference to convey: {preference}
Implicit hint: {implicit}"""

NATURAL_REPLY_SYSTEM = """\
You are the traveller in a conversation with a travel agent. Reply briefly and neutrally to the agent's \
latest utterance as the traveller. Do not reveal any preference; if the agent asks about a preference, \
say you have none.

Reply with one JSON object and nothing else:
{"thought": "<your short reasoning>", "response": "<what the traveller says>"}"""

NATURAL_REPLY_USER = """\
Scenario:
{scenario}

Conversation so far:
{history}

Agent's latest utterance:
{utterance}"""


def format_history(history: Sequence[Mapping[str, Any]]) -> str:
    """The conversation as the judges read it: one `[role] content (note: ...)` line per entry."""
    if not history:
        return "(no conversation yet)"
    lines = []
    for entry in history:
        line = f"[{entry.get('role', '')}] {entry.get('content', '')}"
        if entry.get("note"):
            line += f" (note: {entry['note']})"
        lines.append(line)
    return "\n".join(lines)


def format_preferences(prefs: Iterable[Preference]) -> str:
    """Available preferences as `<Pk> | <aspect> | <preference_text>` lines."""
    lines = [f"{p.pid} | {p.aspect} | {p.text}" for p in prefs]
    return "\n".join(lines) if lines else "(none)"


def search_judge_user(request: str, scenario: Scenario) -> str:
    """The search judge's user message: the request and every aspect's arguments as indented JSON."""
    blocks = [
        f"Aspect: {name}\n{json.dumps(scenario.aspects[name].arguments, indent=4, ensure_ascii=False)}"
        for name in scenario.dimensions
    ]
    return SEARCH_JUDGE_USER.format(request=request, arguments="\n\n".join(blocks))


def type_judge_user(
    scenario: Scenario, history: Sequence[Mapping[str, Any]], utterance: str, prefs: Iterable[Preference]
) -> str:
    """The type judge's user message."""
    return TYPE_JUDGE_USER.format(
        scenario=scenario.scenario,
        history=format_history(history),
        utterance=utterance,
        preferences=format_preferences(prefs),
    )


def reveal_user(
    scenario: Scenario, history: Sequence[Mapping[str, Any]], utterance: str, pref: Preference
) -> str:
    """The user message of both reveal roles."""
    return REVEAL_USER.format(
        scenario=scenario.scenario,
        history=format_history(history),
        utterance=utterance,
        preference=pref.text,
        implicit=pref.implicit,
    )


def natural_reply_user(scenario: Scenario, history: Sequence[Mapping[str, Any]], utterance: str) -> str:
    """The natural-reply role's user message."""
    return NATURAL_REPLY_USER.format(
        scenario=scenario.scenario, history=format_history(history), utterance=utterance
    )


# ---------------------------------------------------------------------------------------------- validators

_CAR_RENTAL_NAMES = {"car_rental", "rental_car"}


def normalize_aspect(name: str) -> str:
    """Lower-case, spaces (and hyphens) to underscores; 'car rental' and 'rental car' become rental_car."""
    key = re.sub(r"[\s\-]+", "_", name.strip().lower())
    return "rental_car" if key in _CAR_RENTAL_NAMES else key


def validate_search_judgement(value: dict[str, Any]) -> tuple[str, str | None]:
    """(label, aspect) of a search-judge reply; raises on a reply that must be retried."""
    raw = value["alignment_judgement"]
    if isinstance(raw, bool):
        label = "True" if raw else "False"
    elif isinstance(raw, str):
        key = raw.strip().casefold()
        label = {"true": "True", "yes": "True", "false": "False", "no": "False", "n/a": "N/A"}.get(key, "")
        if not label:
            raise ValueError(f"alignment_judgement {raw!r} is not one of {SEARCH_LABELS}")
    else:
        raise TypeError(f"alignment_judgement must be a string or boolean, got {type(raw).__name__}")
    aspect = value.get("alignment_aspect")
    if label == "True":
        if not isinstance(aspect, str) or not aspect.strip():
            raise ValueError("a True judgement needs alignment_aspect")
        return label, normalize_aspect(aspect)
    return label, normalize_aspect(aspect) if isinstance(aspect, str) and aspect.strip() else None


def validate_type_judgement(value: dict[str, Any]) -> tuple[int, str | None]:
    """(type, preference_id) of a type-judge reply; raises on a reply that must be retried."""
    raw = value["type"]
    if isinstance(raw, bool):
        raise TypeError("type must be 1, 2, 3 or 4, got a boolean")
    if isinstance(raw, str) and raw.strip().isdigit():
        kind = int(raw.strip())
    elif isinstance(raw, int):
        kind = raw
    elif isinstance(raw, float) and raw.is_integer():
        kind = int(raw)
    else:
        raise ValueError(f"type must be 1, 2, 3 or 4, got {raw!r}")
    if kind not in UTTERANCE_TYPES:
        raise ValueError(f"type must be 1, 2, 3 or 4, got {kind}")
    pid = value.get("preference_id")
    # A missing or malformed id is not a retry reason: type 2 without a usable id counts as type 1.
    return kind, pid.strip().upper() if isinstance(pid, str) and pid.strip() else None


def validate_reply(value: dict[str, Any]) -> str:
    """The traveller's `response` text of a reveal or natural reply; raises when it is missing or empty."""
    response = value["response"]
    if not isinstance(response, str) or not response.strip():
        raise ValueError("response must be a non-empty string")
    return response.strip()


# ---------------------------------------------------------------------------------------------- scripted

SEARCH_KEYWORDS: dict[str, tuple[str, ...]] = {
    "flight": ("flight", "fly", "airline", "plane"),
    "hotel": ("hotel",),
    "apartment": ("apartment", "airbnb", "flat"),
    "rental_car": ("car", "rental", "rent"),
    "restaurant": ("restaurant", "dinner", "lunch", "dine", "eat"),
}
#: Attribute words that make a question concrete (type 3 when it matches no available preference).
ATTRIBUTE_WORDS = frozenset(
    ("price", "cost", "budget", "rating", "review", "layover", "stop", "airline", "seat", "cuisine")
    + ("amenity", "insurance", "brand", "room", "bed", "time", "location", "parking", "breakfast", "wifi")
)
#: Words of a vague ask about preferences (type 4).
VAGUE_WORDS = frozenset({"prefer", "preference", "requirement", "anything"})
#: Type 2 needs at least this many shared content words with one available preference.
TYPE2_MIN_OVERLAP = 2

_TOKEN_RE = re.compile(r"[a-z0-9]+")


def word_forms(text: str) -> set[str]:
    """Lower-case alphanumeric tokens plus their singulars ('stops' -> 'stop', 'amenities' -> 'amenity')."""
    forms: set[str] = set()
    for token in _TOKEN_RE.findall(text.lower()):
        forms.add(token)
        if len(token) > 4 and token.endswith("ies"):
            forms.add(token[:-3] + "y")
        elif len(token) > 3 and token.endswith("s"):
            forms.add(token[:-1])
    return forms


def named_aspects(request: str) -> list[str]:
    """The aspects whose keywords occur as words of the request (canonical order)."""
    forms = word_forms(request)
    return [aspect for aspect, words in SEARCH_KEYWORDS.items() if forms.intersection(words)]


def argument_texts(value: Any) -> list[str]:
    """The texts that must occur in a request for one argument value (lists and objects element-wise)."""
    if value is None:
        return []
    if isinstance(value, bool):
        return [str(value).lower()]
    if isinstance(value, int):
        return [str(value)]
    if isinstance(value, float):
        return [str(int(value)) if value.is_integer() else str(value)]
    if isinstance(value, Mapping):
        return [t for v in value.values() for t in argument_texts(v)]
    if isinstance(value, list | tuple):
        return [t for v in value for t in argument_texts(v)]
    return [str(value)]


def arguments_present(request: str, arguments: Mapping[str, Any]) -> bool:
    """Whether every ground-truth argument value occurs in the request (case-insensitive substrings)."""
    text = request.lower()
    return all(t.lower() in text for v in arguments.values() for t in argument_texts(v))


@dataclass(frozen=True)
class SearchJudgement:
    """A search judge's verdict: label True/False/N/A and the aspect it names (if any)."""

    label: str
    aspect: str | None


def scripted_search_judge(request: str, scenario: Scenario) -> SearchJudgement:
    """Keyword table -> exactly one aspect -> True iff all its argument values occur in the request."""
    named = named_aspects(request)
    if len(named) != 1:
        return SearchJudgement("N/A", None)
    aspect = named[0]
    data = scenario.aspects.get(aspect)
    if data is None:  # an aspect the trip does not have counts as False
        return SearchJudgement("False", aspect)
    return SearchJudgement("True" if arguments_present(request, data.arguments) else "False", aspect)


def preference_overlap(utterance: str, pref: Preference) -> int:
    """s_p = |CW(utterance) ∩ CW(subcategory + ' ' + preference_text)|."""
    return len(content_words(utterance) & content_words(f"{pref.subcategory} {pref.text}"))


def scripted_type_judge(utterance: str, available: Sequence[Preference]) -> tuple[int, str | None]:
    """Type 2 (best overlap >= 2, ties to the lowest Pk), else 3 (a concrete '?' ask), 4 (vague) or 1."""
    best: Preference | None = None
    best_score = 0
    for pref in sorted(available, key=lambda p: int(p.pid[1:])):
        score = preference_overlap(utterance, pref)
        if score > best_score:
            best, best_score = pref, score
    if best is not None and best_score >= TYPE2_MIN_OVERLAP:
        return 2, best.pid
    forms = word_forms(utterance)
    if "?" in utterance and forms & ATTRIBUTE_WORDS:
        return 3, None
    if forms & VAGUE_WORDS:
        return 4, None
    return 1, None


def scripted_proactive_reply(pref: Preference) -> str:
    """The scripted proactive reveal: 'By the way, ' + the implicit elicitation text."""
    return SCRIPTED_PROACTIVE_PREFIX + pref.implicit
