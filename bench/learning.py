"""Learning benchmark: held-out success of GRPO-multiturn under each turn credit, through `userrl sweep`.

The sweep `experiments/sweeps/learning.yaml` (base `experiments/learning.yaml`: FunctionGym levels 0-2 and
TelepathyGym with scripted simulated users, SmolLM2-135M, bracket protocol) runs one trial per turn credit
(equalized, r2g, em) with the same seed. This script

1. builds ONE supervised warm start shared by the trials (`--warm-start shared`, the default): solver
   demonstrations drawn evenly from every gym entry of the config (the gyms' own solvers, seeded), written
   as JSONL, then `userrl sft ... sft.source=file`; the trials get `sft.enabled=false policy.model=<it>`,
   so they start from the same weights and differ only in credit;
2. runs `userrl sweep` (the trials one at a time; each evaluates greedily on the held-out test tasks
   before RL and every `evaluation.interval` iterations);
3. runs `userrl report` on the sweep's MLflow experiment (tables, CSVs and the PNG learning curves);
4. prints, per credit, the held-out success at each evaluation with n and a 95% Wilson interval, final and
   best, the rollout success and the wall time, read back from the report's `history.csv`/`runs.csv`, and
   draws them in one more PNG (`bench_heldout_success.png` in the report folder).

With `--sft-only`, after the sweep: the best SFT-only agent given the same wall time (the warm start's minutes
plus the trials' mean, as MLflow counts them), trained by `userrl train` with 0 iterations on as many
grounded demonstrations and epochs as that time buys at the warm start's speed, and evaluated on the same
held-out tasks: RL against imitation at equal time (issue 34). `--credits equalized` runs one trial.

Every command is printed before it runs. The real run (about 55 min on 2 cores, estimated; run it alone):

    .venv/bin/python bench/learning.py

A smoke run of the whole path (tiny random model, a few minutes):

    .venv/bin/python bench/learning.py --output-dir runs/learning-smoke --model tiny-random --iterations 2 \
        --eval-every 1 --eval-tasks 2 --batch-size 2 --group-size 2 --sft-episodes 8
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import shlex
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SWEEP_FILE = ROOT / "experiments" / "sweeps" / "learning.yaml"
WARM_START_NAME = "warm_start"


def userrl_script() -> str:
    """The `userrl` console script of this interpreter's environment."""
    script = Path(sys.executable).parent / "userrl"
    return str(script) if script.is_file() else "userrl"


def run_command(cmd: list[str], what: str, extra_env: dict[str, str] | None = None) -> tuple[int, float]:
    """Print and run a command from the repository root (with `extra_env` set where unset); returns (exit
    status, seconds)."""
    print(f"\n$ {shlex.join(cmd)}", flush=True)
    env = dict(os.environ)
    env.setdefault("RAY_AUTH_MODE", "disabled")  # a fresh local Ray needs no token (as `make quickstart`)
    for key, value in (extra_env or {}).items():
        env.setdefault(key, value)
    start = time.perf_counter()
    rc = subprocess.run(cmd, cwd=ROOT, env=env, check=False).returncode
    seconds = time.perf_counter() - start
    print(f"[bench] {what}: exit status {rc}, {seconds / 60:.1f} min", flush=True)
    return rc, seconds


# --- 1. the shared warm start ---------------------------------------------------------------------------

def write_demonstrations(config: Any, episodes: int, path: Path, all_there_are: bool = False) -> dict[str, int]:
    """Solver demonstrations drawn round-robin from every gym entry (each entry's train tasks shuffled
    with the experiment seed), as JSONL {"messages": [...]}; returns the count per entry. Fewer than
    `episodes` grounded ones is an error, unless `all_there_are`: then it writes every one there is.

    Each is `userrl.sft.solver_demonstrations` on one task (the product's own solver path and filters: a
    task its solver cannot ground, or whose plan earns nothing, gives none). `sft.source: solver` takes the
    tasks in file order instead (Function's train split is sorted by level, so the first entry would fill
    every demonstration).
    """
    import numpy as np
    from transformers import AutoTokenizer

    from userrl.chat import ChatFormat
    from userrl.checkpoint import write_atomic
    from userrl.envs import load_tasks
    from userrl.models import resolve_model
    from userrl.sft import solver_demonstrations

    tokenizer = AutoTokenizer.from_pretrained(resolve_model(config.policy.model))
    chat = ChatFormat(tokenizer, config.env.protocol)
    rng = np.random.default_rng(config.experiment.seed)
    entries = []
    for spec in config.env.gyms:
        filters = {"difficulty": spec.difficulty} if spec.difficulty is not None else {}
        tasks = load_tasks(spec.name, split=spec.split, source=spec.source, data_root=config.env.data_root, **filters)
        order = rng.permutation(len(tasks))
        label = spec.name + (f" {spec.difficulty}" if spec.difficulty is not None else "")
        entries.append((label, [tasks[i] for i in order], {spec.name: spec.kwargs}))
    counts: dict[str, int] = defaultdict(int)
    lines, longest, position = [], 0, 0
    while len(lines) < episodes:
        progressed = False
        for label, tasks, kwargs in entries:
            if len(lines) >= episodes or position >= len(tasks):
                continue
            progressed = True
            try:
                (demo,) = solver_demonstrations([tasks[position]], chat, 1, seed=config.experiment.seed + len(lines),
                                                max_turns=config.env.max_turns, env_kwargs=kwargs)
            except ValueError:  # this task has no grounded, rewarded demonstration
                continue
            lines.append(json.dumps({"messages": demo.messages}))
            longest = max([longest, *(len(tokenizer(m["content"]).input_ids) for m in demo.messages
                                      if m["role"] == "assistant")])
            counts[label] += 1
        position += 1
        if not progressed and all_there_are:
            print(f"[bench] every grounded demonstration of the train tasks: {len(lines)} (asked {episodes})")
            break
        if not progressed:
            raise SystemExit(f"only {len(lines)} grounded demonstrations in the configured gyms (asked {episodes})")
    if longest > config.policy.max_new_tokens:
        print(f"[bench] warning: a demonstrated assistant turn has {longest} tokens (+ end of turn), more than "
              f"policy.max_new_tokens={config.policy.max_new_tokens}: the policy cannot write such turns whole")
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, lambda tmp: tmp.write_text("\n".join(lines) + "\n"))
    return dict(counts)


def warm_start(args: argparse.Namespace, sweep: Any, common: list[str]) -> Path:
    """Build (or reuse) the shared warm start; returns its model folder."""
    from userrl.checkpoint import Checkpoint

    config = sweep.config
    out = Path(config.experiment.output_dir).resolve() / f"{sweep.spec.name}_{WARM_START_NAME}"
    warm = Checkpoint.of_run(out, 0)  # `userrl sft` writes the warm start as iteration 0
    model = warm.model_dir
    # What the warm start depends on (not the RL settings: another --iterations reuses it).
    recipe = {"model": config.policy.model, "seed": config.experiment.seed, "env": config.env.model_dump(mode="json"),
              "sft": config.sft.model_dump(mode="json", exclude={"enabled"}),
              "learners": config.learners.model_dump(mode="json")}
    stamp = out / "bench_recipe.json"
    if warm.is_complete and stamp.is_file():
        if json.loads(stamp.read_text()) == recipe:
            print(f"[bench] reusing the shared warm start {model} (same recipe: {stamp})")
            return model
        raise SystemExit(f"{out} holds a warm start of another recipe ({stamp}); remove that folder or pass "
                         "another --output-dir")
    demos = out / "demonstrations.jsonl"
    if not args.dry_run:
        tick = time.perf_counter()
        counts = write_demonstrations(config, args.sft_episodes, demos)
        print(f"[bench] {sum(counts.values())} solver demonstrations -> {demos} ({time.perf_counter() - tick:.1f} s): "
              + ", ".join(f"{k}: {v}" for k, v in counts.items()))
    base = (sweep.source.parent / sweep.spec.base).resolve()
    base = base.relative_to(ROOT) if base.is_relative_to(ROOT) else base
    cmd = [userrl_script(), "sft", "--config", str(base), *sweep.spec.overrides, *common,
           f"experiment.name={out.name}", f"tracking.experiment={out.name}", "sft.source=file",
           f"sft.path={demos}", "evaluation.interval=0", "checkpointing.every=1"]
    if args.dry_run:
        print(f"\n$ {shlex.join(cmd)}")
        return model
    rc, _ = run_command(cmd, "shared warm start (userrl sft)")
    if rc != 0 or not warm.is_complete:
        raise SystemExit(f"the warm start failed (exit status {rc}); nothing at {model}")
    stamp.write_text(json.dumps(recipe, indent=1))
    return model


# --- the SFT-only arm: the best imitation given the same wall time ---------------------------------------

def mlflow_runs(uri: str, experiment: str) -> tuple[Any, list[Any]]:
    """(the MLflow client, the experiment's runs; none when it does not exist)."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(uri)
    found = client.get_experiment_by_name(experiment)
    return client, client.search_runs([found.experiment_id], max_results=500) if found else []


def run_minutes(uri: str, experiment: str) -> dict[str, float]:
    """Each finished MLflow run's minutes (start to end, as `userrl report` counts them), by run name."""
    _, runs = mlflow_runs(uri, experiment)
    return {r.info.run_name: (r.info.end_time - r.info.start_time) / 60000 for r in runs if r.info.end_time}


def sft_only(config: Any, base: Path, out: Path, common: list[str], warm_seconds: float, warm_passes: int,
             budget_s: float, experiment: str, max_episodes: int, name: str = "sft_only") -> int:
    """The best SFT-only agent at the wall time of SFT + RL: more passes over more demonstrations (at most
    `max_episodes` distinct ones), trained by `userrl train` with 0 iterations so that it is evaluated on the
    same held-out tasks as the trials; returns the exit status."""
    per_pass = warm_seconds / warm_passes
    passes = max(warm_passes, int(budget_s / per_pass))
    episodes = min(max_episodes, passes)
    epochs = max(1, round(passes / episodes))
    print(f"[bench] SFT-only: {budget_s / 60:.1f} min at {per_pass:.2f} s per demonstration pass (the warm "
          f"start's) -> {episodes} demonstrations x {epochs} epochs")
    demos = out / f"{name}_demonstrations.jsonl"
    counts = write_demonstrations(config, episodes, demos, all_there_are=True)  # drawn as the warm start's are
    if sum(counts.values()) < episodes:  # fewer demonstrations: more epochs fill the time
        epochs = max(1, round(passes / sum(counts.values())))
    base = base.relative_to(ROOT) if base.is_relative_to(ROOT) else base
    cmd = [userrl_script(), "train", "--config", str(base), *common, "training.iterations=0", "sft.enabled=true",
           "sft.source=file", f"sft.path={demos}", f"sft.episodes={sum(counts.values())}", f"sft.epochs={epochs}",
           f"experiment.name={name}", f"tracking.experiment={experiment}", "checkpointing.every=0"]
    rc, _ = run_command(cmd, "SFT only at the same wall time (userrl train, 0 iterations)")
    return rc


# --- 4. tables from the report's CSVs ---------------------------------------------------------------------

def _read_csv(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as handle:
        return list(csv.DictReader(handle))


def _float(value: str | None) -> float | None:
    try:
        number = float(value) if value not in (None, "") else None
    except ValueError:
        return None
    return None if number is None or math.isnan(number) else number


def curves(report: Path) -> list[dict[str, Any]]:
    """One entry per run: label, status, minutes, and its learning curve (`userrl.curve.learning_curve`)."""
    from userrl.curve import learning_curve

    history: dict[str, dict[int, dict[str, Any]]] = defaultdict(dict)
    for row in _read_csv(report / "history.csv"):
        step = int(row["step"])
        history[row["run_id"]].setdefault(step, {"iteration": step})[row["key"].replace(".", "/", 1)] = float(row["value"])
    runs = []
    for row in _read_csv(report / "runs.csv"):
        steps = history.get(row["run_id"], {})
        results = []
        for step in sorted(steps):
            result = steps[step]
            result["phase"] = "rl" if "rollout/success_rate" in result else "eval"
            results.append(result)
        points = learning_curve(results)
        rollout = [p.rollout_success for p in points if p.rollout_success is not None]
        rewards = [r["rollout/reward_mean"] for r in results if "rollout/reward_mean" in r]
        valid = [r["rollout/valid_action_rate"] for r in results if "rollout/valid_action_rate" in r]
        runs.append({"label": row["label"], "status": row.get("status"), "minutes": _float(row.get("minutes")),
                     "points": points, "rollout_mean": sum(rollout) / len(rollout) if rollout else None,
                     "rollout_last": rollout[-1] if rollout else None,
                     "reward_max": max(rewards) if rewards else None,
                     "valid_mean": sum(valid) / len(valid) if valid else None,
                     # MLflow keys: "eval/reward_mean/function" was logged as "eval.reward_mean.function".
                     "gym_eval": {step: {k.removeprefix("eval/reward_mean."): v for k, v in r.items()
                                         if k.startswith("eval/reward_mean.")} for step, r in steps.items()}})
    return runs


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def print_tables(runs: list[dict[str, Any]]) -> None:
    """Markdown tables (to paste into bench/README.md): one per credit, then the summary."""
    for run in runs:
        gyms = sorted({g for per in run["gym_eval"].values() for g in per})
        print(f"\n### {run['label']}  ({run['status']}, {run['minutes'] or 0:.1f} min)\n")
        head = ["iteration", "held-out success", "n", "95% interval", *(f"eval reward {g}" for g in gyms),
                "rollout success"]
        print("| " + " | ".join(head) + " |")
        print("|" + "---|" * len(head))
        for p in run["points"]:
            if p.heldout_success is None:
                continue
            per = run["gym_eval"].get(p.iteration, {})
            print("| " + " | ".join([str(p.iteration), _pct(p.heldout_success), str(p.heldout_episodes),
                                     f"[{p.heldout_low:.3f}, {p.heldout_high:.3f}]",
                                     *(_pct(per.get(g)) for g in gyms), _pct(p.rollout_success)]) + " |")
    print("\n### Summary (held-out: greedy, test split; rollout: sampled, train tasks)\n")
    head = ["run", "status", "evaluations", "held-out first", "held-out final (95% CI)", "held-out best (iteration)",
            "rollout success mean", "rollout success last", "wall min"]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for run in runs:
        held = [p for p in run["points"] if p.heldout_success is not None]
        first, last = (held[0], held[-1]) if held else (None, None)
        best = max(held, key=lambda p: p.heldout_success) if held else None
        print("| " + " | ".join([
            run["label"], str(run["status"]), str(len(held)), _pct(first and first.heldout_success),
            "-" if last is None else f"{last.heldout_success:.3f} [{last.heldout_low:.3f}, {last.heldout_high:.3f}] "
                                     f"n={last.heldout_episodes} @ {last.iteration}",
            "-" if best is None else f"{best.heldout_success:.3f} ({best.iteration})",
            _pct(run["rollout_mean"]), _pct(run["rollout_last"]),
            "-" if run["minutes"] is None else f"{run['minutes']:.1f}"]) + " |")


def plot_heldout(runs: list[dict[str, Any]], path: Path, title: str) -> Path | None:
    """Held-out success per run with its 95% Wilson band, one line per credit."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    series = [(r["label"], [p for p in r["points"] if p.heldout_success is not None]) for r in runs]
    series = [(label, pts) for label, pts in series if pts]
    if not series:
        return None
    fig, ax = plt.subplots(figsize=(7.0, 4.2))
    for i, (label, pts) in enumerate(series):
        xs = [p.iteration for p in pts]
        ax.fill_between(xs, [p.heldout_low for p in pts], [p.heldout_high for p in pts], color=f"C{i}", alpha=0.12)
        ax.plot(xs, [p.heldout_success for p in pts], color=f"C{i}", marker="o", label=label)
    n = series[0][1][-1].heldout_episodes
    ax.set(xlabel="iteration", ylabel="held-out success (greedy)", ylim=(0, 1),
           title=f"{title}: held-out success, {n} test episodes per evaluation, 95% Wilson bands")
    style_axes(ax, 8)
    return save_figure(fig, path, 120)


def style_axes(ax: Any, legend_size: float) -> None:
    """The benches' look of one panel: a small title, a light grid, a legend."""
    ax.title.set_fontsize(10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=legend_size)


def save_figure(fig: Any, path: Path, dpi: int) -> Path:
    """Lay out, write and close a figure; returns its path."""
    import matplotlib.pyplot as plt

    fig.tight_layout()
    fig.savefig(path, dpi=dpi)
    plt.close(fig)
    return path


# --- driver ----------------------------------------------------------------------------------------------

def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    parser.add_argument("--sweep-file", default=str(SWEEP_FILE.relative_to(ROOT)))
    parser.add_argument("--output-dir", default=None,
                        help="experiment.output_dir of the warm start and the trials (Tune folder, run folders "
                             "and MLflow store); default: the base config's (runs). A smoke run should use its own.")
    parser.add_argument("--report-dir", default=None,
                        help="default reports/<sweep name>, or <output-dir>/report when --output-dir is given")
    parser.add_argument("--model", default=None, help="policy.model of the warm start (default: the config's)")
    parser.add_argument("--iterations", type=int, default=None, help="training.iterations")
    parser.add_argument("--eval-every", type=int, default=None, help="evaluation.interval")
    parser.add_argument("--eval-tasks", type=int, default=None,
                        help="evaluation.num_tasks: the first N test tasks of EACH gym entry")
    parser.add_argument("--batch-size", type=int, default=None, help="training.batch_size (tasks per iteration)")
    parser.add_argument("--group-size", type=int, default=None, help="training.group_size (episodes per task)")
    parser.add_argument("--sft-episodes", type=int, default=None, help="warm-start demonstrations (sft.episodes)")
    parser.add_argument("--warm-start", choices=["shared", "per-trial", "none"], default="shared",
                        help="shared: one `userrl sft` for all trials (default); per-trial: every trial runs the "
                             "config's SFT; none: the trials start from --model as it is")
    parser.add_argument("--credits", default=None,
                        help="comma-separated turn credits of the sweep's grid to run (default: all); needs --output-dir")
    parser.add_argument("--sft-only", action="store_true",
                        help="after the sweep, the best SFT-only agent given the wall time of the warm start plus the "
                             "trials' mean, evaluated on the same held-out tasks (RL against imitation)")
    parser.add_argument("--sft-max-episodes", type=int, default=1000,
                        help="distinct demonstrations of the SFT-only arm, at most (more time buys more epochs)")
    parser.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE", help="more overrides of the base config")
    parser.add_argument("--resume", action="store_true", help="continue an interrupted sweep (`userrl sweep --resume`)")
    parser.add_argument("--report-only", action="store_true", help="skip the warm start and the sweep")
    parser.add_argument("--dry-run", action="store_true", help="print the commands only")
    args = parser.parse_args()

    from userrl.commands.sweep import load_sweep
    from userrl.config import ConfigError

    common = [f"{key}={value}" for key, value in (
        ("experiment.output_dir", args.output_dir), ("policy.model", args.model),
        ("training.iterations", args.iterations), ("evaluation.interval", args.eval_every),
        ("evaluation.num_tasks", args.eval_tasks), ("training.batch_size", args.batch_size),
        ("training.group_size", args.group_size), ("sft.episodes", args.sft_episodes)) if value is not None]
    common += args.set
    sweep_file = ROOT / args.sweep_file
    if args.credits:
        if not args.output_dir:
            parser.error("--credits writes its sweep file into --output-dir: pass one")
        sweep_file = one_sweep_per_credits(sweep_file, [c.strip() for c in args.credits.split(",") if c.strip()],
                                           Path(args.output_dir).resolve())
    try:
        sweep = load_sweep(sweep_file, common)  # validates every override and grid value first
    except ConfigError as error:
        print(error, file=sys.stderr)
        return 2
    config = sweep.config
    args.sft_episodes = config.sft.episodes
    name = sweep.spec.name
    uri = config.mlflow_uri()
    report_dir = Path(args.report_dir or (Path(args.output_dir) / "report" if args.output_dir else Path("reports") / name))
    report_dir = (ROOT / report_dir).resolve() if not report_dir.is_absolute() else report_dir
    ev = config.evaluation
    held_out = sum(len(t) for t in _eval_tasks(config))
    print(f"[bench] sweep {name}: grid {sweep.spec.grid}; {config.training.iterations} iterations of "
          f"{config.training.batch_size} tasks x {config.training.group_size} episodes; held-out evaluation "
          f"every {ev.interval} iterations (and before RL) on {held_out} episodes "
          f"({', '.join(f'{g}: {len(t)}' for g, t in zip(_entry_labels(config), _eval_tasks(config), strict=True))}); "
          f"seed {config.experiment.seed}")

    timings: dict[str, float] = {}
    sweep_rc = 0
    if not args.report_only:
        overrides = list(common)
        if args.warm_start == "shared":
            tick = time.perf_counter()
            model = warm_start(args, sweep, common)
            timings["warm start"] = time.perf_counter() - tick
            overrides += ["sft.enabled=false", f"policy.model={model}"]
        elif args.warm_start == "none":
            overrides += ["sft.enabled=false"]
        source = sweep.source.relative_to(ROOT) if sweep.source.is_relative_to(ROOT) else sweep.source
        cmd = [userrl_script(), "sweep", str(source), *overrides, *(["--resume"] if args.resume else [])]
        if args.dry_run:
            print(f"\n$ {shlex.join(cmd)}")
        else:
            sweep_rc, timings["sweep"] = run_command(cmd, f"sweep {name} (userrl sweep)")
            if args.sft_only and sweep_rc == 0:
                tick = time.perf_counter()
                sweep_rc = run_sft_only(args, sweep, common)
                timings["SFT only"] = time.perf_counter() - tick
    cmd = [userrl_script(), "report", "--experiment", name, "--tracking-uri", uri, "--out", str(report_dir)]
    if args.dry_run:
        print(f"\n$ {shlex.join(cmd)}")
        return 0
    rc, timings["report"] = run_command(cmd, "report (userrl report)")
    if rc != 0:
        return rc
    order = [str(v) for v in sweep.spec.grid.get("training.turn_credit", [])]
    runs = sorted(curves(report_dir), key=lambda r: next(
        (i for i, credit in enumerate(order) if r["label"].startswith(f"turn_credit={credit}")), len(order)))
    print(f"\n## Learning benchmark: {name}\n")
    print(f"Held-out set per evaluation: {held_out} greedy episodes; n below excludes aborted episodes.")
    expected = len(sweep.spec.grid.get("training.turn_credit", [])) or None
    if expected and len(runs) > expected:
        print(f"[bench] note: MLflow experiment '{name}' holds {len(runs)} runs (earlier sweeps too); "
              "use a fresh --output-dir to compare one sweep's trials only")
    print_tables(runs)
    png = plot_heldout(runs, report_dir / "bench_heldout_success.png", name)
    print("\n[bench] " + ", ".join(f"{k} {v / 60:.1f} min" for k, v in timings.items())
          + f"; total {sum(timings.values()) / 60:.1f} min")
    print(f"[bench] report: {report_dir / 'report.md'}")
    print(f"[bench] PNGs: {', '.join(sorted(p.name for p in report_dir.glob('*.png')))} in {report_dir}"
          + (f" (held-out success with 95% bands: {png.name})" if png else ""))
    print(f"[bench] MLflow: {uri} (experiment '{name}'); Tune folder {sweep.tune_dir}; trial run folders "
          f"{sweep.runs_root}")
    return sweep_rc


def one_sweep_per_credits(source: Path, credits: list[str], out: Path) -> Path:
    """The sweep file restricted to some turn credits, written to `out` (its base made absolute)."""
    import yaml

    spec = yaml.safe_load(source.read_text())
    spec["base"] = str((source.parent / spec["base"]).resolve())
    spec["grid"]["training.turn_credit"] = credits
    out.mkdir(parents=True, exist_ok=True)
    path = out / "sweep.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def run_sft_only(args: argparse.Namespace, sweep: Any, common: list[str]) -> int:
    """The SFT-only arm given the warm start's minutes plus the trials' mean (MLflow's minutes: a run's own
    time, without the processes' start-up); returns its exit status."""
    config = sweep.config
    uri = config.mlflow_uri()
    trials = [m for run, m in run_minutes(uri, sweep.spec.name).items() if run != "sft_only"]
    (warm,) = run_minutes(uri, f"{sweep.spec.name}_{WARM_START_NAME}").values()
    budget = 60 * (warm + sum(trials) / len(trials))
    base = (sweep.source.parent / sweep.spec.base).resolve()
    out = Path(config.experiment.output_dir).resolve() / f"{sweep.spec.name}_{WARM_START_NAME}"
    return sft_only(config, base, out, [*sweep.spec.overrides, *common], 60 * warm,
                    config.sft.episodes * config.sft.epochs, budget, sweep.spec.name, args.sft_max_episodes)


def _entry_labels(config: Any) -> list[str]:
    return [g.name + (f"{g.difficulty}" if g.difficulty is not None else "") for g in config.env.gyms]


def _eval_tasks(config: Any) -> list[list[Any]]:
    """The held-out tasks of each gym entry, exactly as the trainer picks them (`TaskMixture.first`)."""
    from userrl.coordinator import TaskMixture

    mixture = TaskMixture(config, split=config.evaluation.split)
    return [tasks[: config.evaluation.num_tasks] for tasks in mixture.tasks]


if __name__ == "__main__":
    sys.exit(main())
