"""OpenAIRoleClient over real HTTP, against a scripted OpenAI-compatible server on 127.0.0.1.

Spec: docs/spec/GYMS.md §0.6.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import logging
import socket
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from aiohttp import web
from chat_server import LoopbackChatServer

from userrl.envs.json_extract import as_bool, as_int, as_label
from userrl.envs.llm import RoleCall, RoleClient
from userrl.envs.openai_client import DEFAULT_BASE_URL, LLMConfig, OpenAIRoleClient, make_role_client

SECRET = "sk-test-secret-0123456789"


@dataclass
class Reply:
    """One scripted server reply."""

    content: str | None = '{"ok": true}'
    status: int = 200
    delay_s: float = 0.0
    error_message: str = "scripted failure"
    raw_body: str | None = None  # sent verbatim instead of a chat completion


class ScriptedServer(LoopbackChatServer):
    """POST /v1/chat/completions in a background thread; replies come from `script`, then `default`."""

    cancel_abandoned = True  # a reply the client gave up on (timeout test) must not keep sleeping

    def __init__(self) -> None:
        self.script: deque[Reply] = deque()
        self.default = Reply()
        self.requests: list[dict[str, Any]] = []
        self.auth_headers: list[str] = []
        self.in_flight = 0
        self.max_in_flight = 0
        # Optional barrier: hold replies until this many requests are in flight at once (or 2 s passed),
        # so overlap tests check concurrency without depending on how fast a loaded machine is.
        self.release_at: int | None = None
        self._released: asyncio.Event | None = None
        super().__init__()

    async def on_start(self) -> None:
        self._released = asyncio.Event()

    async def handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.requests.append(body)
        self.auth_headers.append(request.headers.get("Authorization", ""))
        reply = self.script.popleft() if self.script else self.default
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            if self.release_at is not None and self._released is not None:
                if self.in_flight >= self.release_at:
                    self._released.set()
                try:
                    await asyncio.wait_for(self._released.wait(), 2.0)
                except TimeoutError:
                    self._released.set()  # the deadline is shared: a client that is not concurrent fails fast
            if reply.delay_s:
                await asyncio.sleep(reply.delay_s)
        finally:
            self.in_flight -= 1
        if reply.raw_body is not None:
            return web.Response(text=reply.raw_body, content_type="application/json")
        if reply.status != 200:
            error = {"message": reply.error_message, "type": "server_error", "code": None}
            return web.json_response({"error": error}, status=reply.status)
        return web.json_response(
            {
                "id": f"chatcmpl-{len(self.requests)}",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": body.get("model", ""),
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": reply.content},
                        "finish_reason": "stop",
                    }
                ],
                "usage": {"prompt_tokens": 3, "completion_tokens": 5, "total_tokens": 8},
            }
        )


@pytest.fixture
def server():
    srv = ScriptedServer()
    srv.start()
    yield srv
    srv.stop()


def make_client(base_url: str, **overrides: Any) -> OpenAIRoleClient:
    settings: dict[str, Any] = {
        "base_url": base_url,
        "api_key": SECRET,
        "timeout_s": 2.0,
        "retry_pause_s": 0.01,
    }
    settings.update(overrides)
    return OpenAIRoleClient(LLMConfig(**settings))


def call_json(
    client: OpenAIRoleClient, validate: Callable[[dict[str, Any]], Any] = dict, **kwargs: Any
) -> tuple[Any, RoleCall]:
    async def go() -> tuple[Any, RoleCall]:
        try:
            return await client.complete_json("judge", "You are a judge.", "Is it done?", validate, **kwargs)
        finally:
            await client.aclose()

    return asyncio.run(go())


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# ---------------------------------------------------------------------------------------------- replies


def test_think_block_reply_and_request_shape(server: ScriptedServer) -> None:
    server.default = Reply('<think>Maybe {"done": false}? No.</think>\n{"done": true, "note": null}')
    client = make_client(server.base_url, extra_body={"chat_template_kwargs": {"enable_thinking": False}})
    value, call = call_json(client)
    assert value == {"done": True, "note": None}
    assert call.ok and call.attempts == 1 and call.role == "judge" and call.error is None
    assert call.latency_s > 0
    (body,) = server.requests
    assert body["messages"] == [
        {"role": "system", "content": "You are a judge."},
        {"role": "user", "content": "Is it done?"},
    ]
    assert body["model"] == "gpt-4o" and body["temperature"] == 0.0 and body["max_tokens"] == 2048
    assert body["chat_template_kwargs"] == {"enable_thinking": False}
    assert server.auth_headers == [f"Bearer {SECRET}"]


def test_fenced_json_through_a_validator(server: ScriptedServer) -> None:
    server.default = Reply('Here you go:\n```json\n{"label": " Partial ", "ok": "YES", "n": "7"}\n```\nBye.')

    def validate(obj: dict[str, Any]) -> tuple[str, bool, int]:
        return as_label(obj["label"], ["full", "partial", "none"]), as_bool(obj["ok"]), as_int(obj["n"])

    value, call = call_json(make_client(server.base_url), validate)
    assert value == ("partial", True, 7) and call.ok and call.attempts == 1


def test_garbage_then_valid_json_on_the_retry(server: ScriptedServer) -> None:
    server.script.extend([Reply("I'd rather not answer in JSON."), Reply('```\n{"score": 3}\n```')])
    value, call = call_json(make_client(server.base_url), lambda obj: as_int(obj["score"]))
    assert value == 3 and call.ok and call.attempts == 2
    assert len(server.requests) == 2


def test_failed_validation_counts_as_an_attempt_and_falls_back_to_none(server: ScriptedServer) -> None:
    server.default = Reply('{"score": "many"}')
    value, call = call_json(make_client(server.base_url, attempts=3), lambda obj: as_int(obj["score"]))
    assert value is None
    assert not call.ok and call.attempts == 3 and call.error == "validation_failed"
    assert len(server.requests) == 3


def test_missing_key_and_garbage_fail_every_attempt(server: ScriptedServer) -> None:
    server.script.extend([Reply('{"other": 1}'), Reply("{not json}"), Reply("")])
    value, call = call_json(make_client(server.base_url, attempts=3), lambda obj: obj["score"])
    assert value is None and call.attempts == 3 and not call.ok
    assert call.error == "empty_reply"  # the last attempt's reason
    assert len(server.requests) == 3


def test_http_500_then_success(server: ScriptedServer) -> None:
    server.script.extend([Reply(status=500), Reply(status=503), Reply('{"a": 1}')])
    value, call = call_json(make_client(server.base_url, attempts=3))
    assert value == {"a": 1} and call.ok and call.attempts == 3
    assert len(server.requests) == 3  # the SDK's own retries are off: attempts mean what they say


def test_http_500_on_every_attempt(server: ScriptedServer) -> None:
    server.default = Reply(status=500)
    value, call = call_json(make_client(server.base_url, attempts=2))
    assert value is None and call.attempts == 2 and call.error == "http_500"
    assert len(server.requests) == 2


def test_malformed_response_body_is_a_failed_attempt(server: ScriptedServer) -> None:
    server.script.extend([Reply(raw_body="this is not json"), Reply(raw_body='{"choices": []}')])
    value, call = call_json(make_client(server.base_url, attempts=2))
    assert value is None and call.attempts == 2 and not call.ok


def test_slow_reply_times_out_per_attempt(server: ScriptedServer) -> None:
    server.default = Reply('{"late": true}', delay_s=5.0)
    value, call = call_json(make_client(server.base_url, timeout_s=0.25, attempts=2))
    assert value is None and not call.ok and call.attempts == 2 and call.error == "timeout"
    assert len(server.requests) == 2
    # The contract: a call ends within attempts x timeout (+ pauses), never waiting for the slow reply.
    assert call.latency_s < 2.5


def test_slow_reply_then_fast_reply(server: ScriptedServer) -> None:
    # A timeout with room for a fast reply on a loaded 2-core machine (0.25 s once timed out the fast one too).
    server.script.extend([Reply('{"late": true}', delay_s=10.0), Reply('{"late": false}')])
    value, call = call_json(make_client(server.base_url, timeout_s=2.0, attempts=2))
    assert value == {"late": False} and call.ok and call.attempts == 2


def test_permanent_client_error_is_not_retried_and_never_leaks_the_key(
    server: ScriptedServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="userrl.envs.openai_client")
    server.default = Reply(status=401, error_message=f"Incorrect API key provided: {SECRET}")
    value, call = call_json(make_client(server.base_url, attempts=3))
    assert value is None and call.attempts == 1 and call.error == "http_401"
    assert len(server.requests) == 1
    assert "http_401" in caplog.text and SECRET not in caplog.text


def test_unreachable_endpoint_fails_cleanly_and_quickly() -> None:
    client = make_client(f"http://127.0.0.1:{free_port()}/v1", timeout_s=1.0, attempts=3, retry_pause_s=0.05)
    value, call = call_json(client)
    assert value is None and not call.ok and call.attempts == 3
    assert call.error in {"connection_error", "timeout"}
    assert call.latency_s < 3 * 1.0 + 2 * 0.05 + 1.0


def test_complete_text_drops_think_blocks_and_retries_empty_text(server: ScriptedServer) -> None:
    server.script.extend(
        [Reply("<think>nothing to say</think>  \n"), Reply("<think>plan</think>\n Hello there. ")]
    )
    client = make_client(server.base_url)

    async def go() -> tuple[str | None, RoleCall]:
        try:
            return await client.complete_text("user", "You are a user.", "Say hi.")
        finally:
            await client.aclose()

    text, call = asyncio.run(go())
    assert text == "Hello there." and call.ok and call.attempts == 2 and call.role == "user"


def test_per_call_and_per_role_overrides(server: ScriptedServer) -> None:
    client = make_client(server.base_url, roles={"judge": {"model": "judge-model", "max_tokens": 512}})

    async def go() -> None:
        try:
            await client.complete_json("judge", "s", "u", dict)
            await client.complete_json("judge", "s", "u", dict, max_tokens=64, temperature=0.7)
            await client.complete_text("user", "s", "u")
        finally:
            await client.aclose()

    asyncio.run(go())
    judge, judge_override, user = server.requests
    assert (judge["model"], judge["max_tokens"], judge["temperature"]) == ("judge-model", 512, 0.0)
    assert (judge_override["max_tokens"], judge_override["temperature"]) == (64, 0.7)
    assert (user["model"], user["max_tokens"]) == ("gpt-4o", 2048)


def test_validator_bugs_propagate(server: ScriptedServer) -> None:
    # ValueError/LookupError/TypeError reject a reply; anything else is a bug in the gym, not the model.
    def buggy(obj: dict[str, Any]) -> Any:
        return obj.missing_attribute  # type: ignore[attr-defined]

    with pytest.raises(AttributeError):
        call_json(make_client(server.base_url), buggy)


# ------------------------------------------------------------------------------------------ concurrency


def test_semaphore_bounds_requests_in_flight(server: ScriptedServer) -> None:
    server.default = Reply('{"ok": true}', delay_s=0.2)
    server.release_at = 3
    # Two clients of the same endpoint and limit share one semaphore (per endpoint, not per client).
    first = make_client(server.base_url, max_concurrency=3)
    second = make_client(server.base_url, max_concurrency=3)

    async def go() -> list[tuple[Any, RoleCall]]:
        try:
            calls = [(first if i % 2 else second).complete_json("judge", "s", "u", dict) for i in range(10)]
            return await asyncio.gather(*calls)
        finally:
            await first.aclose()

    results = asyncio.run(go())
    assert all(call.ok for _, call in results)
    assert len(server.requests) == 10
    assert server.max_in_flight == 3


def test_many_concurrent_calls_overlap_at_the_server(server: ScriptedServer) -> None:
    server.default = Reply('{"ok": true}', delay_s=0.3)
    server.release_at = 33
    client = make_client(server.base_url, max_concurrency=64, timeout_s=10.0)

    async def go() -> list[tuple[Any, RoleCall]]:
        try:
            return await asyncio.gather(*(client.complete_json("judge", "s", "u", dict) for _ in range(64)))
        finally:
            await client.aclose()

    results = asyncio.run(go())
    assert all(call.ok and call.attempts == 1 for _, call in results)
    # Overlap rather than wall time: serial calls would never have more than one request in flight.
    assert server.max_in_flight > 32


def test_cancelled_call_releases_its_slot(server: ScriptedServer) -> None:
    server.script.append(Reply('{"late": true}', delay_s=5.0))
    client = make_client(server.base_url, max_concurrency=1, timeout_s=10.0)

    async def go() -> tuple[Any, RoleCall]:
        try:
            # What an env step timeout does to a pending role call (docs/spec/GYMS.md §0.8).
            with pytest.raises(TimeoutError):
                await asyncio.wait_for(client.complete_json("judge", "s", "u", dict), 0.3)
            return await asyncio.wait_for(client.complete_json("judge", "s", "u", dict), 5.0)
        finally:
            await client.aclose()

    value, call = asyncio.run(go())
    assert value == {"ok": True} and call.ok


def test_one_client_serves_successive_event_loops(server: ScriptedServer) -> None:
    # run_sync gives every sync step its own loop; pooled connections must not leak across loops.
    client = make_client(server.base_url)

    async def go() -> tuple[Any, RoleCall]:
        return await client.complete_json("judge", "s", "u", dict)

    assert asyncio.run(go())[1].ok
    assert asyncio.run(go())[1].ok
    assert asyncio.run(call_json_async_close(client))[1].ok


def test_one_client_serves_loops_in_several_threads(server: ScriptedServer) -> None:
    # run_sync from inside a running loop runs the step in a worker thread with its own loop.
    server.default = Reply('{"ok": true}', delay_s=0.05)
    client = make_client(server.base_url)
    with concurrent.futures.ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(lambda _: asyncio.run(call_json_async_close(client)), range(8)))
    assert all(call.ok for _, call in results) and len(server.requests) == 8


async def call_json_async_close(client: OpenAIRoleClient) -> tuple[Any, RoleCall]:
    try:
        return await client.complete_json("judge", "s", "u", dict)
    finally:
        await client.aclose()


# -------------------------------------------------------------------------------- config and factory


def test_api_key_and_base_url_are_read_when_the_client_is_built(
    server: ScriptedServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
    client = OpenAIRoleClient(LLMConfig(timeout_s=2.0))
    monkeypatch.setenv("OPENAI_API_KEY", "sk-changed-later")
    assert call_json(client)[1].ok
    assert server.auth_headers == [f"Bearer {SECRET}"]
    for text in (
        repr(client),
        repr(client.config),
        repr(client.settings("judge")),
        str(client.settings("x")),
    ):
        assert SECRET not in text


def test_config_repr_redacts_keys_in_role_overrides() -> None:
    config = LLMConfig(api_key=SECRET, roles={"judge": {"api_key": SECRET + "-judge", "max_tokens": 512}})
    assert SECRET not in repr(config) and "***" in repr(config)


def test_keyless_local_endpoint_and_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    client = OpenAIRoleClient()
    cfg = client.settings("judge")
    assert cfg.base_url == DEFAULT_BASE_URL and cfg.model == "gpt-4o"
    assert (cfg.temperature, cfg.max_tokens, cfg.timeout_s, cfg.attempts) == (0.0, 2048, 10.0, 3)
    assert (cfg.retry_pause_s, cfg.max_concurrency, dict(cfg.extra_body)) == (2.0, 64, {})


def test_retry_pause_schedule() -> None:
    assert [LLMConfig().pause_before_retry(k) for k in (1, 2)] == [2.0, 2.0]
    assert [LLMConfig(retry_backoff=2.0).pause_before_retry(k) for k in (1, 2, 3)] == [2.0, 4.0, 8.0]


@pytest.mark.parametrize(
    "bad",
    [
        {"attempts": 0},
        {"attempts": 1.5},
        {"timeout_s": 0},
        {"temperature": -0.1},
        {"max_tokens": True},
        {"max_concurrency": 0},
        {"retry_backoff": 0.5},
        {"extra_body": "x"},
        {"model": ""},
        {"roles": {"judge": {"temperature": "hot"}}},
        {"roles": {"judge": {"no_such_field": 1}}},
        {"no_such_field": 1},
    ],
)
def test_bad_config_is_rejected_when_built(bad: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        make_role_client(bad)


def test_make_role_client(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    built = make_role_client({"model": "qwen3-32b", "base_url": "http://127.0.0.1:9/v1/", "max_tokens": 512})
    assert isinstance(built, OpenAIRoleClient) and isinstance(built, RoleClient)
    assert built.settings("user").model == "qwen3-32b"
    assert built.settings("user").base_url == "http://127.0.0.1:9/v1"
    assert isinstance(make_role_client(None), OpenAIRoleClient)
    config = LLMConfig(model="m")
    assert make_role_client(config).config is config

    class Double:
        async def complete_json(self, role, system, user, validate, *, max_tokens=None, temperature=None):
            return validate({}), RoleCall(role, 1, True, 0.0)

        async def complete_text(self, role, system, user, *, max_tokens=None, temperature=None):
            return "hi", RoleCall(role, 1, True, 0.0)

    double = Double()
    assert make_role_client(double) is double
    with pytest.raises(TypeError):
        make_role_client(42)  # type: ignore[arg-type]


def test_role_call_error_field_defaults_to_none() -> None:
    call = RoleCall("judge", 1, True, 0.1)
    assert call.error is None
    assert json.loads(json.dumps(call.__dict__))["role"] == "judge"
