"""Privileged scripted solver of the Persuade gym, used to write SFT demonstrations.

On our own claims it plays the hand-written counterarguments, each a relevant, evidence-backed rebuttal of
the persuadee's opening argument. On items without them (the original parquet rows) it fills rebuttal
templates with the claim and quotes from that argument. Either way every argument meets all five criteria
of the scripted rubric, so the scripted persuadee moves two steps per argument and gives in after three.
"""

from __future__ import annotations

import re

import numpy as np

from userrl.envs.base import MultiTurnEnv, Task
from userrl.envs.solving import play_episode
from userrl.envs.text import content_words

#: Generic rebuttals: {claim} is the claim (lower-cased first letter), {quote} a sentence of the argument.
TEMPLATES: tuple[str, ...] = (
    "You argue that {claim}, but the case rests on assumptions that deserve a closer look. You point to "
    '"{quote}", yet research on similar questions shows that outcomes depend heavily on context, and the '
    "evidence behind such claims is usually far more mixed than a single example suggests. A conclusion "
    "this strong needs stronger support.",
    "However, your position underestimates its costs. When we look at data from places that tried this "
    "approach, the promised benefits often failed to appear, while the side effects fell hardest on people "
    'with the least power to avoid them. You mention that "{quote}", but that point says nothing about who '
    "pays the price or for how long.",
    "Although your argument sounds convincing at first, it leaves out important alternatives. Surveys of "
    "experts and practitioners suggest that more targeted measures achieve most of the same goals with "
    'fewer drawbacks. Consider your statement that "{quote}": even if it is true, it does not show that '
    "{claim} is the best or the only answer.",
    "You claim that {claim}, whereas the long-term picture points the other way. Studies that follow "
    "outcomes over many years often find early gains fading while unintended consequences grow. Your own "
    'remark that "{quote}" describes a short-term effect, and a position should be judged by its lasting '
    "results rather than by first impressions.",
    "Contrary to your argument, the people most affected often see things differently. Reports that gather "
    "their experiences describe trade-offs that outside observers tend to miss, such as lost choice, new "
    'costs and practical obstacles. When you say "{quote}", you speak for them without showing that they '
    "agree, which weakens the case considerably.",
    "Your argument also relies on a comparison that does not hold. According to the evidence from cases "
    "that really are similar, the results vary widely and depend on details you do not address. The point "
    'that "{quote}" is only one side of a balance, and once the other side is weighed, the claim looks far '
    "less certain.",
)
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")
MIN_QUOTE_WORDS = 3
MAX_QUOTE_WORDS = 25


def _lower_first(text: str) -> str:
    text = text.strip().rstrip(".!")
    return text[:1].lower() + text[1:] if text[:1].isupper() and not text[1:2].isupper() else text


def quotes(argument: str, claim: str) -> list[str]:
    """Sentences of the argument worth quoting (at least 3 content words), shortened; the claim if none."""
    out = []
    for sentence in _SENTENCE_END.split(" ".join(argument.split())):
        words = sentence.split()
        if len(content_words(sentence)) < MIN_QUOTE_WORDS:
            continue
        text = " ".join(words[:MAX_QUOTE_WORDS]).rstrip(".!?,;:")
        out.append(text + ("..." if len(words) > MAX_QUOTE_WORDS else ""))
    return out or [_lower_first(claim)]


def template_arguments(claim: str, argument: str) -> list[str]:
    """One filled rebuttal template per TEMPLATES entry, each quoting a different sentence where possible."""
    pool = quotes(argument, claim)
    return [
        t.format(claim=_lower_first(claim), quote=pool[i % len(pool)].replace('"', "'"))
        for i, t in enumerate(TEMPLATES)
    ]


class PersuadeSolver:
    """Plays one Persuade episode: the item's counterarguments (if any), then the filled templates."""

    def __init__(self, task: Task, rng: np.random.Generator) -> None:
        data = task.data
        own = [str(c) for c in data.get("counterarguments") or []]
        generic = template_arguments(str(data["claim"]), str(data["argument"]))
        # Without hand-written rebuttals, start the template cycle at a random point for varied demos.
        if not own:
            start = int(rng.integers(len(generic)))
            generic = generic[start:] + generic[:start]
        self.plan: list[tuple[str, str]] = [("answer", a) for a in own + generic]
        self._step = 0

    def next_action(self, last_feedback: str | None) -> tuple[str, str]:
        """The next (choice, content); after the plan it finishes the episode."""
        action = self.plan[self._step] if self._step < len(self.plan) else ("finish", "")
        self._step += 1
        return action


def solve_episode(
    env: MultiTurnEnv, task: Task, rng: np.random.Generator
) -> list[tuple[str, str, str, float]]:
    """Reset env on task and play the solver to the end: one (choice, content, feedback, reward) per step."""
    return play_episode(env, task, PersuadeSolver(task, rng))
