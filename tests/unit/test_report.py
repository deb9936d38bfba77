"""`userrl report` from a real MLflow store: per-gym tables, final/best values, learning-curve PNGs."""

import polars as pl
import pytest
from mlflow import MlflowClient
from mlflow.entities import Metric, Param
from PIL import Image

from userrl.cli import main


def _store(tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = MlflowClient(uri)
    experiment = client.create_experiment("sweep")
    curves = {"equalized": [0.1, 0.3, 0.2, 0.4], "em": [0.2, 0.5, 0.6, 0.55]}
    for credit, rewards in curves.items():
        run = client.create_run(experiment, run_name=f"turn_credit={credit}").info.run_id
        client.log_batch(run, params=[Param("training.turn_credit", credit), Param("training.lr", "1e-06"),
                                      Param("experiment.name", run[:6])])
        metrics = []
        for step, reward in enumerate(rewards, start=1):
            metrics += [Metric("rollout.reward_mean", reward, 0, step),
                        Metric("rollout.reward_mean.function", reward + 0.1, 0, step),
                        Metric("rollout.reward_mean.travel", reward - 0.1, 0, step),
                        Metric("rollout.valid_action_rate", 0.5 + step / 10, 0, step),
                        Metric("rollout.success_rate", reward, 0, step),
                        Metric("rollout.tokens_per_s", 40.0 + step, 0, step),
                        Metric("learner.tokens_per_s", 250.0, 0, step)]
            if step % 2 == 0:
                metrics.append(Metric("eval.reward_mean", reward / 2, 0, step))
        client.log_batch(run, metrics=metrics)
        client.set_terminated(run)
    # an evaluation run (`userrl evaluate` logs eval.<gym>.<metric> at step 0)
    run = client.create_run(experiment, run_name="eval-iter_000004").info.run_id
    client.log_batch(run, metrics=[Metric("eval.function.micro_avg", 0.42, 0, 0), Metric("eval.overall", 0.4, 0, 0)])
    client.set_terminated(run)
    return uri


def test_report_tables_and_curves(tmp_path, capsys):
    uri = _store(tmp_path)
    out = tmp_path / "report"
    assert main(["report", "--experiment", "sweep", "--tracking-uri", uri, "--out", str(out)]) == 0
    assert "report.md" in capsys.readouterr().out
    page = (out / "report.md").read_text()
    assert "Varying settings: training.turn_credit" in page  # experiment.name is not a setting
    for section in ("## All runs", "## Gym: function", "## Gym: travel", "## Settings"):
        assert section in page
    runs = pl.read_csv(out / "runs.csv")
    em = runs.filter(pl.col("label") == "turn_credit=em").row(0, named=True)
    assert em["reward final"] == 0.55 and em["reward best"] == 0.6 and em["iters"] == 4
    assert em["eval reward final"] == 0.275 and em["gen tok/s"] == 42.5  # eval at steps 2 and 4
    assert runs.get_column("label").to_list()[0] == "turn_credit=em"  # sorted by final reward
    function = page.split("## Gym: function")[1].split("##")[0]
    assert "eval micro_avg" in function and "0.420" in function and "0.650" in function  # 0.55 + 0.1
    for png in ("reward.png", "eval_reward.png", "valid_action_rate.png", "tokens_per_s.png"):
        with Image.open(out / png) as image:
            assert image.format == "PNG" and image.width > 600
    # no run has a critic: no critic figure, columns or history rows, no critic settings
    assert not (out / "critic.png").exists() and "Critic" not in page and "critic." not in page
    assert "value loss final" not in runs.columns
    assert not pl.read_csv(out / "history.csv").filter(pl.col("key").str.starts_with("critic.")).height
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mlflow.db", "report"]  # no staging left

    # Rewriting replaces the folder as a whole (HTML now), still nothing half-written around it.
    assert main(["report", "--experiment", "sweep", "--tracking-uri", uri, "--out", str(out),
                 "--format", "html"]) == 0
    assert (out / "report.html").read_text().count("<table>") == 4 and not (out / "report.md").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mlflow.db", "report"]


def _estimator_store(tmp_path):
    """An estimator sweep: grpo_multiturn (no critic metrics) and two GAE runs that log critic.* per iteration."""
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = MlflowClient(uri)
    experiment = client.create_experiment("estimators")
    for estimator, mask_obs in [("grpo_multiturn", "True"), ("gae", "True"), ("gae", "False")]:
        name = f"adv_estimator={estimator}" + ("" if estimator == "grpo_multiturn" else f",mask_obs={mask_obs}")
        run = client.create_run(experiment, run_name=name).info.run_id
        client.log_batch(run, params=[Param("training.adv_estimator", estimator), Param("critic.mask_obs", mask_obs),
                                      Param("critic.lr", "1e-05"), Param("training.lr", "2e-05")])
        metrics = []
        for step in range(1, 4):
            metrics += [Metric("rollout.reward_mean", 0.1 * step, 0, step),
                        Metric("rollout.success_rate", 0.1 * step, 0, step)]
            if estimator != "grpo_multiturn":
                metrics += [Metric("critic.value_loss", 1.0 / step, 0, step),
                            Metric("critic.explained_variance", 0.2 * step - (mask_obs == "False") * 0.5, 0, step),
                            Metric("critic.vf_clipfrac", 0.1, 0, step), Metric("critic.grad_norm", 2.0, 0, step)]
        client.log_batch(run, metrics=metrics)
        client.set_terminated(run)
    return uri


def test_report_critic_figure_and_columns(tmp_path):
    uri = _estimator_store(tmp_path)
    out = tmp_path / "report"
    assert main(["report", "--experiment", "estimators", "--tracking-uri", uri, "--out", str(out)]) == 0
    page = (out / "report.md").read_text()
    assert "Varying settings: critic.mask_obs, training.adv_estimator" in page
    with Image.open(out / "critic.png") as image:
        assert image.format == "PNG" and image.width > 600
    assert "![Critic of the GAE estimators (runs with a critic only)](critic.png)" in page
    runs = pl.read_csv(out / "runs.csv")
    rows = {r["label"]: r for r in runs.iter_rows(named=True)}
    assert rows["adv_estimator=gae,mask_obs=False"]["explained var final"] == pytest.approx(0.1)  # 0.6 - 0.5, step 3
    assert rows["adv_estimator=gae,mask_obs=True"]["value loss final"] == pytest.approx(1 / 3)
    grpo = rows["adv_estimator=grpo_multiturn"]
    assert grpo["value loss final"] is None and grpo["critic.mask_obs"] is None  # no critic: '-', not True
    assert grpo["training.adv_estimator"] == "grpo_multiturn"
    history = pl.read_csv(out / "history.csv")
    critic = history.filter(pl.col("key").str.starts_with("critic."))
    assert set(critic.get_column("key")) == {"critic.value_loss", "critic.explained_variance", "critic.vf_clipfrac",
                                             "critic.grad_norm"}
    assert critic.height == 2 * 4 * 3  # two GAE runs, four keys, three iterations
    settings = page.split("## Settings")[1].split("##")[0]
    assert "training.lr" in settings and "critic.mask_obs" not in settings  # it varies: in the runs table


def test_report_of_runs_with_the_same_settings(tmp_path):
    """No setting varies (one trial so far, or a run interrupted before it logged): the report still works."""
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = MlflowClient(uri)
    experiment = client.create_experiment("one")
    run = client.create_run(experiment, run_name="turn_credit=equalized").info.run_id
    client.log_batch(run, params=[Param("training.turn_credit", "equalized")],
                     metrics=[Metric("rollout.reward_mean", 0.25, 0, 1), Metric("rollout.success_rate", 0.25, 0, 1)])
    client.create_run(experiment, run_name="interrupted")  # started, nothing logged yet
    out = tmp_path / "report"
    assert main(["report", "--experiment", "one", "--tracking-uri", uri, "--out", str(out)]) == 0
    runs = pl.read_csv(out / "runs.csv")
    assert runs.filter(pl.col("label") == "turn_credit=equalized").row(0, named=True)["reward final"] == 0.25
