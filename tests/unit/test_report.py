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
    assert "MUA-RL" not in page  # no run was played with env.protocol native_tools
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


def _native_tools_store(tmp_path):
    """A native_tools run logging MUA-RL's metrics (keys as the tracker writes them) and a run without them."""
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = MlflowClient(uri)
    experiment = client.create_experiment("mua")
    run = client.create_run(experiment, run_name="protocol=native_tools").info.run_id
    steps = {
        1: {"groups": 4, "groups_all_correct": 0.25, "groups_all_wrong": 0.5, "groups_mixed": 0.25,
            "tool_calls_mean": 2.0, "customer_messages_mean": 1.5, "tool_call_share": 4 / 7, "tool_error_rate": 0.25,
            "distinct_1": 0.5, "tool_calls.get_user_details": 6, "tool_error_rate.get_user_details": 0.5,
            "tool_calls.think": 2, "tool_error_rate.think": 0.0},
        # no tool_call_share at the last batch, and `think` was not called: neither may show a stale value
        2: {"groups": 4, "groups_all_correct": 0.5, "groups_all_wrong": 0.25, "groups_mixed": 0.25,
            "tool_calls_mean": 1.0, "customer_messages_mean": 2.0, "tool_error_rate": 0.1, "distinct_1": 0.6,
            "distinct_2": 0.8, "tool_calls.get_user_details": 4, "tool_error_rate.get_user_details": 0.25},
    }
    metrics = [Metric(f"rollout.mua.{name}", float(value), 0, step)
               for step, values in steps.items() for name, value in values.items()]
    metrics += [Metric("rollout.reward_mean", 0.5, 0, step) for step in steps]
    metrics += [Metric("eval.mua.groups", 8.0, 0, 2), Metric("eval.mua.groups_all_correct", 0.375, 0, 2),
                Metric("eval.mua.tool_calls.cancel_pending_order", 3.0, 0, 2),
                Metric("eval.mua.tool_error_rate.cancel_pending_order", 1 / 3, 0, 2)]
    client.log_batch(run, params=[Param("env.protocol", "native_tools")], metrics=metrics)
    client.set_terminated(run)
    other = client.create_run(experiment, run_name="protocol=bracket").info.run_id
    client.log_batch(other, params=[Param("env.protocol", "bracket")],
                     metrics=[Metric("rollout.reward_mean", 0.2, 0, step) for step in steps])
    client.set_terminated(other)
    return uri


def test_report_shows_mua_rl_tables(tmp_path):
    from userrl.commands.report import load_experiment, mua_table, mua_tool_table

    uri = _native_tools_store(tmp_path)
    out = tmp_path / "report"
    assert main(["report", "--experiment", "mua", "--tracking-uri", uri, "--out", str(out)]) == 0
    page = (out / "report.md").read_text()
    for section in ("## MUA-RL: training rollouts", "## MUA-RL tool calls: training rollouts",
                    "## MUA-RL: evaluation", "## MUA-RL tool calls: evaluation"):
        assert section in page
    training = page.split("## MUA-RL: training rollouts")[1].split("##")[0]
    assert "protocol=native_tools" in training and "protocol=bracket" not in training  # only runs that have them
    assert "mixed" in training and "distinct-2" in training and "0.800" in training

    data = load_experiment("mua", uri)
    (row,) = mua_table(data, "rollout").iter_rows(named=True)
    assert (row["iteration"], row["all-correct"], row["all-wrong"], row["tool error rate"]) == (2, 0.5, 0.25, 0.1)
    assert row["distinct-1"] == 0.6 and "tool share" not in row  # logged at step 1 only: not the last batch's
    tools = {r["tool"]: r for r in mua_tool_table(data, "rollout").iter_rows(named=True)}
    assert list(tools) == ["get_user_details", "think"]  # most calls first
    # get_user_details: 6 calls at 0.5 and 4 at 0.25 -> 10 calls, (3 + 1) / 10 errors
    assert tools["get_user_details"]["calls (last)"] == 4 and tools["get_user_details"]["calls (all)"] == 10
    assert tools["get_user_details"]["error rate (last)"] == 0.25
    assert tools["get_user_details"]["error rate (all)"] == pytest.approx(0.4)
    assert tools["think"]["calls (last)"] == 0 and tools["think"]["error rate (last)"] is None
    assert tools["think"]["calls (all)"] == 2 and tools["think"]["error rate (all)"] == 0.0
    (evaluation,) = mua_table(data, "eval").iter_rows(named=True)
    assert evaluation["groups"] == 8 and evaluation["all-correct"] == 0.375
    assert mua_tool_table(data, "eval").row(0, named=True)["calls (all)"] == 3

