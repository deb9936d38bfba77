"""UserRL evaluation metrics (docs/spec/GYMS.md §0.10) over per-episode rows; pure polars, no Ray.

One row per played episode, with the columns of `EPISODE_SCHEMA`. Aborted episodes (env or engine
failures) are counted per gym and excluded from every metric; an item whose passes all aborted drops
out of the item counts (and so out of the overall weights) instead of scoring 0.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

import polars as pl

TRAVEL = "travel"
#: The columns the metric functions read (episodes.parquet carries more: transcript, stop reason, ...).
EPISODE_SCHEMA: dict[str, pl.DataType] = {
    "gym": pl.String(),
    "subset": pl.String(),
    "item_key": pl.String(),
    "pass_index": pl.Int64(),
    "episode_return": pl.Float64(),
    "aborted": pl.Boolean(),
    "turn_rewards": pl.List(pl.Float64()),
    "turn_choices": pl.List(pl.String()),
    "turn_contents": pl.List(pl.String()),
    "turn_executed": pl.List(pl.Boolean()),
}


def aspect_count(subset: str) -> int:
    """Aspects of a Travel sub-set: the number of digits in its name (`travel233` and `233` give 3)."""
    count = sum(ch.isdigit() for ch in subset)
    if count == 0:
        raise ValueError(f"Travel sub-set name {subset!r} has no digits; expected e.g. 'travel233' or '233'")
    return count


def option_letter(content: str) -> str:
    """The option letter of an `answer` turn: the first character of its content (as the gym reads it,
    stripped and upper-cased, so ' h11' and 'H11' are the same hotel recommendation)."""
    return content.strip()[:1].upper()


def travel_pass_score(choices: Iterable[str], contents: Iterable[str], rewards: Iterable[float],
                      subset: str) -> float:
    """Per-aspect score of one Travel episode: max `answer` reward per option letter, summed, / aspects."""
    best: dict[str, float] = {}
    for choice, content, reward in zip(choices, contents, rewards, strict=True):
        if choice != "answer":
            continue
        letter = option_letter(content)
        best[letter] = max(best.get(letter, float("-inf")), float(reward))
    return sum(best.values()) / aspect_count(subset)


def episodes_frame(rows: Iterable[Mapping[str, Any]]) -> pl.DataFrame:
    """Per-episode rows (dicts with at least the EPISODE_SCHEMA columns) as a typed DataFrame."""
    rows = [{name: row.get(name) for name in EPISODE_SCHEMA} for row in rows]
    return pl.DataFrame(rows, schema=EPISODE_SCHEMA)


def _valid(frame: pl.DataFrame) -> pl.DataFrame:
    return frame.filter(~pl.col("aborted"))


def return_metrics(frame: pl.DataFrame) -> dict[str, float | None]:
    """micro_avg = mean over items of (mean over passes of the return); micro_max = ... of the max."""
    per_item = _valid(frame).group_by("item_key").agg(
        pl.col("episode_return").mean().alias("avg"), pl.col("episode_return").max().alias("max"))
    if per_item.is_empty():
        return {"micro_avg": None, "micro_max": None}
    return {"micro_avg": float(per_item["avg"].mean()), "micro_max": float(per_item["max"].mean())}


def _last_pass(frame: pl.DataFrame) -> pl.DataFrame:
    """Each item's highest non-aborted pass (the spec's "last pass")."""
    valid = _valid(frame)
    return valid.filter(pl.col("pass_index") == pl.col("pass_index").max().over("item_key"))


def _executed_rewards(row: Mapping[str, Any]) -> list[float]:
    return [float(r) for r, done in zip(row["turn_rewards"], row["turn_executed"], strict=True) if done]


def travel_subset_metrics(frame: pl.DataFrame) -> dict[str, float | None]:
    """Travel metrics of one (set of) sub-set(s), on the last pass of each item.

    The turns are the executed env steps: a final reply with no tool call has no turn reward.
    micro_avg = mean over items of (sum of turn rewards / number of turns); micro_max = mean of the max turn
    reward; avg_number_of_1 / avg_number_of_08 = mean count of turns whose reward is exactly 1.0 / 0.8.
    """
    last = _last_pass(frame)
    if last.is_empty():
        return {"micro_avg": None, "micro_max": None, "avg_number_of_1": None, "avg_number_of_08": None}
    avgs, maxes, ones, eights = [], [], [], []
    for row in last.iter_rows(named=True):
        rewards = _executed_rewards(row)
        avgs.append(sum(rewards) / len(rewards) if rewards else 0.0)
        maxes.append(max(rewards) if rewards else 0.0)
        ones.append(sum(r == 1.0 for r in rewards))
        eights.append(sum(r == 0.8 for r in rewards))
    n = len(avgs)
    return {"micro_avg": sum(avgs) / n, "micro_max": sum(maxes) / n,
            "avg_number_of_1": sum(ones) / n, "avg_number_of_08": sum(eights) / n}


def travel_aspect_score(frame: pl.DataFrame) -> float | None:
    """Travel's ranking score: per-aspect score per pass, averaged over passes, then over items (all
    sub-sets pooled)."""
    valid = _valid(frame)
    if valid.is_empty():
        return None
    scores = valid.with_columns(pl.struct("turn_choices", "turn_contents", "turn_rewards", "subset").map_elements(
        lambda r: travel_pass_score(r["turn_choices"], r["turn_contents"], r["turn_rewards"], r["subset"]),
        return_dtype=pl.Float64).alias("aspect_score"))
    per_item = scores.group_by("item_key").agg(pl.col("aspect_score").mean())
    return float(per_item["aspect_score"].mean())


def gym_metrics(frame: pl.DataFrame) -> dict[str, Any]:
    """Counts and metrics of one gym's episodes; `score` is the gym's task score for the overall score."""
    valid = _valid(frame)
    gym = frame["gym"][0] if frame.height else ""
    out: dict[str, Any] = {
        "items": int(valid["item_key"].n_unique()),
        "passes": int(valid["pass_index"].n_unique()),
        "episodes": int(frame.height),
        "aborted": int(frame.height - valid.height),
        "mean_return": float(valid["episode_return"].mean()) if valid.height else None,
    }
    if gym != TRAVEL:
        out.update(return_metrics(frame))
        out["score"] = out["micro_avg"]
        return out
    out.update(travel_subset_metrics(frame))
    out["score"] = out["aspect_score"] = travel_aspect_score(frame)
    out["subsets"] = {f"travel{subset}": travel_subset_metrics(part) | {
        "items": int(_valid(part)["item_key"].n_unique()), "aspect_score": travel_aspect_score(part)}
        for (subset,), part in sorted(frame.group_by("subset"), key=lambda kv: (len(kv[0][0]), kv[0][0]))}
    return out


def overall_score(scores: Mapping[str, tuple[float | None, int]]) -> float | None:
    """Average of the task scores weighted by each task's number of unique items (gyms without a score skip)."""
    pairs = [(score, items) for score, items in scores.values() if score is not None and items > 0]
    total = sum(items for _, items in pairs)
    return sum(score * items for score, items in pairs) / total if total else None


def summarize(frame: pl.DataFrame) -> dict[str, Any]:
    """All metrics: per gym, the weighted overall score and the core score (unweighted mean of the gyms'
    mean episode returns, the in-training headline)."""
    gyms = {gym: gym_metrics(part) for (gym,), part in sorted(frame.group_by("gym"), key=lambda kv: kv[0][0])}
    returns = [m["mean_return"] for m in gyms.values() if m["mean_return"] is not None]
    return {
        "gyms": gyms,
        "overall": overall_score({g: (m["score"], m["items"]) for g, m in gyms.items()}),
        "core": sum(returns) / len(returns) if returns else None,
        "episodes": int(frame.height),
        "aborted": int(frame["aborted"].sum()) if frame.height else 0,
    }


def flat_metrics(summary: Mapping[str, Any], prefix: str = "eval") -> dict[str, float]:
    """`eval/<gym>/<metric>`, `eval/travel/<subset>/<metric>`, `eval/overall`, `eval/core`, `eval/mua/<metric>`
    (numbers only)."""
    flat: dict[str, float] = {}

    def put(key: str, value: Any) -> None:
        if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
            flat[key] = float(value)

    for gym, metrics in summary["gyms"].items():
        for name, value in metrics.items():
            if name == "subsets":
                for subset, sub in value.items():
                    for sub_name, sub_value in sub.items():
                        put(f"{prefix}/{gym}/{subset}/{sub_name}", sub_value)
            else:
                put(f"{prefix}/{gym}/{name}", value)
    for name in ("overall", "core", "episodes", "aborted"):
        put(f"{prefix}/{name}", summary.get(name))
    for name, value in summary.get("mua", {}).items():  # MUA-RL's metrics (native_tools, userrl/mua_metrics.py)
        put(f"{prefix}/mua/{name}", value)
    return flat
