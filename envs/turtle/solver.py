"""Observation-grounded scripted solver of the Turtle gym, used to write SFT demonstrations.

The hidden story only chooses the plan: which yes/no questions to ask. The story the solver finally
tells is composed of facts confirmed in the transcript only, never of the hidden bottom: it asks one
question per key point of the rubric ("Is it true that the audience were deaf students?") and tells, as
its story, exactly the propositions the host answered "Yes", in rubric order. Points the host did not
confirm stay out of the story, so such a demonstration earns only the weight of the confirmed points
(with the scripted host, every builtin point is confirmed and the grounded story scores 1.0). When the
host confirms nothing, there is no story to justify and the solver raises `UngroundedTask`.
"""

from __future__ import annotations

import re
from typing import ClassVar

import numpy as np

from userrl.envs.base import Task
from userrl.envs.solving import UngroundedTask

#: Yes/no question forms that put one proposition to the host; {p} is the proposition.
QUESTION_TEMPLATES: tuple[str, ...] = (
    "Is it true that {p}?",
    "Did it happen that {p}?",
    "Am I right that {p}?",
)
#: A rubric statement's grading frame, "The story reveals that ..."; what follows it is the proposition.
_FRAME = re.compile(
    r"^the (?:story|answer|explanation)\s+(?:\w+\s+){0,2}?"
    r"(?:reveals?|includes?|explains?|mentions?|states?|clarifies|specifies|implies|shows?|describes?|"
    r"conveys?|concludes?)\s+(?:that\s+|with\s+)?",
    re.IGNORECASE,
)
_CLAUSE_BREAK = re.compile(
    r",?\s+(?:and|because|so|while|which|but|after|before|when|since|although)\s+|,\s*"
)
_QUESTION_FRAMES = tuple(
    re.compile("^" + re.escape(t).replace(re.escape("{p}"), "(?P<p>.+)") + "$") for t in QUESTION_TEMPLATES
)


def proposition(statement: str) -> str:
    """A rubric statement as a plain proposition: grading frame dropped, first letter lower-cased."""
    text = " ".join(statement.split()).rstrip(" .")
    text = _FRAME.sub("", text, count=1)
    if text[:1].isupper() and not text[1:2].isupper() and not text.startswith("I "):
        text = text[:1].lower() + text[1:]
    return text


def clauses(prop: str) -> list[str]:
    """The proposition's clauses (split at commas and conjunctions), each with at least 3 words; [] if one."""
    parts = [p.strip(" ,") for p in _CLAUSE_BREAK.split(prop)]
    parts = [p for p in parts if len(p.split()) >= 3]
    return parts if len(parts) >= 2 else []


def question_proposition(question: str) -> str | None:
    """The proposition a QUESTION_TEMPLATES question puts to the host, or None for other questions."""
    for frame in _QUESTION_FRAMES:
        match = frame.match(question.strip())
        if match:
            return match.group("p")
    return None


def sentence(prop: str) -> str:
    """A proposition as a sentence of the story."""
    return prop[:1].upper() + prop[1:] + "."


def is_yes(feedback: str | None) -> bool:
    """Whether a host reply is a Yes (its first word, case-insensitively)."""
    words = re.findall(r"[a-z]+", (feedback or "").lower())
    return bool(words) and words[0] == "yes"


class TurtleSolver:
    """Asks some of the story's exploratory key questions (when it has some), then one question per rubric
    point, then tells the story made of the points the host confirmed.

    Should the grader still find points missing, it finishes instead of repeating the same story.
    """

    #: Plans within the episode's step budget: the registry passes max_steps (env.max_steps).
    uses_step_budget: ClassVar[bool] = True

    def __init__(self, task: Task, rng: np.random.Generator, max_steps: int = 16) -> None:
        data = task.data
        rubric = data.get("rubric") or data.get("evaluation") or []
        props: list[str] = []
        for item in rubric:
            prop = proposition(str(item["statement"]))
            if prop and prop not in props:
                props.append(prop)
        self._task = task.item_key
        self._checks = [
            (QUESTION_TEMPLATES[int(rng.integers(len(QUESTION_TEMPLATES)))].format(p=p), p) for p in props
        ]
        # Room for the checks and the story; exploratory questions only where the steps allow.
        room = max(0, max_steps - 1 - len(self._checks))
        key_questions = [str(q["question"]) for q in data.get("key_questions", [])]
        explore: list[str] = []
        if key_questions and room:
            n_questions = min(room, int(rng.integers(0, len(key_questions) + 1)))
            explore = [key_questions[int(i)] for i in rng.choice(len(key_questions), size=n_questions, replace=False)]
        self._checks = self._checks[: max_steps - 1]
        self._plan: list[tuple[str, str]] = [("action", q) for q in explore] + [("action", q) for q, _ in self._checks]
        self._max_questions = max_steps - 1
        self._templates = QUESTION_TEMPLATES
        self._rng = rng
        self.confirmed: list[str] = []
        self._pending: str | None = None
        self._step = 0
        self._told = False

    def next_action(self, last_feedback: str | None) -> tuple[str, str]:
        """The next (choice, content), read off the transcript so far."""
        if self._pending is not None:
            if is_yes(last_feedback):
                self.confirmed.append(self._pending)
            elif len(self._plan) < self._max_questions:
                # Not confirmed as a whole: put its clauses to the host one by one, while steps remain.
                parts = clauses(self._pending)[: self._max_questions - len(self._plan)]
                template = self._templates[int(self._rng.integers(len(self._templates)))]
                self._plan[self._step : self._step] = [("action", template.format(p=c)) for c in parts]
        self._pending = None
        if self._step < len(self._plan):
            action = self._plan[self._step]
            self._step += 1
            self._pending = question_proposition(action[1])
            return action
        if self._told:
            return "finish", ""
        if not self.confirmed:
            raise UngroundedTask(f"turtle task {self._task!r}: the host confirmed none of the story's points")
        self._told = True
        return "answer", self.story()

    def story(self) -> str:
        """The story: the confirmed propositions, in the order asked."""
        return " ".join(sentence(p) for p in self.confirmed)

