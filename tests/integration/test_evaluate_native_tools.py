"""`userrl evaluate --gyms tau env.protocol=native_tools --policy openai:...` (issue 18): MUA-RL's episode played
by a model behind an OpenAI-compatible endpoint (our loopback server, answering with the Tau solver's moves)
against the scripted customer, in both places the tool schemas can go (`evaluation.openai_tools`):
* request: the request's OpenAI `tools`, the calls returned as `tool_calls`, results as `tool` messages with ids;
* prompt: the schemas in the system message, the calls written as `<tool_call>` text (a server with no tool
  parser), results as `tool` messages as training renders them.
The returns must equal the solver's own on the env; no Ray is involved."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pytest
from aiohttp import web
from chat_server import LoopbackChatServer

from userrl.cli import main
from userrl.commands.evaluate import Episode, episode_spec
from userrl.config import load_config
from userrl.env_runner_group import env_kwargs
from userrl.envs import Task, load_tasks, make_env, make_solver
from userrl.envs.solving import play_episode
from userrl.envs.tau.tools import catalogue_text, domain_tools
from userrl.openai_policy import OpenAIEpisodePlayer, OpenAIPolicy, parse_policy
from userrl.rollout import RolloutLimits, request_seed
from userrl.trajectory import Trajectory

MAX_TURNS = 30
SEED = 3
TASKS = load_tasks("tau", split="test")[:3]


class NativeSolverServer(LoopbackChatServer):
    """Chat completions answered by the Tau solver, replayed over the conversation's tool results and customer
    replies (no per-episode state: the episode is found from the request's seed, as in test_evaluation.py)."""

    def __init__(self, tasks: list[Task], written: bool):
        self.by_seed = {request_seed(SEED, episode_spec(Episode(task, 0)).uid, turn): task
                        for task in tasks for turn in range(MAX_TURNS)}
        self.written = written
        self.requests: list[dict[str, Any]] = []
        super().__init__()

    @staticmethod
    def _move(solver: Any, feedback: str | None, domain: str) -> tuple[str, str]:
        choice, content = solver.next_action(feedback)
        while choice == "search":  # the agent has the tools already: answer the solver's look-up here
            choice, content = solver.next_action(catalogue_text(domain))
        return choice, content

    async def handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.requests.append(body)
        task = self.by_seed[body["seed"]]
        solver = make_solver("tau", task, np.random.default_rng(0), MAX_TURNS)
        choice, content = self._move(solver, None, task.data["domain"])
        answered = False
        for message in body["messages"][2:]:
            if message["role"] == "assistant":
                answered = False
            elif not answered:  # the first tool or user message after a reply carries its feedback
                choice, content = self._move(solver, message["content"], task.data["domain"])
                answered = True
        message: dict[str, Any] = {"role": "assistant", "content": "" if choice == "finish" else content}
        if choice == "answer":
            call = json.loads(content)
            if self.written:
                message["content"] = f"<tool_call>\n{json.dumps(call)}\n</tool_call>"
            else:
                message = {"role": "assistant", "content": None, "tool_calls": [
                    {"id": f"call_{len(self.requests)}", "type": "function",
                     "function": {"name": call["name"], "arguments": json.dumps(call["arguments"])}}]}
        return web.json_response({
            "id": f"chatcmpl-{len(self.requests)}", "object": "chat.completion", "created": int(time.time()),
            "model": body["model"], "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 7, "total_tokens": 17}})


def solver_return(task: Task) -> float:
    """The solver's return on the env itself (scripted customer, MUA-RL's customer rule)."""
    env = make_env("tau", task, max_steps=2 * MAX_TURNS, customer_failure="end")
    return sum(step[3] for step in play_episode(env, task, make_solver("tau", task, np.random.default_rng(0),
                                                                       MAX_TURNS)))


def check_episodes(server: NativeSolverServer, returns: list[float], transcripts: list[list[dict[str, Any]]],
                   tools: str) -> None:
    """The solver's returns, the tools where `tools` puts them, tool results answered as that mode wants."""
    assert returns == [solver_return(task) for task in TASKS]
    assert 1.0 in returns  # the solver wins some of these tasks: the comparison above can fail
    tool_names = [tool.schema()["function"]["name"] for tool in domain_tools("retail").values()]
    # Episodes run concurrently, so requests arrive interleaved: TASKS[0]'s first request is its opening.
    first = next(r for r in server.requests if server.by_seed[r["seed"]] is TASKS[0])
    system = first["messages"][0]["content"]
    if tools == "request":  # the schemas travel as OpenAI tools, nothing is written into the policy text
        assert [t["function"]["name"] for t in first["tools"]] == tool_names
        assert "<tool_call>" not in system
    else:  # no tools in the request: the schemas and the call format are in the system message
        assert "tools" not in first
        assert all(f'"name": "{name}"' in system for name in tool_names) and "<tool_call>" in system
    assert first["messages"][1] == {"role": "user", "content": TASKS[0].data["obs"].strip()}
    for messages in transcripts:
        for i, message in enumerate(messages):
            if message["role"] == "tool":
                previous = messages[i - 1]
                if tools == "request":  # answered by id, as the OpenAI API wants
                    assert message["tool_call_id"] == previous["tool_calls"][0]["id"]
                else:
                    assert "tool_call_id" not in message and "<tool_call>" in previous["content"]
    won = transcripts[returns.index(1.0)]
    roles = [m["role"] for m in won]
    assert {"tool", "user"} <= set(roles[2:])  # tool results and customer replies both came back
    # The customer ended it (docs/spec/ALGORITHMS.md §5.1).
    assert "###STOP###" in won[-1]["content"] and roles[-1] == "user"


def test_userrl_evaluate_native_tools_with_the_tools_in_the_prompt(tmp_path: Path, monkeypatch, capsys):
    # The command of issue 18 item 5 (--gyms tau picks the gyms the protocol is checked against).
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-logged")
    server = NativeSolverServer(TASKS, written=True)
    server.start()
    try:
        code = main(["evaluate", "--gyms", "tau", "--policy", f"openai:solver@{server.base_url}",
                     "--max-episodes-per-gym", str(len(TASKS)), "--out", str(tmp_path / "out"),
                     f"experiment.output_dir={tmp_path}", "experiment.name=ev", f"experiment.seed={SEED}",
                     f"tracking.mlflow_uri=sqlite:///{tmp_path}/mlflow.db", "env.protocol=native_tools",
                     f"env.max_turns={MAX_TURNS}", f"env.max_steps={2 * MAX_TURNS}",
                     "evaluation.openai_tools=prompt", "evaluation.concurrency=3"])
    finally:
        server.stop()
    assert code == 0, capsys.readouterr().out
    frame = pl.read_parquet(tmp_path / "out" / "episodes.parquet")
    assert frame["item_key"].to_list() == [t.item_key for t in TASKS]
    assert not frame["aborted"].any() and set(frame["stop_reason"]) == {"env_done"}
    check_episodes(server, frame["episode_return"].to_list(), [json.loads(m) for m in frame["messages"]], "prompt")
    metrics = json.loads((tmp_path / "out" / "metrics.json").read_text())
    assert metrics["gyms"]["tau"]["micro_avg"] == pytest.approx(np.mean(frame["episode_return"].to_list()))


def test_native_tools_with_the_tools_in_the_request(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-logged")
    server = NativeSolverServer(TASKS, written=False)
    server.start()
    config = load_config(None, ["env.protocol=native_tools", "env.gyms=[{name: tau}]", f"env.max_turns={MAX_TURNS}",
                                f"env.max_steps={2 * MAX_TURNS}"])
    specs = [episode_spec(Episode(task, 0)) for task in TASKS]

    async def play() -> list[Trajectory]:
        policy = OpenAIPolicy(parse_policy(f"openai:solver@{server.base_url}"), "native_tools", tools="request")
        player = OpenAIEpisodePlayer(policy, RolloutLimits.from_config(config, 0.0), env_kwargs(config), 3)
        try:
            return await player.run(specs, seed=SEED)
        finally:
            await policy.aclose()
            assert not policy._episode_tools  # nothing kept once the episodes ended

    try:
        trajectories = asyncio.run(play())
    finally:
        server.stop()
    assert not any(t.aborted for t in trajectories) and {t.stop_reason for t in trajectories} == {"env_done"}
    check_episodes(server, [t.episode_return for t in trajectories], [t.messages for t in trajectories], "request")
