"""MUA-RL's metrics (issue 18) over `env.protocol: native_tools` trajectories; pure Python, no Ray, no torch.

A native_tools assistant turn (userrl/protocols/native_tools.py `parse_native_tools`, recorded by `rollout.apply_turn`) is
* a **tool call** when it ran a gym tool: `TurnRecord.tool` names it and `tool_error` says whether the tool
  returned an error (the gym's `info["tool_call"]`; a name the gym does not have, or a call it cannot read, is
  `INVALID_TOOL_CALL`, an error). A message whose `<tool_call>` blocks hold no well-formed call ran nothing and
  ended the episode (`n_tool_calls > 0`, not executed): it is counted as a call of `INVALID_TOOL_CALL` with an
  error too, so tool-parse failures show up here (docs/spec/ALGORITHMS.md §5.1, "lessons");
* a **customer message** when it was plain text sent to the simulated customer (an executed `action` turn;
  the text is `TurnRecord.content`);
* neither when nothing was sent (a message cut at the token limit, an empty message).

The metrics (names without a prefix; callers log them as `rollout/mua/<name>` each iteration and
`eval/mua/<name>` in evaluation) are over the played episodes: aborted ones are left out, as from every mean.
* `groups`, and `groups_all_correct` / `groups_all_wrong` / `groups_mixed`: the shares of groups (episodes
  sharing a `group_id`: a GRPO group in training, an item's passes in `userrl evaluate`) whose played members
  all succeeded, all failed, or some of each. Success is `Trajectory.succeeded` (a positive return in an
  episode the task ended), which for Tau's binary reward (§5.1) is reward 1. A group of one is never mixed.
  Only mixed groups carry a GRPO signal: an all-correct or all-wrong group has zero advantages.
* `tool_calls_mean` / `customer_messages_mean`: tool calls and customer messages per episode;
  `tool_call_share`: tool calls / (tool calls + customer messages).
* `tool_error_rate`: errored calls / calls; per tool: `tool_calls/<tool>` (calls in the batch, a count) and
  `tool_error_rate/<tool>`.
* `distinct_1`, `distinct_2`, `distinct_3`: n-gram diversity of the agent's customer messages. Neither
  docs/spec/ALGORITHMS.md §5.1 nor the MUA-RL paper defines one, so this is distinct-n (Li et al. 2016): the
  number of unique n-grams / the total number of n-grams, pooled over all customer messages of the batch;
  n-grams are taken within one message, over its lowercased word tokens (runs of `\\w` characters; punctuation
  dropped). Low values mean the agent repeats itself across messages and episodes.
A metric whose denominator is 0 (no tool call, no message, no n-gram) is left out rather than logged as 0.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Sequence

from userrl.envs.base import INVALID_TOOL_CALL
from userrl.trajectory import Trajectory, TurnRecord

#: The n of the distinct-n metrics.
DISTINCT_NS: tuple[int, ...] = (1, 2, 3)
#: The batch-level metrics in display order, with their short labels (tables in `userrl evaluate` and `report`).
LABELS: dict[str, str] = {
    "groups": "groups", "groups_all_correct": "all-correct", "groups_all_wrong": "all-wrong",
    "groups_mixed": "mixed", "tool_calls_mean": "tool calls/ep", "customer_messages_mean": "customer msgs/ep",
    "tool_call_share": "tool share", "tool_error_rate": "tool error rate",
    **{f"distinct_{n}": f"distinct-{n}" for n in DISTINCT_NS},
}
_WORD = re.compile(r"\w+")


def turn_tool_call(turn: TurnRecord) -> tuple[str, bool] | None:
    """(tool name, whether it errored) when the turn is a tool call, else None."""
    if turn.tool:
        return turn.tool, turn.tool_error
    if not turn.executed and turn.n_tool_calls > 0:  # `<tool_call>` blocks, none well-formed: nothing ran
        return INVALID_TOOL_CALL, True
    return None


def customer_message(turn: TurnRecord) -> str | None:
    """The text the turn sent to the customer, or None when it sent none."""
    return turn.content if turn.executed and turn.choice == "action" and not turn.tool else None


def words(text: str) -> list[str]:
    """The word tokens distinct-n counts: lowercased runs of word characters."""
    return _WORD.findall(text.lower())


def distinct_n(messages: Iterable[str], n: int) -> float | None:
    """Unique n-grams / all n-grams over the messages (n-grams never cross a message); None without any."""
    if n < 1:
        raise ValueError(f"distinct-n needs n >= 1, got {n}")
    grams: Counter[tuple[str, ...]] = Counter()
    for message in messages:
        tokens = words(message)
        grams.update(tuple(tokens[i:i + n]) for i in range(len(tokens) - n + 1))
    total = sum(grams.values())
    return len(grams) / total if total else None


def group_outcomes(trajectories: Sequence[Trajectory]) -> Counter[str]:
    """Played groups by outcome: `all_correct`, `all_wrong` or `mixed` (aborted episodes are left out)."""
    by_group: dict[str, list[bool]] = {}
    for traj in trajectories:
        if not traj.aborted:
            by_group.setdefault(traj.group_id, []).append(traj.succeeded)
    return Counter("all_correct" if all(s) else "all_wrong" if not any(s) else "mixed" for s in by_group.values())


def mua_metrics(trajectories: Sequence[Trajectory]) -> dict[str, float]:
    """MUA-RL's metrics of a batch of native_tools trajectories (names as in the module docstring)."""
    played = [t for t in trajectories if not t.aborted]
    if not played:
        return {}
    outcomes = group_outcomes(played)
    groups = sum(outcomes.values())
    metrics = {"groups": float(groups)}
    metrics.update({f"groups_{kind}": outcomes[kind] / groups for kind in ("all_correct", "all_wrong", "mixed")})

    calls: Counter[str] = Counter()
    errors: Counter[str] = Counter()
    messages: list[str] = []
    for turn in (turn for traj in played for turn in traj.turns):
        call = turn_tool_call(turn)
        if call is not None:
            calls[call[0]] += 1
            errors[call[0]] += call[1]
        elif (text := customer_message(turn)) is not None:
            messages.append(text)
    n_calls = sum(calls.values())
    metrics["tool_calls_mean"] = n_calls / len(played)
    metrics["customer_messages_mean"] = len(messages) / len(played)
    if n_calls + len(messages):
        metrics["tool_call_share"] = n_calls / (n_calls + len(messages))
    if n_calls:
        metrics["tool_error_rate"] = sum(errors.values()) / n_calls
    for tool in sorted(calls):
        metrics[f"tool_calls/{tool}"] = float(calls[tool])
        metrics[f"tool_error_rate/{tool}"] = errors[tool] / calls[tool]
    for n in DISTINCT_NS:
        value = distinct_n(messages, n)
        if value is not None:
            metrics[f"distinct_{n}"] = value
    return metrics
