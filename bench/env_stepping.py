"""How well an EnvRunner overlaps simulated-user calls: N episodes of an LLM-user gym, one step each.

The simulated user is an OpenAI-compatible server started here (loopback only) whose every reply takes
`--delay` seconds. Stepping the N episodes concurrently should take about one delay, not N delays.

    .venv/bin/python bench/env_stepping.py --episodes 64 --delay 0.5
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import threading
import time

from aiohttp import web

from userrl.envs import load_tasks, make_env
from userrl.envs.openai_client import LLMConfig, make_role_client


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_slow_user(delay: float) -> tuple[str, dict]:
    """An OpenAI-compatible chat server answering every oracle question 'Yes' after `delay` seconds."""
    stats = {"in_flight": 0, "max_in_flight": 0, "requests": 0}

    async def chat(request: web.Request) -> web.Response:
        stats["requests"] += 1
        stats["in_flight"] += 1
        stats["max_in_flight"] = max(stats["max_in_flight"], stats["in_flight"])
        await asyncio.sleep(delay)
        stats["in_flight"] -= 1
        content = json.dumps({"thought": "supported by the story", "response": "Yes"})
        return web.json_response({"id": "x", "object": "chat.completion", "created": 0, "model": "slow-user",
                                  "choices": [{"index": 0, "finish_reason": "stop",
                                               "message": {"role": "assistant", "content": content}}]})

    port = _free_port()
    loop = asyncio.new_event_loop()
    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)

    async def serve() -> None:
        runner = web.AppRunner(app)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", port).start()

    threading.Thread(target=loop.run_forever, daemon=True).start()
    asyncio.run_coroutine_threadsafe(serve(), loop).result()
    return f"http://127.0.0.1:{port}/v1", stats


async def step_all(episodes: int, base_url: str, concurrent: bool) -> float:
    """Seconds to take one question step in each of `episodes` Turtle episodes."""
    client = make_role_client(LLMConfig(base_url=base_url, api_key="local", model="slow-user", timeout_s=30,
                                        max_concurrency=256))
    tasks = load_tasks("turtle", split="test")
    envs = [make_env("turtle", tasks[i % len(tasks)], backend="openai", llm=client) for i in range(episodes)]
    for env in envs:
        env.reset()
    start = time.perf_counter()
    if concurrent:
        results = await asyncio.gather(*(env.astep("[action] Did someone die?") for env in envs))
    else:
        results = [await env.astep("[action] Did someone die?") for env in envs]
    seconds = time.perf_counter() - start
    assert all(r.observation["feedback"] == "Yes" for r in results), results[0].observation
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=64)
    parser.add_argument("--delay", type=float, default=0.5)
    parser.add_argument("--sequential-episodes", type=int, default=8, help="episodes timed one at a time")
    args = parser.parse_args()
    base_url, stats = start_slow_user(args.delay)
    concurrent = asyncio.run(step_all(args.episodes, base_url, concurrent=True))
    peak = stats["max_in_flight"]
    sequential = asyncio.run(step_all(args.sequential_episodes, base_url, concurrent=False))
    per_step = sequential / args.sequential_episodes
    print(f"{'mode':<12}{'episodes':>10}{'reply delay s':>15}{'wall s':>10}{'s per episode-step':>20}")
    print(f"{'concurrent':<12}{args.episodes:>10}{args.delay:>15.2f}{concurrent:>10.2f}{concurrent / args.episodes:>20.3f}")
    print(f"{'sequential':<12}{args.sequential_episodes:>10}{args.delay:>15.2f}{sequential:>10.2f}{per_step:>20.3f}")
    print(f"\nsequential estimate for {args.episodes} episodes: {per_step * args.episodes:.1f} s; "
          f"overlap speed-up {per_step * args.episodes / concurrent:.1f}x; peak user calls in flight {peak}")


if __name__ == "__main__":
    main()
