"""Training with `policy.engine: vllm`: SFT warm start, GRPO iterations, the local learner's weights synced into
vLLM through the process group, as in the quickstart (a sync from a process that also holds an FSDP group:
test_weight_sync.py; two Ray Train ranks gathering their shards: test_reference_run.py).

The learner recomputes the log-probs of every sampled token with its own weights and logs their mean
absolute gap to the sampler's (`learner/sampler_logprob_gap`). Both run SmolLM2-135M in float32, so a
replica that holds the learner's weights agrees to about 1e-5 (measured here: 5.0e-6 and 5.2e-6 in
the two iterations); the packaged weights, which the replica held before the SFT sync, score the same
tokens far away (0.66 after two SFT steps; the test asserts more than 10x the tolerance after its one). So a
small gap in every iteration shows that each sync landed.
"""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("vllm")

from userrl.trainer import TrainerConfig  # noqa: E402

pytestmark = pytest.mark.slow

SYNCED_GAP = 2e-3  # same tolerance as the engine parity tests (measured gap ~1e-5)


def _stale_gap(model_path: str, trajectory) -> float:
    """Mean |logprob| gap of a trajectory's sampled tokens under the packaged (pre-SFT) weights."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32).eval()
    ids = torch.tensor([trajectory.input_ids])
    with torch.inference_mode():
        logprobs = torch.log_softmax(model(ids).logits[0, :-1].float(), dim=-1)
    positions = [i for i, m in enumerate(trajectory.loss_mask) if m]
    packaged = logprobs[[p - 1 for p in positions], [trajectory.input_ids[p] for p in positions]]
    sampler = torch.tensor([trajectory.sampler_logprobs[p] for p in positions])
    return float((packaged - sampler).abs().mean())


def test_fit_on_a_vllm_replica(ray_local, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # a relative output_dir is the user's folder, not the learners' own
    config = (TrainerConfig()
              .experiment(name="vllm-fit", seed=5, output_dir="runs")
              .environment(gyms=[{"name": "function", "difficulty": [0]}], protocol="bracket", max_turns=3,
                           max_steps=3)
              .policy(model="smollm2-135m", engine="vllm", dtype="float32", max_new_tokens=16, max_model_len=1024,
                      num_cpus_per_replica=1, max_batch_size=8)  # automatic KV cache: 8 x 1024 tokens, 360 MiB
              .env_runners(num_env_runners=1)
              .training(iterations=2, batch_size=2, group_size=2, lr=1e-5, micro_batch_tokens=2048)
              # One SFT step: it moves the weights far from the packaged ones (the stale check below).
              .sft(enabled=True, episodes=2, epochs=1, batch_size=2, lr=5e-4)
              .learners(num_learners=0, num_cpus_per_learner=2, precision="float32")
              # No checkpoints: a checkpoint is the learners' alone, whatever the engine (two here cost 36 s;
              # test_reference_run.py checks their layout, metadata and exact resume).
              .checkpointing(every=0)
              .tracking(experiment="vllm-fit", mlflow_uri=f"sqlite:///{tmp_path}/mlflow.db"))
    algo = config.build_trainer()
    try:
        results = algo.fit()
    finally:
        algo.stop()

    # SFT's sync is version 1; every update is one more; the rollouts ran on the learner's latest version.
    assert [r["policy_version"] for r in results] == [2, 3]
    assert all(r["rollout/policy_lag_max"] == 0.0 for r in results)
    for result in results:
        # The weights went through the process group (vllm's default), and the metrics say so, by phase.
        assert result["weight_sync/group_replicas"] == 1.0 and "time/weight_sync/object_store_s" not in result
        assert 0.0 < result["time/weight_sync/broadcast_s"] <= result["time/weight_sync/total_s"]
        assert result["rollout/aborted"] == 0.0
        assert result["learner/trained_tokens"] > 0
        assert result["learner/sampler_logprob_gap"] < SYNCED_GAP, result["learner/sampler_logprob_gap"]
        for trajectory in result["samples"]:
            sampled = [lp for lp, m in zip(trajectory.sampler_logprobs, trajectory.loss_mask, strict=True) if m]
            assert len(sampled) == trajectory.num_sampled > 0
            assert all(lp <= 0.0 for lp in sampled)
            assert trajectory.policy_version == result["policy_version"] - 1
    # The check has teeth: the packaged weights score the same sampled tokens far from the sampler.
    stale = _stale_gap(algo.model_path, results[0]["samples"][0])
    assert stale > 10 * SYNCED_GAP, stale
