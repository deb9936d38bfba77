"""GRPO with `env.protocol: native_tools` on Tau (issue 18): the tiny model's messages are tool calls or speech to
the scripted customer; the run trains end to end and every trajectory has the layout of spec ALGORITHMS.md 5.1.
(The tiny random model rarely ends a message within its token limit, so an OpenAI-compatible customer would
hardly be called here: that path is tested at the episode level in tests/unit/test_native_tools.py.)"""

import pytest
from mlflow import MlflowClient

from userrl.algorithm import GRPOMultiTurnConfig

pytestmark = pytest.mark.slow


def test_native_tools_on_tau_trains_end_to_end(ray_local, tiny_model, tmp_path):
    algo = (GRPOMultiTurnConfig()
            .experiment(name="native", seed=0, output_dir=str(tmp_path))
            .environment(gyms=[{"name": "tau"}], protocol="native_tools", max_turns=4, max_steps=30,
                         backend="scripted")
            .policy(model="tiny-random", max_new_tokens=8, max_model_len=4096, max_response_len=512,
                    num_threads=1)
            .env_runners(num_env_runners=1)
            .training(iterations=2, batch_size=2, group_size=2, lr=1e-4, micro_batch_tokens=8192)
            .learners(num_learners=1)
            .checkpointing(every=0)
            .tracking(experiment="native", mlflow_uri=f"sqlite:///{tmp_path}/mlflow.db", sample_trajectories=4)
            .build_algo())
    try:
        results = algo.fit()
    finally:
        algo.stop()

    assert [r["iteration"] for r in results] == [1, 2]
    for r in results:
        assert r["rollout/episodes"] == 4 and r["rollout/aborted"] == 0
        assert r["learner/trained_tokens"] > 0
        samples = r["samples"]
        assert samples
        for traj in samples:
            traj.check()
            assert traj.role_ids[: traj.prompt_len].count(1) > 0  # the customer's first message is in the prompt
        # Every member of a group starts from the same prompt (the recorded first customer message).
        by_group = {}
        for traj in samples:
            by_group.setdefault(traj.group_id, set()).add(tuple(traj.input_ids[: traj.prompt_len]))
        assert all(len(prompts) == 1 for prompts in by_group.values())
        # MUA-RL's metrics (issue 18 item 3), each iteration: two groups; customer messages counted again here
        assert r["rollout/mua/groups"] == 2 and len(samples) == 4
        assert sum(r[f"rollout/mua/groups_{kind}"] for kind in ("all_correct", "all_wrong", "mixed")) == pytest.approx(1)
        said = sum(turn.executed and turn.choice == "action" for traj in samples for turn in traj.turns)
        assert r["rollout/mua/customer_messages_mean"] == pytest.approx(said / 4)
    # ... and they reach MLflow (the tracker writes rollout/mua/x as rollout.mua.x)
    client = MlflowClient(f"sqlite:///{tmp_path}/mlflow.db")
    (run,) = client.search_runs([client.get_experiment_by_name("native").experiment_id])
    assert {"rollout.mua.groups_mixed", "rollout.mua.tool_calls_mean", "rollout.mua.customer_messages_mean"} <= set(
        run.data.metrics)
