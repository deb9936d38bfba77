"""Learner failures (reliability scenarios 4 and 5) on local Ray, with the fault hooks of userrl/faults.py.

A learner SIGKILLed in its update, or rank 0 SIGKILLed between writing `iter_<n>.tmp` and renaming it:
Ray Train restarts the learner group (`learners.max_failures`), which goes on from the fit's newest
complete checkpoint, and the final weights equal those of an uninterrupted run. The reference run passes
through the same checkpoint (its weights are compared too) and carries on in memory; that a run resumed
from a checkpoint equals one that carried on is test_algorithm's exact-resume test.
"""

import hashlib
import json

import pytest
import torch
from mlflow import MlflowClient
from safetensors.torch import load_file

from userrl import faults
from userrl.commands.sweep import latest_checkpoint
from userrl.trainer import TrainerConfig

pytestmark = pytest.mark.slow

ITERATIONS, EVERY = 4, 2
ATOL, RTOL = 1e-5, 1e-4  # as in test_algorithm's exact-resume test


def _config(out, **learners):
    # entropy_coeff: a gradient in every iteration even when every group's rewards tie (tiny random model),
    # so weights that went down another path would differ.
    return (TrainerConfig()
            .experiment(name="lf", seed=5, output_dir=str(out))
            .environment(gyms=[{"name": "function", "difficulty": [0]}], protocol="bracket", max_turns=2,
                         max_steps=2)
            .policy(model="tiny-random", max_new_tokens=6, max_model_len=512, num_cpus_per_replica=0.5,
                    num_threads=1)
            .env_runners(num_env_runners=1)
            .training(iterations=ITERATIONS, batch_size=2, group_size=2, lr=1e-3, entropy_coeff=0.01,
                      micro_batch_tokens=1024)
            .learners(num_learners=2, **learners)
            .checkpointing(every=EVERY)
            .tracking(experiment="lf", mlflow_uri=f"sqlite:///{out}/mlflow.db"))


def _fit(config, on_result=None):
    algo = config.build_trainer()
    try:
        return algo.fit(on_result=on_result)
    finally:
        algo.stop()


def _weights(run, iteration):
    return load_file(run / "checkpoints" / f"iter_{iteration:06d}" / "model" / "model.safetensors")


def _assert_same(a, b):
    assert a.keys() == b.keys()
    for key in a:
        torch.testing.assert_close(a[key], b[key], atol=ATOL, rtol=RTOL)


def _digest(folder):
    return {p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def reference(ray_local, tiny_model, tmp_path_factory):
    """An uninterrupted run: its results and its checkpoints' weights."""
    out = tmp_path_factory.mktemp("reference")
    results = _fit(_config(out))
    run = out / "lf"
    weights = {i: _weights(run, i) for i in (EVERY, ITERATIONS)}
    moved = max((weights[ITERATIONS][k] - weights[EVERY][k]).abs().max().item() for k in weights[EVERY])
    assert moved > 100 * ATOL  # the iterations after the checkpoint change the weights: equality means something
    return results, weights


def test_learner_killed_mid_update_restarts_from_the_last_checkpoint(reference, tmp_path, monkeypatch):
    """Scenario 4: learner rank 1 is SIGKILLed in the update of iteration 4 (after its backward passes)."""
    ref_results, ref_weights = reference
    monkeypatch.setenv(faults.ENV, f"update:{ITERATIONS}:1")
    seen = []
    results = _fit(_config(tmp_path, max_failures=2), on_result=seen.append)
    run = tmp_path / "lf"
    assert [p.name for p in (run / "faults").iterdir()][0].endswith(f"-update-{ITERATIONS}")  # it fired

    # The group restarted from iter_000002 and re-ran iterations 3 and 4; iteration 3 had been reported
    # before the kill, and is shown and logged once (the first report), returned once (the re-run's).
    assert [r["iteration"] for r in results] == [1, 2, 3, 4]
    assert [r["iteration"] for r in seen if r["phase"] == "rl"] == [1, 2, 3, 4]
    first_3 = next(r for r in seen if r["phase"] == "rl" and r["iteration"] == 3)
    rerun_3 = results[2]
    assert rerun_3 is not first_3
    for key in ("rollout/sampled_tokens", "rollout/reward_mean", "learner/trained_tokens"):
        assert rerun_3[key] == first_3[key] == ref_results[2][key], key
    assert rerun_3["learner/loss"] == pytest.approx(first_3["learner/loss"], abs=1e-5)
    assert [r["policy_version"] for r in results] == [r["policy_version"] for r in ref_results]

    client = MlflowClient(f"sqlite:///{tmp_path}/mlflow.db")
    mlflow_run = client.search_runs([client.get_experiment_by_name("lf").experiment_id])[0]
    assert mlflow_run.data.tags["learner_restarts"] == "1"
    steps = [m.step for m in client.get_metric_history(mlflow_run.info.run_id, "rollout.reward_mean")]
    assert sorted(steps) == [1, 2, 3, 4]
    assert [m.step for m in client.get_metric_history(mlflow_run.info.run_id, "learner.restarts")] == [EVERY]

    meta = json.loads((run / "checkpoints" / f"iter_{ITERATIONS:06d}" / "meta.json").read_text())
    assert meta["iteration"] == ITERATIONS and meta["fit_id"]
    _assert_same(_weights(run, EVERY), ref_weights[EVERY])
    _assert_same(_weights(run, ITERATIONS), ref_weights[ITERATIONS])


def test_trainer_killed_while_checkpointing_resumes_from_the_latest_complete(reference, tmp_path, monkeypatch):
    """Scenario 5: rank 0 dies between writing iter_000004.tmp and renaming it, and with max_failures=0 the
    fit fails; iter_000002 is untouched, the .tmp folder is no checkpoint, and a new fit resumes exactly.

    (With max_failures > 0 the restarted group takes the same path: `restart_checkpoint` removes the .tmp
    folder and goes on from iter_000002, as in scenario 4.)
    """
    _, ref_weights = reference
    monkeypatch.setenv(faults.ENV, f"checkpoint:{ITERATIONS}")
    run = tmp_path / "lf"
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
    assert sorted(p.name for p in folder.iterdir()) == ["iter_000002", "iter_000004"]  # the .tmp was removed
    assert _digest(folder / f"iter_{EVERY:06d}") == previous
    _assert_same(_weights(run, ITERATIONS), ref_weights[ITERATIONS])
