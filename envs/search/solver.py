"""Observation-grounded scripted solver of the Search gym, used to write SFT demonstrations.

The hidden answer and search plan only choose the plan: which queries to send (one per supporting
document, with variants in reserve) and when the evidence is complete. The answer itself is read off the
transcript: the solver answers only once every supporting document has come back and the answer is
written in the search results it was shown. When its searches cannot surface the answer (for example a
real-world Bamboogle question against our offline fictional corpus), there is no justified answer and
the solver raises `UngroundedTask` (no demonstration) instead of answering from hidden state.
"""

from __future__ import annotations

import re

import numpy as np

from userrl.envs.base import Task
from userrl.envs.solving import UngroundedTask

#: The gym's default limit on searches (SearchEnv max_search_steps); later searches are refused.
MAX_SEARCHES = 5
_WORDS = re.compile(r"[a-z0-9]+")
_RESULT_TITLE = re.compile(r"^\d+\. (.+?): ", re.MULTILINE)
_CAPITALISED = re.compile(r"\b[A-Z][A-Za-z0-9'-]*")


def contains_phrase(text: str, phrase: str) -> bool:
    """Whether the lower-case a-z0-9 words of phrase occur consecutively among those of text."""
    words = _WORDS.findall(phrase.lower())
    return bool(words) and f" {' '.join(words)} " in f" {' '.join(_WORDS.findall(text.lower()))} "


def result_titles(feedback: str) -> list[str]:
    """The titles of the numbered results of one search feedback."""
    return _RESULT_TITLE.findall(feedback)


class SearchSolver:
    """Searches one query per supporting document, then answers with what the results say.

    Builtin tasks carry a search plan whose every query finds its document among the top results; the
    option asked first is picked with rng, and a query whose names (capitalised words) already appeared in
    the transcript is preferred, so a second hop follows the bridge the first result named. Should a
    query miss its document, another option of the same hop is tried. Tasks without a plan (source
    "userrl") search the question itself.
    """

    def __init__(self, task: Task, rng: np.random.Generator) -> None:
        data = task.data
        plan = data.get("search_plan") or [[data["question"]]]
        self._hops: list[list[str]] = []
        for options in plan:
            options = [str(o) for o in options]
            first = int(rng.integers(len(options)))
            self._hops.append([options[first]] + options[:first] + options[first + 1 :])
        supporting = data.get("supporting") or []
        # The document each hop must bring back; None (no plan) when any result will do.
        self._targets: list[str | None] = [str(t) for t in supporting] if len(supporting) == len(plan) else [None]
        self.answer = str(data["answer"])
        self._task = task.item_key
        self._transcript = " ".join(m["content"] for m in task.prompt)
        self._results: list[str] = []  # the feedback of every search sent
        self._hop = 0
        self._searches = 0
        self._last: str | None = None
        self._answered = False

    def next_action(self, last_feedback: str | None) -> tuple[str, str]:
        """The next (choice, content), read off the transcript so far."""
        if last_feedback is not None:
            self._transcript += "\n" + last_feedback
            if self._last == "search":
                self._read_results(last_feedback)
        if self._answered:
            return "finish", ""  # the grounded answer was judged wrong: do not guess another
        if self._hop >= len(self._hops) and any(contains_phrase(r, self.answer) for r in self._results):
            self._answered, self._last = True, "answer"
            return "answer", self.answer
        if self._hop < len(self._hops) and self._hops[self._hop] and self._searches < MAX_SEARCHES:
            self._searches += 1
            self._last = "search"
            return "search", self._pick_query()
        raise UngroundedTask(f"search task {self._task!r}: the search results never state the answer")

    def _read_results(self, feedback: str) -> None:
        self._results.append(feedback)
        target = self._targets[self._hop] if self._hop < len(self._targets) else None
        if target is None or target in result_titles(feedback):
            self._hop += 1

    def _pick_query(self) -> str:
        options = self._hops[self._hop]
        grounded = [o for o in options if all(contains_phrase(self._transcript, w) for w in _CAPITALISED.findall(o))]
        query = (grounded or options)[0]
        options.remove(query)
        return query

