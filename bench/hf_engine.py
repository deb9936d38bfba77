"""Micro-benchmarks of the hf engine, one process, no Ray; each prints its settings side by side in one run.

`chunked-prefill`: what a long prompt costs the rows already decoding. `--streams` requests decode
`--new-tokens` tokens each; once every one has its first token, `--arrivals` requests with `--long`-token
prompts arrive one after another. Per `prefill_chunk_tokens` setting (`--chunks`; `off` is one pass per
prefill, the engine before chunking): the running rows' largest and median gap between two tokens, the
long prompts' time to first token, the prefill passes and the whole run's time.

`decode-context`: one decoding step against context length. `--rows` requests with prompts of each
`--contexts` length decode `--new-tokens` tokens together; the median time of a step, for the engine's
cache (`append`: each step writes its column into spare room) and for transformers' DynamicLayer
(`concat`: each step copies the whole cache, the engine's cache before 2026-11-26), and whether both
sampled the same tokens.

    .venv/bin/python bench/hf_engine.py chunked-prefill --model smollm2-135m --chunks off 512 256
    .venv/bin/python bench/hf_engine.py decode-context --model smollm2-135m --contexts 128 1024 4096
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time

import torch
from transformers import Cache
from transformers.cache_utils import DynamicLayer

from userrl.engines import hf
from userrl.engines.base import GenerationRequest
from userrl.models import resolve_model

ONE_PASS = 1 << 30


def long_prompt_arrivals(model_path: str, chunk: int, args: argparse.Namespace) -> dict[str, float]:
    """One prefill_chunk_tokens setting: the running rows' token gaps and the long prompts' time to first token."""
    engine = hf.HFEngine(model_path, dtype=args.dtype, prefill_chunk_tokens=chunk, max_batch_size=args.streams + 1)
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


def chunked_prefill(model_path: str, args: argparse.Namespace) -> None:
    """The table of `chunked-prefill`."""
    rows = [(setting, long_prompt_arrivals(model_path, ONE_PASS if setting == "off" else int(setting), args))
            for setting in args.chunks]
    base = rows[0][1]
    print(f"\n{args.model} {args.dtype}, {args.streams} rows decoding {args.new_tokens} tokens, "
          f"{args.arrivals} arrivals of {args.long}-token prompts, torch threads {torch.get_num_threads()}")
    print("| prefill_chunk_tokens | running rows: largest token gap s | median gap s | long prompt: time to "
          "first token s | prefill passes | whole run s | largest gap vs first row |")
    print("|---|---|---|---|---|---|---|")
    for setting, r in rows:
        print(f"| {setting} | {r['max_gap']:.3f} | {r['median_gap']:.3f} | {r['ttft']:.3f} | {r['chunks']} | "
              f"{r['total']:.2f} | {r['max_gap'] / base['max_gap']:.2f}x |")


class ConcatLayer(DynamicLayer):
    """transformers' DynamicLayer, with the row and column selection the engine needs."""

    def select(self, rows: list[int], first: int) -> None:
        self.keys, self.values = self.keys[rows, :, first:], self.values[rows, :, first:]


def decode_step_ms(engine: hf.HFEngine, context: int, args: argparse.Namespace) -> tuple[float, list[list[int]]]:
    """Median ms of one decoding step of `args.rows` rows at `context` prompt tokens, and the sampled tokens."""
    requests = [GenerationRequest([1] + [300 + (r * 7 + i) % 4000 for i in range(context - 1)], args.new_tokens,
                                  temperature=1.0, seed=r) for r in range(args.rows)]
    stamps: list[float] = []

    def stamp(token: int) -> None:  # returns None: a sink that returns False ends its row
        stamps.append(time.monotonic())

    futures = [engine.submit(request, on_token=stamp if r == 0 else None) for r, request in enumerate(requests)]
    outputs = [future.result() for future in futures]
    return (statistics.median(b - a for a, b in zip(stamps, stamps[1:], strict=False)) * 1000,
            [output.token_ids for output in outputs])


def decode_context(model_path: str, args: argparse.Namespace) -> None:
    """The table of `decode-context`."""
    results: dict[str, dict[int, tuple[float, list[list[int]]]]] = {}
    append_cache = hf._new_cache
    for name, make_cache in (("concat", lambda: Cache(layer_class_to_replicate=ConcatLayer)), ("append", append_cache)):
        hf._new_cache = make_cache
        engine = hf.HFEngine(model_path, dtype=args.dtype, max_batch_size=args.rows)
        engine.generate([GenerationRequest([1, 2, 3], 2, seed=0)])  # warm-up
        results[name] = {context: decode_step_ms(engine, context, args) for context in args.contexts}
        engine.close()
    hf._new_cache = append_cache
    print(f"\n{args.model} {args.dtype}, {args.rows} rows, {args.new_tokens} new tokens each, torch threads "
          f"{torch.get_num_threads()}")
    print("| prompt tokens | decoding step ms, concat (before) | append in place | ratio | same tokens |")
    print("|---|---|---|---|---|")
    for context in args.contexts:
        (before, tokens_before), (after, tokens_after) = results["concat"][context], results["append"][context]
        print(f"| {context} | {before:.0f} | {after:.0f} | {before / after:.2f}x | {tokens_before == tokens_after} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: all cores)")
    commands = parser.add_subparsers(dest="command", required=True)
    prefill = commands.add_parser("chunked-prefill", help="a long prompt arriving while rows decode")
    prefill.add_argument("--chunks", nargs="+", default=["off", "512"])
    prefill.add_argument("--streams", type=int, default=4, help="rows decoding when the long prompts arrive")
    prefill.add_argument("--new-tokens", type=int, default=160)
    prefill.add_argument("--long", type=int, default=2048, help="tokens of each arriving prompt")
    prefill.add_argument("--arrivals", type=int, default=3)
    context = commands.add_parser("decode-context", help="a decoding step against context length")
    context.add_argument("--contexts", type=int, nargs="+", default=[128, 1024, 4096])
    context.add_argument("--rows", type=int, default=8)
    context.add_argument("--new-tokens", type=int, default=33)
    for command in (prefill, context):
        command.add_argument("--model", default="smollm2-135m")
        command.add_argument("--dtype", default="float32")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    bench = chunked_prefill if args.command == "chunked-prefill" else decode_context
    bench(resolve_model(args.model), args)


if __name__ == "__main__":
    main()
