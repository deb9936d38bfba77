"""The group-scoring hook of the user-reply task (docs/spec/ALGORITHMS.md §5.2 "Judge procedure", "Aggregation").

The RolloutCoordinator calls `HumanLMGroupScorer.score` on rank 0 after each rollout (and each evaluation),
before the rollout metrics and the update: the trajectories of one GRPO group share a (row, field) task;
their replies go to the judge in one call (`score_group`), and each trajectory's one turn gets its
reward. Strict parsing and the training judge in training; flexible parsing and the validation judge in
evaluation, whose per-field strict valid rate is reported next to the scores.

What is never scored silently:

* an aborted episode (its replica or env failed) stays aborted, counted by the rollout metrics;
* an episode whose prompt did not fit `policy.max_model_len` (no turn) is aborted as
  `prompt_over_model_len` and counted (`humanlm/prompt_over_model_len`);
* a judge call that never gave a usable reply (after the client's transport retries and
  BAD_REPLY_ATTEMPTS bad replies, each counted) is the spec's "final failure scores 0": with
  `env.role_failure: abort` (the project's default) its candidates are aborted instead (counted as failed
  role calls of the humanlm gym and `humanlm/judge_failures`), with `fallback` they keep the 0.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Sequence
from typing import Any

from userrl.actors.env_runner import EpisodeSpec
from userrl.config import UserRLConfig
from userrl.envs.registry import get_gym
from userrl.humanlm.fields import FIELD_NAMES
from userrl.humanlm.format import parse_flexible, parse_strict
from userrl.humanlm.judge import JUDGE_ROLE, GroupScore, Judge, make_judge, score_group
from userrl.humanlm.row import Row
from userrl.rollout import abort_trajectory
from userrl.trajectory import Trajectory

JUDGE_FAILED = f"role_call_failed:{JUDGE_ROLE}"
PROMPT_TOO_LONG = "prompt_over_model_len"


def reply_text(traj: Trajectory) -> str:
    """The simulated user's reply of a user-reply episode (its last assistant message)."""
    for message in reversed(traj.messages):
        if message["role"] == "assistant":
            return message["content"]
    return ""


def metric_key(prefix: str, name: str) -> str:
    """`prefix/name` with counter qualifiers (`judge_failures:timeout`) as path parts MLflow accepts."""
    return f"{prefix}/{name.replace(':', '/')}"


class HumanLMGroupScorer:
    """Scores the user-reply trajectories of a batch group by group, in place; returns the metrics."""

    def __init__(self, config: UserRLConfig, train_judge: Judge | None = None,
                 validation_judge: Judge | None = None) -> None:
        h = config.humanlm
        self.train_judge = train_judge or make_judge(h.judge, h.judge_llm, "train", h.num_repeats)
        self.validation_judge = validation_judge or make_judge(
            h.validation_judge or h.judge, h.validation_judge_llm or h.judge_llm, "validation", h.num_repeats)
        self.weights, self.thinking = dict(h.field_weights), h.thinking
        self.abort_on_judge_failure = config.env.role_failure == "abort"
        # One loop for the scorer's life: the openai judge's client keeps its connection pool per loop.
        self._loop = asyncio.new_event_loop()

    def close(self) -> None:
        """Close the scorer's event loop."""
        self._loop.close()

    def score(self, specs: Sequence[EpisodeSpec], trajectories: Sequence[Trajectory], evaluation: bool = False,
              records: list[dict[str, Any]] | None = None) -> dict[str, float]:
        """Judge every user-reply group of the batch, write each trajectory's reward; `records` (if given)
        gets one dict per judged reply (row, field, reply, score, parse)."""
        began = time.perf_counter()
        groups: dict[str, list[tuple[EpisodeSpec, Trajectory]]] = {}
        for spec, traj in zip(specs, trajectories, strict=True):
            if get_gym(traj.env_name).user_reply_task:
                groups.setdefault(traj.group_id, []).append((spec, traj))
        if not groups:
            return {}
        judge = self.validation_judge if evaluation else self.train_judge
        counters: Counter[str] = Counter()
        # Per field, over the replies that were scored (a reply aborted for a failed judge call is not).
        samples: Counter[str] = Counter()
        score_sum: Counter[str] = Counter()
        strict_ok: Counter[str] = Counter()
        tagged: Counter[str] = Counter()
        judged: list[tuple[list[Trajectory], GroupScore, str, Row]] = []

        async def one(members: list[tuple[EpisodeSpec, Trajectory]]) -> None:
            task = members[0][0].task
            row, field = Row.from_record(task.data["row"], task.item_key), task.data["field"]
            usable = []
            for _, traj in members:
                if traj.aborted:
                    continue
                if not traj.turns:  # the prompt left no room for a reply
                    abort_trajectory(traj, PROMPT_TOO_LONG)
                    counters[PROMPT_TOO_LONG] += 1
                    continue
                usable.append(traj)
            if usable:
                texts = [reply_text(t) for t in usable]
                group = await score_group(judge, row, texts, field, strict=not evaluation,
                                          thinking=self.thinking, weights=self.weights)
                judged.append((usable, group, field, row))

        async def every() -> None:
            await asyncio.gather(*(one(members) for members in groups.values()))

        self._loop.run_until_complete(every())
        rewards = []
        for usable, group, field, row in judged:
            counters.update(group.stats)
            for i, traj in enumerate(usable):
                text = reply_text(traj)
                turn = traj.turns[-1]
                turn.role_calls += 1
                if group.failed and group.failed[i]:
                    turn.failed_role_calls += 1
                    if self.abort_on_judge_failure:
                        abort_trajectory(traj, JUDGE_FAILED, [traj.policy_version])
                        counters["aborted_judge_failures"] += 1
                        continue
                samples[field] += 1
                score_sum[field] += group.field_scores[field][i]
                strict_ok[field] += parse_strict(text, field, self.thinking).valid
                tagged[field] += f"<{field}>" in text and f"</{field}>" in text
                if turn.executed:
                    turn.reward = group.rewards[i]
                elif group.rewards[i]:  # a reply cut by the token limit (flexible parsing can still score it)
                    counters["unexecuted_scored"] += 1
                rewards.append(group.rewards[i])
                if records is not None:
                    parsed = group.parses[i]
                    records.append({"uid": traj.uid, "target_id": row.target_id, "field": field, "reply": text,
                                    "value": parsed.values.get(field, ""), "strict_valid":
                                    parse_strict(text, field, self.thinking).valid,
                                    "flexible_value": parse_flexible(text, field).values[field],
                                    "score": group.rewards[i], "judge": group.judge})
        prefix = "eval/humanlm" if evaluation else "humanlm"
        metrics: dict[str, float] = {}
        for name in FIELD_NAMES:
            if samples[name]:
                metrics[f"{prefix}/{name}/score"] = score_sum[name] / samples[name]
                # Strict parsing is what training rewards: in evaluation, where scores come from flexible
                # parsing, the valid rate still says how often the format was right; tag_rate how often the
                # field's tags were there at all.
                metrics[f"{prefix}/{name}/valid_rate"] = strict_ok[name] / samples[name]
                metrics[f"{prefix}/{name}/tag_rate"] = tagged[name] / samples[name]
                metrics[f"{prefix}/{name}/samples"] = float(samples[name])
        metrics.update({metric_key(prefix, key): float(value) for key, value in counters.items()})
        metrics[f"{prefix}/groups"] = float(len(groups))
        if rewards:
            metrics[f"{prefix}/score_mean"] = sum(rewards) / len(rewards)
        metrics[f"time/{'eval_' if evaluation else ''}judge_s"] = time.perf_counter() - began
        return metrics
