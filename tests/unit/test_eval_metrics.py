"""UserRL evaluation metrics (docs/spec/GYMS.md §0.10) on hand-worked numbers."""

from __future__ import annotations

import pytest

from userrl.commands.eval_metrics import (
    aspect_count,
    episodes_frame,
    flat_metrics,
    gym_metrics,
    option_letter,
    overall_score,
    return_metrics,
    summarize,
    travel_aspect_score,
    travel_pass_score,
    travel_subset_metrics,
)
from userrl.envs import load_tasks


def episode(gym: str, item: str, pass_index: int, turns: list[tuple[str, str, float, bool]] | None = None,
            *, ret: float | None = None, aborted: bool = False, subset: str | None = None) -> dict:
    """A row; turns are (choice, content, reward, executed); the return defaults to the executed rewards' sum."""
    turns = turns or []
    total = sum(r for _, _, r, done in turns if done) if ret is None else ret
    return {"gym": gym, "subset": subset, "item_key": item, "pass_index": pass_index, "episode_return": total,
            "aborted": aborted, "turn_rewards": [t[2] for t in turns], "turn_choices": [t[0] for t in turns],
            "turn_contents": [t[1] for t in turns], "turn_executed": [t[3] for t in turns]}


FUNCTION_ROWS = [
    episode("function", "A", 0, ret=1.0), episode("function", "A", 1, ret=0.0), episode("function", "A", 2, ret=1.0),
    episode("function", "B", 0, ret=0.0), episode("function", "B", 1, ret=0.0), episode("function", "B", 2, ret=0.5),
    # aborted episodes are counted, never scored: C has no valid pass at all, B's 4th pass failed.
    episode("function", "C", 0, ret=1.0, aborted=True), episode("function", "B", 3, ret=9.0, aborted=True),
]

# Travel item T1 of sub-set 233 (3 aspects), two passes; T2 of sub-set 22 (2 aspects).
T1_PASS0 = [("search", "flight NYC", 0.2, True), ("answer", "F3", 0.8, True), ("answer", "F5", 0.0, True),
            ("answer", "H11", 1.0, True), ("answer", "R2", 0.0, True)]
T1_PASS1 = [("search", "hotel", 0.2, True), ("answer", "F3", 1.0, True), ("answer", " h2", 0.8, True),
            ("action", "Do you like sushi?", 0.6, True), ("answer", "R1", 1.0, True),
            ("", "", 0.0, False)]  # a last reply without a tool call: not a turn of the env
T2_PASS0 = [("answer", "A1", 1.0, True), ("answer", "C4", 1.0, True)]
T2_PASS1 = [("action", "hi", 0.0, True), ("answer", "A1", 0.8, True)]
TRAVEL_ROWS = [
    episode("travel", "T1", 0, T1_PASS0, subset="233"), episode("travel", "T1", 1, T1_PASS1, subset="233"),
    episode("travel", "T2", 0, T2_PASS0, subset="22"), episode("travel", "T2", 1, T2_PASS1, subset="22"),
    episode("travel", "T2", 2, [("answer", "A1", 1.0, True)], subset="22", aborted=True),
]


def test_micro_avg_and_micro_max_over_items_and_passes():
    metrics = return_metrics(episodes_frame(FUNCTION_ROWS))
    # A: mean(1, 0, 1) = 2/3, max 1; B: mean(0, 0, 0.5) = 1/6, max 0.5; C only aborted -> no item.
    assert metrics["micro_avg"] == pytest.approx((2 / 3 + 1 / 6) / 2)  # 5/12
    assert metrics["micro_max"] == pytest.approx((1.0 + 0.5) / 2)


def test_gym_counts_aborted_episodes_and_excludes_them():
    metrics = gym_metrics(episodes_frame(FUNCTION_ROWS))
    assert metrics["items"] == 2 and metrics["passes"] == 3 and metrics["episodes"] == 8 and metrics["aborted"] == 2
    assert metrics["score"] == pytest.approx(5 / 12)
    assert metrics["mean_return"] == pytest.approx(2.5 / 6)


def test_returns_are_not_normalized():
    rows = [episode("intention", "I", 0, ret=1.4), episode("intention", "I", 1, ret=1.2)]
    assert return_metrics(episodes_frame(rows)) == {"micro_avg": pytest.approx(1.3), "micro_max": pytest.approx(1.4)}


def test_all_aborted_gym_has_no_metrics_instead_of_zero():
    metrics = gym_metrics(episodes_frame([episode("search", "S", 0, ret=0.0, aborted=True)]))
    assert metrics["aborted"] == 1 and metrics["items"] == 0
    assert metrics["micro_avg"] is None and metrics["micro_max"] is None and metrics["score"] is None


def test_aspects_are_the_digits_of_the_subset_name():
    assert aspect_count("travel233") == 3 and aspect_count("2222") == 4 and aspect_count("travel22") == 2
    with pytest.raises(ValueError, match="no digits"):
        aspect_count("travel")
    assert option_letter(" h11") == "H" and option_letter("R2") == "R"


def test_travel_pass_score_takes_the_max_answer_reward_per_option_letter():
    choices, contents, rewards, _ = zip(*T1_PASS0, strict=True)
    # F: max(0.8, 0.0) = 0.8; H: 1.0; R: 0.0; search turns do not count -> 1.8 / 3 aspects.
    assert travel_pass_score(choices, contents, rewards, "travel233") == pytest.approx(0.6)
    choices, contents, rewards, _ = zip(*T1_PASS1, strict=True)
    assert travel_pass_score(choices, contents, rewards, "233") == pytest.approx(2.8 / 3)


def test_travel_aspect_score_averages_passes_then_items():
    frame = episodes_frame(TRAVEL_ROWS)
    t1 = (0.6 + 2.8 / 3) / 2
    t2 = ((1.0 + 1.0) / 2 + 0.8 / 2) / 2  # pass 0: 2/2 aspects; pass 1: 0.8/2; the aborted pass 2 is left out
    assert travel_aspect_score(frame) == pytest.approx((t1 + t2) / 2)


def test_travel_subset_metrics_on_the_last_pass():
    frame = episodes_frame(TRAVEL_ROWS)
    t1 = travel_subset_metrics(frame.filter(frame["subset"] == "233"))
    # T1 pass 1, executed turns 0.2, 1.0, 0.8, 0.6, 1.0 (the untaken last turn is not a turn)
    assert t1 == {"micro_avg": pytest.approx(3.6 / 5), "micro_max": 1.0, "avg_number_of_1": 2.0,
                  "avg_number_of_08": 1.0}
    both = travel_subset_metrics(frame)
    # T2's last valid pass is 1 (pass 2 aborted): turns 0.0, 0.8
    assert both["micro_avg"] == pytest.approx((3.6 / 5 + 0.4) / 2)
    assert both["micro_max"] == pytest.approx((1.0 + 0.8) / 2)
    assert both["avg_number_of_1"] == pytest.approx(1.0) and both["avg_number_of_08"] == pytest.approx(1.0)


def test_travel_gym_metrics_have_subsets_and_the_aspect_score():
    metrics = gym_metrics(episodes_frame(TRAVEL_ROWS))
    assert list(metrics["subsets"]) == ["travel22", "travel233"]
    assert metrics["subsets"]["travel233"]["aspect_score"] == pytest.approx((0.6 + 2.8 / 3) / 2)
    assert metrics["subsets"]["travel22"]["items"] == 1
    assert metrics["score"] == metrics["aspect_score"] and metrics["aborted"] == 1 and metrics["items"] == 2


def test_overall_score_is_weighted_by_unique_items():
    assert overall_score({"function": (0.5, 78), "travel": (0.25, 471)}) == pytest.approx(
        (0.5 * 78 + 0.25 * 471) / (78 + 471))
    assert overall_score({"function": (0.5, 2), "search": (None, 0)}) == 0.5
    assert overall_score({}) is None


def test_summary_and_flat_metrics():
    summary = summarize(episodes_frame(FUNCTION_ROWS + TRAVEL_ROWS))
    t1 = (0.6 + 2.8 / 3) / 2
    travel = (t1 + 0.7) / 2
    assert summary["overall"] == pytest.approx((5 / 12 * 2 + travel * 2) / 4)
    assert summary["episodes"] == 13 and summary["aborted"] == 3
    flat = flat_metrics(summary)
    assert flat["eval/function/micro_avg"] == pytest.approx(5 / 12)
    assert flat["eval/function/micro_max"] == pytest.approx(0.75)
    assert flat["eval/travel/aspect_score"] == pytest.approx(travel)
    assert flat["eval/travel/travel233/avg_number_of_1"] == 2.0
    assert flat["eval/overall"] == pytest.approx(summary["overall"])
    assert flat["eval/function/aborted"] == 2.0


def test_our_travel_tasks_carry_subset_names_the_metric_reads():
    tasks = load_tasks("travel", split="test")
    subsets = {t.data["subset"] for t in tasks}
    assert subsets == {"22", "33", "44", "233", "333", "334", "444", "2222"}
    for task in tasks:
        # the digits of the sub-set are the preference counts per aspect: one digit per aspect of the id
        assert aspect_count(task.data["subset"]) == len(task.item_key.split("|")) == len(task.data["best_ids"])
