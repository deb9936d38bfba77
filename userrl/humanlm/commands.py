"""`userrl train-user` and `userrl evaluate-user`: train a user simulator (HumanLM, docs/spec/ALGORITHMS.md §5.2) and score it.

train-user is `userrl train` on a config whose unset keys take HumanLM's settings
(userrl/humanlm/trainer_config.py): the same Trainer, learner group, MLflow run and
checkpoints; each iteration also prints the per-field judge scores and strict-parse valid rates.
evaluate-user plays every test item of the configured mode once (a checkpoint or the configured model on
the usual replicas and env runners), scores them with the validation judge and flexible parsing, prints
per field the judge score, the strict valid rate and the tag rate, and writes metrics.json, replies.jsonl
and one MLflow run.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from userrl.checkpoint import Checkpoint, write_atomic
from userrl.commands.registry import Command, add_config_arguments
from userrl.config import UserRLConfig, apply_overrides, parse_config, read_config_data
from userrl.humanlm.fields import FIELD_NAMES
from userrl.progress import print_result

#: Exit status when replies were aborted (left out of the scores; counted in metrics.json).
EXIT_ABORTED = 3


def load_user_config(path: str | None, overrides: list[str]) -> UserRLConfig:
    """A config file plus dotted overrides, over HumanLM's training settings."""
    from userrl.humanlm.trainer_config import (
        merge_defaults,  # imports the Algorithm: only when a command runs
    )

    data = read_config_data(path) if path else {}
    return parse_config(merge_defaults(apply_overrides(data, list(overrides))))


def field_table(metrics: dict[str, float], prefix: str, title: str) -> Table:
    """Per field: replies, judge score, strict valid rate, tag rate."""
    table = Table(title=title)
    for column in ("field", "replies", "judge score", "valid rate (strict)", "tag rate"):
        table.add_column(column, justify="left" if column == "field" else "right")
    for name in FIELD_NAMES:
        if f"{prefix}/{name}/samples" in metrics:
            table.add_row(name, f"{metrics[f'{prefix}/{name}/samples']:.0f}", f"{metrics[f'{prefix}/{name}/score']:.3f}",
                          f"{metrics[f'{prefix}/{name}/valid_rate']:.2f}", f"{metrics[f'{prefix}/{name}/tag_rate']:.2f}")
    return table


def _field_line(result: dict[str, Any], prefix: str = "humanlm") -> str:
    parts = [f"{name} {result[f'{prefix}/{name}/score']:.3f} (valid {result[f'{prefix}/{name}/valid_rate']:.2f})"
             for name in FIELD_NAMES if f"{prefix}/{name}/score" in result]
    failures = result.get(f"{prefix}/judge_failures", 0.0)
    line = "  judge: " + ", ".join(parts) + (f"  judge failures {failures:.0f}" if failures else "")
    if prefix == "humanlm" and "curriculum/level" in result:  # sequential mode: the step's level, the map's pools
        pools = [f"{name} {result[f'curriculum/pool/{name}']:.0f}" for name in FIELD_NAMES
                 if f"curriculum/pool/{name}" in result]
        line += (f"\n  curriculum: level {result['curriculum/level']:.0f} ({FIELD_NAMES[int(result['curriculum/level'])]}), "
                 f"proposed {result['curriculum/proposed']:.0f}, pending {result['curriculum/pending']:.0f}, "
                 f"pools: {', '.join(pools) or 'none yet'}")
    return line


def cli_train_user(args: Any, console: Console) -> int:
    """Train a user simulator with GRPO on the judge's scores; prints per-field scores each iteration."""
    from userrl.trainer import Trainer

    config = load_user_config(args.config, args.overrides)
    if args.resume:
        config.checkpointing.resume_from = args.resume
    h = config.humanlm
    console.print(f"[bold]train-user[/]: mode {h.mode}{' with the hierarchy-map curriculum' if h.curriculum else ''}, "
                  f"judge {h.judge}"
                  f"{' ' + str(h.judge_llm.get('model')) if h.judge == 'openai' else ''}, validation judge "
                  f"{h.validation_judge or h.judge}, model {config.policy.model}")
    algo = Trainer(config)
    last: dict[str, Any] = {}

    def on_result(result: dict[str, Any]) -> None:
        print_result(console, result)
        if result["phase"] == "rl":
            last.update(result)
            console.print(_field_line(result))
        if result["phase"] == "eval" or "eval/humanlm/groups" in result:
            console.print(_field_line(result, "eval/humanlm").replace("judge:", "eval judge:"))

    try:
        results = algo.fit(on_result=on_result)
        console.print(f"\n[green]done[/]: {len(results)} iterations")
        if last:
            console.print(field_table(last, "humanlm", f"last iteration {last['iteration']} (training judge "
                                      f"{h.judge}, strict parsing)"))
        console.print(f"MLflow run {algo.mlflow_run_id} in {algo.mlflow_uri}")
        checkpoints = [r["checkpoint"] for r in results if r.get("checkpoint")]
        if checkpoints:
            console.print(f"checkpoint: {checkpoints[-1]}")
    finally:
        algo.stop()
    return 0


def run_user_evaluation(config: UserRLConfig, *, checkpoint: str | None = None, split: str | None = None,
                        max_rows: int | None = None, out: str | None = None) -> dict[str, Any]:
    """Play the split's items once with the replicas, judge them (validation judge, flexible parsing);
    returns the summary written to <out>/metrics.json (replies to <out>/replies.jsonl)."""
    from userrl.coordinator import episode_specs, rollout_metrics
    from userrl.env_runner_group import episode_group
    from userrl.envs import load_tasks
    from userrl.humanlm.env import GYM_NAME, skipped_rows
    from userrl.humanlm.scoring import HumanLMGroupScorer
    from userrl.models import resolve_model
    from userrl.tracking import MLflowTracker

    config = config.with_absolute_paths()
    split = split or config.evaluation.split
    if checkpoint:
        opened = Checkpoint.open(checkpoint, "--checkpoint")
        model_path, label = str(opened.model_dir), opened.path.name
    else:
        model_path, label = resolve_model(config.policy.model), Path(config.policy.model).name
    options = config.task_options(GYM_NAME)
    tasks = load_tasks(GYM_NAME, split, **options)
    if max_rows is not None:  # the first max_rows rows, every field of each
        rows = sorted({t.data["row_index"] for t in tasks})[:max_rows]
        tasks = [t for t in tasks if t.data["row_index"] in set(rows)]
    specs = episode_specs(tasks, 1, "evaluser")
    folder = Path(out) if out else config.run_dir / "eval_user" / f"{label}-{split}-T{config.evaluation.temperature:g}"
    with episode_group(config, model_path) as group:
        scorer = HumanLMGroupScorer(config)
        try:
            began = time.perf_counter()
            trajectories = group.play(specs, seed=config.experiment.seed, temperature=config.evaluation.temperature)
            seconds = time.perf_counter() - began
            records: list[dict[str, Any]] = []
            metrics = scorer.score(specs, trajectories, evaluation=True, records=records)
        finally:
            scorer.close()
    metrics.update(rollout_metrics(trajectories, seconds, prefix="eval"))
    skipped = skipped_rows(split, **options)
    metrics.update({f"eval/humanlm/skipped_rows/{reason}": float(n) for reason, n in skipped.items()})
    aborted = {t.uid: t.error for t in trajectories if t.aborted}
    summary = {"model": model_path, "checkpoint": checkpoint, "split": split, "mode": options["mode"],
               "judge": scorer.validation_judge.name, "parsing": "flexible",
               "temperature": config.evaluation.temperature, "items": len(specs), "aborted": len(aborted),
               "aborted_errors": sorted(set(aborted.values())), "metrics": metrics}
    folder.mkdir(parents=True, exist_ok=True)
    replies = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records)
    write_atomic(folder / "replies.jsonl", lambda tmp: tmp.write_text(replies, encoding="utf-8"))
    write_atomic(folder / "metrics.json", lambda tmp: tmp.write_text(json.dumps(summary, indent=2) + "\n"))
    tracker = MLflowTracker(config, run_name=f"evaluate-user {label}",
                            tags={"userrl.kind": "user_evaluation", "judge": summary["judge"]})
    tracker.log_result({k: v for k, v in metrics.items() if math.isfinite(v)}, 0)
    tracker.client.log_artifact(tracker.run_id, str(folder / "metrics.json"))
    tracker.finish()
    summary["out"] = str(folder)
    summary["mlflow_run_id"] = tracker.run_id
    return summary


def cli_evaluate_user(args: Any, console: Console) -> int:
    """`userrl evaluate-user`: per-field judge scores and valid rates on the test split."""
    overrides = list(args.overrides)
    if args.temperature is not None:
        overrides.append(f"evaluation.temperature={args.temperature}")
    config = load_user_config(args.config, overrides)
    summary = run_user_evaluation(config, checkpoint=args.checkpoint, split=args.split, max_rows=args.max_rows,
                                  out=args.out)
    metrics = summary["metrics"]
    console.print(field_table(metrics, "eval/humanlm", f"{summary['split']} split, {summary['items']} items "
                              f"({summary['mode']}), judge {summary['judge']}, flexible parsing, "
                              f"T={summary['temperature']:g}"))
    if "eval/humanlm/score_mean" in metrics:
        console.print(f"mean judge score {metrics['eval/humanlm/score_mean']:.3f}")
    for key, value in sorted(metrics.items()):
        if key.startswith("eval/humanlm/skipped_rows/"):
            console.print(f"[yellow]skipped[/] {value:.0f} row(s) over humanlm.prompt_budget: "
                          f"{key.rsplit('/', 1)[1]}")
    console.print(f"written: {summary['out']}/metrics.json, replies.jsonl; MLflow run {summary['mlflow_run_id']}")
    if summary["aborted"]:
        console.print(f"[red]aborted[/] {summary['aborted']} item(s) ({', '.join(summary['aborted_errors'])}): "
                      f"left out of the scores (exit status {EXIT_ABORTED})")
        return EXIT_ABORTED
    return 0


def _train_user_arguments(parser: argparse.ArgumentParser) -> None:
    add_config_arguments(parser)
    parser.add_argument("--resume", help="checkpoint folder to resume from")


def _evaluate_user_arguments(parser: argparse.ArgumentParser) -> None:
    add_config_arguments(parser)
    parser.add_argument("--checkpoint", help="checkpoint folder (default: the configured policy.model)")
    parser.add_argument("--split", help="split to score (default evaluation.split = test)")
    parser.add_argument("--max-rows", type=int, help="the first N rows (every field of each)")
    parser.add_argument("--temperature", type=float, help="sampling temperature (default evaluation.temperature)")
    parser.add_argument("--out", help="output folder (default <output_dir>/<name>/eval_user/<model>-<split>-T<t>)")


#: HumanLM's subcommands, registered by its plug-in.
COMMANDS = (
    Command("train-user", "train a user simulator (HumanLM: judge-scored replies and latent states)",
            _train_user_arguments, cli_train_user),
    Command("evaluate-user", "per-field judge scores and valid rates of a user simulator",
            _evaluate_user_arguments, cli_evaluate_user),
)
