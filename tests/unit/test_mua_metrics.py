"""MUA-RL's metrics (issue 18): group outcome mix, per-tool calls and errors, the split of turns into tool calls
and customer messages, distinct-n of the customer messages; every expected number is counted by hand below."""

from __future__ import annotations

import json

import pytest
from rich.console import Console

from userrl.commands.eval_metrics import flat_metrics
from userrl.commands.evaluate import Episode, episode_row, episode_trajectories, print_mua, rows_frame
from userrl.coordinator import rollout_metrics
from userrl.envs import Task
from userrl.envs.base import INVALID_TOOL_CALL
from userrl.mua_metrics import distinct_n, mua_metrics
from userrl.rollout import abort_trajectory
from userrl.trajectory import Trajectory, TurnRecord


def tool(name: str, error: bool = False) -> TurnRecord:
    """A turn that ran a tool (as rollout.apply_turn records the gym's info["tool_call"])."""
    content = json.dumps({"name": name, "arguments": {}})
    return TurnRecord(executed=True, choice="answer", content=content, n_tool_calls=1, tool=name, tool_error=error)


def say(text: str) -> TurnRecord:
    """A plain message to the customer."""
    return TurnRecord(executed=True, choice="action", content=text)


def broken() -> TurnRecord:
    """`<tool_call>` blocks, none well-formed: nothing ran, and the episode ended."""
    return TurnRecord(n_tool_calls=1)


def cut() -> TurnRecord:
    """A message cut at the token limit: nothing was sent."""
    return TurnRecord()


def episode(group: str, k: int, turns: list[TurnRecord], success: bool, aborted: bool = False) -> Trajectory:
    turns[-1].terminated = True
    turns[-1].reward = 1.0 if success else 0.0
    traj = Trajectory(uid=f"{group}-s{k}", group_id=group, env_name="tau", item_key=group, turns=turns)
    return abort_trajectory(traj, "role_call_failed:customer") if aborted else traj


def batch() -> list[Trajectory]:
    """Three groups: g1 all correct, g2 all wrong, g3 mixed (plus an aborted episode that must not count)."""
    return [
        episode("g1", 0, [tool("get_user_details"), say("Hello there"), tool("cancel_pending_order")], True),
        episode("g1", 1, [say("hello, there!"), tool("get_user_details", error=True), tool("get_user_details"),
                          say("Done.")], True),
        episode("g2", 0, [tool("get_user_details", error=True), broken()], False),
        episode("g2", 1, [say("how can I help"), cut()], False),
        episode("g3", 0, [tool("cancel_pending_order"), say("Done.")], True),
        episode("g3", 1, [tool(INVALID_TOOL_CALL, error=True), say("hello there")], False),
        episode("g3", 2, [tool("get_user_details"), say("zzz unique words here"), say("more new words")], True,
                aborted=True),
    ]


# Counted by hand over the six played episodes (the aborted g3-s2 is left out):
#   tool calls: get_user_details 4 (2 errors), cancel_pending_order 2 (0 errors), invalid_call 2 (the
#   unknown name and the broken block, both errors) -> 8 calls, 4 errors
#   customer messages: "Hello there", "hello, there!", "Done.", "how can I help", "Done.", "hello there" -> 6
#   words: [hello there] x3, [done] x2, [how can i help]
#     unigrams 12, unique {hello, there, done, how, can, i, help} 7
#     bigrams 6 (hello-there x3, how-can, can-i, i-help), unique 4
#     trigrams 2 (how-can-i, can-i-help), unique 2
EXPECTED = {
    "groups": 3.0, "groups_all_correct": 1 / 3, "groups_all_wrong": 1 / 3, "groups_mixed": 1 / 3,
    "tool_calls_mean": 8 / 6, "customer_messages_mean": 6 / 6, "tool_call_share": 8 / 14, "tool_error_rate": 4 / 8,
    "tool_calls/cancel_pending_order": 2.0, "tool_error_rate/cancel_pending_order": 0.0,
    "tool_calls/get_user_details": 4.0, "tool_error_rate/get_user_details": 2 / 4,
    f"tool_calls/{INVALID_TOOL_CALL}": 2.0, f"tool_error_rate/{INVALID_TOOL_CALL}": 1.0,
    "distinct_1": 7 / 12, "distinct_2": 4 / 6, "distinct_3": 2 / 2,
}


def test_mua_metrics_of_three_groups_match_the_hand_count():
    metrics = mua_metrics(batch())
    assert metrics == pytest.approx(EXPECTED)
    assert set(metrics) == set(EXPECTED)


def test_distinct_n_on_small_strings():
    assert distinct_n(["a b a b"], 1) == pytest.approx(2 / 4)       # a, b of a b a b
    assert distinct_n(["a b a b"], 2) == pytest.approx(2 / 3)       # ab, ba, ab
    assert distinct_n(["a b", "b a"], 2) == pytest.approx(2 / 2)    # no bigram across the two messages
    assert distinct_n(["The cat.", "the CAT"], 2) == pytest.approx(1 / 2)  # case and punctuation ignored
    assert distinct_n(["one", ""], 2) is None and distinct_n([], 1) is None
    with pytest.raises(ValueError, match="n >= 1"):
        distinct_n(["a"], 0)


def test_no_denominator_no_metric():
    """Episodes that only ran out of tokens: counts are 0, rates and diversity are absent rather than 0."""
    metrics = mua_metrics([episode("g", 0, [cut()], False), episode("g", 1, [cut()], False)])
    assert metrics == {"groups": 1.0, "groups_all_correct": 0.0, "groups_all_wrong": 1.0, "groups_mixed": 0.0,
                       "tool_calls_mean": 0.0, "customer_messages_mean": 0.0}
    assert mua_metrics([episode("g", 0, [cut()], False, aborted=True)]) == {}


def test_rollout_metrics_add_them_only_for_native_tools():
    trajectories = batch()
    plain = rollout_metrics(trajectories, seconds=1.0)
    assert not [key for key in plain if "/mua/" in key]  # other protocols' metrics do not change
    native = rollout_metrics(trajectories, seconds=1.0, protocol="native_tools")
    assert {k: v for k, v in native.items() if "/mua/" not in k} == plain
    assert native["rollout/mua/groups_mixed"] == pytest.approx(1 / 3)
    assert native["rollout/mua/tool_calls/get_user_details"] == 4.0
    evaluation = rollout_metrics(trajectories, seconds=1.0, prefix="eval", protocol="native_tools")
    assert evaluation["eval/mua/distinct_1"] == pytest.approx(7 / 12)


def test_evaluation_rows_give_the_same_metrics_with_an_item_s_passes_as_its_group(tmp_path):
    """`userrl evaluate` stores turns in its episode rows; groups there are an item's passes."""
    rows = []
    for traj in batch():
        task = Task("tau", traj.group_id, [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}],
                    {}, split="test")
        rows.append(episode_row(traj, Episode(task, int(traj.uid[-1])), seed=0, temperature=0.0, label="m"))
    path = tmp_path / "episodes.parquet"
    rows_frame(rows).write_parquet(path)
    import polars as pl

    metrics = mua_metrics(episode_trajectories(pl.read_parquet(path)))
    assert metrics == pytest.approx(EXPECTED)
    flat = flat_metrics({"gyms": {}, "mua": metrics})
    assert flat["eval/mua/groups_all_wrong"] == pytest.approx(1 / 3)
    assert flat[f"eval/mua/tool_error_rate/{INVALID_TOOL_CALL}"] == 1.0
    console = Console(record=True, width=250)
    print_mua(metrics, console)
    shown = console.export_text()
    assert "MUA-RL tool calls" in shown and "get_user_details" in shown and "0.500" in shown
    assert "all-wrong" in shown and "distinct-3" in shown
