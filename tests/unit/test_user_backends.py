"""Simulated users behind real endpoints: an OpenAI-compatible HTTP server, and a local replica."""

import asyncio

import pytest
from test_llm_client import Reply, ScriptedServer

from userrl.actors.env_runner import EnvRunner, EpisodeSpec
from userrl.actors.policy_replica import PolicyReplica
from userrl.engines.base import GenerationOutput
from userrl.envs import load_tasks, make_env
from userrl.rollout import RolloutLimits
from userrl.users import ReplicaRoleClient


class LinesPolicy:
    """A stand-in model that writes fixed assistant lines, one per turn."""

    def __init__(self, tokenizer, lines):
        self.tokenizer, self.lines = tokenizer, list(lines)

    async def generate(self, request):
        ids = self.tokenizer.encode(self.lines.pop(0), add_special_tokens=False) + [self.tokenizer.eos_token_id]
        return GenerationOutput(ids, [0.0] * len(ids), "stop")

    def end_session(self, key):
        """A replica's interface: this stand-in keeps nothing per episode."""


def test_openai_backend_through_an_env_runner(tiny_model, tokenizer):
    server = ScriptedServer()
    server.default = Reply(content='{"thought": "the story says so", "response": "No"}')
    server.start()
    try:
        policy = LinesPolicy(tokenizer, ["[action] Did the man die?", "[finish]"])
        runner = EnvRunner(tiny_model, "bracket", RolloutLimits(max_turns=4), [policy],
                           user_backend="openai", llm={"base_url": server.base_url, "api_key": "local", "model": "sim"})
        task = load_tasks("turtle", split="test")[0]
        (traj,) = asyncio.run(runner.run([EpisodeSpec(task, "u0", "g0")]))
    finally:
        server.stop()
    assert traj.turns[0].feedback == "No"
    assert traj.stop_reason == "env_done" and not traj.aborted
    assert server.requests and server.requests[0]["model"] == "sim"
    assert task.data["bottom"] in server.requests[0]["messages"][1]["content"] or any(
        task.data["bottom"] in m["content"] for m in server.requests[0]["messages"])


@pytest.mark.parametrize(("temperature", "attempts"), [(1.0, 2), (0.0, 1)])
def test_local_backend_falls_back_on_unusable_replies(tiny_model, tokenizer, temperature, attempts):
    """A random model cannot write the oracle's JSON: the client reports the failure, the gym falls back.
    A sampled reply is asked for again; a greedy one is not (the replica would decode the same tokens)."""
    replica = PolicyReplica(tiny_model, num_threads=1)
    client = ReplicaRoleClient([replica], tokenizer, max_tokens=8, attempts=2, temperature=temperature)
    text, call = asyncio.run(client.complete_text("user", "You are a user.", "Hello?"))
    assert call.ok == bool(text)  # an empty reply is a failed attempt, never an empty user message
    env = make_env("turtle", load_tasks("turtle", split="test")[0], backend="local", llm=client)
    env.reset()
    before = replica.get_stats()["requests"]
    _, reward, terminated, _, info = env.step("[action] Did the man die?")
    assert not terminated and reward == 0.0
    assert info["lm_calls"][0]["ok"] is False and info["lm_calls"][0]["attempts"] == attempts
    assert replica.get_stats()["requests"] - before == attempts


def test_a_failed_role_call_aborts_the_episode_or_falls_back_as_configured(tiny_model, tokenizer):
    """Scenario 3's rule: the oracle's endpoint answers 500 on every attempt. With role_failure=abort (the
    default) the step's fallback is not taken as the oracle's verdict: the episode is aborted with the
    role named and the failed call counted; with fallback the gym's fallback reply stands in."""
    server = ScriptedServer()
    server.default = Reply(status=500)
    server.start()
    results = {}
    try:
        for mode in ("abort", "fallback"):
            policy = LinesPolicy(tokenizer, ["[action] Did the man die?", "[finish]"])
            runner = EnvRunner(tiny_model, "bracket", RolloutLimits(max_turns=4, role_failure=mode), [policy],
                               user_backend="openai",
                               llm={"base_url": server.base_url, "api_key": "local", "model": "sim", "attempts": 2})
            task = load_tasks("turtle", split="test")[0]
            (results[mode],) = asyncio.run(runner.run([EpisodeSpec(task, "u0", "g0")]))
    finally:
        server.stop()
    aborted, fallback = results["abort"], results["fallback"]
    assert aborted.aborted and aborted.error.startswith("role_call_failed:")
    assert aborted.turns[0].role_calls == 1 and aborted.turns[0].failed_role_calls == 1
    assert not fallback.aborted and fallback.turns[0].failed_role_calls == 1
    assert fallback.turns[0].feedback  # the gym's fallback reply
    assert len(server.requests) == 4  # two attempts per episode, nothing more
