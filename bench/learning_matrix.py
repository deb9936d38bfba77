"""The learning matrix (issue 34): every gym's recipe, warm start + GRPO-multiturn, against imitation at equal time.

For each gym of `experiments/sweeps/learning_matrix.yaml` (its `gym` axis lists the recipes of
`experiments/learn/`) and each seed, this script runs

1. the gym's trial through `userrl sweep ... experiment.seed=<seed> --only gym=I --name learn_<gym>_s<seed>`:
   the recipe's warm start (grounded solver demonstrations), its GRPO-multiturn iterations against the gym's
   scripted users, greedy held-out evaluations after the warm start and during RL;
2. the best SFT-only agent given the trial's whole wall time (`bench/learning.py`'s arm: as many grounded
   demonstrations and epochs as that time buys at the trial's own warm-start speed), evaluated on the same
   held-out tasks, as the run `sft_only` of the same MLflow experiment;
3. `userrl report` on that experiment (its tables, CSVs and PNGs);

then prints the matrix (one row per gym and seed: the held-out score after the warm start and at the end with
its 95% interval, on the gym's headline metric (`GRADED`: mean return; otherwise success), learned or not, the
SFT-only agent's, RL beyond it by 0.10 or not, valid actions, minutes, the largest rollout reward, and a
measured diagnosis for a gym that did not learn) and draws one panel per gym (`matrix.png` in the report
folder).

A gym and seed whose experiment already holds a finished trial and a finished SFT-only run is read, not run
again, so the matrix fills in over several sittings (`--gyms`), and an interrupted trial resumes from its
checkpoint. Each trial takes at most about 30 min on 2 cores; run one sitting at a time, alone:

    .venv/bin/python bench/learning_matrix.py --gyms telepathy,frozenlake      # two rows
    .venv/bin/python bench/learning_matrix.py --seeds 0,1,2                     # every gym, three seeds
    .venv/bin/python bench/learning_matrix.py --report-only                     # the table of what has run
    .venv/bin/python bench/learning_matrix.py --gyms intention --seeds 0,1,2 --data-root ../shared/userrl-data
                                  # + the original test split's 40 tasks, held out (learn_intention_s<seed>_orig)

A smoke run of the whole path (tiny random model, a few minutes):

    .venv/bin/python bench/learning_matrix.py --output-dir runs/matrix-smoke --gyms telepathy \\
        --set policy.model=tiny-random training.iterations=1 evaluation.interval=1 evaluation.num_tasks=2 \\
        training.batch_size=2 training.group_size=2 sft.episodes=4
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import learning  # noqa: E402  (bench/learning.py: commands, the SFT-only arm, the report's curves)

ROOT = learning.ROOT
SWEEP_FILE = ROOT / "experiments" / "sweeps" / "learning_matrix.yaml"
SFT_ONLY = "sft_only"
LEARNED_BY = 0.10  # issue 34: RL beyond imitation = 0.10 or more above the best SFT-only agent
#: Gyms whose episode return is graded, not 0/1 (GYMS §0.10's table): the matrix judges them on the held-out mean
#: return (the papers' headline metric, with a t interval), since an agent earns most of it without the
#: terminating success (an Intention agent that covers every detail but never finishes succeeds 0 times).
#: The others are judged on held-out success (= mean return for a 0/1 return), with a Wilson interval.
GRADED = frozenset({"intention", "persuade", "turtle", "travel"})
METRIC = {True: "mean return", False: "success"}
#: Gyms whose builtin test split holds fewer than 48 tasks (the issue's floor) and the size of the original
#: UserRL test split (docs/spec/GYMS.md §0.3's `alltest`): with --data-root, a cell also evaluates on it.
ORIGINAL_TEST_TASKS = {"intention": 40, "persuade": 42, "turtle": 48}


@dataclass
class Cell:
    """One gym and seed of the matrix: its sweep's name, the recipe's position on the grid and its config."""

    gym: str
    seed: int
    position: int
    config: Any
    overrides: tuple[str, ...] = ()  # this cell's own, over the recipe: the held-out original test split

    @property
    def name(self) -> str:
        return f"learn_{self.gym}_s{self.seed}" + ("_orig" if self.overrides else "")


def held_out_originals(config: Any, gym: str, data_root: Path | None) -> list[str]:
    """Overrides that add the original UserRL test split to a recipe's evaluation, held out (weight 0: never
    drawn, never demonstrated), where the builtin split is below 48 tasks and the data is there; else none."""
    if data_root is None or gym not in ORIGINAL_TEST_TASKS:
        return []
    gyms = [{"name": spec.name, **spec.model_dump(mode="json", exclude_defaults=True)} for spec in config.env.gyms]
    gyms.append({"name": gym, "source": "userrl", "weight": 0})
    return [f"env.data_root={data_root}", f"env.gyms={json.dumps(gyms)}",
            f"evaluation.num_tasks={max(config.evaluation.num_tasks, ORIGINAL_TEST_TASKS[gym])}"]


def cells(gyms: list[str] | None, seeds: list[int], common: list[str], data_root: Path | None = None) -> list[Cell]:
    """The matrix's cells in the sweep file's order (the recipes' labels), each with its trial's config (and,
    with `data_root`, the original test split held out: `held_out_originals`)."""
    from userrl.commands.sweep import LABEL, load_sweep

    labels = [variant[LABEL] for variant in load_sweep(SWEEP_FILE, common).spec.grid["gym"]]
    unknown = sorted(set(gyms or []) - set(labels))
    if unknown:
        raise SystemExit(f"--gyms: no recipe {', '.join(unknown)} in {SWEEP_FILE.name}; known: {', '.join(labels)}")
    out = []
    for position, gym in enumerate(labels, start=1):
        if gyms and gym not in gyms:
            continue
        for seed in seeds:
            sweep = load_sweep(SWEEP_FILE, [*common, f"experiment.seed={seed}"], only=[f"gym={position}"])
            extra = held_out_originals(sweep.config, gym, data_root)
            if extra:
                sweep = load_sweep(SWEEP_FILE, [*common, f"experiment.seed={seed}", *extra], only=[f"gym={position}"])
            out.append(Cell(gym, seed, position, sweep.config, tuple(extra)))
    return out


def finished(uri: str, experiment: str) -> set[str]:
    """The names of an MLflow experiment's finished runs."""
    _, runs = learning.mlflow_runs(uri, experiment)
    return {r.info.run_name for r in runs if r.info.status == "FINISHED"}


def run_trial(cell: Cell, common: list[str], dry_run: bool) -> int:
    """The gym's trial through `userrl sweep` (resumed where its Tune folder holds an interrupted one)."""
    tune_dir = Path(cell.config.experiment.output_dir).resolve() / "sweeps" / cell.name
    cmd = [learning.userrl_script(), "sweep", str(SWEEP_FILE.relative_to(ROOT)), f"experiment.seed={cell.seed}",
           *common, *cell.overrides, "--only", f"gym={cell.position}", "--name", cell.name, *(["--resume"] if tune_dir.is_dir() else [])]
    if dry_run:
        print(f"\n$ {shlex.join(cmd)}")
        return 0
    rc, _ = learning.run_command(cmd, f"{cell.name} (userrl sweep)")
    return rc


def warm_start_seconds(uri: str, cell: Cell) -> float:
    """The trial's warm start in seconds: its SFT steps' own times, as the trial logged them."""
    client, runs = learning.mlflow_runs(uri, cell.name)
    trial = next(r for r in runs if r.info.run_name != SFT_ONLY and r.info.status == "FINISHED")
    return sum(m.value for m in client.get_metric_history(trial.info.run_id, "time.sft_step_s"))


def run_sft_only(cell: Cell, common: list[str], max_episodes: int) -> int:
    """The best SFT-only agent given the trial's wall time, as run `sft_only` of the cell's experiment."""
    uri = cell.config.mlflow_uri()
    trial_minutes = [m for run, m in learning.run_minutes(uri, cell.name).items() if run != SFT_ONLY]
    recipe = ROOT / "experiments" / "learn" / f"{cell.gym}.yaml"
    out = Path(cell.config.experiment.output_dir).resolve() / cell.name
    sft = cell.config.sft
    return learning.sft_only(cell.config, recipe, out, [f"experiment.seed={cell.seed}", *common, *cell.overrides],
                             warm_start_seconds(uri, cell), sft.episodes * sft.epochs, 60 * max(trial_minutes),
                             cell.name, max_episodes, name=SFT_ONLY)


# --- the table and the figure ---------------------------------------------------------------------------

@dataclass(frozen=True)
class Score:
    """A held-out evaluation on the gym's headline metric, with its 95% interval."""

    iteration: int
    value: float
    low: float
    high: float
    episodes: int


def score(point: Any, gym: str) -> Score | None:
    """The point's held-out score on the gym's headline metric (`GRADED`: mean return; else success)."""
    if gym in GRADED:
        if point.heldout_reward is None:
            return None
        return Score(point.iteration, point.heldout_reward, max(point.heldout_reward_low, 0.0),
                     point.heldout_reward_high, point.heldout_episodes)
    if point.heldout_success is None:
        return None
    return Score(point.iteration, point.heldout_success, point.heldout_low, point.heldout_high,
                 point.heldout_episodes)


def row(cell: Cell, runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The matrix row of one cell from its report's curves (the trial's and the SFT-only run's)."""
    # An arm stopped and run again: its finished run (`userrl report` labels runs of one name "name (id)").
    runs = [r for r in runs if r.get("status") in (None, "FINISHED")]
    imitation = next((r for r in runs if r["label"].split(" (")[0] == SFT_ONLY), None)
    trial = next((r for r in runs if r["label"].split(" (")[0] != SFT_ONLY), None)
    held = [s for s in (score(p, cell.gym) for p in trial["points"]) if s] if trial else []
    sft = next((s for s in (score(p, cell.gym) for p in imitation["points"]) if s), None) if imitation else None
    start, end = (held[0], held[-1]) if len(held) >= 2 else (None, None)
    learned = None if start is None else end.value > start.high
    beyond = None if end is None or sft is None else end.value - sft.value >= LEARNED_BY
    return {"gym": cell.gym, "seed": cell.seed, "metric": METRIC[cell.gym in GRADED], "start": start, "end": end,
            "sft": sft, "learned": learned, "beyond": beyond, "valid": trial and trial["valid_mean"],
            "reward_max": trial and trial["reward_max"], "minutes": trial and trial["minutes"],
            "sft_minutes": imitation and imitation["minutes"], "curve": held,
            "diagnosis": diagnosis(start, end, trial) if learned is False else ""}


def diagnosis(start: Score, end: Score, trial: dict[str, Any]) -> str:
    """Why a trial did not rise above its start's interval, from what it measured."""
    if not trial["reward_max"]:
        return "rollout reward 0 in every iteration: no group had a signal"
    if start.value == 0 and end.value == 0:
        return (f"no held-out score before or after, rollout reward at most {trial['reward_max']:.2f} per "
                "iteration: almost no group had a signal")
    if trial["valid_mean"] is not None and trial["valid_mean"] < 0.5:
        return f"valid actions {trial['valid_mean']:.0%} of the rollout's turns"
    if start.low >= 0.9:
        return "the warm start is at the ceiling"
    if end.value < start.value:
        return f"fell from {start.value:.2f} to {end.value:.2f}"
    return f"inside the start's interval after {end.iteration} iterations (n={end.episodes})"


def _share(point: Score | None, interval: bool = True) -> str:
    if point is None:
        return "-"
    text = f"{point.value:.3f}"
    return f"{text} [{point.low:.2f}, {point.high:.2f}]" if interval else text


def _yes(value: bool | None) -> str:
    return "-" if value is None else "yes" if value else "no"


def print_matrix(rows: list[dict[str, Any]]) -> None:
    """The matrix as a markdown table (bench/README "The learning matrix")."""
    head = ["gym", "seed", "metric", "after the warm start (95% CI)", "end (95% CI)", "n", "learned",
            "best SFT-only at the same time", "RL beyond SFT (+0.10)", "valid actions", "rollout reward max",
            "trial min", "diagnosis"]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for r in rows:
        print("| " + " | ".join([
            r["gym"], str(r["seed"]), r["metric"], _share(r["start"]),
            "-" if r["end"] is None else f"{_share(r['end'])} @ {r['end'].iteration}",
            "-" if r["end"] is None else str(r["end"].episodes), _yes(r["learned"]),
            _share(r["sft"], interval=False), _yes(r["beyond"]),
            "-" if r["valid"] is None else f"{r['valid']:.2f}",
            "-" if r["reward_max"] is None else f"{r['reward_max']:.2f}",
            "-" if r["minutes"] is None else f"{r['minutes']:.1f}", r["diagnosis"]]) + " |")
    done = [r for r in rows if r["learned"] is not None]
    print(f"\n{sum(bool(r['learned']) for r in done)} of {len(done)} trials end above their warm start's interval; "
          f"{sum(bool(r['beyond']) for r in done)} end {LEARNED_BY:.2f} or more above the best SFT-only agent.")


def plot_matrix(rows: list[dict[str, Any]], path: Path) -> Path | None:
    """One panel per gym: each seed's held-out score with its 95% band, the SFT-only agent's as a line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    gyms = list(dict.fromkeys(r["gym"] for r in rows if r["curve"]))
    if not gyms:
        return None
    columns = min(5, len(gyms))
    lines = -(-len(gyms) // columns)
    fig, axes = plt.subplots(lines, columns, figsize=(3.2 * columns, 2.8 * lines), squeeze=False)
    for ax, gym in zip(axes.flat, gyms, strict=False):
        for i, r in enumerate(r for r in rows if r["gym"] == gym and r["curve"]):
            xs = [p.iteration for p in r["curve"]]
            ax.fill_between(xs, [p.low for p in r["curve"]], [p.high for p in r["curve"]], color=f"C{i}", alpha=0.12)
            ax.plot(xs, [p.value for p in r["curve"]], color=f"C{i}", marker="o", label=f"seed {r['seed']}")
            if r["sft"] is not None:
                ax.axhline(r["sft"].value, color=f"C{i}", linestyle="--", linewidth=1,
                           label=f"SFT only, seed {r['seed']}")
        ax.set(title=f"{gym} ({METRIC[gym in GRADED]})", xlabel="iteration", ylim=(0, None))
        learning.style_axes(ax, 6)
    for ax in list(axes.flat)[len(gyms):]:
        ax.axis("off")
    axes[0][0].set_ylabel("held-out score (greedy)")
    return learning.save_figure(fig, path, 110)


# --- driver ----------------------------------------------------------------------------------------------

def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    parser.add_argument("--gyms", default=None, help="comma-separated recipe names (default: every recipe)")
    parser.add_argument("--seeds", default="0", help="comma-separated experiment seeds (default 0)")
    parser.add_argument("--output-dir", default=None,
                        help="experiment.output_dir (Tune folders, run folders, MLflow store); default the recipes' (runs)")
    parser.add_argument("--report-dir", default=None, help="default <output dir>/reports/learning_matrix")
    parser.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE", help="overrides of every recipe")
    parser.add_argument("--data-root", default=None, type=Path,
                        help="the original UserRL data (e.g. ../shared/userrl-data): Intention, Persuade and Turtle "
                             "are also evaluated on its test split, held out (experiments learn_<gym>_s<seed>_orig)")
    parser.add_argument("--no-sft-only", action="store_true", help="skip the SFT-only arms")
    parser.add_argument("--sft-max-episodes", type=int, default=1000,
                        help="distinct demonstrations of an SFT-only arm, at most (more time buys more epochs)")
    parser.add_argument("--report-only", action="store_true", help="run nothing: read what the store holds")
    parser.add_argument("--dry-run", action="store_true", help="print the trials' commands only")
    args = parser.parse_args()

    from userrl.config import ConfigError

    common = [*([f"experiment.output_dir={args.output_dir}"] if args.output_dir else []), *args.set]
    try:
        matrix = cells([g.strip() for g in args.gyms.split(",")] if args.gyms else None,
                       [int(s) for s in args.seeds.split(",")], common,
                       args.data_root.resolve() if args.data_root else None)
    except ConfigError as error:
        print(error, file=sys.stderr)
        return 2
    uri = matrix[0].config.mlflow_uri()
    output = Path(matrix[0].config.experiment.output_dir).resolve()
    report_root = Path(args.report_dir).resolve() if args.report_dir else output / "reports" / "learning_matrix"
    failed = 0
    rows = []
    for cell in matrix:
        done = set() if args.dry_run else finished(uri, cell.name)
        if not args.report_only and not done - {SFT_ONLY}:
            failed += run_trial(cell, common, args.dry_run) != 0
            done = set() if args.dry_run else finished(uri, cell.name)
        if not args.report_only and not args.no_sft_only and not args.dry_run and done - {SFT_ONLY} \
                and SFT_ONLY not in done:
            failed += run_sft_only(cell, common, args.sft_max_episodes) != 0
            done = finished(uri, cell.name)
        if args.dry_run or not done:
            continue
        report = report_root / cell.name
        rc, _ = learning.run_command([learning.userrl_script(), "report", "--experiment", cell.name,
                                      "--tracking-uri", uri, "--out", str(report)], f"report of {cell.name}")
        if rc == 0:
            rows.append(row(cell, learning.curves(report)))
    if args.dry_run:
        return 0
    print("\n## The learning matrix\n")
    print_matrix(rows)
    png = plot_matrix(rows, report_root / "matrix.png") if rows else None
    print(f"\n[bench] figure: {png}" if png else "\n[bench] no trial has finished yet: no figure")
    print(f"[bench] MLflow: {uri} (experiments learn_<gym>_s<seed>); reports in {report_root}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
