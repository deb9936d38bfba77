"""`userrl train-user` / `evaluate-user` end to end (issue 17 item 3) on the tiny model: the same Ray Train
FSDP learner group, replicas and episode loop as agent training, with the humanlm gym's user-reply tasks.

The random tiny model never writes a field's tags, so one fixture first teaches it (a few hundred
supervised steps, about a minute) to answer every prompt with one `<response>` block: its replies then parse strictly,
and the training judge, scripted or our own loopback OpenAI-compatible server, really scores them.
"""

from __future__ import annotations

import json
import re
import time
from collections import deque
from typing import Any

import pytest
from aiohttp import web
from chat_server import LoopbackChatServer
from mlflow import MlflowClient

from userrl.humanlm.algorithm import UserSimulatorConfig
from userrl.humanlm.fields import FIELD_NAMES

pytestmark = pytest.mark.slow

REPLY = "<response>I am not convinced, show me evidence.</response>"


@pytest.fixture(scope="module")
def replier(tiny_model, tmp_path_factory) -> str:
    """The tiny model taught to answer a user-reply prompt with REPLY (then its end-of-turn token)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from userrl.chat import ChatFormat
    from userrl.envs import load_tasks, make_env

    out = str(tmp_path_factory.mktemp("replier"))
    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    model = AutoModelForCausalLM.from_pretrained(tiny_model)
    chat = ChatFormat(tokenizer, "user_reply")
    target = tokenizer.encode(REPLY, add_special_tokens=False) + [tokenizer.convert_tokens_to_ids("<|im_end|>")]
    prompts = []
    for task in load_tasks("humanlm", "train", mode="separate_system_prompt")[::97][:24]:
        messages, _ = chat.episode_opening(task, make_env("humanlm", task))
        prompts.append([i for ids, _ in chat.encode_prompt(messages) for i in ids])
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    torch.manual_seed(0)
    for step in range(100):
        prompt = prompts[step % len(prompts)]
        # The head on the target positions only: the prompt's logits over the 49k vocabulary cost 5x the rest.
        hidden = model.model(input_ids=torch.tensor([prompt + target])).last_hidden_state[0, len(prompt) - 1:-1]
        loss = torch.nn.functional.cross_entropy(model.lm_head(hidden), torch.tensor(target))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


def _metric_keys(uri: str, run_id: str) -> dict[str, float]:
    run = MlflowClient(tracking_uri=uri).get_run(run_id)
    return dict(run.data.metrics)


def _builder(tmp_path, model: str, name: str, **humanlm: Any) -> UserSimulatorConfig:
    return (UserSimulatorConfig()
            .experiment(name=name, seed=0, output_dir=str(tmp_path))
            .humanlm(**humanlm)
            .policy(model=model, max_new_tokens=24, max_model_len=1024, max_response_len=32, num_threads=1)
            .env_runners(num_env_runners=1)
            .training(batch_size=3, group_size=2, lr=1e-5, micro_batch_tokens=4096)
            .learners(num_learners=1)
            .tracking(experiment=name, mlflow_uri=f"sqlite:///{tmp_path}/mlflow.db", sample_trajectories=2))


def test_train_user_with_the_scripted_judge_checkpoints_resumes_and_evaluates(ray_local, replier, tmp_path,
                                                                              capsys):
    from userrl.cli import main

    algo = (_builder(tmp_path, replier, "user", mode="separate_system_prompt")
            .training(iterations=2).evaluation(interval=2, num_tasks=3).checkpointing(every=1).build_algo())
    try:
        results = algo.fit()
        uri, run_id = algo.mlflow_uri, algo.mlflow_run_id
    finally:
        algo.stop()

    assert [r["iteration"] for r in results] == [1, 2]
    for r in results:
        assert r["rollout/episodes"] == 6 and r["rollout/aborted"] == 0 and r["humanlm/groups"] == 3
        fields = [f for f in FIELD_NAMES if f"humanlm/{f}/samples" in r]
        assert fields and sum(r[f"humanlm/{f}/samples"] for f in fields) == 6  # every reply is scored once
        for f in fields:
            assert 0.0 <= r[f"humanlm/{f}/score"] <= 1.0 and 0.0 <= r[f"humanlm/{f}/valid_rate"] <= 1.0
            if f != "response":  # the taught reply is a <response> block: strictly invalid for any other field
                assert r[f"humanlm/{f}/valid_rate"] == 0.0 and r[f"humanlm/{f}/score"] == 0.0
        assert r["rollout/reward_mean"] == pytest.approx(r["humanlm/score_mean"])
        assert r["learner/trained_tokens"] > 0
    # Evaluation (iteration 2): the response field, the validation judge, flexible parsing.
    final = results[-1]
    assert final["eval/humanlm/response/samples"] == 3 and "eval/humanlm/stance/samples" not in final
    assert 0.0 <= final["eval/humanlm/response/score"] <= 1.0
    # What MLflow shows: per-field scores and valid rates of every iteration, the judge's counters.
    metrics = _metric_keys(uri, run_id)
    assert "eval.humanlm.response.score" in metrics and "humanlm.judge_calls" in metrics
    assert {f"humanlm.{f}.valid_rate" for f in fields} <= set(metrics)
    checkpoint = tmp_path / "user" / "checkpoints" / "iter_000002"
    assert (checkpoint / "meta.json").is_file() and (checkpoint / "model" / "config.json").is_file()

    # Resume: the run goes on from the checkpoint for the third iteration.
    algo = (_builder(tmp_path, replier, "user", mode="separate_system_prompt").training(iterations=3)
            .checkpointing(every=1, resume_from=str(checkpoint)).build_algo())
    try:
        resumed = algo.fit()
    finally:
        algo.stop()
    assert [r["iteration"] for r in resumed] == [3] and resumed[0]["policy_version"] == 3
    assert (tmp_path / "user" / "checkpoints" / "iter_000003" / "meta.json").is_file()

    # evaluate-user: every field of the first 2 test rows, per-field scores printed and written.
    out = tmp_path / "eval_user"
    capsys.readouterr()
    status = main(["evaluate-user", "--checkpoint", str(tmp_path / "user" / "checkpoints" / "iter_000003"),
                   "--max-rows", "2", "--out", str(out), f"experiment.output_dir={tmp_path}",
                   "experiment.name=user", f"tracking.mlflow_uri=sqlite:///{tmp_path}/mlflow.db",
                   "policy.max_new_tokens=24", "policy.max_model_len=1024", "policy.num_threads=1",
                   "env_runners.num_env_runners=1"])
    printed = capsys.readouterr().out
    assert status == 0, printed
    summary = json.loads((out / "metrics.json").read_text())
    assert summary["items"] == 14 and summary["mode"] == "separate_system_prompt" and summary["judge"] == "scripted"
    for f in FIELD_NAMES:
        assert summary["metrics"][f"eval/humanlm/{f}/samples"] == 2
        assert 0.0 <= summary["metrics"][f"eval/humanlm/{f}/score"] <= 1.0
        assert re.search(rf"{f}\s+│\s+2\s+│\s+\d\.\d{{3}}", printed), printed
    assert summary["metrics"]["eval/humanlm/response/valid_rate"] == 1.0
    assert summary["metrics"]["eval/humanlm/stance/valid_rate"] == 0.0
    replies = [json.loads(line) for line in (out / "replies.jsonl").read_text().splitlines()]
    assert len(replies) == 14 and {r["field"] for r in replies} == set(FIELD_NAMES)


class JudgeServer(LoopbackChatServer):
    """An OpenAI-compatible judge: scripted bad replies first, then a score per listed candidate."""

    def __init__(self, script: list[str | int] | None = None, score: float = 0.6):
        self.script: deque[str | int] = deque(script or [])
        self.score = score
        self.requests: list[dict[str, Any]] = []
        super().__init__()

    async def handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.requests.append(body)
        n = int(re.search(r"Candidates \((\d+)\):", body["messages"][-1]["content"]).group(1))
        reply = self.script.popleft() if self.script else json.dumps(
            {"key_points": ["doubt"], "candidates": [{"id": i, "thought": "t", "score": self.score - 0.1 * (i - 1)}
                                                     for i in range(1, n + 1)]})
        if isinstance(reply, int):
            return web.json_response({"error": {"message": "down", "type": "server_error"}}, status=reply)
        message = {"role": "assistant", "content": reply}
        return web.json_response({"id": "x", "object": "chat.completion", "created": int(time.time()),
                                  "model": body["model"], "choices": [{"index": 0, "message": message,
                                                                       "finish_reason": "stop"}]})


def test_train_user_with_a_loopback_openai_judge_retries_bad_replies(ray_local, replier, tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "local")
    # Bad replies first: malformed and wrong candidate count are the judge's retries; an empty reply is the
    # client's (a transport failure, retried within its `attempts`). Each is counted.
    server = JudgeServer(script=["not json at all", "", json.dumps({"key_points": [], "candidates": []})])
    server.start()
    llm = {"base_url": server.base_url, "model": "judge-m", "attempts": 2, "timeout_s": 10.0, "retry_pause_s": 0.01}
    try:
        algo = (_builder(tmp_path, replier, "openai-user", mode="response_only", judge="openai", judge_llm=llm)
                .training(iterations=1).evaluation(interval=1, num_tasks=2).checkpointing(every=0).build_algo())
        seen: list[dict[str, Any]] = []  # the evaluation before training (iteration 0) too
        try:
            results = algo.fit(on_result=seen.append)
            uri, run_id = algo.mlflow_uri, algo.mlflow_run_id
        finally:
            algo.stop()
    finally:
        server.stop()

    def total(key: str) -> float:  # over the training and validation judges' numbers of the whole run
        return sum(x.get(f"humanlm/{key}", 0) + x.get(f"eval/humanlm/{key}", 0) for x in seen)

    (r,) = results
    assert r["rollout/aborted"] == 0 and r["humanlm/response/samples"] == 6
    # The judge saw each group's distinct valid replies in one call; its scores are the rewards.
    train_calls = [b for b in server.requests if b["temperature"] == 1.0]
    eval_calls = [b for b in server.requests if b["temperature"] == 0.0]
    assert train_calls and eval_calls and {b["model"] for b in server.requests} == {"judge-m"}
    assert [x["phase"] for x in seen] == ["eval", "rl"]
    assert total("bad_reply/malformed") == 1 and total("bad_reply/wrong_count") == 1
    assert total("judge_retries") == 2 and total("transport_retries") == 1 and total("judge_failures") == 0
    assert total("judge_calls") == len(server.requests) - 1  # the empty reply was the client's own retry
    assert r["humanlm/judge_calls"] >= 1 and r["humanlm/judge_calls"] <= len(train_calls)
    assert 0.0 < r["humanlm/response/score"] <= 0.6 and r["humanlm/response/valid_rate"] > 0
    assert r["eval/humanlm/response/samples"] == 2 and r["eval/humanlm/response/score"] == pytest.approx(0.6)
    metrics = _metric_keys(uri, run_id)
    assert "humanlm.judge_calls" in metrics and "eval.humanlm.response.score" in metrics


def test_evaluate_user_with_a_judge_that_always_fails_aborts_and_reports(ray_local, replier, tmp_path, monkeypatch,
                                                                         capsys):
    from userrl.cli import main

    monkeypatch.setenv("OPENAI_API_KEY", "local")
    server = JudgeServer(script=[500] * 100)
    server.start()
    try:
        status = main(["evaluate-user", "--max-rows", "2", "--out", str(tmp_path / "ev"),
                       f"experiment.output_dir={tmp_path}", f"tracking.mlflow_uri=sqlite:///{tmp_path}/mlflow.db",
                       f"policy.model={replier}", "policy.max_new_tokens=24", "policy.num_threads=1",
                       "env_runners.num_env_runners=1", "humanlm.mode=response_only", "humanlm.judge=openai",
                       f"humanlm.judge_llm.base_url={server.base_url}", "humanlm.judge_llm.model=judge-m",
                       "humanlm.judge_llm.attempts=2", "humanlm.judge_llm.retry_pause_s=0.01"])
    finally:
        server.stop()
    printed = capsys.readouterr().out
    # Never a crash and never a silent 0: the replies whose judge call failed are aborted and counted.
    assert status == 3, printed
    summary = json.loads((tmp_path / "ev" / "metrics.json").read_text())
    assert summary["aborted"] == 2 and summary["aborted_errors"] == ["role_call_failed:humanlm_judge"]
    assert summary["metrics"]["eval/humanlm/judge_failures"] == 2
    assert "eval/humanlm/response/score" not in summary["metrics"]
    assert "aborted 2 item(s)" in printed
