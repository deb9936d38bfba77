"""Privileged scripted solver of the Travel gym, used to write SFT demonstrations.

It knows the hidden scenario: it searches each aspect with exactly its arguments, asks one concrete
question per preference it has room for (naming the preference's subcategory, never its content), and
recommends the best option of each aspect.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from userrl.envs.base import MultiTurnEnv, Task
from userrl.envs.solving import play_episode
from userrl.envs.travel.env import SEARCH_BACKEND_ISSUE
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


def _allocate(counts: list[int], budget: int) -> list[int]:
    """Questions per aspect: round-robin over aspects until the budget or the preferences run out."""
    asked = [0] * len(counts)
    while budget > 0 and any(a < c for a, c in zip(asked, counts, strict=True)):
        for i, count in enumerate(counts):
            if budget > 0 and asked[i] < count:
                asked[i] += 1
                budget -= 1
    return asked


class TravelSolver:
    """Plays one Travel episode with privileged knowledge: per aspect, search, ask, recommend the best."""

    def __init__(self, task: Task, rng: np.random.Generator, max_steps: int = 16) -> None:
        scenario = parse_scenario(task.item_key, task.data["scenario"])
        dims = list(scenario.dimensions)
        by_aspect = {d: [p for p in scenario.preferences if p.dimension == d] for d in dims}
        budget = max_steps - 2 * len(dims)
        asked = _allocate([len(by_aspect[d]) for d in dims], budget)
        self._plan: list[tuple[str, str]] = []
        for aspect, n_questions in zip(dims, asked, strict=True):
            data = scenario.aspects[aspect]
            self._plan.append(("search", search_request(aspect, data.arguments)))
            prefs = by_aspect[aspect]
            # Which preferences to ask when there is no room for all: a random choice, asked in file order.
            picks = sorted(rng.choice(len(prefs), size=n_questions, replace=False).tolist())
            for i in picks:
                template = int(rng.integers(len(QUESTION_TEMPLATES)))
                self._plan.append(("action", preference_question(prefs[i], template)))
            self._plan.append(("answer", data.best_id))
        self._step = 0
        self._last: tuple[str, str] | None = None

    def next_action(self, last_feedback: str | None) -> tuple[str, str]:
        """The next (choice, content); a search that hit the backend failure is repeated."""
        if self._last is not None and self._last[0] == "search" and last_feedback == SEARCH_BACKEND_ISSUE:
            return self._last
        action = self._plan[self._step] if self._step < len(self._plan) else self._plan[-1]
        self._step += 1
        self._last = action
        return action


def solve_episode(
    env: MultiTurnEnv, task: Task, rng: np.random.Generator
) -> list[tuple[str, str, str, float]]:
    """Reset env on task and play the solver to the end: one (choice, content, feedback, reward) per step."""
    return play_episode(env, task, TravelSolver(task, rng, max_steps=env.max_steps))
