"""The loop on local Ray: a mixture of gyms in one run, and a resume path that is no checkpoint.

The loop's metrics, MLflow records, checkpoints, exact resume and learner failures are measured on one
reference run in test_reference_run.py."""

import pytest

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
            .learners(num_learners=0)  # the local learner; two Ray Train ranks: test_reference_run.py
            .checkpointing(every=2)
            .tracking(experiment="it", mlflow_uri=f"sqlite:///{tmp_path}/mlflow.db"))


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
