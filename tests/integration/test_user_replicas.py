"""Simulated users as managed parts of the rollout, with real models (issue 33, item 1): a GRPO group's
episodes that send the same agent messages get the same user replies at temperature 1; the reply cache
changes nothing an uncached run samples; a killed user replica is restarted by Ray, its pending requests are
asked again with the same seeds, and the restart is counted."""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time

import ray

from userrl.actors.env_runner import EpisodePlayer, EpisodeSpec
from userrl.chat import ChatFormat
from userrl.engines.base import GenerationOutput
from userrl.env_runner_group import EnvRunnerGroup
from userrl.envs import load_tasks
from userrl.envs.llm import UserModel
from userrl.envs.reply_cache import ReplyCache
from userrl.rollout import RolloutLimits, TokenPolicy
from userrl.trainer import TrainerConfig
from userrl.trajectory import Trajectory
from userrl.users import ReplicaRoleClient

LINES = ["[action] Hi, how can I help you today?", "[action] Could you tell me more?", "[finish]"]


class ScriptedAgent:
    """A stand-in policy replica: every episode writes the same lines, one per turn."""

    def __init__(self, tokenizer):
        self.tokenizer, self.turn = tokenizer, {}

    async def generate(self, request):
        turn = self.turn[request.cache_key] = self.turn.get(request.cache_key, -1) + 1
        ids = self.tokenizer.encode(LINES[turn], add_special_tokens=False) + [self.tokenizer.eos_token_id]
        return GenerationOutput(ids, [0.0] * len(ids), "stop")


def _play(user_client, tokenizer, specs: list[EpisodeSpec], seed: int = 0) -> list[Trajectory]:
    agent = ScriptedAgent(tokenizer)
    player = EpisodePlayer(TokenPolicy(ChatFormat(tokenizer, "bracket"), agent.generate),
                           RolloutLimits(max_turns=3), {"tau": {"backend": "local", "user_temperature": 1.0}},
                           len(specs), user_backend="local", user_client=user_client)
    return asyncio.run(player.run(specs, seed=seed))


def _replies(traj: Trajectory) -> list[str]:
    """What the agent heard: the customer's replies to its two messages, then the end of the episode."""
    return [turn.feedback for turn in traj.turns if turn.executed]


def _specs(groups: dict[str, int]) -> list[EpisodeSpec]:
    task = load_tasks("tau", split="test")[0]
    return [EpisodeSpec(task, f"{group}-s{i}", group) for group, size in groups.items() for i in range(size)]


def _smollm_client(cache: ReplyCache | None = None) -> tuple[ReplicaRoleClient, object]:
    from transformers import AutoTokenizer

    from userrl.actors.policy_replica import PolicyReplica
    from userrl.models import resolve_model

    path = resolve_model("smollm2-135m")
    tokenizer = AutoTokenizer.from_pretrained(path)
    replica = PolicyReplica(path, "hf", num_threads=2, pad_token_id=tokenizer.pad_token_id)
    client = ReplicaRoleClient([replica], tokenizer, max_tokens=24, user_model=UserModel("smollm2-135m"),
                               cache=cache)
    return client, tokenizer


def test_a_groups_episodes_get_the_same_user_replies_at_temperature_1():
    """SmolLM2-135M plays tau's customer at temperature 1: the two episodes of group a (played together,
    batched with the others) hear the same replies to the same messages; group b hears others."""
    client, tokenizer = _smollm_client()
    a0, a1, b0 = _play(client, tokenizer, _specs({"a": 2, "b": 1}))
    for traj in (a0, a1, b0):
        assert not traj.aborted, traj.error
        assert traj.user_requests == 2 and traj.user_model == "smollm2-135m" and traj.user_tokens > 0
    assert _replies(a0) == _replies(a1)
    assert _replies(a0) != _replies(b0)  # the same messages, sampled with another group's seeds


def test_a_cached_run_samples_what_an_uncached_run_samples():
    """The same episodes with and without the reply cache: the same replies; the cache answered the group's
    repeated requests (one of each pair of identical requests)."""
    client, tokenizer = _smollm_client()
    specs = _specs({"a": 2, "b": 2})
    plain = _play(client, tokenizer, specs)
    client.cache = ReplyCache()
    cached = _play(client, tokenizer, specs)
    assert [_replies(t) for t in cached] == [_replies(t) for t in plain]
    assert sum(t.user_cache_hits for t in plain) == 0
    hits, requests = sum(t.user_cache_hits for t in cached), sum(t.user_requests for t in cached)
    assert hits == requests / 2  # every request of a group's second episode
    assert sum(t.user_tokens for t in cached) == sum(t.user_tokens for t in plain) / 2


def _config(tmp_path):
    return (TrainerConfig()
            .experiment(name="user-faults", output_dir=str(tmp_path))
            .environment(gyms=[{"name": "tau"}], protocol="bracket", max_turns=3, max_steps=3, backend="local",
                         local_user_model="tiny-random", local_user_engine="hf")
            .policy(model="tiny-random", max_batch_size=2, num_threads=1)
            .env_runners(num_env_runners=1)
            .to_config())


def test_a_killed_user_replica_is_restarted_and_its_turns_asked_again(ray_local, tiny_model, tokenizer, tmp_path):
    """A user replica (a Ray actor of the runner group) is killed while episodes wait for it: Ray restarts
    it, the pending user turns are sent again with their seeds (the replies equal an undisturbed run's),
    nothing is aborted, and the group counts the restart."""
    group = EnvRunnerGroup(_config(tmp_path), tiny_model)
    try:
        (user,) = group.user_replicas
        specs = _specs({"a": 2, "b": 2, "c": 2, "d": 2})

        def client():
            return ReplicaRoleClient([user], tokenizer, max_tokens=48, user_model=UserModel("tiny-random"))

        undisturbed = _play(client(), tokenizer, specs)
        victim = ray.get(user.process_id.remote())
        served = ray.get(user.get_stats.remote())["requests"]

        def kill_when_serving():
            deadline = time.monotonic() + 60
            while ray.get(user.get_stats.remote())["requests"] < served + 2 and time.monotonic() < deadline:
                time.sleep(0.02)
            os.kill(victim, signal.SIGKILL)

        killer = threading.Thread(target=kill_when_serving)
        killer.start()
        disturbed = _play(client(), tokenizer, specs)
        killer.join()

        assert not any(t.aborted for t in disturbed), [t.error for t in disturbed if t.aborted]
        assert sum(t.user_resent for t in disturbed) >= 1
        assert [_replies(t) for t in disturbed] == [_replies(t) for t in undisturbed]
        assert ray.get(user.process_id.remote()) != victim
        assert group.pop_counters()["user_replica_restarts"] == 1
        assert group.pop_counters()["user_replica_restarts"] == 0  # per iteration: counted once
    finally:
        group.stop()
