"""What enters the Serve endpoint is validated: strict JSON, strict types, ranges, tool schemas, and the
prompt length before tokenizing; every failure is an APIError naming the parameter."""

from __future__ import annotations

import time

import pytest

from userrl.protocols.choices import TOOL_SCHEMA
from userrl.serving.chat_engine import ChatEngine
from userrl.serving.protocol import APIError, decode_json, parse_request

VALID = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


def _error(change: dict) -> APIError:
    with pytest.raises(APIError) as caught:
        parse_request({**VALID, **change})
    assert caught.value.status == 400
    return caught.value


@pytest.mark.parametrize(("change", "param"), [
    ({"temperature": "0.5"}, "temperature"),
    ({"temperature": True}, "temperature"),
    ({"stream": "yes"}, "stream"),
    ({"stream": 1}, "stream"),
    ({"max_tokens": 5.0}, "max_tokens"),
    ({"n": True}, "n"),
    ({"n": 9}, "n"),
    ({"seed": 2**64}, "seed"),
    ({"seed": -(2**63) - 1}, "seed"),
    ({"messages": [{"role": "user", "content": 5}]}, "messages.0.content"),
    ({"messages": [{"role": "user", "content": [{"type": "text", "text": 5}]}]}, "messages.0.content.0.text"),
    ({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}, "messages.0.content.0"),
    ({"stop": [1]}, "stop.0"),
    ({"stream_options": {"include_usage": True}}, "stream_options"),
    ({"logprobs": 1}, "logprobs"),
    ({"top_logprobs": 5}, "top_logprobs"),
    ({"presence_penalty": 0.5}, "presence_penalty"),
    ({"response_format": {"type": "json_object"}}, "response_format"),
    ({"tools": [{"type": "function", "function": {"name": "f", "parameters": {"properties": 5}}}]},
     "tools.0.function.parameters"),
    ({"tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "string"}}}]},
     "tools.0.function.parameters"),
    ({"tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "objekt"}}}]},
     "tools.0.function.parameters"),
])
def test_wrong_types_and_values_name_the_parameter(change, param):
    error = _error(change)
    assert error.param == param and error.code == "invalid_value"
    assert error.message.startswith(f"invalid parameter {param}: ")  # no pydantic union tags ("str", "list[...]")


def test_a_missing_field_is_named():
    error = _error({"messages": [{"content": "hi"}]})
    assert (error.param, error.code) == ("messages.0.role", "missing_required_parameter")


def test_valid_requests_still_pass():
    request = parse_request({**VALID, "temperature": 1, "top_p": 0.5, "seed": -5, "stream": True,
                             "stream_options": {"include_usage": True}, "logprobs": True, "presence_penalty": 0,
                             "response_format": {"type": "text"}, "user": "u", "tools": [TOOL_SCHEMA], "n": 8,
                             "top_logprobs": 0,
                             "messages": [{"role": "user", "content": [{"type": "text", "text": "a"},
                                                                       {"type": "text", "text": "b"}]}]})
    assert request.temperature == 1.0 and request.messages[0].text() == "ab" and request.seed == -5
    assert request.n == 8 and request.logprobs is True
    assert parse_request({**VALID, "stream": None}).stream is None


@pytest.mark.parametrize("raw", [b"", b"{", b"NaN", b'{"t": Infinity}', b'"\\ud800"', b"[" * 5000,
                                 b'"\xff"', b"{'a': 1}"])
def test_decode_json_accepts_only_strict_json(raw):
    with pytest.raises(APIError) as caught:
        decode_json(raw)
    assert (caught.value.status, caught.value.code) == (400, "invalid_json")
    assert decode_json(b'"\\ud83d\\ude00"') == "\U0001f600"  # a surrogate pair is one character


def test_an_oversized_prompt_is_refused_before_tokenizing(tiny_model):
    engine = ChatEngine(tiny_model, max_model_len=256, default_max_tokens=8)
    assert engine.max_token_bytes and engine.max_token_bytes < 200  # SmolLM2's byte-level BPE has no normalizer
    huge = parse_request({**VALID, "messages": [{"role": "user", "content": "x" * 5_000_000}]})
    began = time.perf_counter()
    with pytest.raises(APIError) as caught:
        engine.prepare(huge)
    assert caught.value.code == "context_length_exceeded" and "5000" in caught.value.message
    assert time.perf_counter() - began < 1.0  # tokenizing 5 MB takes seconds
    # The bound never refuses a prompt that fits: the longest prompt under it is tokenized and measured.
    fits = parse_request({**VALID, "messages": [{"role": "user", "content": "x" * 200}]})
    assert len(engine.prepare(fits).request.prompt_ids) < 256


def test_a_template_error_is_a_400(tiny_model):
    engine = ChatEngine(tiny_model)
    # Chat templates raise on conversations they refuse (role order, missing fields): the request's fault.
    engine.tokenizer.chat_template = "{{ raise_exception('no system message allowed') }}"
    with pytest.raises(APIError) as caught:
        engine.prepare(parse_request(VALID))
    assert caught.value.status == 400 and "no system message allowed" in caught.value.message


def test_starlette_errors_and_failures_have_the_openai_shape():
    """Routes FastAPI answers itself, and an exception in a handler, still give OpenAI error bodies."""
    from starlette.testclient import TestClient

    from userrl.serving.app import fastapi_app

    async def fail() -> None:
        raise RuntimeError("a replica died")

    fastapi_app.add_api_route("/test-only/fail", fail)
    try:
        client = TestClient(fastapi_app, raise_server_exceptions=False)
        failed = client.get("/test-only/fail")
        missing = client.get("/v1/embeddings")
        method = client.post("/health")
    finally:
        fastapi_app.router.routes.pop()
    assert failed.status_code == 500
    assert failed.json()["error"] == {"message": "the server failed on this request (RuntimeError); see the server log",
                                      "type": "server_error", "param": None, "code": "internal_error"}
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "not_found"
    assert method.status_code == 405 and method.json()["error"]["code"] == "method_not_allowed"
    assert method.headers["allow"] == "GET"
