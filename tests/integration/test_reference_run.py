"""One reference training run, and what must hold of it and of the runs measured against it.

The run: a GAE critic (gae_multiturn with cumulative returns, StarPO-S filtering and the format penalty), an
SFT warm start, two env runners, two learners, four iterations with a checkpoint every two, then an
evaluation. Its results show the loop's metrics, MLflow records and checkpoints; the runs below are measured
against its checkpoints' weights (policy and critic):

- reliability scenario 4: a learner SIGKILLed in its update; Ray Train restarts the learner group
  (`learners.max_failures`), which goes on from the fit's newest complete checkpoint;
- reliability scenario 5: rank 0 SIGKILLed between writing `iter_<n>.tmp` and renaming it; the fit fails,
  the `.tmp` folder is no checkpoint, and a fit resumed from the latest complete one ends exactly where the
  uninterrupted run did (the exact-resume check: iterations' metrics and both models' weights).

Every GAE estimator differs from gae_multiturn only in the function `gae_advantages` dispatches to, each
checked against a per-row oracle in tests/unit/test_algorithms_gae.py; the critic's gradient over ranks and
micro-batches is test_critic.py's.
"""

import hashlib
import json

import pytest
import torch
from mlflow import MlflowClient
from safetensors.torch import load_file

from userrl import faults
from userrl.allocator import jemalloc_path
from userrl.checkpoint import CRITIC_DIR, CRITIC_OPTIMIZER
from userrl.commands.sweep import latest_checkpoint
from userrl.trainer import TrainerConfig

pytestmark = pytest.mark.slow

ITERATIONS, EVERY = 4, 2
ATOL, RTOL = 1e-5, 1e-4
PARTS = ("model", CRITIC_DIR)  # the policy's and the critic's weights in a checkpoint


def _config(out, **learners):
    # entropy_coeff: a policy gradient in every iteration even when every group's rewards tie (tiny random
    # model), so weights that went down another path would differ.
    return (TrainerConfig()
            .experiment(name="ref", seed=5, output_dir=str(out))
            .environment(gyms=[{"name": "function", "difficulty": [0]}], protocol="bracket", max_turns=3,
                         max_steps=3)  # three turns: the solver's demonstrations fetch, probe and answer
            .policy(model="tiny-random", max_new_tokens=6, max_model_len=512, num_cpus_per_replica=0.5,
                    num_threads=1)
            .env_runners(num_env_runners=2)
            .training(iterations=ITERATIONS, batch_size=2, group_size=2, lr=1e-3, entropy_coeff=0.01,
                      micro_batch_tokens=1024, adv_estimator="gae_multiturn", mt_gae_returns="cumulative",
                      rollout_filter_ratio=0.5, format_penalty=-0.1)
            .sft(enabled=True, episodes=4, epochs=1, batch_size=4, lr=1e-3)
            .learners(num_learners=2, **learners)
            .checkpointing(every=EVERY)
            .overrides(["critic.lr=1e-3"])  # the critic's weights move measurably between checkpoints
            .tracking(experiment="ref", mlflow_uri=f"sqlite:///{out}/mlflow.db"))


def _fit(config, on_result=None):
    algo = config.build_trainer()
    try:
        return algo.fit(on_result=on_result)
    finally:
        algo.stop()


def _weights(run, iteration):
    folder = run / "checkpoints" / f"iter_{iteration:06d}"
    return {part: load_file(folder / part / "model.safetensors") for part in PARTS}


def _assert_same(a, b):
    for part in PARTS:
        assert a[part].keys() == b[part].keys()
        for key in a[part]:
            torch.testing.assert_close(a[part][key], b[part][key], atol=ATOL, rtol=RTOL)


def _assert_same_iteration(result, expected):
    """A re-run or resumed iteration played and scored what the reference's did."""
    for key in ("rollout/sampled_tokens", "rollout/reward_mean", "rollout/turns_mean", "learner/trained_tokens"):
        assert result[key] == expected[key], key
    for key in ("learner/loss", "critic/value_loss", "critic/value_mean"):
        assert result[key] == pytest.approx(expected[key], abs=1e-5), key


def _digest(folder):
    return {p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def reference(ray_local, tiny_model, tmp_path_factory):
    """The uninterrupted run: its results, what `on_result` saw, an evaluation, its checkpoints' weights."""
    out = tmp_path_factory.mktemp("reference")
    algo = _config(out).build_trainer()
    seen = []
    try:
        results = algo.fit(on_result=seen.append)
        evaluation = algo.evaluate(num_tasks=2)
    finally:
        algo.stop()
    run = out / "ref"
    weights = {i: _weights(run, i) for i in (EVERY, ITERATIONS)}
    for part in PARTS:  # the iterations after the checkpoint change both models: equality means something
        moved = max((weights[ITERATIONS][part][k] - weights[EVERY][part][k]).abs().max().item()
                    for k in weights[EVERY][part])
        assert moved > 100 * ATOL, part
    return {"out": out, "results": results, "seen": seen, "evaluation": evaluation, "weights": weights}


def test_a_run_reports_metrics_checkpoints_and_mlflow_records(reference):
    results, seen, out = reference["results"], reference["seen"], reference["out"]
    assert [r["iteration"] for r in results] == [1, 2, 3, 4]
    assert reference["evaluation"]["eval/episodes"] == 2 and "eval/reward_mean/function" in reference["evaluation"]
    assert any(r["phase"] == "sft" for r in seen)
    first = results[0]
    for key in ("rollout/reward_mean", "rollout/success_rate", "rollout/turns_mean", "rollout/tokens_per_s",
                "time/rollout_s", "time/advantages_s", "time/update_s", "time/weight_sync_s", "learner/loss"):
        assert key in first, key
    assert first["policy_version"] == 2 and results[-1]["policy_version"] == 5  # SFT sync = version 1
    # The hf replica takes its weights through the object store; the phases are metrics.
    assert first["weight_sync/group_replicas"] == 0.0
    assert 0.0 < first["time/weight_sync/object_store_s"] <= first["time/weight_sync/total_s"]
    assert all(r["rollout/policy_lag_max"] == 0.0 for r in results)  # sync mode: always on-policy
    assert 0.0 <= first["time/rollout_wait_s"] <= first["time/rollout_s"]
    for r in results:  # the critic trains in every iteration
        for key in ("critic/value_loss", "critic/explained_variance", "critic/value_mean", "critic/return_mean",
                    "critic/grad_norm", "learner/loss"):
            assert key in r and r[key] == r[key], key  # present and not NaN
        assert r["critic/grad_norm"] > 0
        assert r["rollout/filtered_episodes"] == 2.0  # StarPO-S at 0.5: one of the two groups of two is left out

    folder = out / "ref" / "checkpoints"
    assert sorted(p.name for p in folder.iterdir()) == ["iter_000000", "iter_000002", "iter_000004"]  # 0: SFT's
    assert json.loads((folder / "iter_000002" / "meta.json").read_text())["iteration"] == 2
    assert (folder / "iter_000002" / CRITIC_DIR / "model.safetensors").is_file()
    assert (folder / "iter_000002" / CRITIC_OPTIMIZER).is_file()

    # MLflow: params are the flattened config, metrics per iteration, sample trajectories as artifacts.
    client = MlflowClient(f"sqlite:///{out}/mlflow.db")
    run = client.search_runs([client.get_experiment_by_name("ref").experiment_id])[0]
    assert run.data.params["training.group_size"] == "2"
    # learners.allocator: auto: the Ray Train ranks ran under Ray's jemalloc where this Ray ships it (Linux)
    assert run.data.tags["learner_allocator"] == ("jemalloc" if jemalloc_path() else "system")
    assert len(client.get_metric_history(run.info.run_id, "rollout.reward_mean")) == ITERATIONS
    assert any(a.path == "trajectories" for a in client.list_artifacts(run.info.run_id))


def test_learner_killed_mid_update_restarts_from_the_last_checkpoint(reference, tmp_path, monkeypatch):
    """Scenario 4: learner rank 1 is SIGKILLed in the update of iteration 4 (after its backward passes)."""
    ref_results, ref_weights = reference["results"], reference["weights"]
    monkeypatch.setenv(faults.ENV, f"update:{ITERATIONS}:1")
    seen = []
    results = _fit(_config(tmp_path, max_failures=2), on_result=seen.append)
    run = tmp_path / "ref"
    assert [p.name for p in (run / "faults").iterdir()][0].endswith(f"-update-{ITERATIONS}")  # it fired

    # The group restarted from iter_000002 and re-ran iterations 3 and 4; iteration 3 had been reported
    # before the kill, and is shown and logged once (the first report), returned once (the re-run's).
    assert [r["iteration"] for r in results] == [1, 2, 3, 4]
    assert [r["iteration"] for r in seen if r["phase"] == "rl"] == [1, 2, 3, 4]
    first_3 = next(r for r in seen if r["phase"] == "rl" and r["iteration"] == 3)
    rerun_3 = results[2]
    assert rerun_3 is not first_3
    _assert_same_iteration(rerun_3, first_3)
    _assert_same_iteration(rerun_3, ref_results[2])
    assert [r["policy_version"] for r in results] == [r["policy_version"] for r in ref_results]

    client = MlflowClient(f"sqlite:///{tmp_path}/mlflow.db")
    mlflow_run = client.search_runs([client.get_experiment_by_name("ref").experiment_id])[0]
    assert mlflow_run.data.tags["learner_restarts"] == "1"
    steps = [m.step for m in client.get_metric_history(mlflow_run.info.run_id, "rollout.reward_mean")]
    assert sorted(steps) == [1, 2, 3, 4]
    assert [m.step for m in client.get_metric_history(mlflow_run.info.run_id, "learner.restarts")] == [EVERY]

    meta = json.loads((run / "checkpoints" / f"iter_{ITERATIONS:06d}" / "meta.json").read_text())
    assert meta["iteration"] == ITERATIONS and meta["fit_id"]
    _assert_same(_weights(run, EVERY), ref_weights[EVERY])
    _assert_same(_weights(run, ITERATIONS), ref_weights[ITERATIONS])


def test_trainer_killed_while_checkpointing_resumes_exactly_from_the_latest_complete(reference, tmp_path,
                                                                                     monkeypatch):
    """Scenario 5: rank 0 dies between writing iter_000004.tmp and renaming it, and with max_failures=0 the
    fit fails; iter_000002 is untouched, the .tmp folder is no checkpoint, and a new fit resumed from it
    plays iterations 3 and 4 as the uninterrupted run did and ends with its policy and critic.

    (With max_failures > 0 the restarted group takes the same path: `restart_checkpoint` removes the .tmp
    folder and goes on from iter_000002, as in scenario 4.)
    """
    ref_results, ref_weights = reference["results"], reference["weights"]
    monkeypatch.setenv(faults.ENV, f"checkpoint:{ITERATIONS}")
    run = tmp_path / "ref"
    folder = run / "checkpoints"
    previous = {}

    def on_result(result):
        if result["phase"] == "rl" and result["iteration"] == EVERY:
            previous.update(_digest(folder / f"iter_{EVERY:06d}"))

    with pytest.raises(RuntimeError, match="training failed"):
        _fit(_config(tmp_path, max_failures=0), on_result=on_result)
    assert [p.name for p in (run / "faults").iterdir()][0].endswith(f"-checkpoint-{ITERATIONS}")  # it fired
    half = folder / f"iter_{ITERATIONS:06d}.tmp"
    assert (half / "meta.json").is_file() and not (folder / f"iter_{ITERATIONS:06d}").exists()
    assert previous and _digest(folder / f"iter_{EVERY:06d}") == previous
    assert latest_checkpoint(run) == folder / f"iter_{EVERY:06d}"  # the .tmp folder is not a checkpoint

    monkeypatch.delenv(faults.ENV)
    results = _fit(_config(tmp_path).checkpointing(resume_from=str(latest_checkpoint(run))))
    assert [r["iteration"] for r in results] == [3, 4]
    for result, expected in zip(results, ref_results[2:], strict=True):
        _assert_same_iteration(result, expected)
    assert sorted(p.name for p in folder.iterdir()) == ["iter_000000", "iter_000002", "iter_000004"]  # no .tmp
    assert _digest(folder / f"iter_{EVERY:06d}") == previous
    _assert_same(_weights(run, ITERATIONS), ref_weights[ITERATIONS])
