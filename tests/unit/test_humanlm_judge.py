"""HumanLM judging (docs/spec/ALGORITHMS.md §5.2).

Reply format, clamping, retries, aggregation and the ground-truth rule.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import deque
from collections.abc import Sequence
from typing import Any

import pytest
from aiohttp import web
from chat_server import LoopbackChatServer

from userrl.envs.openai_client import LLMConfig, OpenAIRoleClient
from userrl.humanlm.judge import (
    BadJudgeReply,
    FieldStats,
    JudgeOutcome,
    OpenAIJudge,
    ScriptedJudge,
    judge_user_message,
    key_point_match,
    make_judge,
    parse_judge_reply,
    reply_key_points,
    score_group,
    scripted_score,
)
from userrl.humanlm.row import Row

ROW = Row(
    prompt=(
        {"role": "system", "content": "persona"},
        {"role": "user", "content": "Cities should ban cars from their centres."},
        {"role": "assistant", "content": "However, studies show shops lose customers when cars are banned."},
    ),
    ground_truth="You make a fair point. I am reconsidering my position.",
    persona="persona",
    target_id="r1",
    data_source="test",
    latent_states={
        "stance": "Partly Agree toward the claim; moved from Strongly Agree",
        "goal": "hold my position",
    },
)


def verdict(scores: Sequence[Any], ids: Sequence[Any] | None = None) -> str:
    ids = list(ids) if ids is not None else list(range(1, len(scores) + 1))
    return json.dumps(
        {
            "key_points": ["concedes"],
            "candidates": [{"id": i, "thought": "t", "score": s} for i, s in zip(ids, scores, strict=False)],
        }
    )


class FixedJudge:
    """A judge double: scores from a table by candidate text; records what it was asked."""

    name = "fixed"

    def __init__(self, table: dict[str, float]) -> None:
        self.table, self.calls = table, []

    async def judge(self, row: Row, field_name: str, candidates: Sequence[str]) -> JudgeOutcome:
        self.calls.append((field_name, list(candidates)))
        return JudgeOutcome([self.table[c] for c in candidates])


def run(coro: Any) -> Any:
    return asyncio.run(coro)


# ---------------------------------------------------------------- the judge's reply


def test_judge_reply_is_read_by_id_and_clamped() -> None:
    points, scores, clamped = parse_judge_reply(verdict([0.5, 1.7, -0.2], ids=[2, 3, 1]), 3)
    assert points == ["concedes"]
    assert scores == [0.0, 0.5, 1.0]  # id 1 had -0.2, id 2 0.5, id 3 1.7
    assert clamped == 2
    fenced = "<think>x</think>```json\n" + verdict(["0.3"]) + "\n```"
    assert parse_judge_reply(fenced, 1)[1] == [0.3]


@pytest.mark.parametrize(
    "text, kind",
    [
        ("no json here", "malformed"),
        ('{"key_points": []}', "malformed"),
        (verdict([0.5]), "wrong_count"),
        (verdict([0.5, 0.5, 0.5]), "wrong_count"),
        (verdict([0.5, 0.5], ids=[1, 1]), "bad_ids"),
        (verdict([0.5, 0.5], ids=[1, 3]), "bad_ids"),
        (verdict([0.5, "high"]), "bad_score"),
        (verdict([0.5, None]), "bad_score"),
    ],
)
def test_bad_judge_replies_are_named(text: str, kind: str) -> None:
    with pytest.raises(BadJudgeReply) as info:
        parse_judge_reply(text, 2)
    assert info.value.kind == kind


def test_judge_message_numbers_every_candidate() -> None:
    text = judge_user_message("goal", "ctx", "real", ["a", "b"])
    assert "Field: goal" in text and "Real reply:\nreal" in text
    assert "Candidate 1:\na" in text and "Candidate 2:\nb" in text and "Candidates (2)" in text


# ---------------------------------------------------------------- aggregation


def oracle_rewards(completions: list[str], table: dict[str, float], truth: str) -> list[float]:
    """Spec 5.2 aggregation for one strict response field, written out plainly."""
    values = []
    for text in completions:
        t = text.strip()
        ok = t.startswith("<response>") and t.endswith("</response>") and t.count("<response>") == 1
        values.append(t[len("<response>") : -len("</response>")].strip() if ok else None)
    scores = []
    for v in values:
        scores.append(0.0 if not v or v == truth else table[v])
    others = [s for s, v in zip(scores, values, strict=False) if v != truth]
    return [
        (min(1.0, max(others) + 0.1) if others else 1.0) if v == truth else s
        for s, v in zip(scores, values, strict=False)
    ]


@pytest.mark.parametrize(
    "completions",
    [
        ["<response>a</response>", "<response>b</response>", "<response>a</response>", "junk"],
        [
            "<response>a</response>",
            "<response>REAL</response>",
            "<response> </response>",
            "<response>c</response>",
        ],
        ["<response>REAL</response>", "<response>REAL</response>"],
        [
            "<response>c</response>",
            "<response>b</response>",
            "<response>REAL</response>",
            "<response>a</response>",
        ],
    ],
)
def test_aggregation_matches_the_oracle(completions: list[str]) -> None:
    table = {"a": 0.4, "b": 0.95, "c": 0.0}
    row = Row(ROW.prompt, "REAL", "p", "t", "s")
    judge = FixedJudge(table)
    group = run(score_group(judge, row, completions, "response"))
    assert group.rewards == pytest.approx(oracle_rewards(completions, table, "REAL"))
    # One call with the distinct, non-empty, non-ground-truth candidates.
    asked = [c for _, cs in judge.calls for c in cs]
    assert len(asked) == len(set(asked)) and "REAL" not in asked and "" not in asked
    assert len(judge.calls) <= 1


def test_ground_truth_rule_numbers() -> None:
    row = Row(ROW.prompt, "REAL", "p", "t", "s")
    group = run(score_group(FixedJudge({"a": 0.4, "b": 0.95}), row,
                            ["<response>a</response>", "<response>REAL</response>"], "response"))  # fmt: skip
    assert group.rewards == [0.4, 0.5]  # min(1, 0.4 + 0.1)
    group = run(
        score_group(
            FixedJudge({"b": 0.95}), row, ["<response>b</response>", "<response>REAL</response>"], "response"
        )
    )
    assert group.rewards == [0.95, 1.0]  # min(1, 0.95 + 0.1)
    assert group.stats["ground_truth_matches"] == 1
    # Only at the final field: a latent field equal to the reply is judged like any other.
    judge = FixedJudge({"REAL": 0.3})
    group = run(score_group(judge, row, ["<goal>REAL</goal>"], "goal"))
    assert group.rewards == [0.3] and judge.calls == [("goal", ["REAL"])]


def test_empty_and_invalid_generations_score_zero_and_are_counted() -> None:
    group = run(score_group(FixedJudge({"x": 0.7}), ROW,
                            ["<goal></goal>", "goal: x", "<goal>x</goal>"], "goal"))  # fmt: skip
    assert group.rewards == [0.0, 0.0, 0.7]
    assert group.stats["empty_generations"] == 1 and group.stats["invalid_parses"] == 1
    flexible = run(
        score_group(FixedJudge({"goal: x": 0.2, "x": 0.7}), ROW, ["goal: x"], "goal", strict=False)
    )
    assert flexible.rewards == [0.2]


def test_weighted_sum_over_fields() -> None:
    table = {"Agree": 0.5, "win": 0.8}
    group = run(score_group(FixedJudge(table), ROW, ["<stance>Agree</stance><goal>win</goal>"],
                            ["stance", "goal"], weights={"stance": 2.0}))  # fmt: skip
    assert group.rewards == [pytest.approx(2.0 * 0.5 + 1.0 * 0.8)]
    stats = FieldStats()
    stats.add(group)
    stats.add(run(score_group(FixedJudge(table), ROW, ["bad"], ["stance", "goal"])))
    summary = stats.summary()
    assert summary["humanlm/stance/valid_rate"] == 0.5 and summary["humanlm/goal/score"] == pytest.approx(0.4)
    assert summary["humanlm/invalid_parses"] == 1.0


# ---------------------------------------------------------------- the scripted judge


def test_scripted_judge_rule_numbers() -> None:
    # Key point "Partly Agree toward the claim": content words {partly, agree, toward, claim} (stopwords aside).
    assert key_point_match("Yes.", "yes, it is") == 1.0 and key_point_match("Yes.", "No") == 0.0
    assert reply_key_points("A. B. C. D. E.") == ["A. B.", "C. D.", "E."]
    assert reply_key_points("One only") == ["One only"]
    exact = scripted_score(
        "Partly Agree toward the claim", ["Partly Agree toward the claim"], "gt", "", False
    )
    assert exact == 1.0
    assert (
        scripted_score(
            "<b>Partly Agree toward the claim</b>", ["Partly Agree toward the claim"], "gt", "", False
        )
        == 0.5
    )
    # Half the key point, half the words unsupported: C = 0.5, P = 0.5 * 0.5 = 0.25.
    half = scripted_score("agree bananas", ["agree partly"], "gt", "", False)
    assert half == 0.25
    # A response more than twice as long as the real one pays 0.2 more.
    long = scripted_score("fair point fair point fair point", ["fair point"], "fair point", "", True)
    assert long == 0.8
    context = "one two three four five six seven eight nine"
    assert scripted_score(context, ["nine"], "nine", context, True) == 0.0


def test_scripted_judge_uses_states_and_counts_missing_ground_truth() -> None:
    judge = ScriptedJudge()
    outcome = run(judge.judge(ROW, "stance", ["Partly Agree toward the claim; moved from Strongly Agree"]))
    assert outcome.key_points == ["Partly Agree toward the claim", "moved from Strongly Agree"]
    assert outcome.scores == [1.0] and not outcome.stats["missing_ground_truth:stance"]
    outcome = run(judge.judge(ROW, "emotion", ["I feel a fair point"]))
    assert outcome.stats["missing_ground_truth:emotion"] == 1
    assert outcome.key_points == reply_key_points(ROW.ground_truth)
    group = run(score_group(judge, ROW, ["<emotion>calm</emotion>"] * 3, "emotion"))
    assert group.stats["missing_ground_truth:emotion"] == 1  # one judge call per group
    assert make_judge("scripted").name == "scripted"
    with pytest.raises(ValueError, match="unknown judge backend"):
        make_judge("claude")


# ---------------------------------------------------------------- the openai judge on a loopback server


class JudgeServer(LoopbackChatServer):
    """Replies from `script` (content or an HTTP status), then `default`."""

    def __init__(self) -> None:
        self.script: deque[str | int] = deque()
        self.default: str | int = verdict([0.5])
        self.requests: list[dict[str, Any]] = []
        super().__init__()

    async def handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.requests.append(body)
        reply = self.script.popleft() if self.script else self.default
        if isinstance(reply, int):
            return web.json_response({"error": {"message": "slow down", "type": "rate_limit"}}, status=reply)
        message = {"role": "assistant", "content": reply}
        return web.json_response({"id": "x", "object": "chat.completion", "created": int(time.time()),
                                  "model": body.get("model", ""), "choices": [{"index": 0, "message": message,
                                  "finish_reason": "stop"}]})  # fmt: skip


@pytest.fixture
def server():
    srv = JudgeServer()
    srv.start()
    yield srv
    srv.stop()


def openai_judge(server: JudgeServer, **kwargs: Any) -> OpenAIJudge:
    config = LLMConfig(base_url=server.base_url, api_key="k", model="judge-m", timeout_s=5.0, attempts=10,
                       retry_pause_s=0.001, retry_backoff=2.0, temperature=1.0, max_tokens=4096)  # fmt: skip
    return OpenAIJudge(OpenAIRoleClient(config), "loopback", **kwargs)


def test_openai_judge_sends_the_whole_group_in_one_call(server: JudgeServer) -> None:
    server.default = verdict([0.2, 0.9])
    completions = ["<response>a</response>", "<response>b</response>", "<response>a</response>", "x"]
    group = run(score_group(openai_judge(server), ROW, completions, "response"))
    assert group.rewards == [0.2, 0.9, 0.2, 0.0]
    assert len(server.requests) == 1
    body = server.requests[0]
    assert body["temperature"] == 1.0 and body["max_tokens"] == 4096 and body["model"] == "judge-m"
    user = body["messages"][1]["content"]
    assert "Candidate 1:\na" in user and "Candidate 2:\nb" in user and "Candidate 3" not in user
    assert group.judge == "loopback"


def test_wrong_count_and_malformed_replies_are_retried_then_scored(server: JudgeServer) -> None:
    server.script.extend([verdict([0.5]), "not json", verdict([2.0, 0.4])])
    group = run(
        score_group(
            openai_judge(server), ROW, ["<response>a</response>", "<response>b</response>"], "response"
        )
    )
    assert group.rewards == [1.0, 0.4]  # 2.0 clamped to 1
    assert group.stats["bad_reply:wrong_count"] == 1 and group.stats["bad_reply:malformed"] == 1
    assert group.stats["judge_retries"] == 2 and group.stats["judge_calls"] == 3
    assert group.stats["clamped_scores"] == 1 and not group.stats["judge_failures"]


def test_five_bad_replies_score_zero_and_are_counted(server: JudgeServer) -> None:
    server.default = verdict([0.5, 0.5, 0.5])
    group = run(
        score_group(
            openai_judge(server), ROW, ["<response>a</response>", "<response>b</response>"], "response"
        )
    )
    assert group.rewards == [0.0, 0.0]
    assert len(server.requests) == 5
    assert group.stats["bad_reply:wrong_count"] == 5 and group.stats["judge_failures"] == 1
    assert group.stats["judge_failures:bad_reply"] == 1 and group.stats["judge_retries"] == 4


def test_rate_limits_retry_in_the_client_then_a_final_failure_scores_zero(server: JudgeServer) -> None:
    server.script.extend([429, 429, 429, verdict([0.6])])
    group = run(score_group(openai_judge(server), ROW, ["<response>a</response>"], "response"))
    assert group.rewards == [0.6] and group.stats["transport_retries"] == 3
    server.script.clear()
    server.default = 429
    group = run(score_group(openai_judge(server), ROW, ["<response>a</response>"], "response"))
    assert group.rewards == [0.0]
    assert group.stats["judge_failures"] == 1 and group.stats["judge_failures:http_429"] == 1
    assert group.stats["transport_retries"] == 9  # 10 tries in all


def test_num_repeats_averages_calls(server: JudgeServer) -> None:
    server.script.extend([verdict([0.2]), verdict([0.6])])
    group = run(score_group(openai_judge(server, num_repeats=2), ROW, ["<response>a</response>"], "response"))
    assert group.rewards == [pytest.approx(0.4)] and len(server.requests) == 2
