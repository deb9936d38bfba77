"""Observation-grounded scripted solver of the Persuade gym, used to write SFT demonstrations.

Persuade has no hidden answer: a demonstration is a sequence of arguments, and which arguments to make
(the strategy) may be chosen with privilege. What the agent cannot know is the persuadee's opening essay:
it is never shown (the prompt holds only the claim), so an argument must not quote it or say what the
other side "argues", "claims" or "mentions" beyond the claim itself and its visible replies.

On our own claims the solver plays the hand-written counterarguments, each a relevant, evidence-backed
rebuttal of the usual case for the claim. They were written against the hidden essay ("You argue that
..."), so the solver rewrites every such attribution into one to the claim's supporters ("Supporters of
the claim argue that ..."): the point rebutted is the same, but nobody is told what they never said. On
items without them (the original parquet rows) it fills rebuttal templates with the claim and with
quotes from what the agent has seen: the claim and the persuadee's own replies (the scripted persuadee's
fixed replies hold nothing worth quoting, so then the claim is quoted). Either way every argument meets
all five criteria of the scripted rubric, so the scripted persuadee moves two steps per argument and
gives in after three.
"""

from __future__ import annotations

import re
from collections.abc import Callable

import numpy as np

from userrl.envs.base import Task
from userrl.envs.persuade.scripted import FAIR_POINT, HINTS, NOT_CONVINCED, REBUTTAL_TERMS
from userrl.envs.solving import PlannedSolver
from userrl.envs.text import content_words

#: Generic rebuttals: {claim} is the claim (lower-cased first letter), {quote} a sentence the other side said
#: (its claim, or a sentence of its replies): they speak of its position, never of an essay it did not show.
TEMPLATES: tuple[str, ...] = (
    "You argue that {claim}, but the case rests on assumptions that deserve a closer look. You point to "
    '"{quote}", yet research on similar questions shows that outcomes depend heavily on context, and the '
    "evidence behind such claims is usually far more mixed than a single example suggests. A conclusion "
    "this strong needs stronger support.",
    "However, your position underestimates its costs. When we look at data from places that tried this "
    "approach, the promised benefits often failed to appear, while the side effects fell hardest on people "
    'with the least power to avoid them. You state that "{quote}", but that point says nothing about who '
    "pays the price or for how long.",
    "Although your position sounds convincing at first, it leaves out important alternatives. Surveys of "
    "experts and practitioners suggest that more targeted measures achieve most of the same goals with "
    'fewer drawbacks. Consider your statement that "{quote}": even if it is true, it does not show that '
    "{claim} is the best or the only answer.",
    "You claim that {claim}, whereas the long-term picture points the other way. Studies that follow "
    "outcomes over many years often find early gains fading while unintended consequences grow. Your own "
    'remark that "{quote}" describes a short-term effect, and a position should be judged by its lasting '
    "results rather than by first impressions.",
    "Contrary to your position, the people most affected often see things differently. Reports that gather "
    "their experiences describe trade-offs that outside observers tend to miss, such as lost choice, new "
    'costs and practical obstacles. When you say "{quote}", you speak for them without showing that they '
    "agree, which weakens the case considerably.",
    "However, your position also relies on a comparison that does not hold. According to the evidence from cases "
    "that really are similar, the results vary widely and depend on details you do not address. The point "
    'that "{quote}" is only one side of a balance, and once the other side is weighed, the claim looks far '
    "less certain.",
)
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")
MIN_QUOTE_WORDS = 3
MAX_QUOTE_WORDS = 25
#: The scripted persuadee's fixed sentences: nothing in them is worth quoting.
STOCK_SENTENCES = frozenset(
    s for text in (FAIR_POINT, NOT_CONVINCED, *(hint for _, hint in HINTS)) for s in _SENTENCE_END.split(text)
)
#: The scripted rubric's rebuttal test (c3): one of its terms as a whole word or phrase.
REBUTTAL_RE = re.compile(r"\b(?:" + "|".join(r"\s+".join(map(re.escape, t.split())) for t in REBUTTAL_TERMS) + r")\b")
#: Past participles of the verbs in "the benefits you list" -> "the benefits usually listed".
_PARTICIPLES = {"list": "listed", "describe": "described", "mention": "mentioned", "cite": "cited"}
#: Attributions to the hidden essay -> attributions to the claim's supporters (same point, nobody misquoted).
_ATTRIBUTIONS: tuple[tuple[re.Pattern[str], str | Callable[[re.Match[str]], str]], ...] = (
    (re.compile(r"(^|[.!?]\s+)You (argue|claim|mention|compare|say|said|point to|suggest|insist|note|cite)\b"),
     r"\1Supporters of this view \2"),
    (re.compile(r"\byou (list|describe|mention|cite)\b"), lambda m: "usually " + _PARTICIPLES[m.group(1)]),
    (re.compile(r"\b[Yy]ou (argue|claim|compare|say|said|point to|suggest|insist|note)\b"),
     r"supporters of this view \1"),
    (re.compile(r"\byou (worry|care|want)\b"), r"supporters \1"),
    (re.compile(r"\byou leave out\b"), "this view leaves out"),
)  # fmt: skip


def _lower_first(text: str) -> str:
    text = text.strip().rstrip(".!")
    return text[:1].lower() + text[1:] if text[:1].isupper() and not text[1:2].isupper() else text


def quotes(text: str, claim: str) -> list[str]:
    """Sentences of text worth quoting (at least 3 content words), shortened; the claim if none."""
    out = []
    for sentence in _SENTENCE_END.split(" ".join(text.split())):
        words = sentence.split()
        if len(content_words(sentence)) < MIN_QUOTE_WORDS:
            continue
        text = " ".join(words[:MAX_QUOTE_WORDS]).rstrip(".!?,;:")
        out.append(text + ("..." if len(words) > MAX_QUOTE_WORDS else ""))
    return out or [_lower_first(claim)]


def unattributed(argument: str) -> str:
    """The argument with every attribution to the other side's (unseen) essay given to the claim's supporters."""
    rebuts = REBUTTAL_RE.search(argument.lower()) is not None
    for pattern, replacement in _ATTRIBUTIONS:
        argument = pattern.sub(replacement, argument)
    if rebuts and REBUTTAL_RE.search(argument.lower()) is None:
        # It rebutted by naming the other side ("You mention X, yet ..."); keep it a rebuttal.
        argument = argument.replace(", yet ", ", but ", 1)
        if REBUTTAL_RE.search(argument.lower()) is None:
            argument = "However, " + argument[:1].lower() + argument[1:]
    return argument


def visible_text(feedback: list[str]) -> str:
    """What the persuadee said in its replies, less the scripted persuadee's fixed sentences."""
    sentences = [s for f in feedback for s in _SENTENCE_END.split(" ".join(f.split()))]
    return " ".join(s for s in sentences if s and s not in STOCK_SENTENCES)


def template_arguments(claim: str, seen: str) -> list[str]:
    """One filled rebuttal template per TEMPLATES entry, each quoting a different sentence of `seen` (what
    the persuadee said) where possible, else the claim."""
    pool = quotes(seen, claim)
    return [
        t.format(claim=_lower_first(claim), quote=pool[i % len(pool)].replace('"', "'"))
        for i, t in enumerate(TEMPLATES)
    ]


class PersuadeSolver(PlannedSolver):
    """Plays one Persuade episode: the item's counterarguments (if any), then the filled templates."""

    def __init__(self, task: Task, rng: np.random.Generator) -> None:
        super().__init__()
        data = task.data
        self.claim = str(data["claim"])
        self.own = [unattributed(str(c)) for c in data.get("counterarguments") or []]
        # Without hand-written rebuttals, start the template cycle at a random point for varied demos.
        self._start = 0 if self.own else int(rng.integers(len(TEMPLATES)))
        self._feedback: list[str] = []

    @property
    def plan(self) -> list[tuple[str, str]]:  # type: ignore[override]  # computed from the replies seen
        """The arguments, as they would be made after the replies seen so far."""
        generic = template_arguments(self.claim, visible_text(self._feedback))
        generic = generic[self._start :] + generic[: self._start]
        return [("answer", a) for a in self.own + generic]

    def observe(self, last_feedback: str | None) -> None:
        """Keep each reply: the generic arguments quote what the persuadee said."""
        if last_feedback is not None:
            self._feedback.append(last_feedback)
