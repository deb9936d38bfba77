"""The env runner's breakdown of a turn's time (userrl/actors/turn_timing.py): stamps to phases."""

import asyncio
import time

import pytest

from userrl.actors.env_runner import EnvRunner, EpisodeSpec
from userrl.actors.turn_timing import PHASES, TurnTimings
from userrl.engines.base import GenerationOutput
from userrl.envs import load_tasks
from userrl.rollout import RolloutLimits


def test_stamps_become_phases_and_the_first_turn_is_told_apart():
    def stamps(sent: float) -> dict[str, float]:  # seconds after the send: replica 1, put 2, first 5, done 9, out 10
        return {"replica_in": sent + 1, "put": sent + 2, "first": sent + 5, "done": sent + 9, "replica_out": sent + 10}

    timings = TurnTimings()
    timings.episode_started("e")
    for _ in range(2):
        sent = timings.sending("e")
        timings.received("e", sent, stamps(sent))
    timings.episode_ended("e")
    result = timings.snapshot(reset=True)
    assert result["turns"] == 2 and result["episodes"] == 1
    assert result["to_engine"] == pytest.approx(2.0) and result["engine_decode"] == pytest.approx(8.0)
    assert result["engine_open"] == pytest.approx(3.0) and result["engine_first"] == pytest.approx(3.0)
    assert result["from_engine"] == pytest.approx(2.0)
    assert timings.snapshot()["turns"] == 0  # reset


def test_outputs_without_stamps_count_as_one_hop():
    timings = TurnTimings()
    sent = timings.sending(None)
    timings.received(None, sent, None)
    result = timings.snapshot()
    assert result["turns"] == 1 and result["request_hop"] >= 0.0
    assert sum(result[phase] for phase in PHASES) == pytest.approx(result["request_hop"])


class StampedPolicy:
    """A replica stand-in that answers `[answer] 1` and stamps its output like PolicyReplica + vLLM do."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer

    async def generate(self, request):
        arrived = time.monotonic()
        await asyncio.sleep(0.002)
        ids = self.tokenizer.encode("[answer] 1", add_special_tokens=False) + [self.tokenizer.eos_token_id]
        now = time.monotonic()
        return GenerationOutput(ids, [0.0] * len(ids), "stop", timing={
            "replica_in": arrived, "put": arrived, "first": arrived + 0.001, "done": now, "replica_out": now})

    def end_session(self, key):
        """A replica's interface: nothing kept per episode."""


def test_an_env_runner_accounts_for_its_episodes_time(tiny_model, tokenizer):
    runner = EnvRunner(tiny_model, "bracket", RolloutLimits(max_turns=2), [StampedPolicy(tokenizer)])
    tasks = load_tasks("function", split="test")[:3]
    start = time.monotonic()
    trajectories = asyncio.run(runner.run([EpisodeSpec(task, f"u{i}", f"g{i}") for i, task in enumerate(tasks)]))
    wall = time.monotonic() - start
    result = runner.turn_timings(reset=True)
    assert result["episodes"] == 3 and result["turns"] == sum(len(t.turns) for t in trajectories)
    assert all(result[phase] >= 0.0 for phase in PHASES)
    assert result["engine_decode"] > 0.0 and result["engine_open"] > 0.0
    # Every episode's time is in exactly one phase: their sum is the episodes' summed wall time, at most.
    assert sum(result[phase] for phase in PHASES) <= 3 * wall
