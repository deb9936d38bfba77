"""How well an EnvRunner overlaps simulated-user calls: N episodes of an LLM-user gym, one step each.

The simulated user is an OpenAI-compatible server started here (loopback only, in its own process so
that its work does not share this process's GIL) whose every reply takes `--delay` seconds. The
episodes run through EpisodePlayer, the plain class an EnvRunner actor plays its episodes with (one
shared role client, gyms built and stepped concurrently on one event loop); the agent side is a
stand-in that asks one question, so the time is the env's and the user's. Stepping the N episodes
concurrently should take about one delay, not N delays.

Each round plays N fresh episodes on the same loop and client, as a runner does batch after batch; the
first round also pays one-time costs (imports, first connections) and is shown apart. The breakdown
gives, relative to the start of the batch, when the agents took their turn (each gym is built and reset
first), when the role calls were made, when the server saw them (the last one: all in flight), when it
answered, when the client had parsed the replies and when the env had filed the feedback.

    .venv/bin/python bench/env_stepping.py --episodes 64 --delay 0.5
    .venv/bin/python bench/env_stepping.py --episodes 64 --delay 0.5 --transport openai-sdk --server thread

`--transport openai-sdk` sends the requests through the `openai` SDK as the role client did before
2026-11-26, and `--server thread` runs the server in a thread of this process as this benchmark did.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable
from typing import Any

from aiohttp import web

from userrl.actors.env_runner import EpisodePlayer, EpisodeSpec, make_user_client
from userrl.envs import MultiTurnEnv, Task, load_tasks
from userrl.envs.llm import RoleCall, UserModel
from userrl.envs.openai_client import OpenAIRoleClient
from userrl.protocols import ParsedTurn
from userrl.rollout import AgentTurn, EpisodePolicy, RolloutLimits
from userrl.trajectory import Trajectory

QUESTION = "Did someone die?"
#: The events of a batch, in the order each episode meets them, and how the breakdown names them.
KINDS = {"act": "agent turns (gyms built, reset)", "call": "role calls made", "recv": "server received",
         "send": "server replied", "reply": "replies parsed by the client", "observe": "feedback filed by the env"}


# ----------------------------------------------------------------------------------- the slow user


def slow_user_app(delay: float, events: list[tuple[str, float]]) -> web.Application:
    """An OpenAI-compatible chat app answering every oracle question 'Yes' after `delay` seconds."""

    async def chat(request: web.Request) -> web.Response:
        await request.read()
        events.append(("recv", time.time()))
        await asyncio.sleep(delay)
        events.append(("send", time.time()))
        content = json.dumps({"thought": "supported by the story", "response": "Yes"})
        return web.json_response({"id": "x", "object": "chat.completion", "created": 0, "model": "slow-user",
                                  "choices": [{"index": 0, "finish_reason": "stop",
                                               "message": {"role": "assistant", "content": content}}]})

    async def stats(request: web.Request) -> web.Response:
        drained = list(events)
        events.clear()
        return web.json_response(drained)

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    app.router.add_get("/stats", stats)
    return app


async def _serve(app: web.Application) -> int:
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    return site._server.sockets[0].getsockname()[1]  # the port the OS picked


def serve_forever(delay: float) -> None:
    """The server process: print the port, then serve until stdin closes (the benchmark ended)."""

    async def main() -> None:
        port = await _serve(slow_user_app(delay, []))
        print(port, flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)

    asyncio.run(main())


class SlowUser:
    """The slow user server, in its own process (default) or in a thread of this one."""

    def __init__(self, delay: float, where: str):
        self.process: subprocess.Popen | None = None
        if where == "process":
            self.process = subprocess.Popen([sys.executable, __file__, "--serve-user", str(delay)],
                                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
            port = int(self.process.stdout.readline())
        else:
            loop = asyncio.new_event_loop()
            threading.Thread(target=loop.run_forever, daemon=True).start()
            port = asyncio.run_coroutine_threadsafe(_serve(slow_user_app(delay, [])), loop).result()
        self.root = f"http://127.0.0.1:{port}"
        self.base_url = f"{self.root}/v1"

    def drain(self) -> list[tuple[str, float]]:
        """The server's (event, time) records since the last drain."""
        with urllib.request.urlopen(f"{self.root}/stats") as response:
            return [tuple(e) for e in json.load(response)]

    def close(self) -> None:
        """Stop the server process (closing its stdin ends it)."""
        if self.process is not None:
            self.process.stdin.close()
            self.process.wait(timeout=10)


# ----------------------------------------------------------------------------------- the client side


class SDKRoleClient(OpenAIRoleClient):
    """The role client with its requests sent through the `openai` SDK, as before 2026-11-26 (comparison only)."""

    _clients: dict[Any, Any] = {}

    async def _request(self, cfg: Any, system: str, user: str, max_tokens: int | None,
                       temperature: float | None) -> str:
        from openai import AsyncOpenAI

        loop = asyncio.get_running_loop()
        client = self._clients.get(loop)
        if client is None:
            client = self._clients[loop] = AsyncOpenAI(api_key=cfg.api_key, base_url=cfg.base_url, max_retries=0,
                                                       timeout=cfg.timeout_s)
        semaphore = self._clients.get((loop, "slots"))
        if semaphore is None:
            semaphore = self._clients[(loop, "slots")] = asyncio.Semaphore(cfg.max_concurrency)
        async with semaphore, asyncio.timeout(cfg.timeout_s):
            response = await client.chat.completions.create(
                model=cfg.model,
                messages=[{"role": "system", "content": system}, {"role": "user", "content": user}],
                temperature=cfg.temperature if temperature is None else temperature,
                max_tokens=cfg.max_tokens if max_tokens is None else max_tokens, timeout=cfg.timeout_s)
        return response.choices[0].message.content


class TimedRoleClient:
    """A RoleClient that records when each call was made and when its (parsed) reply came back."""

    def __init__(self, inner: Any, events: list[tuple[str, float]]):
        self.inner, self.events = inner, events

    @property
    def user_model(self) -> UserModel:
        """The inner client's model (a UserBackend's)."""
        return self.inner.user_model

    async def complete_json(self, role: str, system: str, user: str, validate: Callable[[dict[str, Any]], Any],
                            **kwargs: Any) -> tuple[Any, RoleCall]:
        """The inner client's complete_json, timed."""
        self.events.append(("call", time.time()))
        try:
            return await self.inner.complete_json(role, system, user, validate, **kwargs)
        finally:
            self.events.append(("reply", time.time()))

    async def complete_text(self, role: str, system: str, user: str, **kwargs: Any) -> tuple[Any, RoleCall]:
        """The inner client's complete_text, timed."""
        self.events.append(("call", time.time()))
        try:
            return await self.inner.complete_text(role, system, user, **kwargs)
        finally:
            self.events.append(("reply", time.time()))


class AskOnce(EpisodePolicy):
    """A stand-in agent whose every turn asks the oracle the same yes/no question."""

    def __init__(self, events: list[tuple[str, float]]):
        self.events = events

    def start(self, traj: Trajectory, task: Task, env: MultiTurnEnv) -> None:
        """The task's opening messages, untokenised (no model here)."""
        traj.messages = [dict(m) for m in task.prompt]

    async def act(self, traj: Trajectory, turn: int, limits: RolloutLimits, seed: int) -> AgentTurn | None:
        """One `[action]` question."""
        self.events.append(("act", time.time()))
        return AgentTurn(turn, ParsedTurn(calls=[("action", QUESTION)], n_tool_calls=1), "stop", 1)

    def observe(self, traj: Trajectory, turn: AgentTurn, feedback: str, limits: RolloutLimits) -> bool:
        """Note when the feedback arrived."""
        self.events.append(("observe", time.time()))
        traj.messages.append({"role": "user", "content": feedback})
        return True


def make_player(args: argparse.Namespace, base_url: str, events: list[tuple[str, float]],
                concurrent: int) -> EpisodePlayer:
    """An EpisodePlayer with the runner's openai user backend (one shared role client), timed."""
    llm = {"base_url": base_url, "api_key": "local", "model": "slow-user", "timeout_s": 30,
           "max_concurrency": args.max_concurrency}
    client = make_user_client("openai", llm, None, None)
    if args.transport == "openai-sdk":
        client = SDKRoleClient(client.config)
    return EpisodePlayer(AskOnce(events), RolloutLimits(max_turns=1), None, concurrent,
                         user_backend="openai", user_client=TimedRoleClient(client, events))


def breakdown(start: float, end: float, events: list[tuple[str, float]]) -> dict[str, float]:
    """Seconds from the start of the batch to the first/last of each kind of event, and peak in flight.

    step_s runs from the last agent turn (every gym built, reset and stepping) to the last feedback filed.
    """
    times: dict[str, list[float]] = {}
    for kind, t in events:
        times.setdefault(kind, []).append(t)
    row = {"run_s": end - start}
    for kind in KINDS:
        row[f"first_{kind}"] = min(times[kind]) - start
        row[f"last_{kind}"] = max(times[kind]) - start
    row["step_s"] = row["last_observe"] - row["last_act"]
    in_flight = peak = 0
    for kind, _ in sorted((e for e in events if e[0] in ("recv", "send")), key=lambda e: (e[1], e[0] == "recv")):
        in_flight += 1 if kind == "recv" else -1
        peak = max(peak, in_flight)
    row["peak_in_flight"] = peak
    return row


async def play_rounds(args: argparse.Namespace, user: SlowUser, tasks: list[Task], rounds: int, episodes: int,
                      concurrent: int) -> list[dict[str, float]]:
    """`rounds` batches of `episodes` one-step episodes on one player; a breakdown per round."""
    events: list[tuple[str, float]] = []
    player = make_player(args, user.base_url, events, concurrent)
    rows = []
    for r in range(rounds):
        specs = [EpisodeSpec(tasks[i % len(tasks)], f"r{r}e{i}", f"r{r}e{i}") for i in range(episodes)]
        events.clear()
        user.drain()
        start = time.time()
        trajectories = await player.run(specs)
        end = time.time()
        bad = [t for t in trajectories if t.aborted or t.turns[0].feedback != "Yes"]
        assert not bad, (bad[0].error, bad[0].turns[:1])
        rows.append(breakdown(start, end, events + user.drain()))
    return rows


def main() -> None:
    """Run the benchmark and print the table and the breakdown."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=64)
    parser.add_argument("--delay", type=float, default=0.5)
    parser.add_argument("--rounds", type=int, default=6, help="batches of --episodes timed; the first is cold")
    parser.add_argument("--sequential-episodes", type=int, default=8, help="episodes timed one at a time (0: skip)")
    parser.add_argument("--max-concurrency", type=int, default=64, help="the role client's requests in flight")
    parser.add_argument("--transport", choices=("aiohttp", "openai-sdk"), default="aiohttp")
    parser.add_argument("--server", choices=("process", "thread"), default="process")
    parser.add_argument("--serve-user", type=float, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_user is not None:
        serve_forever(args.serve_user)
        return
    user = SlowUser(args.delay, args.server)
    try:
        tasks = load_tasks("turtle", split="test")
        rows = asyncio.run(play_rounds(args, user, tasks, args.rounds, args.episodes, args.episodes))
        sequential = None
        if args.sequential_episodes:
            (seq,) = asyncio.run(play_rounds(args, user, tasks, 1, args.sequential_episodes, 1))
            sequential = seq["run_s"]  # one episode at a time: the whole batch is the sum of its steps
    finally:
        user.close()
    cold, warm = rows[0], rows[1:] or rows
    median = {key: statistics.median(r[key] for r in warm) for key in warm[0]}
    print(f"transport {args.transport}, server in a {args.server}, {args.episodes} episodes, "
          f"reply delay {args.delay:.2f} s, max_concurrency {args.max_concurrency}")
    per_round = ", ".join(f"{r['step_s']:.2f}" for r in rows)
    print(f"step s per round: {per_round} (the first is cold)\n")
    print(f"{'mode':<24}{'episodes':>10}{'step s':>10}{'run s':>10}{'s per episode-step':>20}")
    for name, row in ((f"concurrent, median of {len(warm)}", median), ("concurrent, cold", cold)):
        print(f"{name:<24}{args.episodes:>10}{row['step_s']:>10.2f}{row['run_s']:>10.2f}"
              f"{row['step_s'] / args.episodes:>20.3f}")
    if sequential is not None:
        per_step = sequential / args.sequential_episodes
        print(f"{'sequential':<24}{args.sequential_episodes:>10}{sequential:>10.2f}{'':>10}{per_step:>20.3f}")
    print("\nbreakdown, s after the batch started (first .. last of its episodes):")
    print(f"{'':<36}{'median':>16}{'cold':>16}")
    for kind, label in KINDS.items():
        spans = [f"{r[f'first_{kind}']:.3f}..{r[f'last_{kind}']:.3f}" for r in (median, cold)]
        print(f"{label:<36}{spans[0]:>16}{spans[1]:>16}")
    print(f"{'peak requests in flight':<36}{median['peak_in_flight']:>16.0f}{cold['peak_in_flight']:>16.0f}")
    print("\nstep s = last feedback filed - last agent turn; run s = the whole batch (gyms built too)")
    if sequential is not None:
        print(f"\nsequential estimate for {args.episodes} episodes: {per_step * args.episodes:.1f} s; "
              f"overlap speed-up {per_step * args.episodes / median['step_s']:.1f}x")


if __name__ == "__main__":
    main()
