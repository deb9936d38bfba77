"""Many episodes stepping at once against an OpenAI-compatible user (the path of bench/env_stepping.py).

The episodes run through EpisodePlayer, the plain class an EnvRunner plays its episodes with, so these
check what training does: one role client per runner, its requests pooled and bounded, and a failed
call costing only its own episode.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from aiohttp import web
from test_llm_client import Reply, ScriptedServer, make_client

from userrl.actors.env_runner import EpisodePlayer, EpisodeSpec, make_user_client
from userrl.envs import MultiTurnEnv, Task, load_tasks, openai_client
from userrl.protocols import ParsedTurn
from userrl.rollout import AgentTurn, EpisodePolicy, RolloutLimits
from userrl.trajectory import Trajectory

YES = Reply('{"thought": "the story says so", "response": "Yes"}')


class PortRecordingServer(ScriptedServer):
    """The scripted server, also noting the client port (so the TCP connection) of every request."""

    def __init__(self) -> None:
        self.ports: list[int] = []
        super().__init__()

    async def handle(self, request: web.Request) -> web.StreamResponse:
        self.ports.append(request.transport.get_extra_info("peername")[1])
        return await super().handle(request)


@pytest.fixture
def server():
    srv = PortRecordingServer()
    srv.default = YES
    srv.start()
    yield srv
    srv.stop()


class AskOnce(EpisodePolicy):
    """A stand-in agent that asks the oracle one yes/no question per turn."""

    def start(self, traj: Trajectory, task: Task, env: MultiTurnEnv) -> None:
        traj.messages = [dict(m) for m in task.prompt]

    async def act(self, traj: Trajectory, turn: int, limits: RolloutLimits, seed: int) -> AgentTurn | None:
        return AgentTurn(turn, ParsedTurn(calls=[("action", "Did someone die?")], n_tool_calls=1), "stop", 1)

    def observe(self, traj: Trajectory, turn: AgentTurn, feedback: str, limits: RolloutLimits) -> bool:
        return True


def player(server: ScriptedServer, **llm: Any) -> EpisodePlayer:
    """An EpisodePlayer with the runner's openai user backend, one question per episode."""
    spec = {"base_url": server.base_url, "api_key": "local", "model": "sim", "timeout_s": 10.0, **llm}
    return EpisodePlayer(AskOnce(), RolloutLimits(max_turns=1), None, 256, user_backend="openai",
                         user_client=make_user_client("openai", spec, None, None))


def specs(n: int, batch: str = "b") -> list[EpisodeSpec]:
    tasks = load_tasks("turtle", split="test")
    return [EpisodeSpec(tasks[i % len(tasks)], f"{batch}{i}", f"{batch}{i}") for i in range(n)]


def test_a_runner_reuses_its_pooled_connections_batch_after_batch(server: PortRecordingServer) -> None:
    server.release_at = 8  # hold the replies until all 8 are in flight: the batch really overlaps
    p = player(server)

    async def two_batches() -> list[Trajectory]:
        return await p.run(specs(8, "a")) + await p.run(specs(8, "b"))

    trajectories = asyncio.run(two_batches())
    assert [t.turns[0].feedback for t in trajectories] == ["Yes"] * 16
    assert server.max_in_flight == 8
    # One session per loop and endpoint: the second batch rides the first one's keep-alive connections;
    # a client (or connection) per call or per gym would have opened 16.
    assert len(server.ports) == 16 and len(set(server.ports)) == 8


def test_scripted_user_episodes_ask_no_model_on_a_runner_with_llm_users(server: PortRecordingServer) -> None:
    # Held-out evaluation against ground truth (evaluation.scripted_users): the same runner, whose users are
    # an LLM, plays these episodes against the gym's scripted oracle, and only these.
    tasks = load_tasks("turtle", split="test")[:4]
    mixed = [EpisodeSpec(t, f"e{i}", f"e{i}", scripted_users=i % 2 == 0) for i, t in enumerate(tasks)]
    trajectories = asyncio.run(player(server).run(mixed))
    assert len(server.requests) == 2
    for spec, t in zip(mixed, trajectories, strict=True):
        assert not t.aborted
        assert t.turns[0].role_calls == (0 if spec.scripted_users else 1)
        if not spec.scripted_users:
            assert t.turns[0].feedback == "Yes"


def test_role_calls_in_flight_are_bounded_by_max_concurrency(server: PortRecordingServer) -> None:
    server.default = Reply(YES.content, delay_s=0.05)
    server.release_at = 3
    trajectories = asyncio.run(player(server, max_concurrency=3).run(specs(12)))
    assert all(not t.aborted and t.turns[0].feedback == "Yes" for t in trajectories)
    assert len(server.requests) == 12 and server.max_in_flight == 3


def test_a_failed_role_call_costs_only_its_own_episode(server: PortRecordingServer) -> None:
    # The first three requests to arrive fail (500, no retry); all eight are in flight before any answers,
    # so the failures come back while the other calls are pending: those must go on, not be cancelled.
    server.script.extend([Reply(status=500)] * 3)
    server.release_at = 8
    trajectories = asyncio.run(player(server, attempts=1).run(specs(8)))
    failed = [t for t in trajectories if t.aborted]
    assert len(failed) == 3 and len(server.requests) == 8
    for t in failed:
        assert t.error == "role_call_failed:turtle_oracle"  # counted and named, never scored as an answer
        assert (t.turns[0].role_calls, t.turns[0].failed_role_calls) == (1, 1)
    ok = [t for t in trajectories if not t.aborted]
    assert [t.turns[0].feedback for t in ok] == ["Yes"] * 5
    assert all(t.turns[0].failed_role_calls == 0 for t in ok)


def test_a_request_does_not_hop_to_a_worker_thread(server: PortRecordingServer) -> None:
    # aiohttp's trust_env would read ~/.netrc in the loop's executor on every request: a thread hop per
    # role call on a runner's busy loop. The client resolves its proxy once instead.
    client = make_client(server.base_url)
    hops: list[Any] = []

    async def go() -> bool:
        loop = asyncio.get_running_loop()
        run_in_executor = loop.run_in_executor

        def counting(executor: Any, func: Any, *args: Any) -> Any:
            hops.append(func)
            return run_in_executor(executor, func, *args)

        loop.run_in_executor = counting  # type: ignore[method-assign]
        try:
            results = await asyncio.gather(*(client.complete_json("judge", "s", "u", dict) for _ in range(4)))
            return all(call.ok for _, call in results)
        finally:
            await client.aclose()

    assert asyncio.run(go())
    assert hops == []


def judge_once(client: Any) -> Any:
    """One judge call on a fresh event loop, the client closed after it: (value, RoleCall)."""

    async def go() -> Any:
        try:
            return await client.complete_json("judge", "s", "u", dict)
        finally:
            await client.aclose()

    return asyncio.run(go())


def test_a_body_that_is_not_a_chat_completion_is_a_malformed_reply(server: PortRecordingServer) -> None:
    server.default = Reply(raw_body='{"object": "chat.completion"}')
    client = make_client(server.base_url, attempts=2)

    value, call = judge_once(client)
    assert value is None and call.attempts == 2 and call.error == "empty_reply"
    server.default = Reply(raw_body="<html>bad gateway</html>")
    value, call = judge_once(client)
    assert value is None and call.error == "malformed_reply"


def test_the_proxy_comes_from_the_environment_and_no_proxy_exempts(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("http_proxy", "https_proxy", "no_proxy", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "all_proxy",
                 "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)
    assert openai_client._env_proxy("https://api.example.com/v1") is None
    monkeypatch.setenv("https_proxy", "http://proxy.internal:3128")
    assert openai_client._env_proxy("https://api.example.com/v1") == "http://proxy.internal:3128"
    assert openai_client._env_proxy("http://api.example.com/v1") is None  # no http_proxy set
    monkeypatch.setenv("no_proxy", "example.com")
    assert openai_client._env_proxy("https://api.example.com/v1") is None


def test_requests_go_through_the_environments_proxy(server: PortRecordingServer,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    # The scripted server stands in for the proxy: the endpoint's own host does not resolve, so the call
    # succeeds only if it was sent to the proxy.
    for name in ("no_proxy", "NO_PROXY", "HTTP_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("http_proxy", f"http://127.0.0.1:{server.port}")
    client = make_client("http://role-endpoint.invalid/v1", attempts=1)

    value, call = judge_once(client)
    assert call.ok and value == {"thought": "the story says so", "response": "Yes"}
    assert len(server.requests) == 1
