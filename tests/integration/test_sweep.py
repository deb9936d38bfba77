"""`userrl sweep` on a local Ray: real GRPO-multiturn trials under Tune, MLflow runs, restore, report."""

import shutil
from pathlib import Path

import pytest
import yaml
from mlflow import MlflowClient
from PIL import Image

from userrl.cli import main

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
TINY = ["policy.model=tiny-random", "policy.dtype=float32", "policy.max_new_tokens=6", "policy.num_threads=1",
        "policy.max_model_len=512", "env_runners.num_env_runners=1", "sft.enabled=false",
        "training.iterations=1", "training.batch_size=2", "training.group_size=2",
        "training.micro_batch_tokens=1024", "learners.num_learners=0", "learners.num_cpus_per_learner=1",
        "learners.precision=float32", "evaluation.interval=0", "checkpointing.every=1", "env.max_turns=2", "env.max_steps=2"]


def _sweep_file(tmp_path, name, grid):
    spec = {"name": name, "base": str(REPO / "experiments" / "quickstart.yaml"),
            "overrides": [*TINY, f"experiment.output_dir={tmp_path / 'runs'}"],
            "grid": grid, "tune": {"max_concurrent_trials": 1}}
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def _runs(tmp_path, name):
    client = MlflowClient(f"sqlite:///{tmp_path / 'runs' / 'mlflow.db'}")
    return client, client.search_runs([client.get_experiment_by_name(name).experiment_id])


def test_sweep_errored_trial_mlflow_resume_and_report(ray_local, tiny_model, tmp_path, capsys):
    """Two trials, the second of whose model folder is missing: it fails and is reported; once the folder
    exists, --resume restores the finished trial (nothing re-runs) and runs the errored one."""
    model = tmp_path / "model"
    grid = {"credit": [{"training.turn_credit": "equalized"},
                       # this trial on a Ray Train learner (a worker group inside a Tune trial), the other on the local one
                       {"training.turn_credit": "em", "policy.model": str(model), "learners.num_learners": 1}]}
    path = _sweep_file(tmp_path, "credit_tiny", grid)
    assert main(["sweep", str(path)]) == 1
    out = " ".join(capsys.readouterr().out.split())
    assert "ERROR" in out and "neither a known model" in out and "--resume" in out
    assert "sweep credit_tiny: rollout/reward_mean (max)" in out and out.count("TERMINATED") >= 1

    # Starting it again is refused; --resume restores the finished trial and runs the errored one.
    assert main(["sweep", str(path)]) == 2
    assert "pass --resume" in capsys.readouterr().out
    shutil.copytree(tiny_model, model)
    assert main(["sweep", str(path), "--resume"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "resuming sweep credit_tiny" in out and out.count("TERMINATED") >= 2
    assert "best (rollout/reward_mean, max, scope last): turn_credit=" in out

    # One MLflow experiment named after the sweep; a run per trial, tagged, with its params and metrics.
    client, runs = _runs(tmp_path, "credit_tiny")
    assert sorted(r.data.params["training.turn_credit"] for r in runs) == ["em", "equalized"]
    for run in runs:
        assert run.info.status == "FINISHED" and run.data.tags["sweep"] == "credit_tiny"
        assert run.data.tags["sweep.training.turn_credit"] == run.data.params["training.turn_credit"]
        assert f"turn_credit={run.data.params['training.turn_credit']}" in run.info.run_name.split(",")
        # one iteration each: the trial restored by --resume did not run again
        assert len(client.get_metric_history(run.info.run_id, "rollout.reward_mean")) == 1
        # each trial has its own run folder and checkpoints
        checkpoint = Path(run.data.tags["checkpoint"])
        assert checkpoint.name == "iter_000001" and (checkpoint / "meta.json").is_file()
        assert checkpoint.parents[2] == tmp_path / "runs" / "credit_tiny"
    assert len({Path(r.data.tags["checkpoint"]).parents[1] for r in runs}) == 2

    # The report: tables list both runs, learning curves are real PNGs.
    uri = f"sqlite:///{tmp_path / 'runs' / 'mlflow.db'}"
    for fmt, page in [("markdown", "report.md"), ("html", "report.html")]:
        out_dir = tmp_path / f"report_{fmt}"
        assert main(["report", "--experiment", "credit_tiny", "--tracking-uri", uri, "--out", str(out_dir),
                     "--format", fmt]) == 0
        text = (out_dir / page).read_text()
        assert "turn_credit=equalized" in text and "turn_credit=em" in text and "Gym: function" in text
        for png in ("reward.png", "valid_action_rate.png", "tokens_per_s.png"):
            assert png in text
            with Image.open(out_dir / png) as image:
                assert image.format == "PNG" and image.width > 400 and image.height > 200
        assert not (out_dir / "eval_reward.png").exists()  # no evaluation in these runs: no empty plot
    table = (tmp_path / "report_markdown" / "report.md").read_text().split("## All runs")[1].split("##")[0]
    assert table.count("turn_credit=") == 2 and table.count("FINISHED") == 2
