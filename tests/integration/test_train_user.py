"""`userrl train-user` / `evaluate-user` end to end (issue 17 item 3) on the tiny model: the same Ray Train
FSDP learner group, replicas and episode loop as agent training, with the humanlm gym's user-reply tasks.

The random tiny model never writes a field's tags, so one fixture first teaches it with train-user's own SFT
warm start (sft.source=rows, on rows whose real reply is one fixed text) to answer every prompt with one
`<response>` block: its replies then parse strictly, and the training judge, scripted or our own loopback
OpenAI-compatible server, really scores them. The same checkpoint, exported, plays the user side of Persuade
and Intention as a HumanLM-format local user.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import re
import time
from collections import deque
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from aiohttp import web
from chat_server import LoopbackChatServer
from mlflow import MlflowClient

from userrl.humanlm.fields import FIELD_NAMES
from userrl.humanlm.trainer_config import UserSimulatorConfig

pytestmark = pytest.mark.slow

REPLY_TEXT = "I am not convinced, show me evidence."
REPLY = f"<response>{REPLY_TEXT}</response>"


@pytest.fixture(scope="module")
def replier_checkpoint(tiny_model, tmp_path_factory) -> Path:
    """The tiny model warm started by train-user's SFT phase (sft.source=rows; `sft_phase` as rank 0 of the
    learner group runs it, here in a one-member process group) on rows whose real reply is REPLY's text, so
    that it answers every user-reply prompt with REPLY; saved as the run's checkpoint iter_000000."""
    import socket

    import torch.distributed as dist
    from transformers import AutoTokenizer

    from userrl.chat import ChatFormat
    from userrl.envs import load_tasks
    from userrl.humanlm.data import load_rows, render_jsonl
    from userrl.learner import Learner
    from userrl.train_loop import checkpoint_path, sft_phase

    out = tmp_path_factory.mktemp("replier")
    rows = [dataclasses.replace(r, ground_truth=REPLY_TEXT) for r in load_rows("train")[::14]]
    (out / "train.jsonl").write_text(render_jsonl(rows))
    config = (_builder(out, tiny_model, "replier", mode="response_only", data_files={"train": str(out / "train.jsonl")})
              .sft(enabled=True, episodes=80, epochs=2, batch_size=4, lr=1e-2).training(iterations=0).to_config())
    tasks = load_tasks("humanlm", "train", **config.task_options("humanlm"))
    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    try:
        learner = Learner(tiny_model, config, tokenizer.pad_token_id)
        losses: list[float] = []
        sft_phase(config, learner, tasks, ChatFormat(tokenizer, "user_reply"), lambda r: losses.append(r["sft/loss"]))
        path = checkpoint_path(config, 0)
        learner.save_checkpoint(path, {"iteration": 0, "policy_version": 1, "config": config.model_dump(mode="json")},
                                tokenizer)
    finally:
        dist.destroy_process_group()
    assert len(losses) == 40 and losses[-1] < 0.1 * losses[0], losses
    return path


@pytest.fixture(scope="module")
def replier(replier_checkpoint) -> str:
    """The warm-started model's folder."""
    return str(replier_checkpoint / "model")


def _replies(model: str, tokenizer: Any, rows: list[Any]) -> list[str]:
    """Greedy response-field replies of `model` to rows, rendered as the user_reply task renders them."""
    from userrl.actors.policy_replica import PolicyReplica
    from userrl.humanlm.user import HumanLMUserClient

    client = HumanLMUserClient([PolicyReplica(model, num_threads=1)], tokenizer, max_tokens=24)
    return list(asyncio.run(_gather(client.reply_text("response", r.persona, r.context) for r in rows)))


async def _gather(calls: Any) -> list[Any]:
    return list(await asyncio.gather(*calls))


def test_the_sft_warm_start_teaches_the_strict_format(replier, tiny_model, tokenizer):
    """Before the warm start the random model never writes a closed <response> block; after it, greedy
    replies to held-out prompts parse strictly (REPLY's text, which every demonstration held)."""
    from userrl.humanlm.data import load_rows
    from userrl.humanlm.format import parse_strict

    rows = load_rows("test")[::11][:8]
    before = [parse_strict(t, "response").valid for t in _replies(tiny_model, tokenizer, rows)]
    after = _replies(replier, tokenizer, rows)
    assert sum(before) == 0 and all(parse_strict(t, "response").valid for t in after), after
    assert {parse_strict(t, "response").values["response"] for t in after} == {REPLY_TEXT}


def test_an_exported_simulator_plays_the_user_side_of_persuade_and_intention(replier_checkpoint, tokenizer,
                                                                             tmp_path):
    """`userrl export` of the train-user checkpoint, then env.local_user_format=humanlm with it as the local
    user model: the gyms' feedback is the text of its <response> block (the reply it was taught)."""
    from userrl.actors.env_runner import make_user_client
    from userrl.actors.policy_replica import PolicyReplica
    from userrl.chat import ChatFormat
    from userrl.cli import main
    from userrl.envs import load_tasks, make_env, tool_call_to_action
    from userrl.humanlm.format import STOP_STRINGS
    from userrl.users import resolve_user_model

    out = tmp_path / "simulator"
    assert main(["export", "--checkpoint", str(replier_checkpoint), "--out", str(out)]) == 0
    meta = json.loads((out / "userrl.json").read_text())
    assert meta["protocol"] == "user_reply" and meta["stop_strings"] == list(STOP_STRINGS)
    # The exported chat template renders a user-reply prompt into the ids training rendered.
    from transformers import AutoTokenizer

    task = load_tasks("humanlm", "test", mode="response_only")[0]
    messages = task.data["messages"]
    trained = [i for ids, _ in ChatFormat(tokenizer, "user_reply").encode_prompt(messages) for i in ids]
    exported = AutoTokenizer.from_pretrained(out).apply_chat_template(messages, add_generation_prompt=True,
                                                                       tokenize=True, return_dict=True)
    assert list(exported["input_ids"]) == trained
    with pytest.raises(ValueError, match="set env.local_user_format=humanlm"):
        resolve_user_model(str(out))
    path = resolve_user_model(str(out), "humanlm")
    client = make_user_client("local", None, [PolicyReplica(path, num_threads=1)], path, "humanlm")
    client.max_tokens = 24
    persuade = make_env("persuade", load_tasks("persuade", "test")[0], backend="local", llm=client)
    persuade.reset()
    observation, reward, _, _, info = persuade.step(tool_call_to_action("answer", "Cash is easy to trace."))
    assert observation["feedback"] == REPLY_TEXT and info["lm_calls"][0]["ok"]
    # Its <stance> answer is REPLY too (the only block it knows), which names no stance: the stance stays.
    assert info["json_response"]["stance"] == REPLY_TEXT and persuade.stance == 0 and reward == 0.0
    intention = make_env("intention", load_tasks("intention", "test")[0], backend="local", llm=client,
                         role_backends={"intention_judge": "scripted"})
    intention.reset()
    observation, *_, info = intention.step(tool_call_to_action("action", "Which music genres do you like?"))
    assert observation["feedback"] == REPLY_TEXT
    assert [c["role"] for c in info["lm_calls"]] == ["intention_user"] and info["lm_calls"][0]["ok"]


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
            .learners(num_learners=0)
            .tracking(experiment=name, mlflow_uri=f"sqlite:///{tmp_path}/mlflow.db", sample_trajectories=2))


def test_train_user_with_the_scripted_judge_checkpoints_resumes_and_evaluates(ray_local, replier, tmp_path,
                                                                              capsys):
    """The sequential mode with the hierarchy-map curriculum: each step's tasks come from the map, which goes
    into every checkpoint and comes back on resume; then evaluate-user in the main mode."""
    from userrl.cli import main

    algo = (_builder(tmp_path, replier, "user", mode="sequential", curriculum=True)
            .training(iterations=2).evaluation(interval=2, num_tasks=3).checkpointing(every=1).build_trainer())
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
        # Only level 0 holds a batch before any promotion: stance; the taught <response> block never promotes.
        assert fields == ["stance"] and r["curriculum/level"] == 0 and r["curriculum/proposed"] == 0
    # Evaluation (iteration 2): the response field, the validation judge, flexible parsing.
    final = results[-1]
    assert final["eval/humanlm/response/samples"] == 3 and "eval/humanlm/stance/samples" not in final
    assert 0.0 <= final["eval/humanlm/response/score"] <= 1.0
    # What MLflow shows: per-field scores and valid rates of every iteration, the judge's counters.
    metrics = _metric_keys(uri, run_id)
    # (Training never called the judge: every stance reply failed strict parsing and scored 0 without it.)
    assert "eval.humanlm.response.score" in metrics and "eval.humanlm.judge_calls" in metrics
    assert "humanlm.invalid_parses" in metrics and "curriculum.level" in metrics
    assert {f"humanlm.{f}.valid_rate" for f in fields} <= set(metrics)
    checkpoint = tmp_path / "user" / "checkpoints" / "iter_000002"
    assert (checkpoint / "meta.json").is_file() and (checkpoint / "model" / "config.json").is_file()
    # The map went into the checkpoint (empty: nothing reached 0.9). Give it a ready response-level pool of
    # 3 rows (prefix blocks of every latent field) so that the resumed run has something to restore.
    state = json.loads((checkpoint / "task_source.json").read_text())
    assert state["kind"] == "humanlm_hierarchy_map" and state["map"]["pools"] == state["map"]["pending"] == []
    blocks = [[name, f"my {name}"] for name in FIELD_NAMES[:-1]]
    state["map"]["pools"] = [{"row_index": i, "level": 6, "prefix_blocks": blocks, "reward": 0.95, "step": 2}
                             for i in range(3)]
    (checkpoint / "task_source.json").write_text(json.dumps(state))

    # Resume: the run goes on from the checkpoint for the third iteration, with the map it holds.
    algo = (_builder(tmp_path, replier, "user", mode="sequential", curriculum=True).training(iterations=3)
            .checkpointing(every=1, resume_from=str(checkpoint)).build_trainer())
    try:
        resumed = algo.fit()
    finally:
        algo.stop()
    assert [r["iteration"] for r in resumed] == [3] and resumed[0]["policy_version"] == 3
    (r,) = resumed
    # Levels 0 and 6 hold a batch; the draw of (seed 0, iteration 2) is uniform over them: numpy's
    # default_rng([0, 2]).integers(2) is 1, level 6. Its prompts carry the six blocks; the taught reply parses.
    assert np.random.default_rng([0, 2]).integers(2) == 1
    assert r["curriculum/pool/response"] == 3 and r["curriculum/level"] == 6
    assert r["humanlm/response/samples"] == 6 and r["humanlm/response/valid_rate"] > 0
    assert (tmp_path / "user" / "checkpoints" / "iter_000003" / "meta.json").is_file()
    saved = json.loads((tmp_path / "user" / "checkpoints" / "iter_000003" / "task_source.json").read_text())
    assert sorted(e["row_index"] for e in saved["map"]["pools"] if e["level"] == 6) == [0, 1, 2]

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
                .training(iterations=1).evaluation(interval=1, num_tasks=2)
                .checkpointing(every=0, keep_best="eval/reward_mean").build_trainer())
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

    # checkpointing.keep_best: the first of the best evaluations is named, and its checkpoint exists although
    # the schedule writes none (every=0); the start (iteration 0) is the starting model itself.
    folder = tmp_path / "openai-user" / "checkpoints"
    best = json.loads((folder / "best.json").read_text())
    values = [x["eval/reward_mean"] for x in seen]
    assert best["value"] == pytest.approx(max(values)) and best["iteration"] == values.index(max(values))
    if best["iteration"] == 0:
        assert best["path"] == replier and not (folder / "iter_000001").exists()
    else:
        assert best["path"] == str(folder / "iter_000001") and (folder / "iter_000001" / "meta.json").is_file()


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
