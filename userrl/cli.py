"""`userrl` command line: train, sft, evaluate (`--config file.yaml` plus dotted overrides), play."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from typing import Any

from rich.console import Console

from userrl.config import ConfigError, load_config

console = Console()


def _progress(result: dict[str, Any]) -> None:
    if result["phase"] == "sft":
        console.print(f"[cyan]sft[/] epoch {result['sft/epoch']} step {result['sft/step']:>3}  "
                      f"loss {result['sft/loss']:.4f}  {result['time/sft_step_s']:.1f}s")
        return
    if result["phase"] == "eval":
        console.print(f"[magenta]eval[/] at iteration {result['iteration']}: reward {result['eval/reward_mean']:.3f}  "
                      f"success {result['eval/success_rate']:.2f}  valid {result['eval/valid_action_rate']:.2f}")
        return
    r = result
    console.print(
        f"[bold]iter {r['iteration']:>3}[/]  reward {r['rollout/reward_mean']:.3f}±{r['rollout/reward_std']:.3f}  "
        f"success {r['rollout/success_rate']:.2f}  valid {r['rollout/valid_action_rate']:.2f}  "
        f"turns {r['rollout/turns_mean']:.1f}  gen {r['rollout/tokens_per_s']:.0f} tok/s  "
        f"train {r['learner/tokens_per_s']:.0f} tok/s  | rollout {r['time/rollout_s']:.1f}s  "
        f"adv {r['time/advantages_s']:.2f}s  update {r['time/update_s']:.1f}s  sync {r['time/weight_sync_s']:.1f}s  "
        f"learner mem {r['memory/learner_rss_gb']:.1f} GB"
        + (f"  | eval reward {r['eval/reward_mean']:.3f}" if "eval/reward_mean" in r else "")
    )


def cmd_train(args: argparse.Namespace) -> int:
    """Train with GRPO-multiturn (optionally after an SFT warm start)."""
    from userrl.algorithm import GRPOMultiTurn

    config = load_config(args.config, args.overrides)
    if args.resume:
        config.checkpointing.resume_from = args.resume
    algo = GRPOMultiTurn(config)
    try:
        results = algo.fit(on_result=_progress)
        checkpoints = [r["checkpoint"] for r in results if r.get("checkpoint")]
        console.print(f"\n[green]done[/]: {len(results)} iterations")
        console.print(f"MLflow run {algo.mlflow_run_id} in {algo.mlflow_uri}  "
                      f"(view: mlflow ui --backend-store-uri {algo.mlflow_uri})")
        if checkpoints:
            console.print(f"checkpoint: {checkpoints[-1]}")
    finally:
        algo.stop()
    return 0


def cmd_sft(args: argparse.Namespace) -> int:
    """Only the supervised warm start; writes a checkpoint whose model folder can seed RL."""
    overrides = ["sft.enabled=true", "training.iterations=0", *args.overrides]
    from userrl.algorithm import GRPOMultiTurn

    config = load_config(args.config, overrides)
    algo = GRPOMultiTurn(config)
    try:
        algo.fit(on_result=_progress)
        from userrl.train_loop import checkpoint_path

        console.print(f"[green]done[/]: SFT checkpoint {checkpoint_path(config, 0)}")
    finally:
        algo.stop()
    return 0


def cmd_evaluate(args: argparse.Namespace) -> int:
    """Evaluate the configured policy (or a checkpoint) on the evaluation split."""
    from userrl.algorithm import GRPOMultiTurn

    config = load_config(args.config, args.overrides)
    if args.checkpoint:
        config.checkpointing.resume_from = args.checkpoint
    algo = GRPOMultiTurn(config)
    try:
        for key, value in sorted(algo.evaluate().items()):
            console.print(f"{key:40s} {value:.4f}")
    finally:
        algo.stop()
    return 0


def cmd_play(args: argparse.Namespace) -> int:
    """Play the agent's side of a gym in the terminal."""
    from userrl.play import play

    play(args.gym, split=args.split, index=args.index, task_id=args.task, seed=args.seed, source=args.source,
         data_root=args.data_root, console=console)
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the `userrl` command."""
    parser = argparse.ArgumentParser(prog="userrl", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    for name, func, help_text in [("train", cmd_train, "GRPO-multiturn training"),
                                  ("sft", cmd_sft, "supervised warm start only"),
                                  ("evaluate", cmd_evaluate, "evaluate a policy or checkpoint")]:
        p = sub.add_parser(name, help=help_text)
        p.add_argument("--config", help="YAML config file")
        p.add_argument("overrides", nargs="*", help="dotted overrides, e.g. training.lr=1e-6")
        p.set_defaults(func=func)
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
    sub.choices["evaluate"].add_argument("--checkpoint", help="checkpoint folder to evaluate")
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `userrl` command."""
    logging.basicConfig(level=os.environ.get("USERRL_LOG", "WARNING"))
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except (ConfigError, FileNotFoundError, ValueError) as error:
        console.print(f"[red]error:[/] {error}")
        return 2


if __name__ == "__main__":
    sys.exit(main())
