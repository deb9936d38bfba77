"""`userrl evaluate` end to end: a checkpoint on local Ray, an OpenAI-compatible endpoint over real HTTP
whose replies come from the gyms' privileged solvers, resume from shards, MLflow, and bad input."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pytest
from aiohttp import web
from chat_server import LoopbackChatServer
from mlflow import MlflowClient

from userrl.cli import main
from userrl.commands.evaluate import Episode, episode_spec, run_evaluation
from userrl.config import load_config
from userrl.envs import load_tasks, make_env, make_solver
from userrl.envs.solving import play_episode
from userrl.protocols.choices import TOOL_NAME
from userrl.rollout import request_seed

MAX_TURNS = 8


class SolverServer(LoopbackChatServer):
    """POST /v1/chat/completions answered by the privileged solvers (tests/chat_server.py). The episode is recognised from the request's sampling seed, which the
    evaluation derives from the episode uid and turn; the solver is replayed over the conversation's tool
    feedback, so the server keeps no per-episode state."""

    def __init__(self, tasks: list[Any], passes: int, seed: int, text_gyms: set[str], failing: set[str]):
        self.by_seed: dict[int, Any] = {}
        for task in tasks:
            for p in range(passes):
                uid = episode_spec(Episode(task, p)).uid
                for turn in range(MAX_TURNS):
                    self.by_seed[request_seed(seed + p, uid, turn)] = task
        self.text_gyms, self.failing = text_gyms, failing
        self.requests: list[dict[str, Any]] = []
        super().__init__()

    def _next_action(self, task: Any, messages: list[dict[str, Any]]) -> tuple[str, str]:
        solver = make_solver(task.gym, task, np.random.default_rng(0))
        action = solver.next_action(None)
        answered = False
        for message in messages[2:]:
            if message["role"] == "assistant":
                answered = False
            elif message["role"] in ("tool", "user") and not answered:  # the first reply carries the feedback
                action, answered = solver.next_action(message["content"]), True
        return action

    async def handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.requests.append(body)
        task = self.by_seed[body["seed"]]
        if task.item_key in self.failing:
            return web.json_response({"error": {"message": "scripted outage", "type": "server_error"}}, status=503)
        choice, content = self._next_action(task, body["messages"])
        arguments = json.dumps({"choice": choice, "content": content})
        if task.gym in self.text_gyms:  # the call written as text, as served models without a tool parser do
            message = {"role": "assistant",
                       "content": f'<tool_call>\n{{"name": "{TOOL_NAME}", "arguments": {arguments}}}\n</tool_call>'}
        else:
            message = {"role": "assistant", "content": None, "tool_calls": [
                {"id": f"call_{len(self.requests)}", "type": "function",
                 "function": {"name": TOOL_NAME, "arguments": arguments}}]}
        return web.json_response({
            "id": f"chatcmpl-{len(self.requests)}", "object": "chat.completion", "created": int(time.time()),
            "model": body["model"], "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls"}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 7, "total_tokens": 17}})


def _config(tmp_path: Path, *overrides: str):
    return load_config(None, [f"experiment.output_dir={tmp_path}", "experiment.name=ev", "experiment.seed=5",
                              f"tracking.mlflow_uri=sqlite:///{tmp_path}/mlflow.db", "tracking.experiment=ev",
                              f"env.max_turns={MAX_TURNS}", f"env.max_steps={MAX_TURNS}", *overrides])


def _solver_returns(gym: str, tasks: list[Any]) -> list[float]:
    """What the solver scores on each task when played directly on the env (scripted users)."""
    returns = []
    for task in tasks:
        env = make_env(gym, task, max_steps=MAX_TURNS)
        steps = play_episode(env, task, make_solver(gym, task, np.random.default_rng(0)))
        returns.append(sum(step[3] for step in steps))
    return returns


def test_openai_policy_scores_the_solvers_and_resumes(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-logged")
    function = load_tasks("function", split="test")[:3]
    telepathy = load_tasks("telepathy", split="test")[:3]
    failing = function[2].item_key
    server = SolverServer(function + telepathy, passes=2, seed=5, text_gyms={"telepathy"}, failing={failing})
    server.start()
    try:
        config = _config(tmp_path, "evaluation.passes=2", "evaluation.max_episodes_per_gym=3",
                         "evaluation.concurrency=4", "evaluation.openai_timeout_s=5")
        policy = f"openai:solver@{server.base_url}"
        first = run_evaluation(config, policy=policy, gyms="function,telepathy", out=tmp_path / "out")
        requests_first = len(server.requests)

        frame = pl.read_parquet(tmp_path / "out" / "episodes.parquet")
        assert frame.height == (3 + 3) * 2 and first.played == 12 and first.reused == 0
        assert sorted(frame.filter(pl.col("gym") == "function")["pass_index"].to_list()) == [0, 0, 0, 1, 1, 1]
        function_rows = frame.filter((pl.col("gym") == "function") & ~pl.col("aborted"))
        assert function_rows["episode_return"].to_list() == [1.0] * 4  # the solver always wins Function
        assert set(function_rows["stop_reason"]) == {"env_done"}
        transcript = json.loads(function_rows["messages"][0])
        assert [m["role"] for m in transcript[:4]] == ["system", "user", "assistant", "tool"]
        assert transcript[2]["tool_calls"][0]["function"]["name"] == TOOL_NAME
        # The failing item's passes are aborted, counted and excluded: Function still scores exactly 1.0.
        aborted = frame.filter(pl.col("aborted"))
        assert aborted["item_key"].to_list() == [failing, failing]
        assert aborted["error"].to_list() == ["generate_exception:InternalServerError"] * 2

        fn = first.summary["gyms"]["function"]
        assert (fn["micro_avg"], fn["micro_max"], fn["items"], fn["aborted"]) == (1.0, 1.0, 2, 2)
        expected = _solver_returns("telepathy", telepathy)
        tp = first.summary["gyms"]["telepathy"]
        assert tp["micro_avg"] == pytest.approx(np.mean(expected)) and tp["micro_max"] == pytest.approx(
            np.mean(expected))
        assert first.summary["overall"] == pytest.approx((1.0 * 2 + np.mean(expected) * 3) / 5)
        metrics = json.loads((tmp_path / "out" / "metrics.json").read_text())
        assert metrics["gyms"]["function"]["micro_avg"] == 1.0 and metrics["passes"] == 2

        client = MlflowClient(f"sqlite:///{tmp_path}/mlflow.db")
        run = client.get_run(first.mlflow_run_id)
        assert run.data.metrics["eval.function.micro_avg"] == 1.0
        assert run.data.metrics["eval.function.aborted"] == 2.0
        assert run.data.params["eval.policy"] == policy and run.data.params["evaluation.passes"] == "2"
        assert run.data.params["env.reward_preset"] == "eval"  # the standalone evaluation's (GYMS §0.9)
        artifacts = {a.path for a in client.list_artifacts(run.info.run_id, "evaluation")}
        assert artifacts == {"evaluation/metrics.json", "evaluation/episodes.parquet"}

        # Resume: lose one shard (as if interrupted before it was written); only its episodes and the
        # aborted ones are played again, everything else is read back.
        shard = next(p for p in sorted((tmp_path / "out" / "shards").glob("telepathy-p1-*.parquet")))
        lost = pl.read_parquet(shard).height
        shard.unlink()
        second = run_evaluation(config, policy=policy, gyms="function,telepathy", out=tmp_path / "out")
        assert second.played == lost + 2 and second.reused == 12 - lost - 2
        replayed = server.requests[requests_first:]
        assert {server.by_seed[r["seed"]].item_key for r in replayed} == {t.item_key for t in telepathy} | {failing}
        assert second.summary["gyms"]["telepathy"] == tp
        assert pl.read_parquet(tmp_path / "out" / "episodes.parquet").height == 12

        # A finished evaluation re-run plays nothing; a different temperature refuses the folder.
        third = run_evaluation(config, policy=policy, gyms="function,telepathy", out=tmp_path / "out")
        assert third.played == 2 and third.reused == 10  # only the still-failing item is retried
        hotter = _config(tmp_path, "evaluation.temperature=0.7")
        with pytest.raises(ValueError, match="different evaluation"):
            run_evaluation(hotter, policy=policy, gyms="function", out=tmp_path / "out")
    finally:
        server.stop()


def _tiny_checkpoint(tiny_model: str, path: Path) -> Path:
    """A checkpoint folder as Learner.save_checkpoint lays it out (model/ + meta.json), from the tiny model."""
    shutil.copytree(tiny_model, path / "model")
    (path / "meta.json").write_text(json.dumps({"iteration": 0, "policy_version": 0, "config": {}}))
    return path


@pytest.mark.slow
def test_checkpoint_evaluation_on_local_ray_with_resume(ray_local, tiny_model, tmp_path):
    checkpoint = _tiny_checkpoint(tiny_model, tmp_path / "checkpoints" / "iter_000000")
    # policy.model stays at its default (smollm2-135m): the checkpoint's own model folder must be what plays.
    config = _config(tmp_path, "env.protocol=bracket", "env.max_turns=2", "policy.max_new_tokens=6",
                     "policy.max_model_len=1024", "policy.num_threads=1", "env_runners.num_env_runners=2",
                     "evaluation.passes=2", "evaluation.max_episodes_per_gym=2")
    result = run_evaluation(config, checkpoint=str(checkpoint), gyms="function,travel")
    out = tmp_path / "ev" / "eval" / "iter_000000"
    assert result.out == out and result.played == 8

    frame = pl.read_parquet(out / "episodes.parquet")
    assert frame.height == 2 * 2 * 2  # gyms x items x passes
    assert frame.select("gym", "pass_index").rows() == [("function", 0), ("function", 1)] * 2 + [
        ("travel", 0), ("travel", 1)] * 2
    assert set(frame["policy"]) == {str(checkpoint.resolve())}
    assert set(frame.filter(pl.col("gym") == "travel")["subset"]) == {"22"}
    for messages, turns in zip(frame["messages"], frame["num_turns"], strict=True):
        transcript = json.loads(messages)
        assert [m["role"] for m in transcript[:2]] == ["system", "user"]
        assert sum(m["role"] == "assistant" for m in transcript) == turns >= 1
    # micro_avg / micro_max recomputed by hand from the rows
    for gym in ("function", "travel"):
        rows = frame.filter((pl.col("gym") == gym) & ~pl.col("aborted"))
        per_item: dict[str, list[float]] = {}
        for item, ret in zip(rows["item_key"], rows["episode_return"], strict=True):
            per_item.setdefault(item, []).append(ret)
        metrics = result.summary["gyms"][gym]
        assert metrics["episodes"] == 4 and metrics["items"] == len(per_item)
        if gym == "function":
            assert metrics["micro_avg"] == pytest.approx(np.mean([np.mean(v) for v in per_item.values()]))
            assert metrics["micro_max"] == pytest.approx(np.mean([max(v) for v in per_item.values()]))
    assert set(result.summary["gyms"]["travel"]["subsets"]) == {"travel22"}

    shard = sorted((out / "shards").glob("travel-p1-*.parquet"))[0]
    lost = pl.read_parquet(shard).height
    shard.unlink()
    again = run_evaluation(config, checkpoint=str(checkpoint), gyms="function,travel")
    assert (again.played, again.reused) == (lost, 8 - lost)
    assert pl.read_parquet(out / "episodes.parquet").height == 8


def test_bad_input_exits_2_and_writes_nothing(tmp_path, capsys):
    def printed() -> str:
        return " ".join(capsys.readouterr().out.split())  # rich wraps long lines

    base = ["evaluate", f"experiment.output_dir={tmp_path}", "experiment.name=ev",
            f"tracking.mlflow_uri=sqlite:///{tmp_path}/mlflow.db"]
    assert main([*base, "--checkpoint", str(tmp_path / "missing")]) == 2
    assert "no such folder" in printed()
    assert main([*base, "--policy", "gpt-4o"]) == 2
    assert "expected openai:MODEL@URL" in printed()
    assert main([*base, "--policy", "openai:m@http://127.0.0.1:9/v1", "--checkpoint", str(tmp_path)]) == 2
    assert "not both" in printed()
    assert main([*base, "--passes", "0"]) == 2
    assert "--passes must be >= 1" in printed()
    assert main([*base, "--gyms", "functoin"]) == 2
    assert "did you mean 'function'" in printed()
    # A gym whose data is missing is skipped with a warning (docs/spec/GYMS.md §0.11); with none left there is
    # nothing to do.
    missing = ["env.gyms=[{name: travel, source: userrl}]", f"env.data_root={tmp_path / 'nodata'}"]
    assert main([*base, *missing, "--policy", "openai:m@http://127.0.0.1:9/v1"]) == 2
    text = printed()
    assert "warning: gym travel skipped: FileNotFoundError" in text and "no gym to evaluate" in text
    assert list(tmp_path.iterdir()) == []
