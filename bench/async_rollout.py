"""Synchronous against asynchronous rollout (`training.async_rollout`), side by side in one process run.

Both modes train the same config for the same iterations from the same model (the quickstart's, SFT off,
no evaluation, no checkpoints), one after the other on the same local Ray. Per mode the table gives the
mean seconds per iteration (the first one left out: it includes the replicas' warm-up), what the loop
waited for the rollout, the update and the weight sync, and the largest policy lag.

    .venv/bin/python bench/async_rollout.py --model runs/quickstart/checkpoints/iter_000000/model --iterations 5
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

COLUMNS = ("time/iteration_s", "time/rollout_s", "time/rollout_wait_s", "time/update_s", "time/weight_sync_s")


def _run(args: argparse.Namespace, async_rollout: bool, folder: Path) -> tuple[list[dict], float]:
    from userrl.config import load_config
    from userrl.trainer import TrainerConfig

    config = (TrainerConfig(load_config(Path(__file__).parent.parent / "experiments" / "quickstart.yaml"))
              .experiment(name=f"async-{async_rollout}", output_dir=str(folder))
              .policy(model=args.model, engine=args.engine)
              .training(iterations=args.iterations, async_rollout=async_rollout)
              .sft(enabled=False)
              .evaluation(interval=0)
              .checkpointing(every=0)
              .tracking(experiment="bench-async", mlflow_uri=f"sqlite:///{folder}/mlflow.db")
              .overrides(args.set))
    algo = config.build_trainer()
    try:
        start = time.perf_counter()
        results = algo.fit()
        return results, time.perf_counter() - start
    finally:
        algo.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--engine", default="hf", choices=["hf", "vllm"])
    parser.add_argument("--iterations", type=int, default=5)
    parser.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE", help="more config overrides")
    args = parser.parse_args()

    rows = {}
    with tempfile.TemporaryDirectory(prefix="userrl-bench-async-") as tmp:
        for mode in (False, True):
            results, wall = _run(args, mode, Path(tmp) / str(mode))
            steady = results[1:] or results
            rows["async" if mode else "sync"] = {
                **{key: statistics.mean(r[key] for r in steady) for key in COLUMNS},
                "lag": max(r["rollout/policy_lag_max"] for r in results),
                "reward": statistics.mean(r["rollout/reward_mean"] for r in results),
                "wall": wall,
            }
            print(f"{'async' if mode else 'sync'}: {len(results)} iterations in {wall:.1f} s", flush=True)

    print(f"\nmodel {args.model}, engine {args.engine}, quickstart config, {args.iterations} iterations per mode; "
          "means over iterations 2..N\n")
    print("| mode | iteration s | rollout s | waited for rollout s | update s | weight sync s | max lag | "
          "reward mean | fit wall s |")
    print("|---|---|---|---|---|---|---|---|---|")
    for mode, row in rows.items():
        print(f"| {mode} | " + " | ".join(f"{row[key]:.2f}" for key in COLUMNS)
              + f" | {row['lag']:.0f} | {row['reward']:.3f} | {row['wall']:.1f} |")
    print(f"\nsync / async seconds per iteration = {rows['sync'][COLUMNS[0]] / rows['async'][COLUMNS[0]]:.2f}")


if __name__ == "__main__":
    main()
