"""`userrl` command line: train, sft, evaluate, sweep, report, export, serve, play, config show, and the
plug-ins' commands (userrl/commands/registry.py)."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import traceback
from collections.abc import Callable
from typing import Any

from rich.console import Console

from userrl.allocator import forget_restart, restart_under
from userrl.commands.registry import add_config_arguments, registered_commands
from userrl.config import ConfigError, UserRLConfig, load_config
from userrl.engines.select import announced, mark_announced
from userrl.progress import print_result, progress_bars

#: The choices a command printed before it started itself again (`_allocator_of_a_local_learner`).
ANNOUNCED = "USERRL_ANNOUNCED"
console = Console(soft_wrap=True)  # a path or a long line is never broken in a log (no terminal: 80 columns)


def _progress(result: dict[str, Any]) -> None:
    print_result(console, result)


#: fit's progress events (userrl/trainer.py `progress_event`): the bar's label, and whether the work
#: begins with the bar (an SFT bar appears at the first step, an evaluation's as it starts; the iterations'
#: bar at the learners' start, so its rate leaves out loading, SFT and the first evaluation).
_BARS = {"sft": ("sft steps", True), "rl": ("iterations", False), "eval": ("eval episodes", True)}


def _fit(algo: Any, on_result: Callable[[dict[str, Any]], None]) -> list[dict[str, Any]]:
    """`algo.fit` with its progress lines, and progress bars under them when stdout is a terminal."""
    with progress_bars(console) as bars:
        def on_progress(event: dict[str, Any]) -> None:
            label, rate_from_now = _BARS[event["of"]]
            bars.update(label, event["done"], event["total"], rate_from_now=rate_from_now)

        return algo.fit(on_result=on_result, on_progress=on_progress)


def cmd_train(args: argparse.Namespace) -> int:
    """Train with GRPO-multiturn (optionally after an SFT warm start)."""
    config = load_config(args.config, args.overrides)
    if args.resume:
        config.checkpointing.resume_from = args.resume
    _allocator_of_a_local_learner(args, config)
    from userrl.trainer import Trainer  # after the restart: it imports torch and transformers (6 s)

    algo = Trainer(config)
    seen: list[dict[str, Any]] = []

    def on_result(result: dict[str, Any]) -> None:
        seen.append(result)
        _progress(result)

    try:
        results = _fit(algo, on_result)
        checkpoints = [r["checkpoint"] for r in results if r.get("checkpoint")]
        console.print(f"\n[green]done[/]: {len(results)} iterations")
        _print_curve(seen, config)
        console.print(f"MLflow run {algo.mlflow_run_id} in {algo.mlflow_uri}  "
                      f"(view: mlflow ui --backend-store-uri {algo.mlflow_uri})")
        if checkpoints:
            console.print(f"checkpoint: {checkpoints[-1]}")
        if config.checkpointing.keep_best:
            from userrl.checkpoint import BestCheckpoint, checkpoints_dir

            best = BestCheckpoint(checkpoints_dir(config.run_dir), config.checkpointing.keep_best,
                                  config.checkpointing.best_mode)
            if best.path:
                console.print(f"best checkpoint ({best.metric} {best.value:.3f} at iteration {best.iteration}): "
                              f"{best.path}")
    finally:
        algo.stop()
    return 0


def _allocator_of_a_local_learner(args: argparse.Namespace, config: UserRLConfig) -> None:
    """A local learner trains in this process: start the command again under `learners.allocator` if it runs
    under another (only when this process is the command, not a caller of `main`, and not restarted already)."""
    if config.learners.num_learners == 0 and args.own_process:
        os.environ[ANNOUNCED] = "\n".join(announced())  # said once: the restarted command does not repeat them
        restart_under(config.learners.allocator)
        del os.environ[ANNOUNCED]


def _print_curve(results: list[dict[str, Any]], config: Any) -> None:
    from userrl.curve import curve_table, learning_curve, plot_curve

    points = learning_curve(results)
    if not points:
        return
    console.print(curve_table(points))
    if any(p.heldout_success is not None for p in points):
        path = plot_curve(points, config.run_dir.resolve() / "learning_curve.png", config.experiment.name)
        console.print(f"learning curve: {path}")


def sft_config(path: str | None, overrides: list[str]) -> UserRLConfig:
    """The config of `userrl sft`: the warm start alone, always written as checkpoint iter_000000.

    A config made for RL may say `checkpointing.every: 0` (no RL checkpoints); the warm start is this
    command's only product, so it is written anyway.
    """
    overrides = [*overrides, "sft.enabled=true", "training.iterations=0"]  # last: a run's own iterations lose
    config = load_config(path, overrides)
    if not config.checkpointing.every:
        console.print("checkpointing.every=0 in the config: `userrl sft` writes its checkpoint anyway")
        config = load_config(path, [*overrides, "checkpointing.every=1"])
    return config


def cmd_sft(args: argparse.Namespace) -> int:
    """Only the supervised warm start; writes a checkpoint whose model folder can seed RL."""
    config = sft_config(args.config, args.overrides)
    _allocator_of_a_local_learner(args, config)
    from userrl.trainer import Trainer  # after the restart, as in cmd_train

    algo = Trainer(config)
    try:
        _fit(algo, _progress)
        from userrl.train_loop import checkpoint_path

        console.print(f"[green]done[/]: SFT checkpoint {checkpoint_path(config, 0)}")
    finally:
        algo.stop()
    return 0


def cmd_evaluate(args: argparse.Namespace) -> int:
    """Evaluate a checkpoint, the configured model or an OpenAI-compatible endpoint on the test splits."""
    from userrl.commands.evaluate import cli_evaluate

    return cli_evaluate(args, console)


def cmd_sweep(args: argparse.Namespace) -> int:
    """Run (or resume) a Ray Tune sweep described by a sweep file."""
    from userrl.commands.sweep import cli_sweep

    return cli_sweep(args, console)


def cmd_report(args: argparse.Namespace) -> int:
    """Write a Markdown/HTML report with tables and learning curves from an experiment's MLflow runs."""
    from userrl.commands.report import cli_report

    return cli_report(args, console)


def cmd_export(args: argparse.Namespace) -> int:
    """Export a checkpoint as a Hugging Face model folder."""
    from userrl.commands.export import cli_export

    return cli_export(args, console)


def cmd_serve(args: argparse.Namespace) -> int:
    """Serve a model behind an OpenAI-compatible API (and the /play page) with Ray Serve."""
    from userrl.serving.app import cli_serve

    return cli_serve(args, console)


def cmd_play(args: argparse.Namespace) -> int:
    """Play the agent's side of a gym in the terminal."""
    from userrl.commands.play import play

    play(args.gym, split=args.split, index=args.index, task_id=args.task, seed=args.seed, source=args.source,
         data_root=args.data_root, console=console)
    return 0


def cmd_config_show(args: argparse.Namespace) -> int:
    """Print the resolved config (file, overrides and every default) as YAML."""
    import yaml

    config = load_config(args.config, args.overrides)
    # Plain stdout, not the console: the YAML must come out exactly (no wrapping, no markup).
    sys.stdout.write(yaml.safe_dump(config.model_dump(mode="json"), sort_keys=False, width=10_000))
    return 0


def package_version() -> str:
    """The installed userrl's version."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("userrl")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown"


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the `userrl` command."""
    parser = argparse.ArgumentParser(prog="userrl", description=__doc__)
    parser.add_argument("--version", action="version", version=f"%(prog)s {package_version()}")
    sub = parser.add_subparsers(dest="command", required=True)
    for name, func, help_text in [("train", cmd_train, "GRPO-multiturn training"),
                                  ("sft", cmd_sft, "supervised warm start only"),
                                  ("evaluate", cmd_evaluate, "evaluate a policy or checkpoint")]:
        p = sub.add_parser(name, help=help_text)
        add_config_arguments(p)
        p.set_defaults(func=func)
    for command in registered_commands():  # the plug-ins' subcommands (userrl/commands/registry.py)
        p = sub.add_parser(command.name, help=command.help)
        command.add_arguments(p)
        p.set_defaults(func=lambda args, run=command.run: run(args, console))
    play_parser = sub.add_parser("play", help="play the agent's side of a gym in the terminal")
    play_parser.add_argument("gym", help="gym name, e.g. function, travel, turtle")
    play_parser.add_argument("--split", default="test")
    play_parser.add_argument("--index", type=int, help="task index (default: a random one)")
    play_parser.add_argument("--task", help="task id (item key)")
    play_parser.add_argument("--seed", type=int, default=0)
    play_parser.add_argument("--source", default="builtin", choices=["builtin", "userrl"])
    play_parser.add_argument("--data-root", help="original UserRL data folder (source userrl)")
    play_parser.set_defaults(func=cmd_play)
    sub.choices["train"].add_argument("--resume", help="checkpoint folder to resume from")
    _evaluate_arguments(sub.choices["evaluate"])

    sweep_parser = sub.add_parser("sweep", help="Ray Tune sweep (e.g. experiments/sweeps/credit_assignment.yaml)")
    sweep_parser.add_argument("sweep_file", help="sweep YAML: base config, grid and Tune settings")
    sweep_parser.add_argument("overrides", nargs="*", help="dotted overrides of the base config")
    sweep_parser.add_argument("--resume", action="store_true", help="resume the sweep from its Tune folder")
    sweep_parser.add_argument("--only", action="append", default=[], metavar="AXIS=I,J",
                              help="keep only these values of a grid axis (1-based positions in the file); repeatable")
    sweep_parser.add_argument("--name", help="the sweep's name (Tune folder, MLflow experiment) instead of the file's")
    sweep_parser.set_defaults(func=cmd_sweep)

    report_parser = sub.add_parser("report", help="report (tables + learning curves) from MLflow runs")
    report_parser.add_argument("--experiment", required=True, help="MLflow experiment name")
    report_parser.add_argument("--out", help="report folder (default: reports/<experiment>)")
    report_parser.add_argument("--format", choices=["markdown", "html"], default="markdown")
    report_parser.add_argument("--tracking-uri", help="MLflow tracking URI (default: MLFLOW_TRACKING_URI or "
                               "sqlite:///runs/mlflow.db)")
    report_parser.set_defaults(func=cmd_report)

    export_parser = sub.add_parser("export", help="export a checkpoint as a Hugging Face folder")
    export_parser.add_argument("--checkpoint", required=True, help="checkpoint folder (has meta.json)")
    export_parser.add_argument("--out", required=True, help="output folder")
    export_parser.add_argument("--force", action="store_true", help="replace a non-empty output folder")
    export_parser.set_defaults(func=cmd_export)

    serve_parser = sub.add_parser("serve", help="OpenAI-compatible endpoint and /play page on Ray Serve")
    serve_parser.add_argument("--model", help="model folder (exported, a checkpoint or its model/) or a model name")
    serve_parser.add_argument("--config", help="serving YAML (see serving/*.yaml)")
    serve_parser.add_argument("--host", help="bind address (default: the config's, 127.0.0.1)")
    serve_parser.add_argument("--port", type=int, help="port (default: the config's, 8000)")
    serve_parser.add_argument("overrides", nargs="*", help="dotted overrides of the serving config, e.g. num_replicas=2")
    serve_parser.set_defaults(func=cmd_serve)

    config_parser = sub.add_parser("config", help="inspect run configs")
    config_sub = config_parser.add_subparsers(dest="config_command", required=True)
    show_parser = config_sub.add_parser("show", help="print the resolved config (file + overrides + defaults) as YAML")
    show_parser.add_argument("--config", help="YAML config file (default: every default)")
    show_parser.add_argument("overrides", nargs="*", help="dotted overrides, e.g. policy.engine=hf")
    show_parser.set_defaults(func=cmd_config_show)
    return parser


def _evaluate_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--checkpoint", help="checkpoint folder to evaluate")
    parser.add_argument("--policy", help="openai:MODEL@URL to evaluate an OpenAI-compatible endpoint instead")
    parser.add_argument("--gyms", help="comma-separated gym names, or 'all' (default: the config's gyms)")
    parser.add_argument("--passes", type=int, help="passes per test item (default evaluation.passes = 1)")
    parser.add_argument("--temperature", type=float, help="sampling temperature (default 0: greedy)")
    parser.add_argument("--max-episodes-per-gym", type=int,
                        help="first N test items per gym, each played --passes times (default: whole test split)")
    parser.add_argument("--concurrency", type=int, help="episodes in flight at once (default 32)")
    parser.add_argument("--out", help="output folder, resumed when re-run (default: "
                        "<output_dir>/<name>/eval/<checkpoint or model>)")


_WHAT_STAYS = ("what was written stays (training commands resume from their last checkpoint with --resume; "
               "evaluate reuses its finished shards)")


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `userrl` command."""
    # force: a library imported first (Ray in a job's driver) may have configured the root logger already.
    logging.basicConfig(level=os.environ.get("USERRL_LOG", "WARNING"), force=True)
    # Ray's C++ crash handler in the driver takes SIGTERM (`kill`, `ray job stop`) for a crash: it dumps a
    # stack and aborts (status 134) before Python's handler, which raises SystemExit, can run the commands'
    # `finally` blocks. Read when Ray is imported, so set before any command imports it.
    os.environ.setdefault("RAY_DISABLE_FAILURE_SIGNAL_HANDLER", "1")
    restarted = forget_restart()
    if restarted:
        mark_announced(os.environ.pop(ANNOUNCED, "").splitlines())
    args = build_parser().parse_args(argv)
    args.own_process = argv is None and not restarted  # may start itself again (once)
    try:
        return args.func(args)
    except KeyboardInterrupt:  # the commands' own `finally` blocks have stopped their actors by now
        from userrl.cluster import sigterm_received  # imports Ray: only once a command has run

        if sigterm_received():
            console.print(f"[yellow]stopped[/] (SIGTERM): {_WHAT_STAYS}")
            return 128 + signal.SIGTERM
        console.print(f"[yellow]interrupted[/]: {_WHAT_STAYS}")
        return 130
    except SystemExit as stop:
        if stop.code != signal.SIGTERM:
            raise
        # Ray's handler (a driver that never reached `init_ray`, e.g. a sweep) turns SIGTERM into sys.exit(15).
        console.print(f"[yellow]stopped[/] (SIGTERM): {_WHAT_STAYS}")
        return 128 + signal.SIGTERM
    except (ConfigError, FileNotFoundError, ValueError, ConnectionError) as error:
        if os.environ.get("USERRL_LOG", "").upper() == "DEBUG":
            traceback.print_exc()
        console.print(f"[red]error:[/] {error}")
        return 2


if __name__ == "__main__":
    sys.exit(main())
