"""The hf engine's decoding step against context length: a cache that appends in place vs concatenation.

`--rows` requests with prompts of each `--contexts` length decode `--new-tokens` tokens together; printed
is the median time of one decoding step (all rows), for the engine's cache (`append`: each step writes
its column into spare room) and for transformers' DynamicLayer (`concat`: each step copies the whole cache
with the new column, the engine's cache before 2026-11-26), in one run on the same model and requests, and
whether both sampled the same tokens.

    .venv/bin/python bench/decode_context.py --model smollm2-135m --contexts 128 1024 4096
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from transformers import Cache
from transformers.cache_utils import DynamicLayer

from userrl.engines import hf
from userrl.engines.base import GenerationRequest
from userrl.models import resolve_model


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--contexts", type=int, nargs="+", default=[128, 1024, 4096])
    parser.add_argument("--rows", type=int, default=8)
    parser.add_argument("--new-tokens", type=int, default=33)
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: all cores)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    path = resolve_model(args.model)
    results: dict[str, dict[int, tuple[float, list[list[int]]]]] = {}
    append_cache = hf._new_cache
    for name, make_cache in (("concat", lambda: Cache(layer_class_to_replicate=ConcatLayer)), ("append", append_cache)):
        hf._new_cache = make_cache
        engine = hf.HFEngine(path, dtype=args.dtype, max_batch_size=args.rows)
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


if __name__ == "__main__":
    main()
