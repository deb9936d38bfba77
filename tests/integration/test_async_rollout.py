"""Asynchronous (one-version-behind) rollout: the PPO ratio against the sampler, and the loop that overlaps."""

import functools
import time

import pytest
import ray
import torch
import torch.distributed as dist
from test_algorithm import _config
from transformers import AutoModelForCausalLM

from userrl.cli import main
from userrl.config import ConfigError, parse_config
from userrl.estimators import make_estimator
from userrl.learner import Learner
from userrl.trajectory import Trajectory, TurnRecord

TEMPERATURE = 0.7


@pytest.fixture
def gloo():
    """A one-process gloo group, as a single learner rank sees it."""
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    yield
    dist.destroy_process_group()


@functools.cache
def _hf_model(model_path: str) -> torch.nn.Module:
    return AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32)


def _hf_logprobs(model_path: str, ids: list[int], temperature: float) -> list[float]:
    """log_softmax(logits / T) of every token given its prefix, from a plain transformers forward (0 for the first)."""
    with torch.no_grad():
        logits = _hf_model(model_path)(input_ids=torch.tensor([ids])).logits[0, :-1]
    picked = torch.log_softmax(logits / temperature, dim=-1).gather(-1, torch.tensor(ids[1:])[:, None])
    return [0.0, *picked.squeeze(-1).tolist()]


def _batch(model_path: str, temperature: float, shift: float = 0.0) -> list[Trajectory]:
    """Two groups of two one-turn episodes whose sampler logprobs are the model's own at `temperature` (+ shift)."""
    gen = torch.Generator().manual_seed(0)
    batch = []
    for i, reward in enumerate([1.0, 0.0, 0.5, 0.0]):
        t = Trajectory(uid=f"u{i}", group_id=f"g{i // 2}", env_name="function", item_key=f"k{i // 2}")
        prompt = torch.randint(5, 500, (12,), generator=gen).tolist()
        sampled = torch.randint(5, 500, (6,), generator=gen).tolist()
        t.append(prompt, 1)
        t.turn_starts, t.prompt_len = [0], len(prompt)
        exact = _hf_logprobs(model_path, prompt + sampled, temperature)[len(prompt):]
        t.append(sampled, 2, sampled=True, turn=0, logprobs=[lp + shift for lp in exact])
        t.turns = [TurnRecord(reward=reward, executed=True, n_sampled=len(sampled))]
        batch.append(t)
    return batch


def _update(model_path: str, batch: list[Trajectory], async_rollout: bool) -> dict[str, float]:
    """One GRPO update from the original weights; metrics are of the pre-update policy."""
    config = parse_config({"policy": {"temperature": TEMPERATURE},
                           "training": {"lr": 1e-3, "micro_batch_tokens": 4096, "async_rollout": async_rollout}})
    learner = Learner(model_path, config, pad_token_id=0)
    advantages, _, _ = make_estimator(config, 0).estimate(batch, learner.compute_values)
    return learner.update(batch, advantages)


def test_learner_logprobs_are_at_the_sampling_temperature(gloo, tiny_model):
    """Sampler logprobs of softmax(logits / 0.7) match the learner's exactly; those of softmax(logits) do not."""
    matched = _update(tiny_model, _batch(tiny_model, TEMPERATURE), async_rollout=True)
    assert matched["sampler_logprob_gap"] < 1e-4
    assert matched["approx_kl"] == pytest.approx(0.0, abs=1e-4)
    assert matched["importance_ratio_mean"] == pytest.approx(1.0, abs=1e-4)
    assert matched["pg_clipfrac"] == 0.0
    at_one = _update(tiny_model, _batch(tiny_model, 1.0), async_rollout=True)
    assert at_one["sampler_logprob_gap"] > 0.05  # the temperature really changes the distribution


def test_async_ratio_is_against_the_sampler(gloo, tiny_model):
    """Async: sampler logprobs 0.5 above the policy's give ratio exp(-0.5) < 1 - 0.2, so the clip binds on
    every negative-advantage token (half of them: each group has one better and one worse episode of equal
    length); sync: the same sampler logprobs do not enter the loss (the ratio is on-policy)."""
    exact, shifted = _batch(tiny_model, TEMPERATURE), _batch(tiny_model, TEMPERATURE, shift=0.5)
    behind = _update(tiny_model, shifted, async_rollout=True)
    assert behind["approx_kl"] == pytest.approx(0.5, abs=1e-3)
    assert behind["importance_ratio_mean"] == pytest.approx(torch.exp(torch.tensor(-0.5)).item(), abs=1e-3)
    assert behind["pg_clipfrac"] == pytest.approx(0.5)
    on_policy = _update(tiny_model, exact, async_rollout=False)
    ignored = _update(tiny_model, shifted, async_rollout=False)
    assert ignored["loss"] == pytest.approx(on_policy["loss"], abs=1e-7)
    assert ignored["approx_kl"] == 0.0 and ignored["pg_clipfrac"] == 0.0
    assert ignored["sampler_logprob_gap"] == pytest.approx(0.5, abs=1e-3)  # the shift is seen, not used
    assert behind["loss"] != pytest.approx(on_policy["loss"], abs=1e-4)


def test_async_with_sleep_mode_is_refused(capsys):
    with pytest.raises(ConfigError, match=r"training\.async_rollout.*policy\.vllm\.sleep_mode"):
        parse_config({"training": {"async_rollout": True}, "policy": {"engine": "vllm", "vllm": {"sleep_mode": True}}})
    assert main(["train", "training.async_rollout=true", "policy.vllm={sleep_mode: true}"]) == 2
    assert "set one of them to false" in capsys.readouterr().out
    assert parse_config({"training": {"async_rollout": True}}).training.async_rollout


@pytest.mark.slow
def test_async_run_overlaps_and_stays_one_version_behind(ray_local, tiny_model, tmp_path):
    algo = _config(tmp_path).training(async_rollout=True).sft(enabled=False).build_trainer()
    try:
        results = algo.fit()
        requests = sum(s["requests"] for s in ray.get([r.get_stats.remote() for r in algo.env_runner_group.replicas]))
        time.sleep(1.0)
        requests_later = sum(s["requests"] for s in ray.get([r.get_stats.remote() for r in algo.env_runner_group.replicas]))
    finally:
        algo.stop()
    assert [r["iteration"] for r in results] == [1, 2, 3]
    assert [r["policy_version"] for r in results] == [1, 2, 3]
    lags = [r["rollout/policy_lag_max"] for r in results]
    assert lags[0] == 0.0 and all(lag in (0.0, 1.0) for lag in lags) and max(lags[1:]) == 1.0, lags
    for result in results:
        before = result["policy_version"] - 1  # the learner's version when it took this batch
        assert {t.policy_version for t in result["samples"]} <= {before - 1, before}
        assert 0.0 <= result["time/rollout_wait_s"] <= result["time/rollout_s"]
        assert result["learner/importance_ratio_mean"] > 0
    # Nothing was launched past the last iteration: every request the replicas served belongs to a reported
    # batch, and none arrive after the run.
    played = sum(round(r["rollout/turns_mean"] * r["rollout/episodes"]) for r in results)
    assert requests == requests_later == played
    assert (tmp_path / "it" / "checkpoints" / "iter_000003" / "meta.json").is_file()


@pytest.mark.slow
def test_cancelled_rollout_stops_and_leaves_the_runners_usable(ray_local, tiny_model, tmp_path):
    """What the loop does when an update fails with a batch in flight: the batch's result says it was
    cancelled, the replica drops the requests still queued (only the batch on the engine finishes), and the
    next rollout on the same actors plays normally."""
    from userrl.coordinator import RolloutCoordinator

    algo = (_config(tmp_path).policy(max_new_tokens=24, max_batch_size=4)
            .training(batch_size=8, group_size=4).build_trainer())  # 32 first turns queue 4 at a time
    try:
        coordinator = RolloutCoordinator(algo.config, algo.env_runner_group)

        def served() -> int:
            return sum(s["requests"] for s in ray.get([r.get_stats.remote() for r in algo.env_runner_group.replicas]))

        pending = coordinator.start_rollout(0)
        while served() == 0:
            time.sleep(0.02)
        pending.cancel()
        with pytest.raises(ray.exceptions.TaskCancelledError):
            coordinator.gather(pending)
        stopped, deadline = served(), time.monotonic() + 60
        while time.sleep(1.0) or served() != stopped:  # quiet for a whole second
            stopped = served()
            assert time.monotonic() < deadline
        assert stopped < 32, stopped  # the queued first turns were never generated

        trajectories, metrics = coordinator.finish_rollout(coordinator.start_rollout(1))  # the loop's path
        assert len(trajectories) == 32 and metrics["rollout/episodes"] == 32
        assert not any(t.aborted for t in trajectories)
        assert served() == stopped + sum(len(t.turns) for t in trajectories)
    finally:
        algo.stop()
