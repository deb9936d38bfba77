"""Co-training rows (issue 33 item 3): the agent's own questions, answered by the gym's scripted user.

A user simulator trained on the shipped rows has seen the scripted solver's questions only. After the agent
has trained against the simulator, its recent conversations (the trajectories its run saved) show the
questions the simulator will face next. Each one is replayed here against the gym's scripted user, turn by
turn (`intention_conversation(..., moves=...)`), and every scripted reply becomes a row with its ground-truth
latent states, as the shipped rows are made: the simulator's next round learns the scripted user's answers to
the agent's questions. The simulator's own replies in those conversations are not used as targets; the
scripted user is the ground truth (docs/ARCHITECTURE.md "Co-training relabels the agent's questions").

    python -m userrl.humanlm.cotrain --samples runs/agent/artifacts --out runs/cotrain/rows_1.jsonl

writes the shipped Intention train rows followed by the rows of every saved Intention conversation.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np

from userrl.checkpoint import write_atomic
from userrl.envs.registry import load_tasks
from userrl.humanlm.data import (
    SEED,
    conversation_rows,
    intention_conversation,
    load_rows,
    render_jsonl,
    seed_of,
)
from userrl.humanlm.row import Row
from userrl.trajectory import Trajectory, read_parquet

GYM = "intention"
SOURCE = "agent"


def agent_rows(trajectories: Iterable[Trajectory], seed: int = SEED) -> tuple[list[Row], Counter[str]]:
    """Rows from the agent's Intention conversations on train tasks, replayed against the scripted user, and
    the count of conversations used and of those left out, by reason."""
    tasks = {task.item_key: task for task in load_tasks(GYM, "train")}
    rows: list[Row] = []
    counts: Counter[str] = Counter()
    for trajectory in trajectories:
        moves = [(turn.choice, turn.content) for turn in trajectory.turns if turn.executed]
        reason = ("another gym" if trajectory.env_name != GYM else "aborted" if trajectory.aborted
                  else "not a train task" if trajectory.item_key not in tasks else "no executed turn" if not moves
                  else "")
        if reason:
            counts[f"left out: {reason}"] += 1
            continue
        task = tasks[trajectory.item_key]
        task_seed = seed_of(seed, GYM, f"{trajectory.item_key}:{trajectory.uid}")
        persona, turns = intention_conversation(task, np.random.default_rng(task_seed), task_seed, moves=moves)
        rows += conversation_rows(GYM, task, "train", persona, turns, source=SOURCE, conversation=trajectory.uid)
        counts["conversations"] += 1
    return rows, counts


def saved_trajectories(folders: Sequence[Path]) -> list[Trajectory]:
    """Every trajectory of the `samples_iter_*.parquet` files in the folders (a run's artifacts)."""
    paths = sorted(p for folder in folders for p in Path(folder).glob("samples_iter_*.parquet"))
    if not paths:
        raise FileNotFoundError(f"no samples_iter_*.parquet in {', '.join(map(str, folders))}: give the artifacts "
                                "folder of an agent's run (tracking.sample_trajectories > 0)")
    return [t for path in paths for t in read_parquet(path)]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--samples", nargs="+", required=True, type=Path, help="artifacts folders of the agent's runs")
    parser.add_argument("--out", required=True, type=Path, help="JSONL of HumanLM rows (humanlm.data_files.train)")
    parser.add_argument("--seed", type=int, default=SEED, help="seeds the scripted user's hidden preferences")
    parser.add_argument("--no-shipped", action="store_true", help="the agent's rows alone, without the shipped ones")
    args = parser.parse_args(argv)
    rows, counts = agent_rows(saved_trajectories(args.samples), args.seed)
    shipped = [] if args.no_shipped else load_rows("train", gyms=[GYM])
    args.out.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(args.out, lambda tmp: tmp.write_text(render_jsonl([*shipped, *rows])))
    print(f"{args.out}: {len(shipped)} shipped rows + {len(rows)} from {counts['conversations']} agent conversations"
          + "".join(f"; {reason} {n}" for reason, n in sorted(counts.items()) if reason != "conversations"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
