"""`userrl sweep`: a Ray Tune grid of GRPO-multiturn runs (e.g. credit assignment), resumable.

Every trial is a real training run: a Tune function trainable builds `Trainer` (its Ray Train
learner group runs inside the trial, Train V2 inside Tune) and reports one Tune result per iteration.
MLflow logging goes through our own `MLflowTracker` only (not Ray's MLflow callback): one run per
trial, all in one experiment named after the sweep. A trial's run folder holds its userrl
checkpoints; a trial restarted by `--resume` continues from the latest one.

The grid is a product of axes. An ordinary axis is a dotted config key with its values. A key without a
dot is a *variant axis*: each value is a mapping of dotted keys applied together, for combinations that
are no product (e.g. critic settings only with the estimators that have a critic). A variant may name itself
(`label`, its trial's name instead of its keys), and a variant may be a config file (a *recipe*, relative to the
sweep file): every key the file sets, labelled with the file's name, so a matrix of whole configs is one sweep
(`experiments/sweeps/learning_matrix.yaml`):

    grid:
      estimator:
        - {training.adv_estimator: grpo_multiturn, training.turn_credit: r2g}
        - {label: gae-unmasked, training.adv_estimator: gae, critic.mask_obs: false}
      training.lr: [1.0e-5, 2.0e-5]      # 2 variants x 2 values = 4 trials
"""

from __future__ import annotations

import copy
import itertools
import json
import math
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from rich.console import Console
from rich.table import Table

from userrl.checkpoint import checkpoints_dir, latest_complete, write_atomic
from userrl.config import (
    ConfigError,
    UserRLConfig,
    apply_overrides,
    flatten,
    parse_config,
    read_config_data,
    read_yaml_mapping,
    section_models,
    set_dotted,
)

RUN_ID_FILE = "mlflow_run_id"
LABEL = "label"  # a variant's own name (a key of a variant that is no dotted config key)
RECIPE = "recipe"  # the file a recipe variant was read from (set by resolve_recipes, not by a sweep file)
_DRIVER_CPU = 0.2  # the trial actor itself mostly waits on queues (Tune refuses 0 CPU)


class TrialResources(BaseModel):
    """Resources of one trial besides its learners (which Ray Train reserves from `learners.*`)."""

    model_config = ConfigDict(extra="forbid")
    cpu: float | None = Field(None, gt=0, description="CPUs for the trial driver, policy replicas and env "
                              "runners; null = what the base config asks for.")
    gpu: float | None = Field(None, ge=0, description="GPUs for the trial's policy replicas; null = "
                              "policy.num_replicas x policy.num_gpus_per_replica.")


class TuneSettings(BaseModel):
    """How Tune runs the grid and ranks the trials."""

    model_config = ConfigDict(extra="forbid")
    metric: str = Field("rollout/reward_mean", description="Result key that ranks the trials.")
    mode: Literal["max", "min"] = "max"
    scope: Literal["last", "avg", "all", "last-5-avg", "last-10-avg"] = Field(
        "last", description="Which of a trial's results counts for the ranking (Tune's get_best_result scope).")
    max_concurrent_trials: int = Field(1, ge=1)
    num_samples: int = Field(1, ge=1, description="Repeats of the whole grid.")
    max_failures: int = Field(0, ge=0, description="Automatic retries of a failed trial.")
    resources_per_trial: TrialResources = Field(default_factory=TrialResources)


class SweepSpec(BaseModel):
    """A sweep file: the base config, the grid, Tune settings."""

    model_config = ConfigDict(extra="forbid")
    name: str = Field(description="Tune folder and MLflow experiment name.")
    description: str = ""
    base: str | None = Field(None, description="Base config YAML, relative to the sweep file.")
    overrides: list[str] = Field(default_factory=list, description="Dotted overrides of the base config.")
    grid: dict[str, list[Any]] = Field(
        description="Dotted config key -> values; every combination is a trial. A key without a dot is a variant "
        "axis: its values are mappings of dotted keys, each applied together (e.g. estimator: "
        "[{training.adv_estimator: gae, critic.mask_obs: false}, ...]); a variant may carry a `label` (its trial's "
        "name) or be a config file (.yaml) relative to the sweep file (a recipe: every key it sets).")
    tune: TuneSettings = Field(default_factory=TuneSettings)
    storage_path: str | None = Field(None, description="Tune results folder; null = <output_dir>/sweeps.")

    @field_validator("name")
    @classmethod
    def _folder_name(cls, value: str) -> str:
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", value):
            raise ValueError("use letters, digits, '_', '-' or '.' (it names a folder and an MLflow experiment)")
        return value

    @field_validator("grid")
    @classmethod
    def _axes(cls, value: dict[str, list[Any]]) -> dict[str, list[Any]]:
        if not value:
            raise ValueError("needs at least one key, e.g. training.turn_credit: [equalized, r2g, em]")
        owner: dict[str, str] = {}  # config key -> the axis that sets it
        for key, values in value.items():
            if not values:
                raise ValueError(f"grid.{key}: give at least one value")
            if is_variant_axis(key):
                for i, variant in enumerate(values, start=1):
                    _check_variant(key, i, variant)
            # A recipe sets every key, as a base does, and the other axes win over it as over a base.
            explicit = [v for v in values if RECIPE not in v] if is_variant_axis(key) else []
            for dotted in dict.fromkeys(k for v in explicit for k in v if k != LABEL) if is_variant_axis(key) else [key]:
                if owner.setdefault(dotted, key) != key:
                    raise ValueError(f"grid.{key}: sets {dotted}, which grid.{owner[dotted]} sets too; "
                                     "set each config key on one axis only")
        return value


def _check_variant(axis: str, i: int, variant: Any) -> None:
    if not isinstance(variant, dict) or not variant:
        raise ValueError(f"grid.{axis}: a grid key without a dot is a variant axis, whose values are mappings of "
                         "dotted config keys set together (e.g. {training.adv_estimator: gae, critic.mask_obs: "
                         f"false}}) or config files (recipes, .yaml); value {i} is {variant!r}{_did_you_mean(axis)}")
    if not isinstance(variant.get(LABEL, ""), str):
        raise ValueError(f"grid.{axis}: variant {i}'s {LABEL} names its trial: give a string")
    for key in variant:
        if key not in (LABEL, RECIPE) and (not isinstance(key, str) or "." not in key):
            raise ValueError(f"grid.{axis}: variant {i} sets {key!r}, not a dotted config key{_did_you_mean(key)}")


def resolve_recipes(grid: Any, folder: Path, overrides: list[str]) -> Any:
    """The grid with each variant given as a YAML file (a recipe, relative to `folder`) replaced by the dotted keys
    that file sets, then the sweep's `overrides` (which win over a recipe as over a base), labelled with the
    file's name (a grid that is no mapping is left to SweepSpec to refuse)."""
    if not isinstance(grid, dict):
        return grid
    resolved = {}
    for axis, values in grid.items():
        if is_variant_axis(axis) and isinstance(values, list):
            values = [_recipe(axis, i, value, folder, overrides) if _is_recipe(value) else value
                      for i, value in enumerate(values, start=1)]
        resolved[axis] = values
    return resolved


def _is_recipe(value: Any) -> bool:
    return isinstance(value, str) and value.endswith((".yaml", ".yml"))


def _recipe(axis: str, i: int, name: str, folder: Path, overrides: list[str]) -> dict[str, Any]:
    path = folder / name
    if not path.is_file():
        raise ConfigError(f"grid.{axis}: variant {i} names the recipe {name!r}, which does not exist (looked at "
                          f"{path}); give a config file relative to the sweep file")
    data = apply_overrides(read_config_data(path, f"recipe of grid.{axis}"), overrides)
    return {LABEL: path.stem, RECIPE: name, **flatten(data)}


def _did_you_mean(leaf: Any) -> str:
    """' (did you mean section.leaf?)' for the config sections that have a key `leaf`, else ''."""
    full = [f"{name}.{leaf}" for name, model in section_models().items()
            if isinstance(model, type) and issubclass(model, BaseModel) and leaf in model.model_fields]
    return f" (did you mean {' or '.join(full)}?)" if full else ""


@dataclass
class Sweep:
    """A validated sweep: the spec, the base config as data, and where things go."""

    spec: SweepSpec
    base: dict[str, Any]
    config: UserRLConfig  # the base config with the first grid point, for paths and resources
    source: Path

    @property
    def storage(self) -> Path:
        """Tune's storage folder (the experiment lies in `storage / name`)."""
        root = Path(self.spec.storage_path) if self.spec.storage_path else Path(self.config.experiment.output_dir) / "sweeps"
        return root.resolve()

    @property
    def tune_dir(self) -> Path:
        """The Tune experiment folder (what `Tuner.restore` reads)."""
        return self.storage / self.spec.name

    @property
    def runs_root(self) -> Path:
        """Parent of the trials' userrl run folders (checkpoints, artifacts)."""
        return (Path(self.config.experiment.output_dir) / self.spec.name).resolve()


def _set(data: dict[str, Any], dotted: str, value: Any) -> None:
    set_dotted(data, dotted, value, f"grid key {dotted!r}")


def _reason(error: ConfigError) -> str:
    return str(error).removeprefix("invalid config:\n  ").replace("Value error, ", "")


def select_values(grid: dict[str, list[Any]], only: list[str]) -> dict[str, list[Any]]:
    """The grid with some axes cut to the values named by `AXIS=I,J` (1-based, in the file's order)."""
    grid = dict(grid)
    for item in only:
        axis, sep, picks = item.partition("=")
        if not sep or axis not in grid:
            raise ConfigError(f"--only {item!r}: give AXIS=I,J with AXIS one of the grid's axes "
                              f"({', '.join(grid)}) and I,J the positions of its values (1 = the first)")
        count = len(grid[axis])
        try:
            positions = [int(p) for p in picks.split(",")]
        except ValueError:
            positions = []
        if not positions or any(not 1 <= p <= count for p in positions):
            raise ConfigError(f"--only {item!r}: grid.{axis} has {count} values: give positions from 1 to {count}, "
                              f"comma-separated (e.g. {axis}=1,{count})")
        grid[axis] = [grid[axis][p - 1] for p in dict.fromkeys(positions)]
    return grid


def load_sweep(path: str | Path, overrides: list[str] | None = None, *, only: list[str] | None = None,
               name: str | None = None) -> Sweep:
    """Read and validate a sweep file; every grid value is checked against the config schema.

    `only` keeps some values of some axes (`select_values`) and `name` renames the sweep (its Tune folder
    and MLflow experiment), so a part of a grid runs under a name of its own.
    """
    path = Path(path)
    raw = read_yaml_mapping(path, "sweep file")
    if "grid" in raw:
        own = raw.get("overrides") if isinstance(raw.get("overrides"), list) else []  # else SweepSpec refuses it
        every_override = [*own, *(overrides or [])]
        raw = {**raw, "grid": resolve_recipes(raw["grid"], path.parent, every_override)}
    if only and isinstance(raw.get("grid"), dict):
        raw = {**raw, "grid": select_values(raw["grid"], only)}
    if name is not None:
        raw = {**raw, "name": name}
    try:
        spec = SweepSpec.model_validate(raw)
    except ValidationError as error:
        lines = []
        for item in error.errors():
            loc = ".".join(str(p) for p in item["loc"])
            if item["type"] == "extra_forbidden":
                lines.append(f"{loc}: unknown key (valid here: "
                             f"{', '.join(_fields_at(item['loc']))})")
            else:
                message = item["msg"].replace("Value error, ", "")
                lines.append(message if message.startswith(f"{loc}.") else f"{loc}: {message}")
        raise ConfigError(f"invalid sweep file {path}:\n  " + "\n  ".join(lines)) from None

    base: dict[str, Any] = {}
    if spec.base:
        base_path = (path.parent / spec.base)
        if not base_path.is_file():
            raise ConfigError(f"sweep file {path}: base {spec.base!r} does not exist (looked at {base_path})")
        base = read_config_data(base_path, "base config")
    base = apply_overrides(base, [*spec.overrides, *(overrides or [])])
    try:
        parse_config(base)
    except ConfigError as error:
        raise ConfigError(f"sweep file {path}: base config: {_reason(error)}") from None
    first = None
    for point in grid_points(spec.grid):
        try:
            config = parse_config(trial_data(base, point))
        except ConfigError as error:
            # Name the axis value that fails on the base config alone, else the combination.
            for key, value in point.items():
                try:
                    parse_config(trial_data(base, {key: value}))
                except ConfigError as alone:
                    raise ConfigError(f"sweep file {path}: grid.{key} = {value!r}: {_reason(alone)}") from None
            raise ConfigError(f"sweep file {path}: grid point {point}: {_reason(error)}") from None
        first = first or config
    return Sweep(spec, base, first, path)


def _fields_at(loc: tuple) -> list[str]:
    model: type[BaseModel] = SweepSpec
    for part in loc[:-1]:
        annotation = model.model_fields[part].annotation if part in model.model_fields else None
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            model = annotation
    return list(model.model_fields)


def is_variant_axis(key: str) -> bool:
    """Whether a grid key is a variant axis (no dot: its values are mappings of dotted keys set together)."""
    return "." not in key


def grid_points(grid: dict[str, list[Any]]) -> list[dict[str, Any]]:
    """Every combination of the grid's values (a variant axis contributes one mapping per point)."""
    return [dict(zip(grid, combo, strict=True)) for combo in itertools.product(*grid.values())]


def _is_recipe_value(key: str, value: Any) -> bool:
    return is_variant_axis(key) and isinstance(value, dict) and RECIPE in value


def assignments(point: dict[str, Any], recipes: bool = True) -> list[tuple[str, Any]]:
    """The (dotted config key, value) pairs a grid point sets, variant axes expanded in order; a recipe's
    first (the other axes win over it), or none of its keys without `recipes`."""
    ordered = sorted(point.items(), key=lambda item: not _is_recipe_value(*item))
    return [pair for key, value in ordered if recipes or not _is_recipe_value(key, value)
            for pair in (value.items() if is_variant_axis(key) else [(key, value)]) if pair[0] not in (LABEL, RECIPE)]


def trial_data(base: dict[str, Any], point: dict[str, Any]) -> dict[str, Any]:
    """The base config with one grid point applied."""
    data = copy.deepcopy(base)
    for key, value in assignments(point):
        _set(data, key, value)
    return data


def _label_value(value: Any) -> str:
    if isinstance(value, bool):
        return str(value).lower()  # as written in YAML
    if isinstance(value, list) and value and all(isinstance(g, dict) and "name" in g for g in value):
        # env.gyms: names (and levels), not the entries' dicts
        return "+".join(g["name"] + (":" + "/".join(map(str, g["difficulty"])) if g.get("difficulty") else "")
                        for g in value)
    return str(value)


def trial_label(point: dict[str, Any]) -> str:
    """Readable trial name from its grid values (leaf key names unless two collide; a labelled variant by its
    label)."""
    labelled = {key: value[LABEL] for key, value in point.items() if is_variant_axis(key) and LABEL in value}
    pairs = [*((key, label) for key, label in labelled.items()),
             *assignments({key: value for key, value in point.items() if key not in labelled})]
    leaves = [key.rsplit(".", 1)[-1] for key, _ in pairs]
    return ",".join(f"{leaf if leaves.count(leaf) == 1 else key}={_label_value(value)}"
                    for (key, value), leaf in zip(pairs, leaves, strict=True))


def latest_checkpoint(run_dir: Path) -> Path | None:
    """The newest complete userrl checkpoint of a run folder (a `*.tmp` one is half-written)."""
    latest = latest_complete(checkpoints_dir(run_dir))
    return latest.path if latest else None


def trial_cpus(config: UserRLConfig) -> float:
    """CPUs a trial takes besides its learners: its driver, policy replicas, env runners, user replicas."""
    from userrl.cluster import run_cpus

    return _ray_units(run_cpus(config, _DRIVER_CPU, learners=False))


def _ray_units(cpus: float) -> float:
    """Round up to Ray's resource granularity (1e-4): 0.2 + 0.5 + 0.1 - 0.2 is 0.5999..., and Ray would
    truncate that bundle below the 0.6 its actors need, leaving one pending forever."""
    return math.ceil(round(cpus * 10_000, 6)) / 10_000


def _short_error(error: BaseException | None) -> str:
    if error is None:
        return ""
    lines = [line.strip() for line in str(error).strip().splitlines() if line.strip()]
    for line in reversed(lines):  # the innermost exception line of a Ray/Tune traceback
        if re.match(r"^[A-Za-z_.]*(Error|Exception)\b", line):
            return line[:300]
    return (lines[-1] if lines else type(error).__name__)[:300]


# --- the trainable (runs in a Tune trial actor) ---------------------------------------------------

def run_trial(trial: dict[str, Any], setup: dict[str, Any]) -> None:
    """Tune function trainable: one GRPO-multiturn run with this trial's grid values.

    `trial` is Tune's config (just the grid point); `setup` is the sweep's saved `sweep.json` (base
    config, run folders, MLflow store), kept out of the param space so Tune's tables stay readable.
    """
    from ray import tune

    from userrl.tracking import MLflowTracker
    from userrl.trainer import Trainer

    context = tune.get_context()
    trial_id, point = context.get_trial_id(), trial["grid"]
    label = trial_label(point)
    data = trial_data(setup["base"], point)
    _set(data, "experiment.name", trial_id)
    _set(data, "experiment.output_dir", setup["runs_root"])
    _set(data, "tracking.experiment", setup["sweep"])
    _set(data, "tracking.mlflow_uri", setup["mlflow_uri"])
    config = parse_config(data)
    run_dir = config.run_dir
    resume = latest_checkpoint(run_dir)
    if resume is not None:
        config.checkpointing.resume_from = str(resume)
    run_id_file = run_dir / RUN_ID_FILE
    run_id = run_id_file.read_text().strip() if run_id_file.is_file() else None

    algo = Trainer(config)
    try:
        tags = {"sweep": setup["sweep"], "sweep.trial_id": trial_id, "sweep.label": label,
                **{f"sweep.{key}": str(value) for key, value in assignments(point, recipes=False)},
                **{f"sweep.{axis}": value[LABEL] for axis, value in point.items()
                   if is_variant_axis(axis) and LABEL in value}}
        tracker = MLflowTracker(config, run_name=label, tags=tags, run_id=run_id)
        if run_id is None:
            run_dir.mkdir(parents=True, exist_ok=True)
            write_atomic(run_id_file, lambda tmp: tmp.write_text(tracker.run_id))
        if resume is not None:
            print(f"[{label}] resuming from {resume}")

        def report(result: dict[str, Any]) -> None:
            if result["phase"] != "rl":
                return
            metrics = {k: v for k, v in result.items() if isinstance(v, int | float) and not isinstance(v, bool)}
            print(f"[{label}] iter {result['iteration']}  reward {result['rollout/reward_mean']:.3f}  "
                  f"success {result['rollout/success_rate']:.2f}  valid {result['rollout/valid_action_rate']:.2f}")
            tune.report({**metrics, "mlflow_run_id": tracker.run_id, "run_dir": str(run_dir),
                         "checkpoint": result.get("checkpoint") or ""})

        algo.fit(on_result=report, tracker=tracker)
    finally:
        algo.stop()


# --- the driver -------------------------------------------------------------------------------------

def _init_ray(sweep: Sweep) -> None:
    import ray

    from userrl.cluster import check_ray_address, job_env_vars, run_cpus

    if ray.is_initialized():
        return
    config = sweep.config
    runtime_env = {"env_vars": job_env_vars()}
    address = config.ray.address or os.environ.get("RAY_ADDRESS")
    quiet = ray.LoggingConfig(encoding="TEXT", log_level="WARNING")
    if address:
        check_ray_address(address)
        ray.init(address=address, logging_config=quiet, runtime_env=runtime_env)
        return
    per_trial = _ray_units(run_cpus(config, _DRIVER_CPU))
    needed = math.ceil(per_trial * min(sweep.spec.tune.max_concurrent_trials, len(grid_points(sweep.spec.grid))))
    ray.init(num_cpus=config.ray.num_cpus or max(os.cpu_count() or 1, needed + 1), logging_config=quiet,
             runtime_env=runtime_env)


def _resources(sweep: Sweep) -> Any:
    """The trial's placement group: the trial actor, then the actors it starts (captured in the group).

    The learners are a Ray Train worker group with a placement group of their own (`learners.*`).
    """
    from ray import tune

    resources = sweep.spec.tune.resources_per_trial
    # The largest trial's: the trials of a grid of recipes may differ in runners and replicas.
    configs = [parse_config(trial_data(sweep.base, point)) for point in grid_points(sweep.spec.grid)]
    needed = max(trial_cpus(config) for config in configs)
    cpu = resources.cpu if resources.cpu is not None else needed
    if cpu < needed - 1e-9:
        raise ConfigError(f"tune.resources_per_trial.cpu={cpu} is less than the trial's driver, replicas and env "
                          f"runners take ({needed:g}); raise it or leave it null")
    rest: dict[str, float] = {"CPU": _ray_units(cpu - _DRIVER_CPU)}
    gpu_needed = max(c.policy.num_replicas * c.policy.num_gpus_per_replica for c in configs)
    gpu = resources.gpu if resources.gpu is not None else gpu_needed
    if gpu < gpu_needed - 1e-9:
        raise ConfigError(f"tune.resources_per_trial.gpu={gpu} is less than the policy replicas take "
                          f"({gpu_needed:g}); raise it or leave it null")
    if gpu:
        rest["GPU"] = _ray_units(gpu)
    return tune.PlacementGroupFactory([{"CPU": _DRIVER_CPU}, rest])


def _mlflow_uri(sweep: Sweep) -> str:
    from mlflow import MlflowClient

    from userrl.tracking import ensure_experiment

    uri = sweep.config.mlflow_uri()  # resolved here: trials run with another working directory
    if uri.startswith("sqlite:///"):
        Path(uri.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
    ensure_experiment(MlflowClient(uri), sweep.spec.name)  # creates the store once, before trials race for it
    return uri


def _save_setup(sweep: Sweep, uri: str) -> dict[str, Any]:
    """Write `sweep.json` (what every trial needs besides its grid point) into the Tune folder."""
    setup = {"sweep": sweep.spec.name, "base": sweep.base, "runs_root": str(sweep.runs_root), "mlflow_uri": uri,
             "grid": sweep.spec.grid, "trials": len(grid_points(sweep.spec.grid)) * sweep.spec.tune.num_samples}
    sweep.tune_dir.mkdir(parents=True, exist_ok=True)
    write_atomic(sweep.tune_dir / "sweep.json", lambda tmp: tmp.write_text(json.dumps(setup, indent=1)))
    return setup


def param_space(spec: SweepSpec) -> dict[str, Any]:
    """Tune's param space: one grid_search per axis (a variant axis searches over its mappings)."""
    from ray import tune

    return {"grid": {key: tune.grid_search(values) for key, values in spec.grid.items()}}


def run_sweep(sweep: Sweep, resume: bool, console: Console) -> tuple[Any, dict[str, Any]]:
    """Run (or resume) the Tune experiment; returns Tune's ResultGrid and the sweep's saved setup."""
    from ray import tune

    spec = sweep.spec
    restorable = tune.Tuner.can_restore(str(sweep.tune_dir))
    if resume and not restorable:
        raise ConfigError(f"nothing to resume: no Tune experiment at {sweep.tune_dir} "
                          f"(run `userrl sweep {sweep.source}` first)")
    if not resume and restorable:
        raise ConfigError(f"sweep folder {sweep.tune_dir} already holds this sweep: pass --resume to continue "
                          "it, or remove the folder (or change `name`) to start over")
    if resume:  # the trials keep the setup they began with, whatever the sweep file says now
        setup = json.loads((sweep.tune_dir / "sweep.json").read_text())
        trainable = tune.with_resources(tune.with_parameters(run_trial, setup=setup), _resources(sweep))
        _init_ray(sweep)
        console.print(f"resuming sweep [bold]{spec.name}[/] from {sweep.tune_dir}")
        return tune.Tuner.restore(str(sweep.tune_dir), trainable, resume_errored=True).fit(), setup
    resources = _resources(sweep)  # checked before anything is written
    setup = _save_setup(sweep, _mlflow_uri(sweep))
    trainable = tune.with_resources(tune.with_parameters(run_trial, setup=setup), resources)
    _init_ray(sweep)
    points = grid_points(spec.grid)
    console.print(f"sweep [bold]{spec.name}[/]: {len(points) * spec.tune.num_samples} trials, "
                  f"{spec.tune.max_concurrent_trials} at a time; Tune folder {sweep.tune_dir}; "
                  f"MLflow experiment '{spec.name}' in {setup['mlflow_uri']}")
    tuner = tune.Tuner(
        trainable, param_space=param_space(spec),
        tune_config=tune.TuneConfig(num_samples=spec.tune.num_samples,
                                    max_concurrent_trials=spec.tune.max_concurrent_trials),
        run_config=tune.RunConfig(name=spec.name, storage_path=str(sweep.storage), verbose=1,
                                  failure_config=tune.FailureConfig(max_failures=spec.tune.max_failures)))
    return tuner.fit(), setup


def _best(result: Any, metric: str, mode: str) -> float | None:
    frame = result.metrics_dataframe
    if frame is None or metric not in frame:
        return None
    values = frame[metric].dropna()
    if values.empty:
        return None
    return float(values.max() if mode == "max" else values.min())


def trial_status(result: Any, iterations: int) -> str:
    """A trial's status from Tune's public Result: ERROR (it raised), TERMINATED (it reported all its
    `iterations`; where they are not known (0), Tune marked it `done`), PENDING (it never reported), else
    INTERRUPTED."""
    if result.error:
        return "ERROR"
    metrics = result.metrics or {}
    reached = metrics.get("iteration")
    if reached is None:
        return "PENDING"
    # The iteration count decides, not `done`: a trial Tune stopped early (Ctrl-C) may be marked done, and Tune's
    # saved state keeps a finished trial's last result with done=False, which is what a trial restored by
    # --resume shows. A trial's last report comes after its last checkpoint, so all iterations reported is done.
    finished = reached == iterations if iterations else bool(metrics.get("done"))
    return "TERMINATED" if finished else "INTERRUPTED"


def summarize(grid: Any, spec: SweepSpec, setup: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per trial of Tune's ResultGrid: grid values, status, iterations, final and best metric, error."""
    rows = []
    for result in grid:
        metrics = result.metrics or {}
        point = result.config.get("grid", {})
        iterations = parse_config(trial_data(setup["base"], point)).training.iterations if point else 0
        rows.append({"trial": metrics.get("trial_id") or result.path.rsplit("/", 1)[-1], "params": point,
                     "status": trial_status(result, iterations), "iterations": metrics.get("iteration"),
                     "final": metrics.get(spec.tune.metric), "best": _best(result, spec.tune.metric, spec.tune.mode),
                     "success": metrics.get("rollout/success_rate"),
                     "valid": metrics.get("rollout/valid_action_rate"),
                     "eval": metrics.get("eval/reward_mean"), "seconds": metrics.get("time_total_s"),
                     "mlflow_run_id": metrics.get("mlflow_run_id"), "error": _short_error(result.error)})
    return rows


def print_table(rows: list[dict[str, Any]], spec: SweepSpec, console: Console) -> None:
    """The comparison table (rich)."""
    def fmt(value: Any, digits: int = 3) -> str:
        return "-" if value is None else f"{value:.{digits}f}" if isinstance(value, float) else str(value)

    table = Table(title=f"sweep {spec.name}: {spec.tune.metric} ({spec.tune.mode})")
    keys = list(spec.grid)
    for key in keys:  # a variant axis: its name, and cells like adv_estimator=gae,mask_obs=false
        table.add_column(key.rsplit(".", 1)[-1])
    for name in ("status", "iters", "final", "best", "success", "valid", "eval reward", "time s", "MLflow run"):
        table.add_column(name, justify="right" if name not in ("status", "MLflow run") else "left")
    order = sorted(rows, key=lambda r: (r["final"] is None, -(r["final"] or 0) if spec.tune.mode == "max"
                                        else (r["final"] or 0)))
    for row in order:
        style = "red" if row["status"] == "ERROR" else None
        cells = ["-" if k not in row["params"] else trial_label({k: row["params"][k]}) if is_variant_axis(k)
                 else _label_value(row["params"][k]) for k in keys]
        table.add_row(*cells, row["status"], fmt(row["iterations"]),
                      fmt(row["final"]), fmt(row["best"]), fmt(row["success"], 2), fmt(row["valid"], 2),
                      fmt(row["eval"]), fmt(row["seconds"], 0), (row["mlflow_run_id"] or "-")[:12], style=style)
    # Piped output defaults to 80 columns, too narrow for a dozen columns: render it wider then.
    wide = console if console.is_terminal else Console(file=console.file, width=max(console.width, 150))
    wide.print(table)
    for row in rows:
        if row["error"]:
            console.print(f"[red]failed[/] {trial_label(row['params'])}: {row['error']}")


def cli_sweep(args: Any, console: Console) -> int:
    """`userrl sweep FILE [overrides] [--only AXIS=I,J] [--name N] [--resume]`: 0 when every trial finished."""
    sweep = load_sweep(args.sweep_file, args.overrides, only=args.only, name=args.name)
    if args.resume and args.overrides:
        console.print("[yellow]note:[/] overrides are ignored with --resume (trials keep the configs they began with)")
    grid, setup = run_sweep(sweep, args.resume, console)
    spec = sweep.spec
    rows = summarize(grid, spec, setup)
    print_table(rows, spec, console)
    scored = [r for r in rows if r["final"] is not None and r["status"] != "ERROR"]
    if scored:
        best = grid.get_best_result(metric=spec.tune.metric, mode=spec.tune.mode, scope=spec.tune.scope,
                                    filter_nan_and_inf=True)
        console.print(f"[green]best[/] ({spec.tune.metric}, {spec.tune.mode}, scope {spec.tune.scope}): "
                      f"{trial_label(best.config['grid'])}  ->  {best.metrics.get(spec.tune.metric):.4f}")
        for key, value in assignments(best.config["grid"], recipes=False):
            console.print(f"  {key}={value}")
    uri = setup["mlflow_uri"]
    console.print(f"MLflow experiment '{spec.name}' in {uri}  "
                  f"(report: userrl report --experiment {spec.name} --tracking-uri {uri})")
    # Trials Tune never created (an interrupted sweep) count as unfinished too.
    expected = max(setup.get("trials", len(rows)), len(rows))
    unfinished = expected - sum(r["status"] == "TERMINATED" for r in rows)
    if unfinished:
        console.print(f"[red]{unfinished} of {expected} trials did not finish[/]; resume with "
                      f"`userrl sweep {sweep.source} --resume` (errored trials restart from their latest checkpoint)")
        return 1
    return 0
