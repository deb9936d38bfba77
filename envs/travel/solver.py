"""Observation-grounded scripted solver of the Travel gym, used to write SFT demonstrations.

The hidden scenario only chooses the plan: which aspect to search with which arguments (every argument
value is in the traveller's opening message, checked), and which preferences to ask about (one concrete
question per preference, naming its subcategory, never its content). The recommendation itself follows
from the transcript alone: per aspect, the cheapest of the options the search showed that meets every
preference the traveller stated in reply to the questions (read by `reading.read_reply`, from the words
of the reply, not from the scenario). Privilege picks the questions so that the stated preferences single
out the best option: all of them when the steps allow, and at least a smallest set that rules out every
cheaper option. Replies the solver cannot read (other scenarios or a model-played traveller) leave no
justified recommendation, and the solver raises `UngroundedTask` instead of recommending from hidden state.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from itertools import combinations
from typing import Any, ClassVar

import numpy as np

from userrl.envs.base import Task
from userrl.envs.solving import UngroundedTask
from userrl.envs.travel.env import SEARCH_BACKEND_ISSUE
from userrl.envs.travel.reading import Reading, cheapest, read_options, read_reply
from userrl.envs.travel.roles import argument_texts
from userrl.envs.travel.schema import Preference, parse_scenario

#: Question patterns; each names the aspect and the preference's subcategory only.
QUESTION_TEMPLATES: tuple[str, ...] = (
    "Regarding the {aspect}, what matters to you about the {subcategory}?",
    "For the {aspect}, do you have any wishes concerning the {subcategory}?",
    "What would you like in terms of {subcategory} for the {aspect}?",
)


def aspect_words(aspect: str) -> str:
    """'rental_car' -> 'rental car'."""
    return aspect.replace("_", " ")


def search_request(aspect: str, arguments: Mapping[str, Any]) -> str:
    """A search request naming one aspect and every argument value, e.g. 'Search hotel: city: Paris; ...'."""
    parts = []
    for key, value in arguments.items():
        text = ", ".join(str(v) for v in value) if isinstance(value, list | tuple) else str(value)
        parts.append(f"{key.replace('_', ' ')}: {text}")
    return f"Search {aspect_words(aspect)}: " + "; ".join(parts)


def preference_question(pref: Preference, template: int = 0) -> str:
    """A concrete question about one preference's subcategory (QUESTION_TEMPLATES[template])."""
    return QUESTION_TEMPLATES[template].format(
        aspect=aspect_words(pref.dimension), subcategory=pref.subcategory
    )


def deciding_sets(
    aspect: str, options: Sequence[Mapping[str, Any]], readings: Sequence[Reading], best_id: str
) -> list[tuple[int, ...]]:
    """The smallest sets of preferences (indices into readings) whose statement makes best_id the
    cheapest fitting option; [] when not even all of them do."""
    for size in range(len(readings) + 1):
        found = [
            s for s in combinations(range(len(readings)), size)
            if cheapest(aspect, options, [readings[i] for i in s]) == best_id
        ]  # fmt: skip
        if found:
            return found
    return []


class TravelSolver:
    """Plays one Travel episode: per aspect, search, ask about preferences, recommend what the replies imply.

    The questions of an aspect are planned once its options are shown: a smallest deciding set of its
    preferences (picked with rng), plus as many others as the step budget leaves after reserving, for
    every later aspect, a search, an answer and a deciding set over all its options (privileged estimate).
    """

    #: Plans within the episode's step budget: the registry passes max_steps (env.max_steps).
    uses_step_budget: ClassVar[bool] = True

    def __init__(self, task: Task, rng: np.random.Generator, max_steps: int = 16) -> None:
        scenario = parse_scenario(task.item_key, task.data["scenario"])
        self.dims = list(scenario.dimensions)
        self.rng = rng
        self.max_steps = max_steps
        self._task = task.item_key
        self.aspects = scenario.aspects
        self.prefs: dict[str, list[Preference]] = {
            d: [p for p in scenario.preferences if p.dimension == d] for d in self.dims
        }
        # Privileged, for planning only: how each preference would read once the traveller states it.
        self._hidden: dict[str, list[Reading]] = {}
        for d in self.dims:
            readings = [read_reply(d, p.implicit) for p in self.prefs[d]]
            if any(r is None for r in readings):
                raise UngroundedTask(f"travel task {task.item_key!r}: a {d} preference is phrased in words the "
                                     "solver cannot read, so no recommendation would follow from the replies")
            self._hidden[d] = [r for r in readings if r is not None]
        prompt = " ".join(m["content"] for m in task.prompt)
        for d in self.dims:
            missing = [t for t in argument_texts(self.aspects[d].arguments) if t not in prompt]
            if missing:
                raise UngroundedTask(f"travel task {task.item_key!r}: {d} search arguments {missing} are not "
                                     "in the traveller's message")
        self._queue: list[tuple[str, Any]] = []
        self._next_aspect = 0
        self._steps = 0
        self._last: tuple[str, Any] | None = None
        self.shown: dict[str, list[dict[str, Any]]] = {}
        self.stated: dict[str, list[Reading]] = {d: [] for d in self.dims}

    @property
    def _plan(self) -> list[tuple[str, str]]:
        """The actions planned before any feedback: the first search (the rest depends on the replies)."""
        return [("search", search_request(self.dims[0], self.aspects[self.dims[0]].arguments))]

    def next_action(self, last_feedback: str | None) -> tuple[str, str]:
        """The next (choice, content), read off the transcript so far; a failed search is repeated."""
        if self._last is not None and last_feedback is not None:
            if self._last[0] == "search" and last_feedback == SEARCH_BACKEND_ISSUE:
                return self._emit(self._last)
            self._read(self._last, last_feedback)
        if not self._queue:
            if self._next_aspect >= len(self.dims):
                return "finish", ""
            aspect = self.dims[self._next_aspect]
            self._next_aspect += 1
            self._queue.append(("search", aspect))
        return self._emit(self._queue.pop(0))

    def _emit(self, item: tuple[str, Any]) -> tuple[str, str]:
        self._last = item
        self._steps += 1
        kind, what = item
        if kind == "search":
            return "search", search_request(what, self.aspects[what].arguments)
        if kind == "action":
            pref, template = what
            return "action", preference_question(pref, template)
        choice = cheapest(what, self.shown.get(what, []), self.stated[what])
        if choice is None:
            raise UngroundedTask(f"travel task {self._task!r}: no shown {what} option meets what the traveller said")
        return "answer", choice

    def _read(self, item: tuple[str, Any], feedback: str) -> None:
        kind, what = item
        if kind == "search":
            shown = read_options(feedback)
            if shown is None or shown[0] != what:
                raise UngroundedTask(f"travel task {self._task!r}: the {what} search showed no options")
            self.shown[what] = shown[1]
            self._plan_questions(what)
        elif kind == "action":
            pref, _ = what
            reading = read_reply(pref.dimension, feedback)
            if reading is not None:
                self.stated[pref.dimension].append(reading)

    def _plan_questions(self, aspect: str) -> None:
        """Queue the questions and the recommendation of an aspect whose options were just shown."""
        data = self.aspects[aspect]
        sets = deciding_sets(aspect, self.shown[aspect], self._hidden[aspect], data.best_id)
        if not sets:
            raise UngroundedTask(f"travel task {self._task!r}: the {aspect} replies cannot single out its best option")
        needed = set(sets[int(self.rng.integers(len(sets)))])
        later = self.dims[self._next_aspect :]
        reserve = 0
        for d in later:
            every = [o for group in self.aspects[d].options.values() for o in group]
            reserve += 2 + min((len(s) for s in deciding_sets(d, every, self._hidden[d], self.aspects[d].best_id)),
                               default=len(self.prefs[d]))  # fmt: skip
        left = self.max_steps - self._steps - 1  # after this aspect's recommendation
        room = max(len(needed), left - reserve)
        room = min(room, left - 2 * len(later), len(self.prefs[aspect]))
        if room < len(needed):  # no room for a deciding set: the recommendation follows from fewer replies
            needed = set(sorted(needed)[: max(room, 0)])
        others = [i for i in range(len(self.prefs[aspect])) if i not in needed]
        extra = max(0, room - len(needed))
        if extra and others:
            picks = self.rng.choice(len(others), size=min(extra, len(others)), replace=False)
            needed |= {others[int(i)] for i in picks}
        for i in sorted(needed):  # file order
            template = int(self.rng.integers(len(QUESTION_TEMPLATES)))
            self._queue.append(("action", (self.prefs[aspect][i], template)))
        self._queue.append(("answer", aspect))

