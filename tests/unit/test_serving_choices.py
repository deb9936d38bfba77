"""Serving's `n` choices and `logprobs`: per-choice seeds, the per-token texts and entries a reply's
logprobs are built from, the response builders, and the merge of streamed choices."""

from __future__ import annotations

import asyncio
import json

import pytest

from userrl.engines.base import GenerationOutput
from userrl.serving.app import merge_streams
from userrl.serving.chat_engine import ChatEngine, choice_seed, token_texts
from userrl.serving.protocol import (
    INT64_MAX,
    INT64_MIN,
    chat_completion,
    choice,
    logprob_entry,
    parse_request,
)

# ASCII, a multi-byte character split over byte-level tokens, CJK, an emoji, runs of whitespace.
TEXTS = ["Hello there! How can I help you today? ☕", "日本語のテキスト 😀 ok", " a  b\n\n c ."]


@pytest.fixture(scope="module")
def engine(tiny_model) -> ChatEngine:
    return ChatEngine(tiny_model, max_model_len=1024)


def _output(engine: ChatEngine, text: str) -> GenerationOutput:
    ids = engine.tokenizer.encode(text, add_special_tokens=False) + engine.chat.stop_token_ids[:1]
    return GenerationOutput(ids, [-0.1 * (k + 1) for k in range(len(ids))], "stop")


def test_choice_seeds_differ_replay_and_fit_int64():
    assert choice_seed(None, 3) is None  # unseeded choices are random each time
    assert choice_seed(-5, 0) == -5  # choice 0 samples as the same request with n=1 does
    for seed in (0, 1, INT64_MIN, INT64_MAX):
        seeds = [choice_seed(seed, i) for i in range(8)]
        assert len(set(seeds)) == 8 and seeds == [choice_seed(seed, i) for i in range(8)]
        assert all(INT64_MIN <= s <= INT64_MAX for s in seeds)
    assert choice_seed(1, 1) != choice_seed(2, 1)


def test_prepared_requests_are_the_choices(engine):
    prepared = engine.prepare(parse_request({"model": "m", "messages": [{"role": "user", "content": "hi"}],
                                             "n": 3, "seed": 11, "temperature": 0.5}))
    requests = prepared.requests()
    assert [r.seed for r in requests] == [choice_seed(11, i) for i in range(3)] and requests[0] == prepared.request
    assert all(r.prompt_ids == prepared.request.prompt_ids and r.temperature == 0.5 for r in requests)


@pytest.mark.parametrize("text", TEXTS)
def test_token_texts_join_to_the_decoded_reply(engine, text):
    output = _output(engine, text)
    texts = token_texts(engine.tokenizer, output.token_ids)
    assert len(texts) == len(output.token_ids) and texts[-1] == ""  # the end-of-turn token writes nothing
    assert "".join(texts) == engine.tokenizer.decode(output.token_ids, skip_special_tokens=True) == text
    assert "\ufffd" not in "".join(texts)  # partial characters wait for the token completing them


def test_reply_logprobs_are_an_entry_per_token(engine):
    prepared = engine.prepare(parse_request({"model": "m", "messages": [{"role": "user", "content": "hi"}],
                                             "logprobs": True}))
    output = _output(engine, TEXTS[0])
    reply = engine.reply(prepared, output)
    assert [e["logprob"] for e in reply.logprobs] == output.logprobs
    assert "".join(e["token"] for e in reply.logprobs) == reply.content == TEXTS[0]
    assert bytes(b for e in reply.logprobs for b in e["bytes"]).decode() == TEXTS[0]
    assert all(e["top_logprobs"] == [] for e in reply.logprobs)
    # Not asked for: none.
    assert engine.reply(engine.prepare(parse_request({"model": "m", "messages": [{"role": "user", "content": "hi"}]})),
                        output).logprobs is None


def test_reply_logprobs_end_at_a_stop_string(engine):
    prepared = engine.prepare(parse_request({"model": "m", "messages": [{"role": "user", "content": "hi"}],
                                             "logprobs": True, "stop": ["elp"]}))
    reply = engine.reply(prepared, _output(engine, TEXTS[0]))
    assert reply.content == "Hello there! How can I h"
    assert "".join(e["token"] for e in reply.logprobs) == reply.content
    assert reply.logprobs[-1]["token"] == " h"  # " help" is cut where the stop string begins
    assert reply.completion_tokens > len(reply.logprobs)  # every sampled token is still counted


def test_response_builders_are_openai_shaped():
    entry = logprob_entry("é", float("-inf"))
    assert entry == {"token": "é", "logprob": -9999.0, "bytes": [195, 169], "top_logprobs": []}
    body = chat_completion("chatcmpl-x", "m", [choice(0, "a", None, "stop", [entry]), choice(1, None, [], "length")],
                           prompt_tokens=5, completion_tokens=7)
    json.dumps(body, allow_nan=False)  # what JSONResponse requires
    assert [c["index"] for c in body["choices"]] == [0, 1]
    assert body["choices"][0]["logprobs"] == {"content": [entry]} and body["choices"][1]["logprobs"] is None
    assert body["usage"] == {"prompt_tokens": 5, "completion_tokens": 7, "total_tokens": 12}


def test_merge_streams_interleaves_and_closes_every_stream():
    closed: list[str] = []

    async def stream(name: str, delays: list[float]):
        try:
            for k, delay in enumerate(delays):
                await asyncio.sleep(delay)
                yield f"{name}{k}"
        finally:
            closed.append(name)

    async def take(count: int | None, streams):
        items = []
        async for item in merge_streams(streams):
            items.append(item)
            if len(items) == count:
                break
        return items

    items = asyncio.run(take(None, [stream("a", [0.0, 0.05, 0.05]), stream("b", [0.02, 0.05])]))
    assert items == ["a0", "b0", "a1", "b1", "a2"] and sorted(closed) == ["a", "b"]
    closed.clear()

    async def early_exit():
        merged = merge_streams([stream("a", [0.0, 0.05]), stream("b", [10.0])])
        first = await anext(merged)
        await merged.aclose()  # a client gone: both generators run their `finally`, b while it waits
        return first

    assert asyncio.run(early_exit()) == "a0" and sorted(closed) == ["a", "b"]

    async def failing():
        raise RuntimeError("replica died")
        yield  # an async generator

    closed.clear()
    with pytest.raises(RuntimeError, match="replica died"):
        asyncio.run(take(None, [stream("a", [10.0]), failing()]))
    assert closed == ["a"]
