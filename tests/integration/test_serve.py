"""The Serve endpoint over real HTTP with the official `openai` client: chat, streaming, tool calls, `n`
choices, logprobs, models, health, the API key, and every 4xx case; and a `native_tools` model's tool calls.

The served model is the tiny random Llama with its output head fitted (least squares on its own final
hidden states) so that greedy decoding writes known replies to two known prompts: a tool call and a
plain sentence. Everything between the client and the tokens (gateway, rendering, model replica,
decoding, tool-call parsing, SSE) is the real path.

A second app on the same Serve instance serves a native_tools model fitted the same way on the token ids
training's ChatFormat builds for a Tau-like episode (a tool call, then after the tool's result a plain
reply): it writes them only if the gateway renders the OpenAI conversation into those very ids.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import openai
import pytest
import requests
import torch

from userrl.chat import ChatFormat
from userrl.protocols.choices import TOOL_SCHEMA
from userrl.serving.chat_engine import ChatEngine
from userrl.serving.protocol import parse_request

pytestmark = pytest.mark.slow

KEY_ENV = "USERRL_TEST_SERVE_KEY"
KEY = "sk-test-7f3a9c1e5b"
TOOL_MESSAGES = [{"role": "system", "content": "Play the game."},
                 {"role": "user", "content": "What is f at the test input?"}]
HELLO_MESSAGES = [{"role": "user", "content": "Say hello."}]
HELLO = "Hello there! How can I help you today? ☕"
NATIVE_MESSAGES = [{"role": "system", "content": "You are a retail customer service agent. Use the tools."},
                   {"role": "user", "content": "Please cancel my order #W2378156."}]
NATIVE_CALL = {"name": "get_order_details", "arguments": {"order_id": "#W2378156"}}
NATIVE_RESULT = '{"order_id": "#W2378156", "status": "pending"}'
NATIVE_REPLY = "It is pending."


def _prompt_ids(engine: ChatEngine, messages: list[dict], tools: list | None = None) -> list[int]:
    body = {"model": "m", "messages": messages, **({"tools": tools} if tools else {})}
    return engine.prompt_ids(parse_request(body))[0]


def build_forced_model(base: str, out: Path) -> Path:
    """The base model with an untied output head fitted so that greedy decoding of the two prompts gives
    the tool call `answer 42` and HELLO."""
    engine = ChatEngine(base)
    tok = engine.tokenizer
    eos = tok.convert_tokens_to_ids(tok.eos_token)
    pairs = [(_prompt_ids(engine, TOOL_MESSAGES, [TOOL_SCHEMA]),
              tok.encode(engine.chat.render_action("answer", "42"), add_special_tokens=False) + [eos]),
             (_prompt_ids(engine, HELLO_MESSAGES), tok.encode(HELLO, add_special_tokens=False) + [eos])]
    return fit_head(base, out, pairs)


def native_tools() -> list[dict]:
    """A Tau-like tool list: three of Tau retail's schemas."""
    from userrl.envs.tau.tools import domain_tools

    tools = domain_tools("retail")
    return [tools[name].schema() for name in ("get_order_details", "cancel_pending_order", "transfer_to_human_agents")]


def native_training_turns(tokenizer) -> list[tuple[list[int], list[int]]]:
    """(prompt ids, sampled ids) of the two turns as training assembles them (ChatFormat, native_tools): the
    call NATIVE_CALL, then after its result NATIVE_RESULT the plain reply NATIVE_REPLY."""
    chat = ChatFormat(tokenizer, "native_tools")
    tools = native_tools()
    first = [i for ids, _ in chat.encode_prompt(chat.initial_messages(NATIVE_MESSAGES, tools), tools) for i in ids]
    call = tokenizer.encode(chat.render_action("answer", json.dumps(NATIVE_CALL)), add_special_tokens=False)
    call.append(tokenizer.eos_token_id)
    second = first + call + chat.encode_after_assistant([{"role": "tool", "content": NATIVE_RESULT}]) + chat.header_ids
    return [(first, call), (second, tokenizer.encode(NATIVE_REPLY, add_special_tokens=False) + [tokenizer.eos_token_id])]


def fit_head(base: str, out: Path, pairs: list[tuple[list[int], list[int]]]) -> Path:
    """The base model with an untied output head fitted so that greedy decoding of each prompt gives its
    target ids (teacher-forced hidden states are the ones greedy decoding sees), saved at `out`."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(base)
    model = AutoModelForCausalLM.from_pretrained(base)
    features, targets = [], []
    with torch.no_grad():
        for prompt, target in pairs:
            hidden = model.model(input_ids=torch.tensor([prompt + target])).last_hidden_state[0]
            features.append(hidden[len(prompt) - 1: len(prompt) + len(target) - 1])
            targets += target
    vocab = sorted(set(targets))
    scores = torch.zeros(len(targets), len(vocab), dtype=torch.float64)
    for row, token in enumerate(targets):
        scores[row, vocab.index(token)] = 10.0
    head = torch.linalg.lstsq(torch.cat(features).double(), scores).solution
    weight = torch.zeros_like(model.lm_head.weight)
    weight[vocab] = head.T.float()
    model.config.tie_word_embeddings = False
    model.lm_head.weight = torch.nn.Parameter(weight)
    model.save_pretrained(out)
    tok.save_pretrained(out)
    return out


@pytest.fixture(scope="module")
def server(serve_port, tiny_model, tokenizer, tmp_path_factory):
    """The app (with an API key) on a free loopback port; yields the base URL. A second app, deployed
    with it (their replicas start together), serves the native_tools model at /native without a key."""
    from ray import serve

    from userrl.serving.app import build_app
    from userrl.serving.config import ServeConfig

    folder = build_forced_model(tiny_model, tmp_path_factory.mktemp("forced") / "forced-tiny")
    native = fit_head(tiny_model, tmp_path_factory.mktemp("native") / "native-tiny", native_training_turns(tokenizer))
    os.environ[KEY_ENV] = KEY
    port = serve_port
    common = {"max_model_len": 1024, "num_threads": 1, "num_cpus_per_replica": 0.5, "play": {"enabled": False}}
    config = ServeConfig(model=str(folder), model_name="forced-tiny", default_max_tokens=48, api_key_env=KEY_ENV,
                         port=port, **common)
    native_config = ServeConfig(model=str(native), model_name="native-tiny", protocol="native_tools", **common)
    serve.run_many([serve.RunTarget(build_app(config), name="userrl-test", route_prefix="/"),
                    serve.RunTarget(build_app(native_config), name="userrl-test-native", route_prefix="/native")])
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        serve.delete("userrl-test")
        serve.delete("userrl-test-native")
        os.environ.pop(KEY_ENV, None)


@pytest.fixture(scope="module")
def client(server) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server}/v1", api_key=KEY, max_retries=0, timeout=60)


@pytest.fixture(scope="module")
def native_client(server) -> openai.OpenAI:
    """The native_tools app: a model fitted to training's native_tools ids, served with `protocol: native_tools`."""
    return openai.OpenAI(base_url=f"{server}/native/v1", api_key="unused", max_retries=0, timeout=60)


def test_health_and_models(server, client):
    health = requests.get(f"{server}/health", timeout=30)
    assert health.status_code == 200 and health.json()["status"] == "ok"
    assert [m.id for m in client.models.list()] == ["forced-tiny"]


def test_chat_and_streaming_give_the_same_greedy_text(client, tokenizer):
    reply = client.chat.completions.create(model="forced-tiny", messages=HELLO_MESSAGES, temperature=0)
    choice = reply.choices[0]
    assert choice.message.content == HELLO and choice.finish_reason == "stop"
    assert reply.usage.completion_tokens == len(tokenizer.encode(HELLO, add_special_tokens=False)) + 1  # + <|im_end|>
    stream = client.chat.completions.create(model="forced-tiny", messages=HELLO_MESSAGES, temperature=0,
                                            stream=True, stream_options={"include_usage": True})
    chunks = list(stream)
    pieces = [c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content]
    # How many deltas depends on load: the replica sends the tokens that arrived while its last chunk was
    # in flight as one chunk (this tiny model can finish before the first is read). Per-token deltas are
    # tested in tests/unit/test_serving_chat_engine.py.
    assert pieces and chunks[0].choices[0].delta.role == "assistant"
    assert "".join(pieces) == HELLO
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
    assert chunks[-1].usage.completion_tokens == reply.usage.completion_tokens
    assert chunks[-1].usage.prompt_tokens == reply.usage.prompt_tokens


def test_tool_call_comes_back_in_openai_format(client):
    reply = client.chat.completions.create(model="forced-tiny", messages=TOOL_MESSAGES, tools=[TOOL_SCHEMA],
                                           temperature=0)
    choice = reply.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content is None
    (call,) = choice.message.tool_calls
    assert call.type == "function" and call.function.name == "interact_with_env"
    assert json.loads(call.function.arguments) == {"choice": "answer", "content": "42"}

    stream = list(client.chat.completions.create(model="forced-tiny", messages=TOOL_MESSAGES, tools=[TOOL_SCHEMA],
                                                 temperature=0, stream=True))
    deltas = [c.choices[0].delta.tool_calls for c in stream if c.choices and c.choices[0].delta.tool_calls]
    assert json.loads(deltas[0][0].function.arguments) == {"choice": "answer", "content": "42"}
    assert stream[-1].choices[0].finish_reason == "tool_calls"

    # The conversation continues: the call and the tool's answer go back in, rendered by the template.
    follow = client.chat.completions.create(
        model="forced-tiny", temperature=0, max_tokens=4, tools=[TOOL_SCHEMA],
        messages=[*TOOL_MESSAGES, choice.message.model_dump(exclude_none=True),
                  {"role": "tool", "tool_call_id": call.id, "content": "Correct!"}])
    assert follow.usage.prompt_tokens > reply.usage.prompt_tokens + 20
    # tool_choice none: no tool text in the prompt, no parsing.
    plain = client.chat.completions.create(model="forced-tiny", messages=TOOL_MESSAGES, tools=[TOOL_SCHEMA],
                                           tool_choice="none", temperature=0, max_tokens=4)
    assert plain.choices[0].message.tool_calls is None
    assert plain.usage.prompt_tokens < reply.usage.prompt_tokens - 100


def test_n_choices_of_one_prompt(client):
    """n=3 greedy: three identical choices, each parsed on its own; the prompt is counted once."""
    one = client.chat.completions.create(model="forced-tiny", messages=HELLO_MESSAGES, temperature=0)
    three = client.chat.completions.create(model="forced-tiny", messages=HELLO_MESSAGES, temperature=0, n=3)
    assert [(c.index, c.message.content, c.finish_reason) for c in three.choices] == [
        (i, HELLO, "stop") for i in range(3)]
    assert three.usage.prompt_tokens == one.usage.prompt_tokens
    assert three.usage.completion_tokens == 3 * one.usage.completion_tokens
    assert three.usage.total_tokens == three.usage.prompt_tokens + three.usage.completion_tokens
    calls = client.chat.completions.create(model="forced-tiny", messages=TOOL_MESSAGES, tools=[TOOL_SCHEMA],
                                           temperature=0, n=2)
    assert [c.finish_reason for c in calls.choices] == ["tool_calls"] * 2
    ids = [c.message.tool_calls[0].id for c in calls.choices]
    assert len(set(ids)) == 2  # each choice's calls are its own
    assert all(json.loads(c.message.tool_calls[0].function.arguments) == {"choice": "answer", "content": "42"}
               for c in calls.choices)


def test_seeded_choices_differ_and_replay_streamed_or_not(client):
    """Seeded n=2 at temperature 1: the choices differ, the same request gives them again, choice 0 is the
    n=1 request's, and streaming gives each choice's same text, finish, logprobs and the summed usage."""
    request = {"model": "forced-tiny", "messages": HELLO_MESSAGES, "temperature": 1.0, "seed": 3,
               "max_tokens": 16, "n": 2, "logprobs": True}
    first = client.chat.completions.create(**request)
    again = client.chat.completions.create(**request)
    texts = [c.message.content for c in first.choices]
    assert texts == [c.message.content for c in again.choices] and texts[0] != texts[1]
    alone = client.chat.completions.create(**{**request, "n": 1})
    assert alone.choices[0].message.content == texts[0]

    chunks = list(client.chat.completions.create(**request, stream=True, stream_options={"include_usage": True}))
    streamed: dict[int, dict] = {}
    for chunk in chunks:
        for c in chunk.choices:
            got = streamed.setdefault(c.index, {"content": "", "finish": None, "logprobs": []})
            got["content"] += c.delta.content or ""
            got["finish"] = c.finish_reason or got["finish"]
            got["logprobs"] += c.logprobs.content if c.logprobs else []
    assert sorted(streamed) == [0, 1]
    for index, c in enumerate(first.choices):
        assert (streamed[index]["content"], streamed[index]["finish"]) == (c.message.content, c.finish_reason)
        assert [e.token for e in streamed[index]["logprobs"]] == [e.token for e in c.logprobs.content]
        assert streamed[index]["logprobs"][0].logprob == pytest.approx(c.logprobs.content[0].logprob, abs=1e-4)
    assert chunks[-1].usage.model_dump() == first.usage.model_dump()


def test_logprobs_of_the_sampled_tokens(client):
    """An entry per completion token (the end of turn included, with no text): log-probabilities <= 0,
    texts (and bytes) joining to the content."""
    reply = client.chat.completions.create(model="forced-tiny", messages=HELLO_MESSAGES, temperature=0,
                                           logprobs=True, top_logprobs=0)
    choice = reply.choices[0]
    entries = choice.logprobs.content
    assert choice.message.content == HELLO and len(entries) == reply.usage.completion_tokens
    assert all(e.logprob <= 0 and e.top_logprobs == [] for e in entries)
    assert "".join(e.token for e in entries) == HELLO
    assert bytes(b for e in entries for b in e.bytes).decode() == HELLO
    plain = client.chat.completions.create(model="forced-tiny", messages=HELLO_MESSAGES, temperature=0)
    assert plain.choices[0].logprobs is None


@pytest.mark.parametrize(("change", "param"), [({"n": 9}, "n"),
                                               ({"logprobs": True, "top_logprobs": 5}, "top_logprobs")])
def test_what_is_not_served_is_a_400_naming_the_field(client, change, param):
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(model="forced-tiny", messages=HELLO_MESSAGES, **change)
    assert caught.value.body["param"] == param and param in caught.value.message


def test_api_key_required_and_never_logged(server):
    for key in ("wrong-key", None):
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        response = requests.post(f"{server}/v1/chat/completions", headers=headers, timeout=30,
                                 json={"model": "forced-tiny", "messages": HELLO_MESSAGES})
        assert response.status_code == 401
        assert response.json()["error"]["code"] == "invalid_api_key"
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=f"{server}/v1", api_key="wrong", max_retries=0).models.list()
    import ray

    logs = Path(ray._private.worker.global_worker.node.get_session_dir_path()) / "logs"
    leaked = [p.name for p in logs.rglob("*") if p.is_file() and KEY.encode() in p.read_bytes()]
    assert leaked == []


@pytest.mark.parametrize(("change", "status", "param"), [
    ({"temperature": -0.5}, 400, "temperature"),
    ({"n": 9}, 400, "n"),
    ({"logprobs": True, "top_logprobs": 2}, 400, "top_logprobs"),
    ({"max_tokens": 0}, 400, "max_tokens"),
    ({"top_p": 0}, 400, "top_p"),
    ({"model": "gpt-4"}, 404, "model"),
    ({"messages": []}, 400, "messages"),
    ({"messages": [{"role": "user", "content": "word " * 2000}]}, 400, "messages"),
    ({"max_tokens": 5000}, 400, "messages"),
    ({"tools": [{"type": "retrieval"}]}, 400, "tools.0.type"),
    ({"tool_choice": "required", "tools": [TOOL_SCHEMA]}, 400, "tool_choice"),
])
def test_invalid_requests_get_openai_errors(server, change, status, param):
    body = {"model": "forced-tiny", "messages": HELLO_MESSAGES, **change}
    response = requests.post(f"{server}/v1/chat/completions", json=body, timeout=30,
                             headers={"Authorization": f"Bearer {KEY}"})
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["param"] == param and error["message"] and error["type"] == "invalid_request_error"
    if "max_tokens" in change and change["max_tokens"] == 5000 or "word" in json.dumps(change):
        assert error["code"] == "context_length_exceeded" and "1024" in error["message"]


def test_bad_json_and_openai_client_errors(server, client):
    response = requests.post(f"{server}/v1/chat/completions", data=b"{not json", timeout=30,
                             headers={"Authorization": f"Bearer {KEY}", "Content-Type": "application/json"})
    assert response.status_code == 400 and response.json()["error"]["code"] == "invalid_json"
    with pytest.raises(openai.BadRequestError, match="temperature"):
        client.chat.completions.create(model="forced-tiny", messages=HELLO_MESSAGES, temperature=-1)
    with pytest.raises(openai.NotFoundError, match="forced-tiny"):
        client.chat.completions.create(model="nope", messages=HELLO_MESSAGES)


def test_native_tools_model_calls_tools_as_trained(native_client, tokenizer):
    """One tool call in OpenAI's format (content null, finish tool_calls), streamed too (the chunks
    accumulated by the openai library); the tool's result goes back and the model answers in plain text.
    Each prompt the server counts is training's, whose ids alone the model was fitted to answer."""
    from openai.lib.streaming.chat import ChatCompletionStreamState

    (first, _), (second, _) = native_training_turns(tokenizer)
    request = {"model": "native-tiny", "messages": NATIVE_MESSAGES, "tools": native_tools(), "temperature": 0}
    reply = native_client.chat.completions.create(**request)
    choice = reply.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content is None
    (call,) = choice.message.tool_calls
    assert call.type == "function" and call.id.startswith("call_")
    assert {"name": call.function.name, "arguments": json.loads(call.function.arguments)} == NATIVE_CALL
    assert reply.usage.prompt_tokens == len(first)

    state = ChatCompletionStreamState()
    for chunk in native_client.chat.completions.create(**request, stream=True):
        state.handle_chunk(chunk)
    streamed = state.get_final_completion().choices[0]
    assert streamed.finish_reason == "tool_calls" and not streamed.message.content
    assert [(c.function.name, json.loads(c.function.arguments)) for c in streamed.message.tool_calls] == [
        (NATIVE_CALL["name"], NATIVE_CALL["arguments"])]

    request["messages"] = [*NATIVE_MESSAGES, choice.message.model_dump(exclude_none=True),
                           {"role": "tool", "tool_call_id": call.id, "content": NATIVE_RESULT}]
    follow = native_client.chat.completions.create(**request)
    assert follow.choices[0].message.content == NATIVE_REPLY and follow.choices[0].message.tool_calls is None
    assert follow.choices[0].finish_reason == "stop" and follow.usage.prompt_tokens == len(second)
    state = ChatCompletionStreamState()
    for chunk in native_client.chat.completions.create(**request, stream=True):
        state.handle_chunk(chunk)
    streamed = state.get_final_completion().choices[0]
    assert streamed.message.content == NATIVE_REPLY and not streamed.message.tool_calls
    assert streamed.finish_reason == "stop"
