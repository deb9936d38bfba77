"""Privileged scripted solver of the Intention gym, used to write SFT demonstrations.

It knows the hidden details and asks about one at a time, most important first, with a question built from
that detail's own words. Each candidate question is checked against the scripted coverage rule, so that
it covers its target detail and no other detail still open: every detail then pays its full weight.

Grounding (issue #14): Intention demonstrations are grounded as they are. Every step is a clarifying
question (or the final `finish`); there is no answer or recommendation whose facts the transcript would
have to justify, and nothing the user said is ever used later. Privilege only chooses which questions to
ask, which is allowed; the last-resort phrasing offers the detail's example options as choices ("would it
be a, b or c?"), a question, not a claim about the user's preference.
"""

from __future__ import annotations

import numpy as np

from userrl.envs.base import Task
from userrl.envs.intention.scripted import covers, detail_keywords
from userrl.envs.intention.tasks import Detail, details_of, validate_item
from userrl.envs.solving import PlannedSolver
from userrl.envs.text import content_words

#: Fallback phrasings, tried after the detail's own example question.
TEMPLATES: tuple[str, ...] = (
    "Could you tell me about the {description}?",
    "What would you like for the {description}?",
    "Do you have a preference regarding the {description}?",
)
#: The last resort: name the detail and its example answers, which share most words with the detail.
OPTIONS_TEMPLATE = "About the {description}: would it be {options}?"


def _lower_first(text: str) -> str:
    return text[:1].lower() + text[1:] if text[:1].isupper() and not text[1:2].isupper() else text


class IntentionSolver(PlannedSolver):
    """Plays one Intention episode: one targeted question per hidden detail, then finish."""

    def __init__(self, task: Task, rng: np.random.Generator) -> None:
        super().__init__()
        data = dict(task.data)
        data.setdefault("id", task.item_key)
        record = validate_item(data, f"intention task {task.item_key!r}")
        self.details: tuple[Detail, ...] = details_of(record)
        self.keywords = tuple(detail_keywords(record["task"], d) for d in self.details)
        self.rng = rng
        # Most important first (stable: file order within a level), so a short budget still pays most.
        self.order = sorted(range(len(self.details)), key=lambda i: -self.details[i].importance)
        self.open = [i for i in self.order if self.keywords[i]]
        self.plan: list[tuple[str, str]] = []
        while self.open:
            target = self.open[0]
            question = self._question(target)
            q = content_words(question)
            if covers(q, self.keywords[target]):
                self.plan.append(("action", question))
            # Track what the scripted judge will mark covered, bundled details included; a target no
            # candidate covers is dropped, so the plan never repeats a question.
            self.open = [i for i in self.open if i != target and not covers(q, self.keywords[i])]

    def _question(self, target: int) -> str:
        """A question covering the target and no other open detail; the example question when none does."""
        detail = self.details[target]
        description = _lower_first(detail.description)
        candidates = [detail.inquiry] + [t.format(description=description) for t in TEMPLATES]
        clean = [c for c in candidates if self._covers_only(c, target)]
        if not clean:
            options = [o.strip() for o in detail.options[:3]]
            listed = ", ".join(options[:-1]) + f" or {options[-1]}" if len(options) > 1 else options[0]
            fallback = OPTIONS_TEMPLATE.format(description=description, options=listed)
            # Bundling is still better than a question that uncovers nothing.
            return fallback if covers(content_words(fallback), self.keywords[target]) else detail.inquiry
        # Vary the phrasing across demonstrations, but prefer the natural example question when it works.
        if clean[0] == detail.inquiry and self.rng.random() < 0.75:
            return clean[0]
        return clean[int(self.rng.integers(len(clean)))]

    def _covers_only(self, question: str, target: int) -> bool:
        q = content_words(question)
        return covers(q, self.keywords[target]) and not any(
            covers(q, self.keywords[i]) for i in self.open if i != target
        )
