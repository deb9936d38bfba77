"""The whole loop on local Ray: SFT warm start, GRPO iterations, MLflow, checkpoints and exact resume."""

import json

import pytest
import torch
from mlflow import MlflowClient
from safetensors.torch import load_file

from userrl.trainer import TrainerConfig

pytestmark = pytest.mark.slow


def _config(tmp_path, **training):
    return (TrainerConfig()
            .experiment(name="it", seed=3, output_dir=str(tmp_path))
            .environment(gyms=[{"name": "function", "difficulty": [0]}], protocol="bracket", max_turns=3, max_steps=3)
            .policy(model="tiny-random", max_new_tokens=6, max_model_len=512, num_cpus_per_replica=0.5, num_threads=1)
            .env_runners(num_env_runners=2)
            .training(iterations=3, batch_size=2, group_size=2, lr=1e-4, micro_batch_tokens=1024, **training)
            .sft(enabled=True, episodes=4, epochs=1, batch_size=4, lr=1e-3)
            .learners(num_learners=2)
            .checkpointing(every=2)
            .tracking(experiment="it", mlflow_uri=f"sqlite:///{tmp_path}/mlflow.db"))


def test_fit_checkpoint_and_exact_resume(ray_local, tiny_model, tmp_path):
    algo = _config(tmp_path / "a").build_trainer()
    try:
        seen = []
        results = algo.fit(on_result=seen.append)
        evaluation = algo.evaluate(num_tasks=2)
    finally:
        algo.stop()
    assert [r["iteration"] for r in results] == [1, 2, 3]
    assert evaluation["eval/episodes"] == 2 and "eval/reward_mean/function" in evaluation
    assert any(r["phase"] == "sft" for r in seen)
    first = results[0]
    for key in ("rollout/reward_mean", "rollout/success_rate", "rollout/turns_mean", "rollout/tokens_per_s",
                "time/rollout_s", "time/advantages_s", "time/update_s", "time/weight_sync_s", "learner/loss"):
        assert key in first
    assert first["policy_version"] == 2 and results[-1]["policy_version"] == 4  # SFT sync = version 1
    # The hf replica takes its weights through the object store; the phases are metrics.
    assert first["weight_sync/group_replicas"] == 0.0
    assert 0.0 < first["time/weight_sync/object_store_s"] <= first["time/weight_sync/total_s"]
    assert all(r["rollout/policy_lag_max"] == 0.0 for r in results)  # sync mode: always on-policy
    assert 0.0 <= first["time/rollout_wait_s"] <= first["time/rollout_s"]
    checkpoint = tmp_path / "a" / "it" / "checkpoints" / "iter_000002"
    assert json.loads((checkpoint / "meta.json").read_text())["iteration"] == 2
    assert not list(checkpoint.parent.glob("*.tmp"))

    # MLflow: params are the flattened config, metrics per iteration, sample trajectories as artifacts.
    client = MlflowClient(f"sqlite:///{tmp_path / 'a'}/mlflow.db")
    run = client.search_runs([client.get_experiment_by_name("it").experiment_id])[0]
    assert run.data.params["training.group_size"] == "2"
    assert len(client.get_metric_history(run.info.run_id, "rollout.reward_mean")) == 3
    assert any(a.path == "trajectories" for a in client.list_artifacts(run.info.run_id))

    resumed = _config(tmp_path / "b").checkpointing(every=1, resume_from=str(checkpoint)).build_trainer()
    try:
        again = resumed.fit()
    finally:
        resumed.stop()
    assert [r["iteration"] for r in again] == [3]
    for key in ("rollout/sampled_tokens", "rollout/reward_mean", "rollout/turns_mean", "learner/trained_tokens"):
        assert again[0][key] == results[-1][key], key
    assert again[0]["learner/loss"] == pytest.approx(results[-1]["learner/loss"], abs=1e-5)
    a = load_file(tmp_path / "a" / "it" / "checkpoints" / "iter_000003" / "model" / "model.safetensors")
    b = load_file(tmp_path / "b" / "it" / "checkpoints" / "iter_000003" / "model" / "model.safetensors")
    for key in a:
        torch.testing.assert_close(a[key], b[key], atol=1e-5, rtol=1e-4)


def test_missing_checkpoint_is_a_clear_error(ray_local, tiny_model, tmp_path):
    with pytest.raises(FileNotFoundError, match="not a userrl checkpoint"):
        _config(tmp_path).checkpointing(resume_from=str(tmp_path / "nope")).build_trainer()


def test_mixed_gyms_report_metrics_per_gym(ray_local, tiny_model, tmp_path):
    """A mixture of gyms trains in one run; demonstrations come from every gym's solver."""
    config = (_config(tmp_path)
              .environment(gyms=[{"name": "function", "weight": 2}, {"name": "turtle"}, {"name": "travel"}],
                           protocol="bracket", max_turns=5, max_steps=16)
              .training(iterations=1, batch_size=6, group_size=2, filter_groups=True)
              .sft(episodes=6)
              .checkpointing(every=0))
    algo = config.build_trainer()
    try:
        (result,) = algo.fit()
    finally:
        algo.stop()
    gyms = {key.rsplit("/", 1)[1] for key in result if key.startswith("rollout/reward_mean/")}
    assert gyms <= {"function", "turtle", "travel"} and len(gyms) >= 2
    assert result["rollout/episodes"] == 12
    # filter_groups: the groups without signal (6 of 2 episodes each) are left out of the update.
    assert result["rollout/filtered_episodes"] == 12 * result["groups/frac_groups_no_signal"]
    assert ("learner/loss" in result) == (result["rollout/filtered_episodes"] < 12)
