"""What each training user teaches (issue 33, item 2), through `userrl sweep` and `userrl report`.

One warm start (solver demonstrations, `userrl sft`), then the same agent (SmolLM2-135M) trained the same
number of GRPO iterations on IntentionGym (`experiments/llm_users.yaml`) against four training users:

  (a) scripted:  the gym's scripted user (the ceiling: it is also the user of the evaluation);
  (b) local:     SmolLM2-135M untrained, as a local user replica (`env.backend=local`, vLLM where it runs);
  (c) simulator: the HumanLM user simulator of `userrl train-user --config experiments/humanlm.yaml` (its rows
                 come from the gyms' train tasks only), as a local user replica (`env.local_user_format=humanlm`);
  (d) openai:    (b)'s model behind vLLM's own OpenAI server (`python -m vllm.entrypoints.openai.api_server`)
                 through `env.backend=openai`: the path a user takes with Qwen3-32B or gpt-4o.

Intention's coverage judge is scripted in every trial, so the trials differ only in who answers the agent's
questions. Every trial is evaluated before RL and every `--eval-every` iterations on the held-out tasks against
the **scripted** user and judge (`evaluation.scripted_users`), which no LLM training user is. Beside them, the
best SFT-only agent given the same wall time: the warm start's recipe with as many demonstration passes as
the warm start's and the scripted trial's wall time together allow at the warm start's measured rate (`userrl train ... training.iterations=0`,
evaluated the same way, in the same MLflow experiment).

The held-out tasks: the builtin Intention test split (16) and, when the original UserRL data is there
(`--data-root`, default ../shared/userrl-data), its 40 test tasks as a second gym entry: 56 per evaluation.

    .venv/bin/python bench/llm_users.py                                  # all four users, about 2 h 20 min on 2 cores
    .venv/bin/python bench/llm_users.py --users a,b,d --simulator none   # without (c)
    .venv/bin/python bench/llm_users.py --users a,b --user-url http://127.0.0.1:8000/v1 --user-name qwen3-32b
        # (d) against your own OpenAI-compatible server instead of a vLLM server started here
    .venv/bin/python bench/llm_users.py --report-only                    # the tables of an earlier run again

Prints per trial: held-out reward and success before and after with 95% intervals, the user tokens per
episode and the share of rollout time the episodes waited for their users; then the report's PNGs.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
import learning  # noqa: E402 - the learning benchmark's warm start, runner and report readers
import mua_acceptance  # noqa: E402 - vLLM's OpenAI server on a loopback port

ROOT = learning.ROOT
BASE = ROOT / "experiments" / "llm_users.yaml"
DEFAULT_DATA_ROOT = ROOT.parent / "shared" / "userrl-data"
JUDGE_SCRIPTED = {"role_backends": {"intention_judge": "scripted"}}
LABELS = {"a": "scripted user", "b": "SmolLM2-135M, local replica", "c": "HumanLM simulator, local replica",
          "d": "SmolLM2-135M behind vLLM's OpenAI server"}


def gym_entries(data_root: Path | None) -> list[dict[str, Any]]:
    """Intention's builtin tasks, and the original UserRL tasks when their folder is there."""
    entries = [{"name": "intention", "kwargs": JUDGE_SCRIPTED}]
    if data_root is not None:
        entries.append({"name": "intention", "source": "userrl", "kwargs": JUDGE_SCRIPTED})
    return entries


def user_variants(users: list[str], user_model: str, simulator: Path | None, llm: dict[str, Any] | None
                  ) -> list[dict[str, Any]]:
    """The sweep's `user` axis: one mapping of config keys per training user, in the order asked."""
    variants = {"a": {"env.backend": "scripted"},
                "b": {"env.backend": "local", "env.local_user_model": user_model},
                "c": {"env.backend": "local", "env.local_user_model": str(simulator),
                      "env.local_user_format": "humanlm"},
                "d": {"env.backend": "openai", "env.llm": llm}}
    return [variants[u] for u in users]


def which_user(label: str) -> str:
    """The letter of a trial from its run label (`backend=...,...`); '-' for runs of no trial."""
    if "local_user_format=humanlm" in label:
        return "c"
    for letter, backend in (("a", "backend=scripted"), ("b", "backend=local"), ("d", "backend=openai")):
        if backend in label:
            return letter
    return "-"


def build_simulator(args: argparse.Namespace, out: Path) -> Path:
    """The HumanLM simulator of (c): `userrl train-user` on experiments/humanlm.yaml (reused when there)."""
    from userrl.checkpoint import Checkpoint

    run = out / "simulator"
    iterations = args.simulator_iterations
    checkpoint = Checkpoint.of_run(run, iterations)
    if checkpoint.is_complete:
        print(f"[bench] reusing the user simulator {checkpoint.model_dir}")
        return checkpoint.model_dir
    cmd = [learning.userrl_script(), "train-user", "--config", "experiments/humanlm.yaml", f"experiment.output_dir={out}",
           "experiment.name=simulator", "tracking.experiment=llm_users_simulator",
           f"training.iterations={iterations}", f"checkpointing.every={max(iterations, 1)}", "evaluation.interval=0",
           "learners.num_learners=0", "learners.num_cpus_per_learner=2"]
    rc, _ = learning.run_command(cmd, "user simulator (userrl train-user)")
    if rc != 0 or not checkpoint.is_complete:
        raise SystemExit(f"the user simulator failed (exit status {rc}); nothing at {checkpoint.model_dir}")
    return checkpoint.model_dir


def write_sweep(path: Path, name: str, variants: list[dict[str, Any]]) -> Path:
    """The sweep file of this run (the `user` axis depends on the simulator and the server)."""
    spec = {"name": name, "description": "what each training user teaches (bench/llm_users.py)",
            "base": str(BASE), "overrides": [], "grid": {"user": variants},
            "tune": {"metric": "eval/reward_mean", "mode": "max", "scope": "all", "max_concurrent_trials": 1,
                     "num_samples": 1, "max_failures": 0}}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    print(f"[bench] sweep file {path}:\n{path.read_text()}")
    return path


def run_metric(uri: str, experiment: str, key: str) -> dict[str, list[float]]:
    """Every run's history of one metric (`time/user_s`), by run name."""
    key = key.replace("/", ".")  # as userrl's tracker logs it
    client, runs = learning.mlflow_runs(uri, experiment)
    return {run.info.run_name: [m.value for m in sorted(client.get_metric_history(run.info.run_id, key),
                                                        key=lambda m: m.step)] for run in runs}


def reward_interval(uri: str, experiment: str) -> dict[str, list[tuple[float, float, float]]]:
    """Per run, each held-out evaluation's mean reward and its 95% normal interval (mean, low, high)."""
    means, stds, episodes, aborted = (run_metric(uri, experiment, f"eval/{k}")
                                      for k in ("reward_mean", "reward_std", "episodes", "aborted"))
    out = {}
    for run, values in means.items():
        rows = []
        for mean, std, n, lost in zip(values, stds[run], episodes[run], aborted[run], strict=True):
            half = 1.96 * std / math.sqrt(n - lost) if n > lost else float("nan")
            rows.append((mean, mean - half, mean + half))
        out[run] = rows
    return out


def print_user_table(uri: str, experiment: str, runs: list[dict[str, Any]], episodes_per_iteration: int) -> None:
    """Per trial: held-out reward first -> last (95% intervals), user tokens per episode, user wait share."""
    rewards = reward_interval(uri, experiment)
    user_tokens = run_metric(uri, experiment, "rollout/user_tokens")
    user_s = run_metric(uri, experiment, "time/user_s")
    rollout_s = run_metric(uri, experiment, "time/rollout_s")
    calls = run_metric(uri, experiment, "rollout/role_calls/intention")
    failed = run_metric(uri, experiment, "rollout/failed_role_calls/intention")
    flat = run_metric(uri, experiment, "groups/frac_groups_no_signal")
    print("\n### Training users (held-out: scripted user and judge, greedy)\n")
    head = ["training user", "held-out reward, iteration 0 (95% CI)", "final (95% CI)", "learned",
            "success first -> final", "groups without signal", "user calls failed", "user tokens / episode",
            "user wait / rollout", "wall min"]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for run in runs:
        name, held = run["label"], [p for p in run["points"] if p.heldout_success is not None]
        evals = rewards.get(name, [])
        first, last = (evals[0], evals[-1]) if evals else (None, None)
        learned = "-" if not first or len(evals) < 2 else ("yes" if last[0] > first[2] else "no")
        tokens = user_tokens.get(name, [])
        waited, wall = user_s.get(name, []), rollout_s.get(name, [])
        share = (sum(waited) / episodes_per_iteration / sum(wall)) if waited and wall else None
        letter = which_user(name)
        print("| " + " | ".join([
            f"({letter}) {LABELS.get(letter, name)}" if letter != "-" else name,
            "-" if first is None else f"{first[0]:.3f} [{first[1]:.3f}, {first[2]:.3f}]",
            "-" if last is None else f"{last[0]:.3f} [{last[1]:.3f}, {last[2]:.3f}]", learned,
            "-" if not held else f"{held[0].heldout_success:.3f} -> {held[-1].heldout_success:.3f}",
            "-" if not flat.get(name) else f"{sum(flat[name]) / len(flat[name]):.2f}",
            "-" if not sum(calls.get(name, [])) else f"{sum(failed[name]) / sum(calls[name]):.2f}",
            "-" if not tokens else f"{sum(tokens) / (len(tokens) * episodes_per_iteration):.0f}",
            "-" if share is None else f"{share:.2f}",
            "-" if run["minutes"] is None else f"{run['minutes']:.1f}"]) + " |")
    print("\n(user wait / rollout: the seconds an episode waited for its user, averaged over the iteration's "
          "episodes, over the rollout's wall time; the episodes of an iteration run concurrently)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    parser.add_argument("--users", default="a,b,c,d", help="training users to run, of a,b,c,d")
    parser.add_argument("--name", default="llm_users", help="sweep name (Tune folder, MLflow experiment)")
    parser.add_argument("--output-dir", default="runs/llm_users")
    parser.add_argument("--data-root", default=str(DEFAULT_DATA_ROOT) if DEFAULT_DATA_ROOT.is_dir() else None,
                        help="the original UserRL data (adds its Intention tasks); default ../shared/userrl-data")
    parser.add_argument("--iterations", type=int, default=None)
    parser.add_argument("--eval-every", type=int, default=None)
    parser.add_argument("--eval-tasks", type=int, default=None, help="held-out tasks per gym entry")
    parser.add_argument("--sft-episodes", type=int, default=None)
    parser.add_argument("--sft-max-episodes", type=int, default=400, help="demonstrations of the SFT-only arm, at most")
    parser.add_argument("--no-sft-only", action="store_true", help="skip the SFT-only arm")
    parser.add_argument("--user-model", default="smollm2-135m", help="the LLM user of (b) and (d)")
    parser.add_argument("--simulator", default=None, help="(c)'s model folder; default: train it here")
    parser.add_argument("--simulator-iterations", type=int, default=0,
                        help="GRPO iterations of (c)'s `userrl train-user` after its SFT warm start")
    parser.add_argument("--user-url", default=None, help="(d): an OpenAI-compatible server instead of vLLM's here")
    parser.add_argument("--user-name", default=None, help="(d): the model name that server serves")
    parser.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE", help="more overrides of the base config")
    parser.add_argument("--report-only", action="store_true", help="only the report and tables of an earlier run")
    parser.add_argument("--after-sweep", action="store_true",
                        help="an earlier run's SFT-only arm, report and tables (its sweep ended or was stopped)")
    args = parser.parse_args()

    from userrl.commands.sweep import load_sweep

    users = [u.strip() for u in args.users.split(",") if u.strip()]
    if not users or set(users) - set(LABELS):
        parser.error(f"--users takes letters of {','.join(LABELS)}, got {args.users!r}")
    out = (ROOT / args.output_dir).resolve()
    data_root = Path(args.data_root).resolve() if args.data_root else None
    if data_root is None:
        print("[bench] no UserRL data folder: the builtin Intention tasks only (16 held-out)")
    common = [f"experiment.output_dir={out}", f"env.gyms={json.dumps(gym_entries(data_root))}",
              *([f"env.data_root={data_root}"] if data_root else [])]
    common += [f"{key}={value}" for key, value in (
        ("training.iterations", args.iterations), ("evaluation.interval", args.eval_every),
        ("evaluation.num_tasks", args.eval_tasks), ("sft.episodes", args.sft_episodes)) if value is not None]
    common += args.set

    if args.report_only or args.after_sweep:
        config = load_sweep(out / "sweep.yaml", common).config
        if args.after_sweep:
            run_sft_only(args, config, out, common)
        report_and_tables(args.name, config, out / "report", {})
        return 0
    timings: dict[str, float] = {}
    server = None
    try:
        simulator = None
        if "c" in users:
            tick = time.perf_counter()
            simulator = Path(args.simulator) if args.simulator else build_simulator(args, out)
            timings["simulator"] = time.perf_counter() - tick
        llm = None
        if "d" in users:
            server, llm = openai_user(args, out)
        sweep_file = write_sweep(out / "sweep.yaml", args.name, user_variants(users, args.user_model, simulator, llm))
        sweep = load_sweep(sweep_file, common)
        config = sweep.config

        tick = time.perf_counter()
        model = learning.warm_start(argparse.Namespace(dry_run=False, sft_episodes=config.sft.episodes), sweep, common)
        timings["warm start"] = time.perf_counter() - tick
        cmd = [learning.userrl_script(), "sweep", str(sweep_file), *common, "sft.enabled=false", f"policy.model={model}"]
        # (d)'s client reads its key from the environment; vLLM's server takes any.
        sweep_rc, timings["sweep"] = learning.run_command(cmd, f"sweep {args.name} (userrl sweep)",
                                                          {"OPENAI_API_KEY": "EMPTY"})
    finally:
        if server is not None:
            mua_acceptance.stop(server)
    if not args.no_sft_only:
        tick = time.perf_counter()
        run_sft_only(args, config, out, common)
        timings["SFT only"] = time.perf_counter() - tick
    report_and_tables(args.name, config, out / "report", timings)
    return sweep_rc


def run_sft_only(args: argparse.Namespace, config: Any, out: Path, common: list[str]) -> None:
    """The SFT-only arm, given the wall time of SFT + RL: the warm start and the trial against the scripted user
    (the agent's own compute: the other trials also wait for their users), or the trials' mean without one; all
    counted as MLflow counts a run (the processes' start-up is outside every one of them)."""
    uri = config.mlflow_uri()
    minutes = {which_user(name): m for name, m in learning.run_minutes(uri, args.name).items() if which_user(name) != "-"}
    rl = minutes.get("a") or sum(minutes.values()) / max(len(minutes), 1)
    (warm,) = learning.run_minutes(uri, f"{args.name}_{learning.WARM_START_NAME}").values()
    learning.sft_only(config, BASE, out, common, 60 * warm, config.sft.episodes * config.sft.epochs, 60 * (warm + rl),
                      args.name, args.sft_max_episodes)


def openai_user(args: argparse.Namespace, out: Path) -> tuple[subprocess.Popen | None, dict[str, Any]]:
    """(d)'s `env.llm`: vLLM's OpenAI server started here on a loopback port (returned, to stop), or --user-url."""
    from userrl.models import resolve_model

    url, served, server = args.user_url, args.user_name or args.user_model, None
    if url is None:
        port = mua_acceptance.free_port()
        url = f"http://127.0.0.1:{port}/v1"
        log = out / "vllm_server.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        command = mua_acceptance.server_command(resolve_model(args.user_model), port, 2048, 32)
        command[command.index("--served-model-name") + 1] = served
        print(f"\n$ {shlex.join(command)}  > {log}", flush=True)
        env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "2"}
        with log.open("w") as sink:
            server = subprocess.Popen(command, stdout=sink, stderr=subprocess.STDOUT, env=env, cwd=ROOT,
                                      start_new_session=True)
        print(f"[bench] vLLM's OpenAI server ready after {mua_acceptance.wait_ready(url, server, 600, log):.0f} s "
              f"at {url}")
    # As the local user client asks (userrl/users.py): greedy, 512 tokens, and a greedy reply that cannot be
    # used is not asked for again (the server would decode the same tokens).
    return server, {"base_url": url, "model": served, "temperature": 0.0, "max_tokens": 512, "attempts": 1,
                    "timeout_s": 300.0}


def report_and_tables(name: str, config: Any, report: Path, timings: dict[str, float]) -> None:
    """`userrl report` on the sweep's MLflow experiment, then the tables and the held-out plot."""
    uri = config.mlflow_uri()
    learning.run_command([learning.userrl_script(), "report", "--experiment", name, "--tracking-uri", uri, "--out", str(report)],
                  "report (userrl report)")
    runs = learning.curves(report)
    print(f"\n## What each training user teaches: {name}\n")
    learning.print_tables(runs)
    print_user_table(uri, name, runs, config.training.batch_size * config.training.group_size)
    png = learning.plot_heldout(runs, report / "bench_heldout_success.png", name)
    if timings:
        print("\n[bench] " + ", ".join(f"{k} {v / 60:.1f} min" for k, v in timings.items()))
    print(f"[bench] report: {report / 'report.md'}; PNGs in {report}" + (f" ({png.name})" if png else ""))


if __name__ == "__main__":
    sys.exit(main())
