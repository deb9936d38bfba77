"""Reliability scenarios 1, 2 and 6 (issue 15): a dead env runner, a dead policy replica and a gym that cannot
be built each cost only their own work, counted; nothing is lost or silently scored 0.

Processes are killed for real (SIGKILL of the actor's process id); Ray restarts them and the EnvRunnerGroup
plays their episodes again or gives the restarted replica the current weights.
"""

from __future__ import annotations

import os
import signal
import time

import pytest
import ray

from userrl.actors.env_runner import EpisodeSpec
from userrl.coordinator import episode_specs
from userrl.engines.base import GenerationRequest
from userrl.env_runner_group import EnvRunnerGroup
from userrl.envs import load_tasks
from userrl.trainer import TrainerConfig


def _config(tmp_path, **runners):
    return (TrainerConfig()
            .experiment(name="faults", output_dir=str(tmp_path))
            .environment(gyms=[{"name": "function", "difficulty": [0]}], protocol="bracket", max_turns=4, max_steps=4)
            # Small decode batches of long replies: the rollout lasts seconds, so a kill lands in the middle.
            .policy(model="tiny-random", max_new_tokens=64, max_batch_size=2, num_threads=1)
            .env_runners(num_env_runners=2, **runners)
            .to_config())


def _specs(count: int = 32) -> list[EpisodeSpec]:
    return episode_specs(load_tasks("function", split="train", difficulty=[0])[:count // 4], 4, "faults")


def _served(group: EnvRunnerGroup) -> int:
    return sum(s["requests"] for s in ray.get([r.get_stats.remote() for r in group.replicas]))


def _wait_until_serving(group: EnvRunnerGroup, at_least: int) -> None:
    deadline = time.monotonic() + 60
    while _served(group) < at_least:
        assert time.monotonic() < deadline, "the rollout never started"
        time.sleep(0.05)


def _greedy(replica, tokenizer) -> list[int]:
    prompt = tokenizer.encode("What is f(1, 2, 3, 4)?")
    out = ray.get(replica.generate.remote(GenerationRequest(prompt, 12, temperature=0.0)))
    return out.token_ids


def test_a_killed_env_runner_costs_nothing_and_is_counted(ray_local, tiny_model, tmp_path):
    """Scenario 1: the iteration completes with all its episodes; one restart and the chunk's re-runs counted."""
    group = EnvRunnerGroup(_config(tmp_path), tiny_model)
    try:
        specs = _specs()
        chunks = group.split(specs)  # one chunk per runner
        job = group.launch(chunks, [0] * len(chunks))
        victim = ray.get(group.runners[0].ping.remote())["pid"]
        _wait_until_serving(group, 2)
        os.kill(victim, signal.SIGKILL)
        trajectories = job.gather()

        assert sorted(t.uid for t in trajectories) == sorted(s.uid for s in specs)
        assert not any(t.aborted for t in trajectories), [t.error for t in trajectories if t.aborted]
        assert all(t.turns for t in trajectories)
        counters = group.pop_counters()
        assert counters["env_runner_restarts"] == 1
        assert counters["rerun_episodes"] == len(chunks[0])  # the dead runner's whole chunk, played again
        assert counters["lost_episodes"] == 0
        deadline = time.monotonic() + 120
        while group.live_runners != [0, 1]:  # Ray restarts it, and the group takes it back (a loaded machine
            assert time.monotonic() < deadline, group.live_runners  # takes a while)
            group.check_runners()
            time.sleep(0.2)
        assert ray.get(group.runners[0].ping.remote())["pid"] != victim
    finally:
        group.stop()


def test_a_killed_replica_is_restarted_with_the_current_weights(ray_local, tiny_model, tokenizer, tmp_path):
    """Scenario 2: the restarted replica serves only after it has the current weights and version; episodes
    in flight go on (their requests are sent again) and the iteration completes."""
    import torch
    from transformers import AutoModelForCausalLM

    group = EnvRunnerGroup(_config(tmp_path), tiny_model)
    try:
        replica = group.replicas[0]
        initial = _greedy(replica, tokenizer)
        model = AutoModelForCausalLM.from_pretrained(tiny_model)
        torch.manual_seed(0)
        trained = {name: value + 0.05 * torch.randn_like(value) for name, value in model.state_dict().items()}
        group.sync_weights(trained, version=3)
        synced = _greedy(replica, tokenizer)
        assert synced != initial  # so the check below can tell the two weights apart

        specs = _specs()
        job = group.launch(group.split(specs), [0, 0])
        victim = ray.get(replica.process_id.remote())
        _wait_until_serving(group, 2)
        os.kill(victim, signal.SIGKILL)
        trajectories = job.gather()

        assert not any(t.aborted for t in trajectories), [t.error for t in trajectories if t.aborted]
        assert {t.policy_version for t in trajectories} == {3}  # no turn came from the restarted model folder
        group.heal_replicas(force=True)
        assert ray.get(replica.process_id.remote()) != victim
        assert ray.get(replica.get_version.remote()) == 3
        assert _greedy(replica, tokenizer) == synced
        assert group.pop_counters()["replica_restarts"] == 1
        runner_stats = ray.get([r.ping.remote() for r in group.runners])
        assert sum(s["replica_retries"] for s in runner_stats) >= 1  # requests sent again, not episodes lost
    finally:
        group.stop()


def test_without_restarts_a_dead_runner_ends_the_rollout_with_a_clear_error(ray_local, tiny_model, tmp_path):
    """`env_runners.restart_failed_env_runners=false`: the error names the key that would have saved the run."""
    group = EnvRunnerGroup(_config(tmp_path, restart_failed_env_runners=False), tiny_model)
    try:
        job = group.launch(group.split(_specs()), [0, 0])
        victim = ray.get(group.runners[1].ping.remote())["pid"]
        _wait_until_serving(group, 2)
        os.kill(victim, signal.SIGKILL)
        with pytest.raises(RuntimeError, match="restart_failed_env_runners"):
            job.gather()
    finally:
        group.stop()


def test_episodes_past_their_retries_come_back_aborted_with_the_reason(ray_local, tiny_model, tmp_path):
    """`max_episode_retries=0`: the dead runner's episodes are counted as lost and aborted, never scored 0."""
    group = EnvRunnerGroup(_config(tmp_path, max_episode_retries=0), tiny_model)
    try:
        specs = _specs()
        chunks = group.split(specs)
        job = group.launch(chunks, [0, 0])
        victim = ray.get(group.runners[0].ping.remote())["pid"]
        _wait_until_serving(group, 2)
        os.kill(victim, signal.SIGKILL)
        trajectories = job.gather()
        lost = {s.uid for s in chunks[0]}
        assert {t.uid for t in trajectories if t.aborted} == lost
        assert all(t.error.startswith("env_runner_lost") for t in trajectories if t.aborted)
        assert group.pop_counters()["lost_episodes"] == len(lost)
    finally:
        group.stop()


def test_evaluate_scores_the_other_gyms_when_one_cannot_be_built(ray_local, tmp_path, capsys):
    """Scenario 6: a gym whose construction raises costs only its own episodes, counted as aborted with the
    error; the other gyms are scored; the exit status (3) says episodes were aborted."""
    import json

    import yaml

    from userrl.cli import main

    config = tmp_path / "eval.yaml"
    config.write_text(yaml.safe_dump({
        "experiment": {"name": "broken-gym", "output_dir": str(tmp_path)},
        "env": {"protocol": "bracket", "max_turns": 3, "max_steps": 3,
                "gyms": [{"name": "function", "difficulty": [0]},
                         {"name": "turtle", "kwargs": {"reward_preset": "no_such_preset"}}]},
        "policy": {"model": "tiny-random", "max_new_tokens": 8, "num_threads": 1},
        "evaluation": {"max_episodes_per_gym": 4},
        "tracking": {"mlflow_uri": f"sqlite:///{tmp_path / 'mlflow.db'}"},
    }))
    status = main(["evaluate", "--config", str(config), "--out", str(tmp_path / "eval")])
    out = capsys.readouterr().out
    assert status == 3, out
    metrics = json.loads((tmp_path / "eval" / "metrics.json").read_text())
    assert metrics["gyms"]["function"]["episodes"] == 4 and metrics["gyms"]["function"]["aborted"] == 0
    assert metrics["gyms"]["turtle"]["aborted"] == 4
    assert "turtle" in out and "no_such_preset" in out
