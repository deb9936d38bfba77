"""Observation-grounded scripted solver of the Telepathy gym, used to write SFT demonstrations.

The hidden entity only chooses the plan: which narrowing questions to ask and which name to put to the
oracle last. The guess itself is always justified by the transcript: the solver names the entity only
after the oracle answered "Yes" to a question naming it ("Is it Lion?"). Should the oracle not confirm
the name, the episode cannot end in a justified guess and the solver raises `UngroundedTask` (no
demonstration), rather than guess from hidden state.
"""

from __future__ import annotations

import re

import numpy as np

from userrl.envs.base import Task
from userrl.envs.solving import PlannedSolver, UngroundedTask
from userrl.envs.telepathy import roles
from userrl.envs.telepathy.facts import article

#: Attribute -> question about one of its values; {s} is "it" or "this person".
QUESTION_TEMPLATES: dict[str, str] = {
    "size": "Is {s} {v}?",
    "colors": "Is {s} {v}?",
    "materials": "Is {s} made of {v}?",
    "found_in": "Can {s} be found in {v}?",
    "origin": "Is {s} from {v}?",
    "era": "Is {s} from the {v}?",
    "features": "Does {s} have {v}?",
    "known_for": "Is {s} known for {v}?",
    "uses": "Is {s} used for {v}?",
}
#: Broad "No" questions the solver may open with, keyed by the hypernym word they test.
CONTRAST_QUESTIONS: dict[str, str] = {
    "person": "Are you thinking of a person?",
    "animal": "Are you thinking of an animal?",
    "vehicle": "Is it a vehicle?",
}


#: Questions that put a name to the oracle; {name} is the entity's title.
CONFIRM_TEMPLATES: tuple[str, ...] = (
    "Is it {name}?",
    "Is the answer {name}?",
    "Are you thinking of {name}?",
)


def _usable(key: str, value: str) -> bool:
    # Multi-word colours ("brown spots") and article-led materials ("a wick") make ungrammatical questions.
    if key == "colors":
        return " " not in value
    return not (key == "materials" and value.split()[0] in ("a", "an", "the"))


def attribute_questions(task: Task, rng: np.random.Generator) -> list[str]:
    """A kind question, then one or two questions about other attributes; all true of the entity."""
    attributes: dict[str, list[str]] = task.data.get("attributes") or {}
    if not attributes.get("kind"):
        return []
    is_person = "person" in roles.hypernyms(task.data["category"])
    subject = "this person" if is_person else "it"
    kinds = attributes["kind"]
    kind = kinds[int(rng.integers(len(kinds)))]
    questions = [f"Are you thinking of {article(kind)} {kind}?"]
    usable = {key: [v for v in attributes.get(key, []) if _usable(key, v)] for key in QUESTION_TEMPLATES}
    keys = [key for key, values in usable.items() if values]
    n_more = min(len(keys), int(rng.integers(1, 3)))
    # Keys stay in template order (broad before specific), so the questions narrow down naturally.
    for i in sorted(rng.choice(len(keys), size=n_more, replace=False)):
        values = usable[keys[int(i)]]
        value = values[int(rng.integers(len(values)))]
        questions.append(QUESTION_TEMPLATES[keys[int(i)]].format(s=subject, v=value))
    return questions


def contrast_question(task: Task, rng: np.random.Generator) -> str | None:
    """A broad question whose true (and scripted) answer is No, or None when none fits."""
    data = task.data
    groups = roles.hypernyms(data["category"])
    keywords = roles.entity_keywords(data["title"], data["target_entity"], data["category"])
    # Persons are animals too, biologically; asking them "an animal?" would teach a wrong No.
    candidates = [
        q
        for word, q in CONTRAST_QUESTIONS.items()
        if word not in groups
        and not (word == "animal" and "person" in groups)
        and roles.scripted_oracle(q, keywords) == "No"
    ]
    return candidates[int(rng.integers(len(candidates)))] if candidates else None


def description_questions(task: Task) -> list[str]:
    """For tasks without attributes: one question from the description's first phrase, if it is a noun
    phrase ("Is it a large wild cat?"), else none."""
    parts = task.data["target_entity"].split(" - ", 1)
    if len(parts) < 2:
        return []
    phrase = parts[1].split(",")[0].strip().rstrip(".")
    if phrase.split(" ", 1)[0].lower() not in ("a", "an", "the"):
        return []
    return [f"Is it {phrase}?"]


class TelepathySolver(PlannedSolver):
    """Asks a couple of attribute questions (sometimes opening with a broad No question), then asks whether
    it is the entity by name, and names it once the oracle said Yes.

    Tasks without structured attributes (the original data) get one question from the entity's
    description when it starts like a noun phrase. Should the judge reject the confirmed name, it finishes.
    """

    def __init__(self, task: Task, rng: np.random.Generator) -> None:
        super().__init__()
        questions = attribute_questions(task, rng)
        if not questions:
            questions = description_questions(task)
        if rng.random() < 0.5:
            opener = contrast_question(task, rng)
            if opener is not None:
                questions.insert(0, opener)
        self.title = str(task.data["title"])
        self.confirm = CONFIRM_TEMPLATES[int(rng.integers(len(CONFIRM_TEMPLATES)))].format(name=self.title)
        self._task = task.item_key
        self.plan = [("action", q) for q in questions] + [("action", self.confirm), ("answer", self.title)]

    def approve(self, action: tuple[str, str], last_feedback: str | None) -> None:
        """The guess only after a Yes to the naming question."""
        if action[0] == "answer" and not is_yes(last_feedback):
            # The oracle did not confirm the name: nothing in the transcript singles the entity out.
            raise UngroundedTask(
                f"telepathy task {self._task!r}: the oracle answered {last_feedback!r} to {self.confirm!r}"
            )


def is_yes(feedback: str | None) -> bool:
    """Whether an oracle reply is a Yes (its first word, case-insensitively)."""
    words = re.findall(r"[a-z]+", (feedback or "").lower())
    return bool(words) and words[0] == "yes"

