"""Serving's tokenizer side: prompts equal training's rendering, tool-call parsing in both protocols,
streaming deltas, and the serving config's errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from userrl.chat import ChatFormat
from userrl.config import ConfigError
from userrl.engines.base import GenerationOutput
from userrl.envs import load_tasks
from userrl.protocols.choices import TOOL_SCHEMA
from userrl.serving.chat_engine import ChatEngine
from userrl.serving.config import load_serve_config
from userrl.serving.protocol import APIError, parse_request


@pytest.fixture(scope="module")
def engine(tiny_model) -> ChatEngine:
    return ChatEngine(tiny_model, max_model_len=1024)


def _request(messages, **extra):
    return parse_request({"model": "m", "messages": messages, **extra})


def _output(engine: ChatEngine, text: str) -> GenerationOutput:
    ids = engine.tokenizer.encode(text, add_special_tokens=False) + [engine.chat.stop_token_ids[0]]
    return GenerationOutput(ids, [0.0] * len(ids), "stop")


def test_prompt_with_the_tool_schema_is_the_training_prompt(engine, tokenizer):
    task = load_tasks("function", split="test")[0]
    trained = ChatFormat(tokenizer, "tool_call")
    expected = [i for ids, _ in trained.encode_prompt(trained.initial_messages(task.prompt)) for i in ids]
    assert engine.prompt_ids(_request(task.prompt, tools=[TOOL_SCHEMA]))[0] == expected


def test_tool_call_text_becomes_openai_tool_calls(engine):
    prepared = engine.prepare(_request([{"role": "user", "content": "hi"}], tools=[TOOL_SCHEMA]))
    text = "Let me look.\n" + engine.chat.render_action("search", "test")
    reply = engine.reply(prepared, _output(engine, text))
    assert reply.finish_reason == "tool_calls" and reply.content == "Let me look."
    assert [json.loads(c["function"]["arguments"]) for c in reply.tool_calls] == [{"choice": "search", "content": "test"}]
    # A call to a tool the request did not offer, or broken JSON, stays text.
    for bad in ('<tool_call>\n{"name": "rm_rf", "arguments": {}}\n</tool_call>', "<tool_call>{oops</tool_call>"):
        reply = engine.reply(prepared, _output(engine, bad))
        assert reply.tool_calls == [] and reply.content == bad and reply.finish_reason == "stop"
    # Without tools nothing is parsed.
    plain = engine.prepare(_request([{"role": "user", "content": "hi"}]))
    assert engine.reply(plain, _output(engine, text)).tool_calls == []


def test_bracket_model_maps_lines_to_interact_with_env(tiny_model):
    engine = ChatEngine(tiny_model, protocol="bracket")
    prepared = engine.prepare(_request([{"role": "system", "content": "Play."}, {"role": "user", "content": "go"}],
                                       tools=[TOOL_SCHEMA]))
    assert "[choice] content" in engine.tokenizer.decode(prepared.request.prompt_ids)
    reply = engine.reply(prepared, _output(engine, "[answer] 42"))
    assert json.loads(reply.tool_calls[0]["function"]["arguments"]) == {"choice": "answer", "content": "42"}
    with pytest.raises(APIError, match="bracket protocol"):
        engine.prepare(_request([{"role": "user", "content": "x"}],
                                tools=[{"type": "function", "function": {"name": "other"}}]))


def _stream(engine: ChatEngine, prepared, output: GenerationOutput) -> tuple[list[str], int, object]:
    """Push the tokens one at a time as a replica streams them: (deltas, tokens pushed before the first
    delta, the final reply)."""
    stream, pieces, first_at = engine.stream(prepared), [], None
    for i, token in enumerate(output.token_ids):
        piece = stream.push([token])
        if piece:
            pieces.append(piece)
            first_at = i + 1 if first_at is None else first_at
        if stream.stopped:
            break
    rest, reply = stream.finish(output)
    return pieces + [rest] * bool(rest), first_at, reply


def test_stop_strings_and_stream_deltas(engine):
    prepared = engine.prepare(_request([{"role": "user", "content": "hi"}], stop=["END"]))
    output = _output(engine, "Café ☕ déjà vu END trailing")
    reply = engine.reply(prepared, output)
    assert reply.content == "Café ☕ déjà vu " and reply.finish_reason == "stop"
    pieces, first_at, streamed = _stream(engine, prepared, output)
    assert "".join(pieces) == reply.text and len(pieces) > 3
    assert first_at <= 3  # the first delta leaves with the first tokens, not at the end
    assert all("\ufffd" not in p for p in pieces)
    assert streamed.content == reply.content and streamed.finish_reason == "stop"
    # The stop string ended the stream: the tokens after it were not needed.
    stream = engine.stream(prepared)
    for token in output.token_ids:
        stream.push([token])
        if stream.stopped:
            break
    assert stream.stopped and len(stream.token_ids) < len(output.token_ids) - 1


@pytest.mark.parametrize("text", [
    "Let me look.\n<tool_call>\n{\"name\": \"interact_with_env\", \"arguments\": {\"choice\": \"search\", "
    "\"content\": \"a <b> [c]\"}}\n</tool_call>",
    "<tool_call>\n{\"name\": \"interact_with_env\", \"arguments\": {\"choice\": \"answer\", \"content\": \"42\"}}"
    "\n</tool_call>",
    "  Leading space, then a call <tool_call>{\"name\": \"interact_with_env\", \"arguments\": {}}</tool_call> tail ",
    "No call here, only a <tool_ tag and a <b>bold</b> word.  ",
    "<tool_call>{oops</tool_call> broken JSON stays text",
])
def test_streamed_content_with_tools_equals_the_whole_reply(engine, text):
    prepared = engine.prepare(_request([{"role": "user", "content": "hi"}], tools=[TOOL_SCHEMA]))
    output = _output(engine, text)
    whole = engine.reply(prepared, output)
    pieces, _, streamed = _stream(engine, prepared, output)
    assert "".join(pieces) == (whole.content or "")
    assert streamed.tool_calls and whole.tool_calls or streamed.tool_calls == whole.tool_calls == []
    assert [c["function"] for c in streamed.tool_calls] == [c["function"] for c in whole.tool_calls]
    if "Let me look" in text:  # content before the call streams before the call is written
        assert pieces[0] == "Let" and len(pieces) > 2


def test_streamed_bracket_reply_holds_back_the_call(tiny_model):
    engine = ChatEngine(tiny_model, protocol="bracket")
    prepared = engine.prepare(_request([{"role": "user", "content": "go"}], tools=[TOOL_SCHEMA]))
    for text in ("I think [so] too.\n[answer] 42", "Plain words [answer and more", "[search] capital of France"):
        output = _output(engine, text)
        whole = engine.reply(prepared, output)
        pieces, _, streamed = _stream(engine, prepared, output)
        assert "".join(pieces) == (whole.content or "") and streamed.tool_calls == whole.tool_calls or (
            [c["function"] for c in streamed.tool_calls] == [c["function"] for c in whole.tool_calls])
        assert not any("[answer]" in p or "[search]" in p for p in pieces)


def test_bracket_choices_are_the_ones_the_parser_knows():
    from userrl.protocols.bracket import BRACKET_CHOICES, parse_bracket

    assert [parse_bracket(f"[{c}] x").calls for c in BRACKET_CHOICES] == [[(c, "x")] for c in BRACKET_CHOICES]
    assert parse_bracket("[other] x").calls == []


def test_context_limit_is_a_400(engine):
    with pytest.raises(APIError) as error:
        engine.prepare(_request([{"role": "user", "content": "word " * 1500}]))
    assert error.value.status == 400 and error.value.code == "context_length_exceeded"


def test_serving_config_errors_name_the_key(tmp_path):
    default = Path(__file__).resolve().parents[2] / "serving" / "default.yaml"
    assert load_serve_config(default).model == "smollm2-135m"
    with pytest.raises(ConfigError, match="did you mean 'num_replicas'"):
        load_serve_config(None, ["num_replica=2"])
    with pytest.raises(ConfigError, match="does not exist"):
        load_serve_config(tmp_path / "missing.yaml")
    with pytest.raises(ConfigError, match="max_model_len"):
        load_serve_config(None, ["max_model_len=100", "default_max_tokens=200"])
    # The hf engine's options are checked when the config loads (engine hf), not ignored.
    with pytest.raises(ConfigError, match="engine_options for the hf engine .*prefill_chunk_tokens.*chunk"):
        load_serve_config(None, ["engine=hf", "engine_options.chunk=128"])


def test_api_key_variable_must_be_set(monkeypatch):
    from userrl.serving.app import api_key_digest

    monkeypatch.delenv("USERRL_UNSET_KEY", raising=False)
    with pytest.raises(ConfigError, match="USERRL_UNSET_KEY is not set"):
        api_key_digest(load_serve_config(None, ["api_key_env=USERRL_UNSET_KEY"]))
    monkeypatch.setenv("USERRL_UNSET_KEY", "secret")
    digest = api_key_digest(load_serve_config(None, ["api_key_env=USERRL_UNSET_KEY"]))
    assert digest and "secret" not in digest
