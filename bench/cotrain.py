"""Co-training (issue 33 item 3): the user simulator and the agent trained in turns, on IntentionGym.

Round 0 is a HumanLM user simulator (`userrl train-user --config experiments/humanlm.yaml`, its warm start on
the shipped rows, which the gyms' scripted users answered to the scripted solver's questions) and an agent
warm-started on solver demonstrations (`userrl sft --config experiments/llm_users.yaml`). Then, per round r:

1. the agent trains `--iterations` GRPO iterations against the simulator of round r-1, as a local user
   replica (`env.backend=local env.local_user_format=humanlm`), evaluated before and after against the
   **scripted** user and judge (`evaluation.scripted_users`): ground truth the simulator never was;
2. its saved conversations (`tracking.sample_trajectories`: every episode) are replayed against the scripted
   user (`python -m userrl.humanlm.cotrain`): the scripted user's answers to the agent's own questions, as rows;
3. the simulator of round r is the one of round r-1 trained on the shipped rows plus those rows
   (`userrl train-user ... humanlm.data_files={train: rows_r.jsonl} training.iterations=0`), and both are
   scored on the held-out rows by `userrl evaluate-user` (the scripted judge against the scripted user's replies).

The agent's held-out tasks are bench/llm_users.py's: Intention's 16 builtin test tasks and, when the original
UserRL data is there (`--data-root`), its 40 test tasks as a second gym entry.

The table: per round, the agent's held-out reward before and after (95% intervals), and the simulator's
held-out judge score and valid rate. Every step is a product command, printed before it runs; a step whose
output exists is reused, so an interrupted run continues.

    .venv/bin/python bench/cotrain.py --rounds 2                       # about 1 h 40 min on 2 cores (estimated)
    .venv/bin/python bench/cotrain.py --simulator runs/llm_users/simulator/checkpoints/iter_000000/model \\
        --agent runs/llm_users_w212/warm_start/checkpoints/iter_000000/model     # reuse round 0

A smoke run (tiny random models, a few minutes):

    .venv/bin/python bench/cotrain.py --output-dir runs/cotrain-smoke --model tiny-random --iterations 1 \\
        --sft-episodes 8 --eval-tasks 2 --simulator-rows 8 --set training.batch_size=2 training.group_size=2
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import learning  # noqa: E402 - commands, MLflow readers
import llm_users  # noqa: E402 - the held-out reward with its interval

ROOT = learning.ROOT
AGENT_CONFIG = "experiments/llm_users.yaml"
USER_CONFIG = "experiments/humanlm.yaml"
EXPERIMENT = "cotrain"


def checkpoint_model(run: Path, iteration: int) -> Path | None:
    """The model folder of a run's complete checkpoint at `iteration`, or None."""
    from userrl.checkpoint import Checkpoint

    checkpoint = Checkpoint.of_run(run, iteration)
    return checkpoint.model_dir if checkpoint.is_complete else None


def step(cmd: list[str], what: str) -> None:
    """Run one product command; a failure ends the bench with its status."""
    rc, _ = learning.run_command(cmd, what)
    if rc != 0:
        raise SystemExit(f"{what} failed (exit status {rc})")


def simulator_command(args: argparse.Namespace, name: str, extra: list[str]) -> list[str]:
    return [learning.userrl_script(), "train-user", "--config", USER_CONFIG, f"experiment.output_dir={args.out}",
            f"experiment.name={name}", f"tracking.experiment={EXPERIMENT}_simulator", "training.iterations=0",
            "checkpointing.every=1", "evaluation.interval=0", "humanlm.gyms=[intention]",
            "learners.num_learners=0", "learners.num_cpus_per_learner=2", *args.user_set, *extra]


def simulator_score(args: argparse.Namespace, model: Path, name: str) -> dict[str, Any]:
    """`userrl evaluate-user` of a simulator on the held-out Intention rows: its metrics.json."""
    out = args.out / f"eval_{name}"
    if not (out / "metrics.json").is_file():
        step([learning.userrl_script(), "evaluate-user", "--config", USER_CONFIG, "--out", str(out),
              *(["--max-rows", str(args.simulator_eval_rows)] if args.simulator_eval_rows else []),
              f"policy.model={model}", f"experiment.output_dir={args.out}", "humanlm.gyms=[intention]",
              f"tracking.experiment={EXPERIMENT}_simulator", *args.user_set], f"held-out score of {name}")
    return json.loads((out / "metrics.json").read_text())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    parser.add_argument("--rounds", type=int, default=2, help="agent rounds (a new simulator between two)")
    parser.add_argument("--iterations", type=int, default=8, help="the agent's GRPO iterations per round")
    parser.add_argument("--output-dir", default="runs/cotrain")
    parser.add_argument("--model", default=None, help="policy.model of both warm starts (default: the configs')")
    parser.add_argument("--simulator", default=None, help="round 0's simulator model (default: train it)")
    parser.add_argument("--agent", default=None, help="round 0's agent model (default: warm-start it)")
    parser.add_argument("--sft-episodes", type=int, default=212, help="the agent's warm start: demonstrations")
    parser.add_argument("--simulator-rows", type=int, default=None,
                        help="rows of each simulator's training (default: every row of its file)")
    parser.add_argument("--simulator-eval-rows", type=int, default=None, help="held-out rows scored (default all)")
    parser.add_argument("--eval-tasks", type=int, default=None, help="the agent's evaluation.num_tasks")
    parser.add_argument("--data-root", default=str(llm_users.DEFAULT_DATA_ROOT) if llm_users.DEFAULT_DATA_ROOT.is_dir()
                        else None, help="the original UserRL data (adds its Intention tasks, as bench/llm_users.py "
                        "does); default ../shared/userrl-data")
    parser.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE", help="more overrides of the agent's runs")
    parser.add_argument("--user-set", nargs="*", default=[], metavar="KEY=VALUE",
                        help="more overrides of the simulator's runs")
    args = parser.parse_args()
    args.out = (ROOT / args.output_dir).resolve()
    model = [f"policy.model={args.model}"] if args.model else []
    args.user_set = [*model, *args.user_set]
    data_root = Path(args.data_root).resolve() if args.data_root else None
    agent_set = [f"experiment.output_dir={args.out}", f"tracking.experiment={EXPERIMENT}", *model,
                 f"env.gyms={json.dumps(llm_users.gym_entries(data_root))}",
                 *([f"env.data_root={data_root}"] if data_root else []),
                 *([f"evaluation.num_tasks={args.eval_tasks}"] if args.eval_tasks else []), *args.set]

    simulator = Path(args.simulator) if args.simulator else checkpoint_model(args.out / "simulator_0", 0)
    if simulator is None:
        rows = [f"sft.episodes={args.simulator_rows}"] if args.simulator_rows else []
        step(simulator_command(args, "simulator_0", rows), "round 0: the user simulator's warm start")
        simulator = checkpoint_model(args.out / "simulator_0", 0)
    agent = Path(args.agent) if args.agent else checkpoint_model(args.out / "agent_0", 0)
    if agent is None:
        step([learning.userrl_script(), "sft", "--config", AGENT_CONFIG, *agent_set, "experiment.name=agent_0",
              f"sft.episodes={args.sft_episodes}"], "round 0: the agent's warm start")
        agent = checkpoint_model(args.out / "agent_0", 0)

    uri = f"sqlite:///{args.out}/mlflow.db"
    table = []
    for r in range(1, args.rounds + 1):
        name = f"agent_{r}"
        trained = checkpoint_model(args.out / name, args.iterations)
        if trained is None:
            step([learning.userrl_script(), "train", "--config", AGENT_CONFIG, *agent_set, f"experiment.name={name}",
                  f"policy.model={agent}", "sft.enabled=false", f"training.iterations={args.iterations}",
                  f"evaluation.interval={args.iterations}", f"checkpointing.every={args.iterations}",
                  "env.backend=local", f"env.local_user_model={simulator}", "env.local_user_format=humanlm",
                  "tracking.sample_trajectories=1000"], f"round {r}: the agent against simulator_{r - 1}")
            trained = checkpoint_model(args.out / name, args.iterations)
        held = llm_users.reward_interval(uri, EXPERIMENT).get(name, [])
        table.append({"round": r, "simulator": f"simulator_{r - 1}", "agent": name, "held_out": held,
                      "simulator_score": simulator_score(args, simulator, f"simulator_{r - 1}")})
        agent = trained
        if r == args.rounds:
            break
        rows = args.out / f"rows_{r}.jsonl"
        if not rows.is_file():
            step([sys.executable, "-m", "userrl.humanlm.cotrain", "--samples", str(args.out / name / "artifacts"),
                  "--out", str(rows)], f"round {r}: the agent's conversations answered by the scripted user")
        count = sum(1 for line in rows.read_text().splitlines() if line.strip())
        nxt = checkpoint_model(args.out / f"simulator_{r}", 0)
        if nxt is None:
            step(simulator_command(args, f"simulator_{r}", [f"policy.model={simulator}",
                                                          f"humanlm.data_files={{train: {rows}}}",
                                                          f"sft.episodes={args.simulator_rows or count}"]),
                 f"round {r}: the simulator on the shipped rows and the agent's ({count} rows)")
            nxt = checkpoint_model(args.out / f"simulator_{r}", 0)
        simulator = nxt

    print("\n## Co-training on IntentionGym\n")
    print("| round | training user | agent held-out reward before (95% CI) | after (95% CI) | "
          "the user's held-out judge score (response) | valid rate |")
    print("|---|---|---|---|---|---|")
    for row in table:
        before, after = (row["held_out"][0], row["held_out"][-1]) if len(row["held_out"]) >= 2 else (None, None)
        metrics = row["simulator_score"]["metrics"]
        print(f"| {row['round']} | {row['simulator']} | "
              + (" | ".join(f"{m:.3f} [{lo:.3f}, {hi:.3f}]" for m, lo, hi in (before, after)) if before else "- | -")
              + f" | {metrics.get('eval/humanlm/response/score', float('nan')):.3f}"
              f" | {metrics.get('eval/humanlm/response/valid_rate', float('nan')):.2f} |")
    print(f"\n[bench] MLflow: {uri} (experiments {EXPERIMENT}, {EXPERIMENT}_simulator); runs in {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
