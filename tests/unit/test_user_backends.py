"""Simulated users behind real endpoints: an OpenAI-compatible HTTP server, and a local replica."""

import asyncio

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


def test_local_backend_falls_back_on_unusable_replies(tiny_model, tokenizer):
    """A random model cannot write the oracle's JSON: the client reports the failure, the gym falls back."""
    client = ReplicaRoleClient([PolicyReplica(tiny_model, num_threads=1)], tokenizer, max_tokens=8, attempts=2)
    text, call = asyncio.run(client.complete_text("user", "You are a user.", "Hello?"))
    assert call.ok == bool(text)  # an empty reply is a failed attempt, never an empty user message
    env = make_env("turtle", load_tasks("turtle", split="test")[0], backend="local", llm=client)
    env.reset()
    _, reward, terminated, _, info = env.step("[action] Did the man die?")
    assert not terminated and reward == 0.0
    assert info["lm_calls"][0]["ok"] is False and info["lm_calls"][0]["attempts"] == 2
