"""Reliability scenario 7 at test size: a few hundred malformed requests to the Serve endpoint (loopback).

Every reply must be the 4xx its family expects, in OpenAI's error format; nothing may go unanswered;
the official `openai` client must still get a completion afterwards; the Serve processes' RSS must stay
flat. The cases and the sender are those of `bench/reliability.py` (which sends 1,000); the checks
below are made here, on the raw replies.
"""

from __future__ import annotations

import os

import openai
import pytest
import requests
from bench_module import load_bench

pytestmark = pytest.mark.slow

KEY_ENV = "USERRL_TEST_FUZZ_KEY"
KEY = "sk-fuzz-test-3b9d"
APP = "userrl-fuzz-test"
MAX_MODEL_LEN = 512
MAX_REQUEST_BYTES = 64 * 1024
FAMILIES = {"random bytes", "broken JSON", "wrong JSON types", "huge/negative numbers", "bad tool schemas",
            "missing fields", "oversized", "unknown model", "wrong content type", "routes and methods",
            "wrong API key", "play API"}


reliability = load_bench("reliability")


@pytest.fixture(scope="module")
def server(serve_port, tiny_model):
    """The app with an API key, /play and a small body limit, on a free loopback port."""
    from ray import serve

    from userrl.serving.app import build_app
    from userrl.serving.config import ServeConfig

    os.environ[KEY_ENV] = KEY
    port = serve_port
    config = ServeConfig(model=tiny_model, model_name="tiny", max_model_len=MAX_MODEL_LEN, default_max_tokens=8,
                         num_threads=1, num_cpus_per_replica=0.5, api_key_env=KEY_ENV, port=port,
                         max_request_bytes=MAX_REQUEST_BYTES)
    serve.run(build_app(config), name=APP, route_prefix="/")
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        serve.delete(APP)
        os.environ.pop(KEY_ENV, None)


def test_malformed_requests_get_openai_4xx_and_the_server_recovers(server):
    result = reliability.scenario_7_serve_fuzz(
        300, url=server, api_key=KEY, model_name="tiny", app_name=APP, max_model_len=MAX_MODEL_LEN,
        max_request_bytes=MAX_REQUEST_BYTES, seed=7, time_limit_s=240)
    replies = result.details["replies"]
    assert len(replies) == 300  # nothing left unsent by the time limit, nothing lost
    assert {r.case.family for r in replies} == FAMILIES
    unanswered = [(r.case.label, r.error) for r in replies if r.status is None]
    assert unanswered == []
    wrong = [(r.case.family, r.case.label, r.status, str(r.body)[:120]) for r in replies
             if r.status not in r.case.expect or not 400 <= r.status < 500]
    assert wrong == []
    misshapen = [(r.case.label, r.body) for r in replies if not reliability.is_openai_error(r.body)]
    assert misshapen == []

    codes = {(r.case.family, r.status, r.body["error"]["code"]) for r in replies}
    assert ("oversized", 413, "request_too_large") in codes
    assert ("oversized", 400, "context_length_exceeded") in codes
    assert ("wrong API key", 401, "invalid_api_key") in codes
    assert ("wrong content type", 415, "unsupported_media_type") in codes
    assert ("broken JSON", 400, "invalid_json") in codes

    before, after = result.details["rss"][0], result.details["rss"][-1]
    assert len(before) >= 4  # proxy, controller, gateway, model
    assert sum(after.values()) - sum(before.values()) < 64, result.notes  # MiB, over 240 requests after the warm-up

    # Afterwards a valid request still gets a completion, through the official client.
    client = openai.OpenAI(base_url=f"{server}/v1", api_key=KEY, max_retries=0, timeout=120)
    reply = client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "Hi"}], max_tokens=3)
    assert reply.choices[0].message.role == "assistant" and reply.usage.completion_tokens == 3
    assert [m.id for m in client.models.list()] == ["tiny"]


def test_each_failure_the_fuzzer_found_once(server):
    """The cases that used to get a 500 or a non-OpenAI body, one by one with their exact answers."""
    auth = {"Authorization": f"Bearer {KEY}", "Content-Type": "application/json"}
    chat = f"{server}/v1/chat/completions"
    base = '{"model": "tiny", "messages": [{"role": "user", "content": "%s"}]%s}'

    def post(data: bytes, headers: dict | None = None, url: str = chat) -> requests.Response:
        return requests.post(url, data=data, headers=headers or auth, timeout=60)

    # A lone surrogate reached the tokenizer (TypeError, 500).
    reply = post((base % ("\\ud800", "")).encode())
    assert reply.status_code == 400 and reply.json()["error"]["code"] == "invalid_json"
    # Deep nesting raised RecursionError in the JSON parser (500).
    assert post(b"[" * 5000 + b"]" * 5000).status_code == 400
    # NaN was read as a float.
    assert post((base % ("hi", ', "temperature": NaN')).encode()).json()["error"]["code"] == "invalid_json"
    # A seed wider than 64 bits overflowed torch's generator in the model replica (500).
    reply = post((base % ("hi", ', "seed": 18446744073709551616')).encode())
    assert reply.status_code == 400 and reply.json()["error"]["param"] == "seed"
    # `properties` that is not an object failed inside the chat template (500).
    tools = ', "tools": [{"type": "function", "function": {"name": "f", "parameters": {"properties": 5}}}]'
    reply = post((base % ("hi", tools)).encode())
    assert reply.status_code == 400 and reply.json()["error"]["param"] == "tools.0.function.parameters"
    # Lax types: "yes" was stream=true, "0.5" a temperature.
    reply = post((base % ("hi", ', "stream": "yes"')).encode())
    assert reply.status_code == 400 and reply.json()["error"]["param"] == "stream"
    # Starlette answered unknown routes and wrong methods with {"detail": ...}.
    for response in (requests.get(chat, headers=auth, timeout=60), requests.post(f"{server}/v1/embeddings", timeout=60)):
        assert response.status_code in (404, 405) and reliability.is_openai_error(response.json())
    # The play API: a non-string task id raised in difflib (500); a negative seed in numpy (500).
    for body in (b'{"gym": "function", "task_id": 5}', b'{"gym": "function", "seed": -1}'):
        reply = post(body, url=f"{server}/play/api/episodes")
        assert reply.status_code == 400 and reliability.is_openai_error(reply.json())
    # Bodies were read whole whatever their size, declared type or encoding.
    reply = post(b'"' + b"x" * (MAX_REQUEST_BYTES + 1) + b'"')
    assert reply.status_code == 413 and reply.json()["error"]["code"] == "request_too_large"
    reply = post((base % ("hi", "")).encode(), headers={**auth, "Content-Type": "text/plain"})
    assert reply.status_code == 415
    # ... and a request that declares no Content-Type at all is still read as JSON.
    reply = post((base % ("hi", ', "max_tokens": 2')).encode(), headers={"Authorization": f"Bearer {KEY}"})
    assert reply.status_code == 200 and reply.json()["usage"]["completion_tokens"] == 2
