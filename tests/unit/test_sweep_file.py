"""Sweep files and report arguments: bad input fails before anything starts, naming the key and the fix."""

import json
import os
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from userrl.cli import main
from userrl.commands.sweep import (
    assignments,
    grid_points,
    latest_checkpoint,
    load_sweep,
    param_space,
    print_table,
    trial_cpus,
    trial_data,
    trial_label,
    trial_status,
)
from userrl.config import ConfigError, parse_config

REPO = Path(__file__).resolve().parents[2]
QUICKSTART = str(REPO / "experiments" / "quickstart.yaml")


def _write(tmp_path, grid, **extra):
    spec = {"name": "s", "base": QUICKSTART, "overrides": [f"experiment.output_dir={tmp_path / 'runs'}"],
            "grid": grid, **extra}
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))  # a variant keeps its keys in order
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
    assert len(points) == 18
    assert {p["training.turn_credit"] for p in points} == {"equalized", "r2g", "em"}
    assert {p["training.trajectory_score"] for p in points} == {"mean", "sum", "r2g"}
    assert sweep.spec.name == "credit_assignment" and sweep.config.sft.enabled
    # driver 0.2 + one replica 0.5 + two env runners 0.1 each + the quickstart's local learner, 2 CPUs
    assert trial_cpus(sweep.config) == pytest.approx(2.9)


def test_shipped_learning_matrix_is_every_gym_recipe():
    sweep = load_sweep(REPO / "experiments" / "sweeps" / "learning_matrix.yaml", ["training.iterations=2"])
    points = grid_points(sweep.spec.grid)
    recipes = sorted(p.stem for p in (REPO / "experiments" / "learn").glob("*.yaml") if p.stem != "common")
    assert sorted(trial_label(p).removeprefix("gym=") for p in points) == recipes
    assert len(recipes) == 10  # the ten gyms, each trained alone
    for point in points:
        config = parse_config(trial_data(sweep.base, point))
        assert [g.name for g in config.env.gyms] == [trial_label(point).removeprefix("gym=")]
        assert config.training.iterations == 2  # the sweep's overrides win over a recipe, as over a base
        assert config.sft.enabled and config.evaluation.interval and config.tracking.experiment == "learn"
        assert trial_cpus(config) == pytest.approx(2.9)  # one local learner, as the quickstart


def test_a_variant_may_be_a_recipe_file_and_carry_a_label(tmp_path):
    (tmp_path / "recipes").mkdir()
    (tmp_path / "recipes" / "slow.yaml").write_text(f"base: {QUICKSTART}\ntraining: {{lr: 1.0e-6}}\n")
    path = _write(tmp_path, {"arm": ["recipes/slow.yaml", {"label": "fast", "training.lr": 1e-4}],
                             "training.batch_size": [2]})
    sweep = load_sweep(path, ["training.iterations=1"])
    points = grid_points(sweep.spec.grid)
    assert [trial_label(p) for p in points] == ["arm=slow,batch_size=2", "arm=fast,batch_size=2"]
    slow, fast = (parse_config(trial_data(sweep.base, p)) for p in points)
    assert (slow.training.lr, slow.training.iterations, slow.training.batch_size) == (1e-6, 1, 2)
    assert (fast.training.lr, fast.training.iterations) == (1e-4, 1)
    assert ("label", "fast") not in assignments(points[1])  # a label names the trial, it sets nothing
    with pytest.raises(ConfigError, match=r"grid.arm: variant 1 names the recipe 'nope.yaml', which does not "
                                          r"exist \(looked at .*nope.yaml\)"):
        load_sweep(_write(tmp_path, {"arm": ["nope.yaml"]}))
    # another axis wins over a recipe's key, as over a base's; a variant written out may not set it
    crossed = load_sweep(_write(tmp_path, {"arm": ["recipes/slow.yaml"], "training.lr": [1e-5]}))
    (point,) = grid_points(crossed.spec.grid)
    assert parse_config(trial_data(crossed.base, point)).training.lr == 1e-5
    assert assignments(point, recipes=False) == [("training.lr", 1e-5)]
    with pytest.raises(ConfigError, match=r"grid.training.lr: sets training.lr, which grid.arm sets too"):
        load_sweep(_write(tmp_path, {"arm": [{"training.lr": 1e-4}], "training.lr": [1e-5]}))
    with pytest.raises(ConfigError, match=r"grid.arm: variant 1's label names its trial: give a string"):
        load_sweep(_write(tmp_path, {"arm": [{"label": 3, "training.lr": 1e-4}]}))


def test_a_local_ray_and_a_sweep_trial_count_the_same_actors():
    """One count (userrl/cluster.run_cpus): local user replicas reserve CPUs in a local Ray as in a trial."""
    from userrl.cluster import ray_cpus, run_cpus
    from userrl.config import load_config

    config = load_config(None, ["env.backend=local", "env.local_user_replicas=3", "policy.num_cpus_per_replica=2",
                                "env_runners.num_env_runners=4", "env_runners.num_cpus_per_env_runner=0.5",
                                "learners.num_learners=2", "learners.num_cpus_per_learner=3"])
    replicas, runners, learners = (1 + 3) * 2, 4 * 0.5, 2 * 3
    assert trial_cpus(config) == pytest.approx(0.2 + replicas + runners)
    assert run_cpus(config, driver=1.0) == pytest.approx(1 + replicas + runners + learners)
    assert ray_cpus(config) == max(os.cpu_count() or 1, 1 + replicas + runners + learners)
    scripted = config.model_copy(update={"env": config.env.model_copy(update={"backend": "scripted"})})
    assert trial_cpus(scripted) == pytest.approx(0.2 + 2 + runners)
    # A local learner (num_learners 0) runs in the driver, a trial's own process: counted in the trial either way.
    local = config.model_copy(update={"learners": config.learners.model_copy(update={"num_learners": 0})})
    assert trial_cpus(local) == pytest.approx(0.2 + replicas + runners + 3)
    assert run_cpus(local, driver=1.0) == pytest.approx(1 + replicas + runners + 3)


def test_trial_label():
    assert trial_label({"training.turn_credit": "em", "training.gamma": 0.9}) == "turn_credit=em,gamma=0.9"
    assert trial_label({"policy.temperature": 1.0, "evaluation.temperature": 0.0}) == \
        "policy.temperature=1.0,evaluation.temperature=0.0"
    assert trial_label({"estimator": {"training.adv_estimator": "gae", "critic.mask_obs": False},
                        "env.gyms": [{"name": "function", "difficulty": [0, 1]}, {"name": "telepathy"}]}) == \
        "adv_estimator=gae,mask_obs=false,gyms=function:0/1+telepathy"


# --- variant axes: a grid key without a dot, whose values are mappings of dotted keys set together ---------

ESTIMATOR_AXIS = [{"training.adv_estimator": "grpo_multiturn", "training.turn_credit": "r2g"},
                  {"training.adv_estimator": "gae", "critic.mask_obs": True},
                  {"training.adv_estimator": "gae", "critic.mask_obs": False}]


def test_variant_axis_times_an_ordinary_axis(tmp_path):
    sweep = load_sweep(_write(tmp_path, {"estimator": ESTIMATOR_AXIS, "training.lr": [1e-5, 2e-5]}))
    points = grid_points(sweep.spec.grid)
    assert len(points) == 3 * 2
    assert points[0] == {"estimator": ESTIMATOR_AXIS[0], "training.lr": 1e-5}
    assert assignments(points[5]) == [("training.adv_estimator", "gae"), ("critic.mask_obs", False),
                                      ("training.lr", 2e-5)]
    data = trial_data(sweep.base, points[5])  # every key of the variant applied, the base left alone
    assert data["training"]["adv_estimator"] == "gae" and data["critic"] == {"mask_obs": False}
    assert data["training"]["lr"] == 2e-5 and "critic" not in sweep.base
    assert [trial_label(p) for p in points[::2]] == [
        "adv_estimator=grpo_multiturn,turn_credit=r2g,lr=1e-05", "adv_estimator=gae,mask_obs=true,lr=1e-05",
        "adv_estimator=gae,mask_obs=false,lr=1e-05"]
    assert sweep.config.training.turn_credit == "r2g"  # the first point's config


def test_variant_value_that_is_not_a_mapping(tmp_path, capsys):
    path = _write(tmp_path, {"estimator": [{"training.adv_estimator": "gae"}, "gae"]})
    assert main(["sweep", str(path)]) == 2
    out = " ".join(capsys.readouterr().out.split())
    assert "grid.estimator: a grid key without a dot is a variant axis" in out and "value 2 is 'gae'" in out
    assert "grid: grid." not in out and sorted(p.name for p in tmp_path.iterdir()) == ["sweep.yaml"]
    # a section-less ordinary key reads as a variant axis: the error names the full key
    with pytest.raises(ConfigError, match=r"grid.turn_credit: .*value 1 is 'em' \(did you mean "
                                          r"training.turn_credit\?\)"):
        load_sweep(_write(tmp_path, {"turn_credit": ["em"]}))
    with pytest.raises(ConfigError, match=r"grid.estimator: .*value 1 is \{\}"):
        load_sweep(_write(tmp_path, {"estimator": [{}]}))


def test_variant_key_without_a_dot(tmp_path):
    path = _write(tmp_path, {"estimator": [{"adv_estimator": "gae", "critic.mask_obs": False}]})
    with pytest.raises(ConfigError, match=r"grid.estimator: variant 1 sets 'adv_estimator', not a dotted config "
                                          r"key \(did you mean training.adv_estimator\?\)"):
        load_sweep(path)


def test_variant_key_also_on_another_axis(tmp_path):
    path = _write(tmp_path, {"estimator": ESTIMATOR_AXIS, "training.turn_credit": ["em"]})
    with pytest.raises(ConfigError, match="grid.training.turn_credit: sets training.turn_credit, which "
                                          "grid.estimator sets too; set each config key on one axis only"):
        load_sweep(path)


def test_bad_variant_names_the_variant(tmp_path):
    # critic settings without a critic, and a typo inside a variant
    path = _write(tmp_path, {"estimator": [{"training.adv_estimator": "grpo_multiturn", "critic.mask_obs": False}]})
    with pytest.raises(ConfigError, match=r"grid.estimator = \{'training.adv_estimator': 'grpo_multiturn', "
                                          r"'critic.mask_obs': False\}: critic.mask_obs: .*has no critic"):
        load_sweep(path)
    path = _write(tmp_path, {"estimator": [{"training.adv_estimator": "gea"}]})
    with pytest.raises(ConfigError, match=r"grid.estimator = .*'gea'"):
        load_sweep(path)


def test_bad_combination_of_a_variant_and_an_axis(tmp_path):
    # each value is fine on the base alone; gae with a GRPO-only turn credit is not
    path = _write(tmp_path, {"estimator": [{"training.adv_estimator": "gae", "critic.mask_obs": False}],
                             "training.turn_credit": ["equalized", "r2g"]})
    with pytest.raises(ConfigError, match=r"grid point .*training.turn_credit='r2g': not used by "
                                          r"training.adv_estimator=gae"):
        load_sweep(path)


def test_an_axis_valid_only_with_the_variants(tmp_path):
    # critic.lr alone on the (grpo_multiturn) base fails, but every grid point has a critic: the grid is fine
    sweep = load_sweep(_write(tmp_path, {"estimator": ESTIMATOR_AXIS[1:], "critic.lr": [1e-5, 3e-5]}))
    assert len(grid_points(sweep.spec.grid)) == 4


def test_tune_grid_search_over_variants(tmp_path):
    """Tune's own variant generator (what the Tuner's BasicVariantGenerator runs) yields every grid point."""
    from ray.tune.search.variant_generator import generate_variants

    sweep = load_sweep(_write(tmp_path, {"estimator": ESTIMATOR_AXIS, "training.lr": [1e-5, 2e-5]}))
    configs = [spec["grid"] for _, spec in generate_variants(param_space(sweep.spec))]
    points = grid_points(sweep.spec.grid)
    assert len(configs) == len(points) == 6
    assert sorted(map(json.dumps, configs)) == sorted(map(json.dumps, points))


def test_table_shows_a_variant_axis_by_its_keys(tmp_path):
    import io

    from rich.console import Console

    sweep = load_sweep(_write(tmp_path, {"estimator": ESTIMATOR_AXIS[1:], "training.lr": [1e-5]}))
    rows = [{"params": point, "status": "TERMINATED", "iterations": 2, "final": 0.5, "best": 0.5, "success": 0.5,
             "valid": 1.0, "eval": None, "seconds": 60.0, "mlflow_run_id": "abc", "error": ""}
            for point in grid_points(sweep.spec.grid)]
    out = io.StringIO()
    print_table(rows, sweep.spec, Console(file=out))
    text = out.getvalue()
    assert "adv_estimator=gae,mask_obs=false" in text and "{" not in text


def test_shipped_estimators_sweep():
    from userrl.envs.registry import RECORDS

    if "frozenlake" not in RECORDS:
        pytest.skip("the frozenlake gym (envs/frozenlake) is not registered in this checkout yet")
    sweep = load_sweep(REPO / "experiments" / "sweeps" / "estimators.yaml")
    points = grid_points(sweep.spec.grid)
    assert len(points) == 18 and list(sweep.spec.grid) == ["estimator", "env.gyms"]
    labels = [trial_label(p) for p in points]
    assert len(set(labels)) == 18
    assert "adv_estimator=grpo_multiturn,turn_credit=r2g,gyms=frozenlake:0" in labels
    assert "adv_estimator=gae_bilevel_weighted,mask_obs=false,gyms=function:0" in labels
    configs = [load_sweep_point(sweep, p) for p in points]
    estimators = {(c.training.adv_estimator, c.critic.mask_obs) for c in configs}
    assert len(estimators) == 9 and ("grpo_multiturn", True) in estimators  # grpo: the (unused) default
    assert {c.env.gyms[0].name for c in configs} == {"frozenlake", "function"}
    assert all(c.training.turn_credit == ("r2g" if not c.training.uses_critic else "equalized") for c in configs)
    assert sweep.spec.tune.metric == "eval/success_rate" and sweep.config.evaluation.interval > 0
    assert sweep.config.training.iterations % sweep.config.evaluation.interval == 0  # the last iteration evaluates
    assert sweep.config.sft.enabled and sweep.config.checkpointing.every == 0


def load_sweep_point(sweep, point):
    from userrl.config import parse_config

    return parse_config(trial_data(sweep.base, point))


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


def test_only_keeps_the_named_values_and_name_renames(tmp_path):
    path = _write(tmp_path, {"estimator": [{"training.turn_credit": "equalized"}, {"training.turn_credit": "r2g"},
                                           {"training.turn_credit": "em"}],
                             "training.lr": [1.0e-5, 2.0e-5]})
    sweep = load_sweep(path, only=["estimator=3,1", "training.lr=2"], name="part")
    assert sweep.spec.name == "part"
    assert sweep.spec.grid == {"estimator": [{"training.turn_credit": "em"}, {"training.turn_credit": "equalized"}],
                               "training.lr": [2.0e-5]}
    assert len(grid_points(sweep.spec.grid)) == 2  # 2 x 1 trials instead of 3 x 2
    assert load_sweep(path).spec.name == "s" and len(grid_points(load_sweep(path).spec.grid)) == 6


@pytest.mark.parametrize("only, message", [
    ("training.gamma=1", r"AXIS one of the grid's axes \(training.lr\)"),
    ("training.lr", r"AXIS one of the grid's axes"),
    ("training.lr=3", r"grid.training.lr has 2 values: give positions from 1 to 2"),
    ("training.lr=0", r"positions from 1 to 2"),
    ("training.lr=a", r"positions from 1 to 2"),
])
def test_only_refuses_unknown_axes_and_positions(tmp_path, capsys, only, message):
    path = _write(tmp_path, {"training.lr": [1.0e-5, 2.0e-5]})
    with pytest.raises(ConfigError, match=message):
        load_sweep(path, only=[only])
    assert main(["sweep", str(path), "--only", only]) == 2  # the command says so before anything starts
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sweep.yaml"]


@pytest.mark.parametrize(("metrics", "error", "status"), [
    ({"iteration": 3, "done": True}, None, "TERMINATED"),
    ({"iteration": 2, "done": True}, None, "INTERRUPTED"),  # stopped short, though Tune marked it done
    ({"iteration": 3, "done": False}, None, "TERMINATED"),  # restored by --resume: Tune saved it with done=False
    ({"iteration": 2}, None, "INTERRUPTED"),
    ({}, None, "PENDING"),
    ({"iteration": 1}, RuntimeError("boom"), "ERROR"),
    ({}, RuntimeError("boom"), "ERROR"),
])
def test_trial_status_from_the_public_result(metrics, error, status):
    assert trial_status(SimpleNamespace(metrics=metrics, error=error), iterations=3) == status


def test_trial_status_without_a_known_length_trusts_done():
    assert trial_status(SimpleNamespace(metrics={"iteration": 7, "done": True}, error=None), iterations=0) == "TERMINATED"
