"""Load on the OpenAI-compatible endpoint: N concurrent clients for a bounded time, loopback only.

Starts the Serve app on a free loopback port (or uses --url, which must be a loopback address), runs
`--clients` asyncio clients of the official `openai` package, each sending chat completions back to
back for `--duration` seconds, and prints throughput, latency percentiles and the error count (exit
status 1 when any request failed).

`--ttft`: instead of the load, one client sends streamed requests one at a time and prints the time to
the first content delta, the time to the end of the stream and their ratio (medians), next to the
latency of the same requests not streamed.

    .venv/bin/python bench/serve_load.py --model tiny-random --clients 8 --duration 30
    .venv/bin/python bench/serve_load.py --model smollm2-135m --ttft
    .venv/bin/python bench/serve_load.py --model smollm2-135m --ttft --engine vllm --max-model-len 1024
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import sys
import time
from urllib.parse import urlparse

import numpy as np

LOOPBACK = {"127.0.0.1", "localhost", "::1"}
#: Asks for more than 32 tokens, so that a real model's reply is not over before max_tokens.
TTFT_PROMPT = "Write a long story about a dragon who learns to cook, with many details."
PROMPTS = ["Say hello.", "What is 2 + 3?", "Name a colour.", "Give me one word that rhymes with cat.",
           "Ask me a clarifying question about my trip.", "Summarize: the cat sat on the mat."]


def free_port() -> int:
    """A free TCP port on the loopback interface."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


async def client_loop(client, model: str, index: int, deadline: float, max_tokens: int,
                      results: list[tuple[float, int]], errors: list[str]) -> None:
    """One client: requests back to back until the deadline."""
    n = 0
    while time.perf_counter() < deadline:
        start = time.perf_counter()
        try:
            reply = await client.chat.completions.create(
                model=model, max_tokens=max_tokens, temperature=0.7, seed=index * 100_000 + n,
                messages=[{"role": "user", "content": PROMPTS[(index + n) % len(PROMPTS)]}])
            results.append((time.perf_counter() - start, reply.usage.completion_tokens))
        except Exception as error:  # noqa: BLE001 - every failure is counted and reported
            errors.append(f"{type(error).__name__}: {error}")
        n += 1


async def run_load(url: str, model: str, clients: int, duration: float, max_tokens: int) -> dict[str, float]:
    """Drive the endpoint and summarize."""
    import openai

    client = openai.AsyncOpenAI(base_url=f"{url}/v1", api_key=os.environ.get("USERRL_API_KEY", "none"),
                                max_retries=0, timeout=300)
    results: list[tuple[float, int]] = []
    errors: list[str] = []
    began = time.perf_counter()
    await asyncio.gather(*(client_loop(client, model, i, began + duration, max_tokens, results, errors)
                           for i in range(clients)))
    wall = time.perf_counter() - began
    latencies = np.array([r[0] for r in results]) if results else np.array([float("nan")])
    for message in sorted(set(errors))[:5]:
        print("error:", message, file=sys.stderr)
    return {"clients": clients, "requests": len(results), "errors": len(errors), "wall_s": wall,
            "req_per_s": len(results) / wall, "tok_per_s": sum(r[1] for r in results) / wall,
            "p50_s": float(np.percentile(latencies, 50)), "p90_s": float(np.percentile(latencies, 90)),
            "p99_s": float(np.percentile(latencies, 99))}


async def run_ttft(url: str, model: str, requests: int, max_tokens: int) -> dict[str, float]:
    """Streamed requests one at a time: medians of the time to the first content delta, to the stream's
    end, of their ratio, and of the latency of the same requests not streamed."""
    import openai

    client = openai.AsyncOpenAI(base_url=f"{url}/v1", api_key=os.environ.get("USERRL_API_KEY", "none"),
                                max_retries=0, timeout=300)
    first, full, unary, tokens = [], [], [], []
    for n in range(requests):
        ask = {"model": model, "max_tokens": max_tokens, "temperature": 0.7, "seed": n,
               "messages": [{"role": "user", "content": TTFT_PROMPT}]}
        start, first_at = time.perf_counter(), None
        stream = await client.chat.completions.create(**ask, stream=True, stream_options={"include_usage": True})
        async for chunk in stream:
            if first_at is None and chunk.choices and chunk.choices[0].delta.content:
                first_at = time.perf_counter() - start
            if chunk.usage is not None:
                tokens.append(chunk.usage.completion_tokens)
        full.append(time.perf_counter() - start)
        first.append(full[-1] if first_at is None else first_at)  # no content at all: nothing came earlier
        start = time.perf_counter()
        await client.chat.completions.create(**ask)
        unary.append(time.perf_counter() - start)
    return {"requests": requests, "completion_tokens": float(np.median(tokens)), "ttft_s": float(np.median(first)),
            "full_s": float(np.median(full)), "ratio": float(np.median(np.array(first) / np.array(full))),
            "unary_s": float(np.median(unary))}


def print_ttft(model: str, s: dict[str, float]) -> None:
    """The --ttft table."""
    print(f"\nmodel {model}, {s['requests']} streamed requests one at a time\n")
    print("| model | completion tokens | time to first token s | full completion s | ratio | not streamed s |")
    print("|---|---|---|---|---|---|")
    print(f"| {model} | {s['completion_tokens']:.0f} | {s['ttft_s']:.3f} | {s['full_s']:.3f} | {s['ratio']:.3f} | "
          f"{s['unary_s']:.3f} |")


def main(argv: list[str] | None = None) -> int:
    """Start the app (or use --url), run the load, print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="tiny-random", help="model name or folder to serve")
    parser.add_argument("--url", help="an already running endpoint (loopback only), e.g. http://127.0.0.1:8000")
    parser.add_argument("--model-name", help="model id to request with --url (default: GET /v1/models)")
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--duration", type=float, default=30.0, help="seconds of load")
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--replicas", type=int, default=1)
    parser.add_argument("--max-batch-size", type=int, default=16)
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--ttft", action="store_true", help="measure streaming's time to first token instead")
    parser.add_argument("--ttft-requests", type=int, default=5, help="streamed requests with --ttft")
    parser.add_argument("--num-threads", type=int, help="torch threads of a replica (default: all cores)")
    parser.add_argument("--engine", choices=("hf", "vllm"), default="hf", help="the replicas' engine")
    parser.add_argument("--max-model-len", type=int, default=2048, help="the replicas' context")
    args = parser.parse_args(argv)
    if args.ttft_requests < 1 or args.clients < 1 or args.max_tokens < 1:
        parser.error("--ttft-requests, --clients and --max-tokens must be at least 1")
    measure = ((lambda url, model: run_ttft(url, model, args.ttft_requests, args.max_tokens)) if args.ttft else
               (lambda url, model: run_load(url, model, args.clients, args.duration, args.max_tokens)))

    if args.url:
        host = urlparse(args.url).hostname
        if host not in LOOPBACK:
            parser.error(f"--url must be a loopback address ({', '.join(sorted(LOOPBACK))}), not {host!r}")
        url = args.url.rstrip("/")
        import openai

        model = args.model_name or openai.OpenAI(base_url=f"{url}/v1", api_key=os.environ.get(
            "USERRL_API_KEY", "none")).models.list().data[0].id
        summary = asyncio.run(measure(url, model))
    else:
        os.environ.setdefault("RAY_AUTH_MODE", "disabled")
        import ray
        from ray import serve

        from userrl.serving.app import start
        from userrl.serving.config import ServeConfig

        ray.init(num_cpus=max(4, os.cpu_count() or 1), logging_config=ray.LoggingConfig(log_level="ERROR"))
        config = ServeConfig(model=args.model, model_name="bench", port=free_port(), num_replicas=args.replicas,
                             max_batch_size=args.max_batch_size, dtype=args.dtype, num_threads=args.num_threads,
                             num_cpus_per_replica=1, play={"enabled": False}, engine=args.engine,
                             max_model_len=args.max_model_len)
        try:
            url = start(config)
            # One request first so that engine warm-up is not counted.
            asyncio.run(run_load(url, "bench", 1, 0.01, args.max_tokens))
            summary = asyncio.run(measure(url, "bench"))
        finally:
            serve.shutdown()
            ray.shutdown()
        model = f"{args.model} ({args.engine})"

    if args.ttft:
        print_ttft(model, summary)
        return 0
    print(f"\nmodel {model}, {args.clients} clients, {args.duration:.0f} s, max_tokens {args.max_tokens}\n")
    print("| clients | requests | errors | req/s | completion tok/s | p50 s | p90 s | p99 s |")
    print("|---|---|---|---|---|---|---|---|")
    s = summary
    print(f"| {s['clients']} | {s['requests']} | {s['errors']} | {s['req_per_s']:.2f} | {s['tok_per_s']:.1f} | "
          f"{s['p50_s']:.2f} | {s['p90_s']:.2f} | {s['p99_s']:.2f} |")
    return 1 if s["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
