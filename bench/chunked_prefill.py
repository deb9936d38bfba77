"""What a long prompt costs the rows already decoding on the hf engine, with and without chunked prefill.

`--streams` requests decode `--new-tokens` tokens each; once every one of them has its first token, a
request with a `--long`-token prompt arrives (one at a time, `--arrivals` of them, each after the last
one's first token). Printed per setting, side by side in one run on the same model and requests: the
running rows' largest gap between two tokens (the stall a long prefill causes), their median gap, the long
requests' time to first token, and the whole run's time. `--chunks` lists the `prefill_chunk_tokens`
settings; the largest int, or `off`, is one pass per prefill (the engine before chunking).

    .venv/bin/python bench/chunked_prefill.py --model smollm2-135m --chunks off 512 256
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time

import torch

from userrl.engines.base import GenerationRequest
from userrl.engines.hf import HFEngine
from userrl.models import resolve_model

ONE_PASS = 1 << 30


def run(model_path: str, chunk: int, args: argparse.Namespace) -> dict[str, float]:
    """One setting: the running rows' token gaps and the long prompts' time to first token."""
    engine = HFEngine(model_path, dtype=args.dtype, prefill_chunk_tokens=chunk, max_batch_size=args.streams + 1)
    engine.generate([GenerationRequest([1, 2, 3], 2, seed=0)])  # warm-up: first-call costs out of the figures
    stamps: list[list[float]] = [[] for _ in range(args.streams)]
    started = threading.Event()

    def on_token(stream: int):
        def record(token: int) -> None:  # on the scheduler thread: never block it
            stamps[stream].append(time.monotonic())
            if all(stamps):
                started.set()
        return record

    begin = time.monotonic()
    streams = [engine.submit(GenerationRequest([1] + [200 + 7 * s + i for i in range(32)], args.new_tokens,
                                               temperature=1.0, seed=s), on_token=on_token(s))
               for s in range(args.streams)]
    started.wait()
    ttft = []
    for arrival in range(args.arrivals):
        prompt = [1] + [300 + (arrival * 13 + i) % 5000 for i in range(args.long - 1)]
        sent = time.monotonic()
        first = threading.Event()
        future = engine.submit(GenerationRequest(prompt, 4, temperature=1.0, seed=100 + arrival),
                               on_token=lambda token, first=first: first.set())
        first.wait()
        ttft.append(time.monotonic() - sent)
        future.result()
    for future in streams:
        future.result()
    total = time.monotonic() - begin
    engine.close()
    gaps = [b - a for times in stamps for a, b in zip(times, times[1:], strict=False)]
    return {"max_gap": max(gaps), "median_gap": statistics.median(gaps), "ttft": statistics.median(ttft),
            "total": total, "chunks": engine.stats["prefill_chunks"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--chunks", nargs="+", default=["off", "512"])
    parser.add_argument("--streams", type=int, default=4, help="rows decoding when the long prompts arrive")
    parser.add_argument("--new-tokens", type=int, default=160)
    parser.add_argument("--long", type=int, default=2048, help="tokens of each arriving prompt")
    parser.add_argument("--arrivals", type=int, default=3)
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: all cores)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    model_path = resolve_model(args.model)
    rows = []
    for setting in args.chunks:
        chunk = ONE_PASS if setting == "off" else int(setting)
        rows.append((setting, run(model_path, chunk, args)))
    base = rows[0][1]
    print(f"\n{args.model} {args.dtype}, {args.streams} rows decoding {args.new_tokens} tokens, "
          f"{args.arrivals} arrivals of {args.long}-token prompts, torch threads {torch.get_num_threads()}")
    print("| prefill_chunk_tokens | running rows: largest token gap s | median gap s | long prompt: time to "
          "first token s | prefill passes | whole run s | largest gap vs first row |")
    print("|---|---|---|---|---|---|---|")
    for setting, r in rows:
        print(f"| {setting} | {r['max_gap']:.3f} | {r['median_gap']:.3f} | {r['ttft']:.3f} | {r['chunks']} | "
              f"{r['total']:.2f} | {r['max_gap'] / base['max_gap']:.2f}x |")


if __name__ == "__main__":
    main()
