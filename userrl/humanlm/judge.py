"""HumanLM's reward (docs/spec/ALGORITHMS.md §5.2 "Judge procedure", "Aggregation"): the judge prompt with a whole group's
candidates in one call, the judge's output format, retries and clamping, and two judges: `openai` (any
OpenAI-compatible model through envs/openai_client.py) and `scripted` (deterministic, offline).

The scripted judge's rule, per (row, field) and candidate (GT = the row's ground truth):

* key points: the field's ground-truth latent state split on ";" (the first 3); the response field, and
  a field with no ground-truth state (counted as `missing_ground_truth:<field>`), use the real reply
  instead, cut into at most 3 consecutive runs of sentences (the deterministic stand-in for "extract key
  points from the real reply");
* m_i: the share of key point i's content words found in the candidate (envs/text.content_words); a key
  point without content words ("Yes.") matches 1 when its normalized text occurs in the candidate, else 0;
* C = mean m_i; P = 0.5 * the share of the candidate's content words found neither in the key points nor
  in the real reply, plus 0.2 for a response more than twice as long (in words) as the real one, at most 1;
* score = max(0, min(1, C - P)), multiplied by 0.5 when the candidate holds markup (`<tag>`, a ``` fence);
  a candidate of at least 8 words copied from the context and absent from the real reply scores 0.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from userrl.envs.json_extract import JSONExtractionError, extract_json_object
from userrl.envs.llm import RoleClient
from userrl.envs.text import content_words, norm
from userrl.humanlm.fields import RESPONSE, get_field
from userrl.humanlm.format import Parsed, parse_flexible, parse_strict
from userrl.humanlm.row import Row, render_context

logger = logging.getLogger(__name__)

JUDGE_ROLE = "humanlm_judge"
#: A bad reply (malformed, empty, wrong number of candidates) is retried up to this many judge calls in all.
BAD_REPLY_ATTEMPTS = 5
#: The bonus of the ground-truth rule: a copy of the real reply scores min(1, best other + 0.1).
GROUND_TRUTH_BONUS = 0.1
MARKUP_FACTOR = 0.5

JUDGE_SYSTEM_PROMPT = """\
You are an expert judge of how well a simulated person's text matches what the real person wrote.

You get one dimension (a field) with its description, the conversation context, the real person's actual \
reply, and a numbered list of candidate texts.

First extract 1 to 3 key points from the real reply along this field's dimension. Then, for each \
candidate:
1. Compare the candidate with each key point.
2. Rate each key point's match m_i in [0, 1]: 1.0 exact; 0.7-0.9 mostly; 0.4-0.6 partial or leaning the \
right way; 0.1-0.3 very weak; 0 missed, contradicted or reversed.
3. Compute coverage C = (1/K) * sum_i m_i.
4. Set a penalty P in [0, 1] for unsupported, irrelevant or conflicting extra content: 0 none; 0.1-0.3 \
mild; 0.4-0.6 moderate; 0.7-0.9 significant; 1 mostly off-topic.
5. Score = max(0, min(1, C - P)).

Extra rules:
- For the response field, length earns nothing, and a reply much longer than the real one is penalized \
through P.
- Copying the context without quoting scores 0.
- Scores above 0.8 are reserved for clearly outstanding matches.
- Malformed or markup-wrapped content has its score multiplied by 0.5.
- When several candidates are given, compare them and give them different scores.

Reply with one JSON object and nothing else, one entry per candidate, ids as numbered:
{"key_points": ["..."], "candidates": [{"id": 1, "thought": "...", "score": 0.0}, ...]}"""


def judge_user_message(field_name: str, context: str, ground_truth: str, candidates: Sequence[str]) -> str:
    """The judge's user message: field and description, context, real reply, numbered candidates."""
    f = get_field(field_name)
    listed = "\n\n".join(f"Candidate {i}:\n{text}" for i, text in enumerate(candidates, start=1))
    return "\n\n".join(
        [
            f"Field: {f.name}\nDescription: {f.description}",
            f"Context:\n{context}",
            f"Real reply:\n{ground_truth}",
            f"Candidates ({len(candidates)}):\n{listed}",
        ]
    )


class BadJudgeReply(ValueError):
    """A judge reply that cannot be used; `kind` is what was wrong (malformed, wrong_count, bad_ids, bad_score)."""

    def __init__(self, kind: str, detail: str) -> None:
        super().__init__(f"{kind}: {detail}")
        self.kind = kind


def clamp01(value: float) -> float:
    """value limited to [0, 1]."""
    return max(0.0, min(1.0, value))


def parse_judge_reply(text: str, n: int) -> tuple[list[str], list[float], int]:
    """(key points, the n scores in candidate order, how many were clamped); BadJudgeReply otherwise."""
    try:
        obj = extract_json_object(text)
    except JSONExtractionError as exc:
        raise BadJudgeReply("malformed", str(exc)) from None
    raw_points = obj.get("key_points")
    points = [str(p) for p in raw_points] if isinstance(raw_points, list) else []
    entries = obj.get("candidates")
    if not isinstance(entries, list):
        raise BadJudgeReply("malformed", "no candidates list")
    if len(entries) != n:
        raise BadJudgeReply("wrong_count", f"{len(entries)} candidates for {n}")
    scores: dict[int, float] = {}
    clamped = 0
    for entry in entries:
        if not isinstance(entry, Mapping):
            raise BadJudgeReply("malformed", "a candidate entry is not an object")
        ident, score = entry.get("id"), entry.get("score")
        if isinstance(ident, str) and ident.strip().isdigit():
            ident = int(ident)
        if not isinstance(ident, int) or isinstance(ident, bool) or not 1 <= ident <= n or ident in scores:
            raise BadJudgeReply("bad_ids", f"id {ident!r} is not a fresh number in 1..{n}")
        if isinstance(score, str):
            with contextlib.suppress(ValueError):
                score = float(score)
        if not isinstance(score, int | float) or isinstance(score, bool) or math.isnan(score):
            raise BadJudgeReply("bad_score", f"score {score!r} of candidate {ident} is not a number")
        value = clamp01(float(score))
        clamped += value != score
        scores[ident] = value
    return points, [scores[i] for i in range(1, n + 1)], clamped


@dataclass
class JudgeOutcome:
    """What one judge did for one (row, field) and its unique candidates."""

    scores: list[float]
    key_points: list[str] = field(default_factory=list)
    stats: Counter[str] = field(default_factory=Counter)
    #: A call (or one of its num_repeats) never gave a usable reply: its 0s are the spec's "final failure".
    failed: bool = False


class Judge(Protocol):
    """Scores unique candidates of one (row, field) against the real reply, all in one go."""

    #: Reported next to every number this judge produced (e.g. "openai:gpt-5-mini@t=1.0", "scripted").
    name: str

    async def judge(self, row: Row, field_name: str, candidates: Sequence[str]) -> JudgeOutcome:
        """One score in [0, 1] per candidate, in order, with counters of what happened."""
        ...


class OpenAIJudge:
    """The `openai` judge: any OpenAI-compatible model through a RoleClient (envs/openai_client.py).

    Transport failures (rate limits included) are retried by the client itself (its `attempts`, with
    exponential backoff); a bad reply is retried here, BAD_REPLY_ATTEMPTS calls in all. A call that never
    yields a usable reply scores 0 for its candidates (docs/spec/ALGORITHMS.md §5.2: "a final failure scores 0"), counted as
    `judge_failures`. num_repeats > 1 averages that many calls.
    """

    def __init__(
        self,
        client: RoleClient,
        name: str = "openai",
        *,
        temperature: float | None = None,
        max_tokens: int | None = None,
        num_repeats: int = 1,
        bad_reply_attempts: int = BAD_REPLY_ATTEMPTS,
    ) -> None:
        if num_repeats < 1 or bad_reply_attempts < 1:
            raise ValueError("num_repeats and bad_reply_attempts must be at least 1")
        self.client, self.name = client, name
        self.temperature, self.max_tokens = temperature, max_tokens
        self.num_repeats, self.bad_reply_attempts = num_repeats, bad_reply_attempts

    async def judge(self, row: Row, field_name: str, candidates: Sequence[str]) -> JudgeOutcome:
        """The mean over num_repeats calls of each candidate's clamped score."""
        outcome = JudgeOutcome([0.0] * len(candidates))
        if not candidates:
            return outcome
        user = judge_user_message(field_name, render_context(row.context), row.ground_truth, candidates)
        runs = await asyncio.gather(*(self._one_call(user, len(candidates)) for _ in range(self.num_repeats)))
        for points, scores, stats in runs:
            outcome.failed = outcome.failed or bool(stats["judge_failures"])
            outcome.stats.update(stats)
            outcome.key_points = outcome.key_points or points
            outcome.scores = [a + b / self.num_repeats for a, b in zip(outcome.scores, scores, strict=True)]
        return outcome

    async def _one_call(self, user: str, n: int) -> tuple[list[str], list[float], Counter[str]]:
        stats: Counter[str] = Counter()
        for attempt in range(1, self.bad_reply_attempts + 1):
            stats["judge_calls"] += 1
            text, call = await self.client.complete_text(
                JUDGE_ROLE,
                JUDGE_SYSTEM_PROMPT,
                user,
                max_tokens=self.max_tokens,
                temperature=self.temperature,
            )
            stats["transport_retries"] += max(0, call.attempts - 1)
            if text is None:
                # The client already spent its own attempts (with backoff): a final failure.
                stats["judge_failures"] += 1
                stats[f"judge_failures:{call.error}"] += 1
                logger.warning(
                    "judge %s failed after %d attempt(s): %s; its candidates score 0",
                    self.name,
                    call.attempts,
                    call.error,
                )
                return [], [0.0] * n, stats
            try:
                points, scores, clamped = parse_judge_reply(text, n)
            except BadJudgeReply as bad:
                stats[f"bad_reply:{bad.kind}"] += 1
                if attempt < self.bad_reply_attempts:
                    stats["judge_retries"] += 1
                logger.info(
                    "judge %s reply %d/%d unusable: %s", self.name, attempt, self.bad_reply_attempts, bad
                )
                continue
            stats["clamped_scores"] += clamped
            return points, scores, stats
        stats["judge_failures"] += 1
        stats["judge_failures:bad_reply"] += 1
        logger.warning(
            "judge %s gave %d unusable replies; its candidates score 0", self.name, self.bad_reply_attempts
        )
        return [], [0.0] * n, stats


def make_openai_judge(
    llm: Mapping[str, Any] | Any = None, purpose: str = "train", num_repeats: int = 1
) -> OpenAIJudge:
    """An openai judge from an `llm` spec (as the gyms take it); purpose `train` samples at temperature 1.0,
    `validation` at 0 (docs/spec/ALGORITHMS.md §5.2), unless the spec sets temperature; max_tokens 4096 unless set."""
    from userrl.envs.openai_client import LLMConfig, OpenAIRoleClient

    if purpose not in ("train", "validation"):
        raise ValueError(f"purpose must be 'train' or 'validation', got {purpose!r}")
    defaults = {
        "temperature": 1.0 if purpose == "train" else 0.0,
        "max_tokens": 4096,
        "timeout_s": 120.0,
        # Rate limits: at most 10 tries with exponential backoff (docs/spec/ALGORITHMS.md §5.2).
        "attempts": 10,
        "retry_pause_s": 1.0,
        "retry_backoff": 2.0,
    }
    spec = llm if isinstance(llm, LLMConfig) else LLMConfig.from_spec({**defaults, **dict(llm or {})})
    name = f"openai:{spec.model}@t={spec.temperature:g}"
    return OpenAIJudge(OpenAIRoleClient(spec), name, num_repeats=num_repeats)


# ---------------------------------------------------------------- the scripted judge

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")
_MARKUP = re.compile(r"<[A-Za-z/][^>]*>|```")
MAX_KEY_POINTS = 3
COPY_MIN_WORDS = 8
LENGTH_RATIO = 2.0
LENGTH_PENALTY = 0.2
UNSUPPORTED_WEIGHT = 0.5


def reply_key_points(reply: str, k: int = MAX_KEY_POINTS) -> list[str]:
    """The real reply cut into at most k consecutive runs of sentences (every sentence in exactly one)."""
    sentences = [s for s in _SENTENCE_END.split(" ".join(reply.split())) if s]
    if not sentences:
        return []
    k = min(k, len(sentences))
    size, extra = divmod(len(sentences), k)
    points, start = [], 0
    for i in range(k):
        end = start + size + (i < extra)
        points.append(" ".join(sentences[start:end]))
        start = end
    return points


def key_point_match(point: str, candidate: str) -> float:
    """m_i: the share of the key point's content words in the candidate (exact containment without any)."""
    words = content_words(point)
    if not words:
        return 1.0 if norm(point) and norm(point) in norm(candidate) else 0.0
    return len(words & content_words(candidate)) / len(words)


def scripted_score(
    candidate: str, key_points: Sequence[str], ground_truth: str, context: str, is_response: bool
) -> float:
    """The scripted judge's score of one candidate (the rule in the module docstring)."""
    if not key_points or not candidate.strip():
        return 0.0
    copied = norm(candidate) in norm(context) and norm(candidate) not in norm(ground_truth)
    if copied and len(candidate.split()) >= COPY_MIN_WORDS:
        return 0.0
    coverage = sum(key_point_match(p, candidate) for p in key_points) / len(key_points)
    words = content_words(candidate)
    supported = content_words(" ".join(key_points)) | content_words(ground_truth)
    penalty = UNSUPPORTED_WEIGHT * (len(words - supported) / len(words) if words else 0.0)
    if is_response and len(candidate.split()) > LENGTH_RATIO * len(ground_truth.split()):
        penalty += LENGTH_PENALTY
    score = clamp01(coverage - min(1.0, penalty))
    if _MARKUP.search(candidate):
        score *= MARKUP_FACTOR
    return round(score, 6)


class ScriptedJudge:
    """The deterministic `scripted` judge: key-point coverage minus penalty from our ground-truth states."""

    name = "scripted"

    def key_points(self, row: Row, field_name: str, stats: Counter[str] | None = None) -> list[str]:
        """The key points of (row, field): its ground-truth state's parts, else the real reply's runs."""
        get_field(field_name)
        state = row.latent_states.get(field_name) if field_name != RESPONSE else None
        if field_name != RESPONSE and not state and stats is not None:
            stats[f"missing_ground_truth:{field_name}"] += 1
        if state:
            return [p.strip() for p in state.split(";") if p.strip()][:MAX_KEY_POINTS]
        return reply_key_points(row.ground_truth)

    async def judge(self, row: Row, field_name: str, candidates: Sequence[str]) -> JudgeOutcome:
        """One deterministic score per candidate."""
        outcome = JudgeOutcome([])
        points = self.key_points(row, field_name, outcome.stats)
        outcome.key_points = points
        context = render_context(row.context)
        outcome.scores = [
            scripted_score(c, points, row.ground_truth, context, field_name == RESPONSE) for c in candidates
        ]
        outcome.stats["judge_calls"] += 1
        return outcome


def make_judge(
    kind: str, llm: Mapping[str, Any] | None = None, purpose: str = "train", num_repeats: int = 1
) -> Judge:
    """A judge by backend name: `scripted` or `openai` (with an llm spec)."""
    if kind == "scripted":
        return ScriptedJudge()
    if kind == "openai":
        return make_openai_judge(llm, purpose, num_repeats)
    raise ValueError(f"unknown judge backend {kind!r}; use 'scripted' or 'openai'")


# ---------------------------------------------------------------- aggregation


@dataclass
class GroupScore:
    """A group's rewards (one scalar per sample, for its last sampled token) and what produced them."""

    rewards: list[float]
    parses: list[Parsed]
    #: Per field: each sample's metric score (0 for an empty generation or a failed parse).
    field_scores: dict[str, list[float]]
    stats: Counter[str]
    judge: str
    #: Per sample: a judge call it was in failed for good (its score holds a final-failure 0).
    failed: list[bool] = field(default_factory=list)


def _unique(values: Sequence[str]) -> list[str]:
    return list(dict.fromkeys(values))


async def score_group(
    judge: Judge,
    row: Row,
    completions: Sequence[str],
    fields: str | Sequence[str],
    *,
    strict: bool = True,
    thinking: bool = False,
    weights: Mapping[str, float] | None = None,
) -> GroupScore:
    """Parse a GRPO group's completions for (row, fields) and score them (docs/spec/ALGORITHMS.md §5.2 "Aggregation").

    score_i = sum over the fields of weight (default 1.0) * the judge's score; an empty generation (or a
    failed strict parse) scores 0; a response equal to the real reply scores min(1, best other + 0.1).
    Each field is one judge call with the group's distinct candidates.
    """
    names = (fields,) if isinstance(fields, str) else tuple(fields)
    parse = (
        (lambda text: parse_strict(text, names, thinking))
        if strict
        else (lambda text: parse_flexible(text, names))
    )
    parses = [parse(text) for text in completions]
    stats: Counter[str] = Counter()
    stats["samples"] += len(completions)
    stats["invalid_parses"] += sum(not p.valid for p in parses)
    truth = row.ground_truth.strip()
    field_scores: dict[str, list[float]] = {}
    failed = [False] * len(parses)
    for name in names:
        values = [p.values.get(name, "").strip() for p in parses]
        stats["empty_generations"] += sum(1 for p, v in zip(parses, values, strict=True) if p.valid and not v)
        is_truth = [name == RESPONSE and v == truth for v in values]
        # Copies of the real reply are scored by the ground-truth rule, so they are not sent to the judge.
        asked = _unique([v for v, t in zip(values, is_truth, strict=True) if v and not t])
        outcome = await judge.judge(row, name, asked) if asked else JudgeOutcome([])
        stats.update(outcome.stats)
        by_text = dict(zip(asked, outcome.scores, strict=True))
        if outcome.failed:
            # Its candidates hold a final-failure 0, and a copy of the real reply is scored from theirs.
            failed = [f or v in by_text or t for f, v, t in zip(failed, values, is_truth, strict=True)]
        scores = [by_text.get(v, 0.0) if v and not t else 0.0 for v, t in zip(values, is_truth, strict=True)]
        others = [s for s, t in zip(scores, is_truth, strict=True) if not t]
        for i, t in enumerate(is_truth):
            if t:
                stats["ground_truth_matches"] += 1
                # With no other candidate to beat, the real reply itself is a perfect match.
                scores[i] = min(1.0, max(others) + GROUND_TRUTH_BONUS) if others else 1.0
        field_scores[name] = scores
    weight = weights or {}
    rewards = [
        round(sum(weight.get(name, 1.0) * field_scores[name][i] for name in names), 6)
        for i in range(len(parses))
    ]
    return GroupScore(rewards, parses, field_scores, stats, judge.name, failed)


class FieldStats:
    """Running per-field numbers over scored groups: valid rate, mean judge score, and every counter."""

    def __init__(self) -> None:
        self.samples: Counter[str] = Counter()
        self.valid: Counter[str] = Counter()
        self.score_sum: Counter[str] = Counter()
        self.counters: Counter[str] = Counter()
        self.judges: set[str] = set()

    def add(self, group: GroupScore) -> None:
        """Count one group."""
        self.judges.add(group.judge)
        self.counters.update(group.stats)
        for name, scores in group.field_scores.items():
            self.samples[name] += len(scores)
            self.valid[name] += sum(p.valid_fields().get(name, False) for p in group.parses)
            self.score_sum[name] += sum(scores)

    def summary(self, prefix: str = "humanlm") -> dict[str, float]:
        """Flat metrics: {prefix}/{field}/valid_rate and /score, and {prefix}/{counter} totals."""
        out: dict[str, float] = {}
        for name, n in self.samples.items():
            out[f"{prefix}/{name}/valid_rate"] = self.valid[name] / n
            out[f"{prefix}/{name}/score"] = self.score_sum[name] / n
        out.update({f"{prefix}/{key}": float(value) for key, value in sorted(self.counters.items())})
        return out
