"""Sweep files and report arguments: bad input fails before anything starts, naming the key and the fix."""

import json
from pathlib import Path

import pytest
import yaml

from userrl.cli import main
from userrl.commands.sweep import grid_points, latest_checkpoint, load_sweep, trial_cpus, trial_label
from userrl.config import ConfigError

REPO = Path(__file__).resolve().parents[2]
QUICKSTART = str(REPO / "experiments" / "quickstart.yaml")


def _write(tmp_path, grid, **extra):
    spec = {"name": "s", "base": QUICKSTART, "overrides": [f"experiment.output_dir={tmp_path / 'runs'}"],
            "grid": grid, **extra}
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def test_unknown_method_names_the_key_and_the_choices(tmp_path, capsys):
    path = _write(tmp_path, {"training.turn_credit": ["equalized", "emm"]})
    assert main(["sweep", str(path)]) == 2
    out = " ".join(capsys.readouterr().out.split())
    assert "grid.training.turn_credit = 'emm'" in out and "valid: equalized, r2g, em" in out
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sweep.yaml"]  # nothing written


def test_unknown_trajectory_score(tmp_path):
    path = _write(tmp_path, {"training.trajectory_score": ["sum", "average"]})
    with pytest.raises(ConfigError, match=r"grid.training.trajectory_score = 'average'.*valid: mean, sum, r2g"):
        load_sweep(path)


def test_grid_key_typo_suggests_the_closest(tmp_path):
    path = _write(tmp_path, {"training.turn_credits": ["em"]})
    with pytest.raises(ConfigError, match="did you mean 'training.turn_credit'"):
        load_sweep(path)


def test_unknown_sweep_key_lists_the_valid_ones(tmp_path):
    path = _write(tmp_path, {"training.gamma": [0.9]}, tune={"max_concurrent": 2})
    with pytest.raises(ConfigError, match=r"tune.max_concurrent: unknown key \(valid here: metric, mode"):
        load_sweep(path)


def test_empty_grid_values_and_bad_name(tmp_path):
    with pytest.raises(ConfigError, match="training.gamma: give at least one value"):
        load_sweep(_write(tmp_path, {"training.gamma": []}))
    with pytest.raises(ConfigError, match="name: .*names a folder"):
        load_sweep(_write(tmp_path, {"training.gamma": [0.9]}, name="a/b"))


def test_too_few_cpus_per_trial(tmp_path, capsys):
    path = _write(tmp_path, {"training.gamma": [0.9]}, tune={"resources_per_trial": {"cpu": 0.3}})
    assert main(["sweep", str(path)]) == 2
    assert "tune.resources_per_trial.cpu=0.3 is less than" in capsys.readouterr().out
    assert not (tmp_path / "runs").exists()


def test_resume_without_a_sweep(tmp_path, capsys):
    path = _write(tmp_path, {"training.gamma": [0.9]})
    assert main(["sweep", str(path), "--resume"]) == 2
    assert "nothing to resume" in capsys.readouterr().out


def test_shipped_credit_assignment_sweep():
    sweep = load_sweep(REPO / "experiments" / "sweeps" / "credit_assignment.yaml")
    points = grid_points(sweep.spec.grid)
    assert len(points) == 12
    assert {p["training.turn_credit"] for p in points} == {"equalized", "r2g", "em"}
    assert {p["training.trajectory_score"] for p in points} == {"sum", "r2g"}
    assert sweep.spec.name == "credit_assignment" and sweep.config.sft.enabled
    # driver 0.2 + one replica 0.5 + two env runners 0.1 each
    assert trial_cpus(sweep.config) == pytest.approx(0.9)


def test_trial_label():
    assert trial_label({"training.turn_credit": "em", "training.gamma": 0.9}) == "turn_credit=em,gamma=0.9"
    assert trial_label({"policy.temperature": 1.0, "evaluation.temperature": 0.0}) == \
        "policy.temperature=1.0,evaluation.temperature=0.0"


def test_latest_checkpoint_skips_half_written(tmp_path):
    assert latest_checkpoint(tmp_path) is None
    for name, iteration in [("iter_000002", 2), ("iter_000010", 10), ("iter_000012.tmp", 12)]:
        folder = tmp_path / "checkpoints" / name
        folder.mkdir(parents=True)
        (folder / "meta.json").write_text(json.dumps({"iteration": iteration}))
    (tmp_path / "checkpoints" / "iter_000011").mkdir()  # no meta.json: incomplete
    assert latest_checkpoint(tmp_path).name == "iter_000010"


def test_report_without_a_store(tmp_path, capsys):
    uri = f"sqlite:///{tmp_path / 'none.db'}"
    assert main(["report", "--experiment", "x", "--tracking-uri", uri, "--out", str(tmp_path / "r")]) == 2
    assert "no MLflow store" in capsys.readouterr().out
    assert not (tmp_path / "none.db").exists() and not (tmp_path / "r").exists()


def test_report_unknown_experiment_lists_the_known(tmp_path, capsys):
    from mlflow import MlflowClient

    uri = f"sqlite:///{tmp_path / 'm.db'}"
    MlflowClient(uri).create_experiment("credit_assignment")
    assert main(["report", "--experiment", "credit", "--tracking-uri", uri, "--out", str(tmp_path / "r")]) == 2
    out = capsys.readouterr().out
    assert "no MLflow experiment 'credit'" in out and "credit_assignment" in out
    assert not (tmp_path / "r").exists()


def test_restarted_trial_appends_to_its_mlflow_run(tmp_path):
    """A trial restarted by --resume reopens the MLflow run it began (params logged once)."""
    from mlflow import MlflowClient

    from userrl.config import load_config
    from userrl.tracking import MLflowTracker

    config = load_config(QUICKSTART, [f"experiment.output_dir={tmp_path}", "tracking.experiment=s"])
    first = MLflowTracker(config, run_name="turn_credit=em", tags={"sweep": "s"})
    first.log_result({"rollout/reward_mean": 0.25}, step=1)
    first.finish("FAILED")
    config.checkpointing.resume_from = str(tmp_path / "checkpoints" / "iter_000001")  # differs from the param
    again = MLflowTracker(config, run_id=first.run_id)
    again.log_result({"rollout/reward_mean": 0.5}, step=2)
    again.finish("FINISHED")
    client = MlflowClient(config.mlflow_uri())
    (run,) = client.search_runs([client.get_experiment_by_name("s").experiment_id])
    assert run.info.run_id == first.run_id and run.info.status == "FINISHED" and run.data.tags["sweep"] == "s"
    assert [m.value for m in client.get_metric_history(run.info.run_id, "rollout.reward_mean")] == [0.25, 0.5]
