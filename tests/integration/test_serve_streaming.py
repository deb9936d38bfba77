"""Streaming that streams: over real HTTP with the official `openai` client, an `hf` replica's tokens
leave while it is still decoding, and the streamed text is exactly the non-streamed completion.

The tiny random Llama, sampled with a seed (reproducible whatever the batch), writes long replies of
arbitrary tokens (partial UTF-8 characters, odd spacing) with no end-of-turn token: what the content
deltas must reassemble exactly.
"""

from __future__ import annotations

import time

import openai
import pytest

pytestmark = pytest.mark.slow

APP = "userrl-test-stream"
PROMPTS = ["Say hello.", "What is 2 + 3?", "Name a colour."]


@pytest.fixture(scope="module")
def client(serve_port, tiny_model):
    from ray import serve

    from userrl.serving.app import build_app
    from userrl.serving.config import ServeConfig

    port = serve_port
    config = ServeConfig(model=tiny_model, model_name="tiny", max_model_len=1024, num_threads=1,
                         num_cpus_per_replica=0.5, play={"enabled": False}, port=port)
    serve.run(build_app(config), name=APP, route_prefix="/")
    try:
        yield openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="unused", max_retries=0, timeout=120)
    finally:
        serve.delete(APP)


def _replica_stats() -> dict:
    from ray import serve

    return serve.get_deployment_handle("model", app_name=APP).get_stats.remote().result(timeout_s=60)


@pytest.mark.parametrize(("prompt", "seed"), [(p, s) for s, p in enumerate(PROMPTS)] + [(PROMPTS[0], None)])
def test_streamed_text_is_the_non_streamed_completion(client, prompt, seed):
    messages = [{"role": "user", "content": prompt}]
    # seed None: greedy, which for this model is a run of newlines (whitespace deltas)
    sampling = {"temperature": 0} if seed is None else {"temperature": 1.0, "seed": seed}
    reply = client.chat.completions.create(model="tiny", messages=messages, max_tokens=48, **sampling)
    chunks = list(client.chat.completions.create(model="tiny", messages=messages, max_tokens=48, **sampling,
                                                 stream=True, stream_options={"include_usage": True}))
    pieces = [c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content]
    assert "".join(pieces) == reply.choices[0].message.content
    assert pieces  # how many depends on load (tokens that arrive together leave together); the test below
    # shows the deltas leave while the replica decodes
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == reply.choices[0].finish_reason
    assert chunks[-1].usage.completion_tokens == reply.usage.completion_tokens == 48


def test_first_token_arrives_while_the_replica_is_still_decoding(client):
    """The client reads the first content delta and hangs up. Had the replica sent its tokens only when
    done, all `max_tokens` would be decoded by then; streaming, the hang-up reaches the replica mid-decode
    and its row stops, so it has sampled fewer. (No wall-clock threshold: only what the replica did.)"""
    messages = [{"role": "user", "content": PROMPTS[0]}]
    max_tokens = 800
    sampling = {"temperature": 1.0, "seed": 1, "max_tokens": max_tokens}
    whole = client.chat.completions.create(model="tiny", messages=messages, **sampling)
    assert whole.usage.completion_tokens == max_tokens  # no end-of-turn: it always decodes them all
    before = _replica_stats()

    stream = client.chat.completions.create(model="tiny", messages=messages, **sampling, stream=True)
    first = next(c for c in stream if c.choices and c.choices[0].delta.content)
    stream.close()
    assert whole.choices[0].message.content.startswith(first.choices[0].delta.content)

    deadline = time.monotonic() + 120
    while (stats := _replica_stats())["rows_running"] and time.monotonic() < deadline:
        time.sleep(0.2)
    assert stats["rows_running"] == 0, "the streamed request never left the engine's batch"
    assert stats["requests"] == before["requests"]  # it never completed: the hang-up cancelled it
    assert stats["decoded_tokens"] - before["decoded_tokens"] < max_tokens


def test_streaming_and_non_streaming_requests_share_the_replica(client):
    """Concurrent streamed and whole requests all complete with the same texts as alone."""
    from concurrent.futures import ThreadPoolExecutor

    messages = [[{"role": "user", "content": p}] for p in PROMPTS]
    sampling = {"temperature": 1.0, "seed": 7, "max_tokens": 24}
    alone = [client.chat.completions.create(model="tiny", messages=m, **sampling).choices[0].message.content
             for m in messages]

    def streamed(m):
        stream = client.chat.completions.create(model="tiny", messages=m, **sampling, stream=True)
        return "".join(c.choices[0].delta.content or "" for c in stream if c.choices)

    def unary(m):
        return client.chat.completions.create(model="tiny", messages=m, **sampling).choices[0].message.content

    with ThreadPoolExecutor(6) as pool:
        texts = list(pool.map(lambda job: job[0](job[1]), [(f, m) for m in messages for f in (streamed, unary)]))
    assert texts == [t for t in alone for _ in range(2)]
