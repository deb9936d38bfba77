"""A native_tools model served like it was trained (issue 18 item 4): the Serve gateway and the chat template
`userrl export` writes turn the OpenAI conversation of a Tau episode (the gym's tools, tool results, the
customer's replies) into the token ids training built for that episode, turn by turn; a reply comes back as
plain text or as the first well-formed tool call, streamed or not.

The reference is training's own assembly (ChatFormat + run_episode: prompt segments, sampled ids, deltas
after each assistant turn); the conversation is what an OpenAI client holds: each earlier reply as the
gateway returned it (parsed from the sampled tokens) and the results it sent back.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from test_native_tools import ORDER_ID, TASK, Scripted, call, native_env, play

from userrl.chat import ChatFormat
from userrl.chat_template import tool_chat_template
from userrl.engines.base import GenerationOutput
from userrl.serving import protocol
from userrl.serving.chat_engine import ChatEngine
from userrl.serving.protocol import APIError, parse_request
from userrl.trajectory import Trajectory


@pytest.fixture(scope="module")
def engine(tiny_model) -> ChatEngine:
    return ChatEngine(tiny_model, protocol="native_tools", max_model_len=16384)


@pytest.fixture(scope="module")
def episode(tokenizer) -> Trajectory:
    """The Tau solver's episode (tool calls, customer replies, reward 1) as training ran it."""
    chat = ChatFormat(tokenizer, "native_tools")
    traj = play(chat, Scripted(chat, task=TASK))
    assert traj.episode_return == 1.0 and {"tool", "user"} <= {m["role"] for m in traj.messages[3:]}
    return traj


def _request(messages: list[dict[str, Any]], **extra: Any):
    return parse_request({"model": "m", "messages": messages, **extra})


def _output(engine: ChatEngine, text: str) -> GenerationOutput:
    ids = engine.tokenizer.encode(text, add_special_tokens=False) + [engine.chat.stop_token_ids[0]]
    return GenerationOutput(ids, [0.0] * len(ids), "stop")


def _sampled(traj: Trajectory, turn: int) -> tuple[int, list[int]]:
    """Where the sampled tokens of `turn` begin in the episode's ids, and those tokens."""
    at = [i for i, (m, t) in enumerate(zip(traj.loss_mask, traj.turn_ids, strict=True)) if m and t == turn]
    return at[0], traj.input_ids[at[0]:at[-1] + 1]


def client_turns(engine: ChatEngine, traj: Trajectory, tools: list[dict]) -> list[list[dict[str, Any]]]:
    """For each assistant turn, the messages an OpenAI client sends to ask for it."""
    messages = [dict(m) for m in native_env().native_prompt()]  # the gym's opening, without training's additions
    turns, last_call, k = [], None, 0
    for message in traj.messages[2:]:
        if message["role"] == "assistant":
            turns.append(copy.deepcopy(messages))
            prepared = engine.prepare(_request(messages, tools=tools))
            ids = _sampled(traj, k)[1]
            reply = engine.reply(prepared, GenerationOutput(ids, [0.0] * len(ids), "stop"))
            choice = protocol.choice(0, reply.content, reply.tool_calls, reply.finish_reason)
            body = protocol.chat_completion("id", "m", [choice], 0, 0)
            sent = json.loads(json.dumps(body))["choices"][0]["message"]
            messages.append(sent)
            last_call = sent["tool_calls"][0]["id"] if reply.tool_calls else None
            k += 1
        elif message["role"] == "tool":
            messages.append({"role": "tool", "tool_call_id": last_call, "content": message["content"]})
        else:
            messages.append({"role": "user", "content": message["content"]})
    return turns


def test_served_prompts_are_the_training_prompts_turn_by_turn(engine, episode):
    tools = native_env().tool_schemas()
    turns = client_turns(engine, episode, tools)
    assert len(turns) == len(episode.turns) > 4
    for k, messages in enumerate(turns):
        start, _ = _sampled(episode, k)
        assert engine.prompt_ids(_request(messages, tools=tools))[0] == episode.input_ids[:start], k
    # the client saw both kinds of reply: tool calls (finish tool_calls) and plain text to the customer
    kinds = {(m.get("content") is None, bool(m.get("tool_calls"))) for t in turns for m in t if m["role"] == "assistant"}
    assert kinds == {(True, True), (False, False)}


def test_exported_template_gives_vllm_the_training_prompts(engine, episode, tokenizer, tiny_model, tmp_path):
    """The exported tokenizer, given the messages as vLLM's OpenAI server hands them to the template (tool
    call arguments parsed into objects, vllm/renderers/chat_utils.py `_postprocess_messages`; tools as
    `tool.model_dump()`, no null fields), renders every turn's prompt as training did."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from userrl.commands.export import export_checkpoint
    from userrl.config import UserRLConfig

    checkpoint = tmp_path / "iter_000001"
    AutoModelForCausalLM.from_pretrained(tiny_model).save_pretrained(checkpoint / "model")
    tokenizer.save_pretrained(checkpoint / "model")
    config = UserRLConfig().model_dump(mode="json")
    config["env"]["protocol"] = "native_tools"
    (checkpoint / "meta.json").write_text(json.dumps({"iteration": 1, "policy_version": 1, "config": config}))
    out = export_checkpoint(checkpoint, tmp_path / "exported")
    assert json.loads((out / "userrl.json").read_text())["protocol"] == "native_tools"
    exported = AutoTokenizer.from_pretrained(out)

    tools = native_env().tool_schemas()
    for k, messages in enumerate(client_turns(engine, episode, tools)):
        for m in messages:
            for c in m.get("tool_calls") or []:
                c["function"]["arguments"] = json.loads(c["function"]["arguments"])
        ids = exported.apply_chat_template(messages, tools=tools, add_generation_prompt=True, tokenize=True,
                                           return_dict=False)
        assert list(ids) == episode.input_ids[:_sampled(episode, k)[0]], k
    # the exported folder serves as it is: its userrl.json names the protocol, the gateway keeps its template
    from userrl.serving.chat_engine import model_protocol

    assert model_protocol(str(out), None) == "native_tools"
    assert tool_chat_template(exported.chat_template, "native_tools") == exported.chat_template


def test_a_template_that_renders_tools_keeps_them(tiny_model):
    """Training passed the schemas through `tools` to a template that renders them (nothing added to the
    system message): so does the preamble, which only writes tool calls as the text training sampled."""
    from test_native_tools import TOOLS_TEMPLATE
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    tokenizer.chat_template = TOOLS_TEMPLATE
    chat = ChatFormat(tokenizer, "native_tools")
    tools, opening = native_env().tool_schemas(), native_env().native_prompt()
    trained = [i for ids, _ in chat.encode_prompt(chat.initial_messages(opening, tools), tools) for i in ids]
    arguments = {"order_id": ORDER_ID}
    history = [*chat.initial_messages(opening, tools), {"role": "assistant", "content": chat.render_action(
        "answer", json.dumps({"name": "get_order_details", "arguments": arguments}))}, {"role": "tool", "content": "ok"}]
    trained_text = tokenizer.apply_chat_template(history, tools=tools, tokenize=False)

    tokenizer.chat_template = tool_chat_template(TOOLS_TEMPLATE, "native_tools")
    ids = tokenizer.apply_chat_template(opening, tools=tools, add_generation_prompt=True, tokenize=True,
                                        return_dict=False)
    assert list(ids) == trained and "You have these tools" not in tokenizer.decode(ids)
    sent = [*opening, {"role": "assistant", "content": None, "tool_calls": [{"id": "c", "type": "function", "function": {
        "name": "get_order_details", "arguments": json.dumps(arguments)}}]}, {"role": "tool", "content": "ok"}]
    assert tokenizer.apply_chat_template(sent, tools=tools, tokenize=False) == trained_text


def test_preambles_are_kept_or_swapped(tokenizer):
    """A model exported as tool_call can be served as native_tools (the preamble is swapped, the model's own
    template kept); one exported by an older userrl keeps its preamble for its own protocol only."""
    from userrl.chat_template import MARKERS

    base = tokenizer.chat_template
    native = tool_chat_template(base, "native_tools")
    assert native.endswith(base) and tool_chat_template(native, "native_tools") == native
    assert tool_chat_template(tool_chat_template(base), "native_tools") == native
    assert tool_chat_template(native, "tool_call") == tool_chat_template(base) == tool_chat_template(base, "bracket")
    older = MARKERS["tool_call"] + "{%- set x = 1 -%}" + base
    assert tool_chat_template(older, "bracket") == older
    with pytest.raises(ValueError, match="export the checkpoint again"):
        tool_chat_template(older, "native_tools")


@pytest.mark.parametrize(("text", "content", "called", "finish"), [
    ("Which order would you like to cancel?", "Which order would you like to cancel?", None, "stop"),
    (call("get_order_details", order_id=ORDER_ID), None, ("get_order_details", {"order_id": ORDER_ID}), "tool_calls"),
    # only the first well-formed call counts (a broken block before it does not), as training executes it
    ("Let me check.\n<tool_call>{broken}</tool_call>" + call("think", thought="a") + call("think", thought="b"),
     "Let me check.", ("think", {"thought": "a"}), "tool_calls"),
    # any tool name, as in training (the gym answers an unknown one with its error)
    (call("refund_everything"), None, ("refund_everything", {}), "tool_calls"),
    # a block with no well-formed call is no call: the text comes back as it is (training ends the episode)
    ('<tool_call>{"name": "get_order_details", "arguments": {</tool_call>',
     '<tool_call>{"name": "get_order_details", "arguments": {</tool_call>', None, "stop"),
    ("<think>maybe <tool_call>x</tool_call></think> Hello!", "<think>maybe <tool_call>x</tool_call></think> Hello!",
     None, "stop"),
])
def test_native_replies_in_the_openai_format(engine, text, content, called, finish):
    tools = native_env().tool_schemas()
    prepared = engine.prepare(_request(native_env().native_prompt(), tools=tools))
    reply = engine.reply(prepared, _output(engine, text))
    assert (reply.content, reply.finish_reason) == (content, finish)
    calls = [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in reply.tool_calls]
    assert calls == ([called] if called else [])
    # streamed: the content deltas are the content, the call is held back (no "<tool_call>" in a delta)
    stream, pieces = engine.stream(prepared), []
    for token in _output(engine, text).token_ids:
        pieces.append(stream.push([token]))
    rest, streamed = stream.finish(_output(engine, text))
    assert "".join(pieces) + rest == (content or "") and streamed.finish_reason == finish
    assert [c["function"] for c in streamed.tool_calls] == [c["function"] for c in reply.tool_calls]
    if called:
        assert not any("<tool_call>" in p for p in pieces)


def test_bad_tool_call_history_is_a_400(engine):
    tools = native_env().tool_schemas()
    for arguments in ("not json", "[1, 2]", '{"a": NaN}'):
        messages = [*native_env().native_prompt(), {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "think", "arguments": arguments}}]}]
        with pytest.raises(APIError, match="must be a JSON object") as error:
            engine.prepare(_request(messages, tools=tools))
        assert error.value.status == 400 and error.value.param == "messages.2.tool_calls.0.function.arguments"


def test_the_protocol_comes_from_the_folder_and_is_checked(tiny_model, tmp_path):
    from userrl.serving.chat_engine import model_protocol

    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "userrl.json").write_text(json.dumps({"protocol": "native_tool"}))
    with pytest.raises(ValueError, match="'native_tool'.*userrl.json.*is not one of"):
        model_protocol(str(folder), None)
    assert model_protocol(str(folder), "native_tools") == "native_tools"  # the serving config wins
    assert model_protocol(str(Path(tiny_model)), None) == "tool_call"
    # A checkpoint's model/ (`userrl serve --model runs/x/checkpoints/iter_000003`) speaks what it was trained in.
    checkpoint = tmp_path / "checkpoints" / "iter_000003"
    (checkpoint / "model").mkdir(parents=True)
    (checkpoint / "model" / "config.json").write_text("{}")
    (checkpoint / "meta.json").write_text(json.dumps({"iteration": 3, "config": {"env": {"protocol": "bracket"}}}))
    assert model_protocol(str(checkpoint / "model"), None) == "bracket"


def test_a_user_simulator_calls_no_tools(tiny_model):
    engine = ChatEngine(tiny_model, protocol="user_reply")
    with pytest.raises(APIError, match="user simulator") as error:
        engine.prepare(_request([{"role": "user", "content": "hi"}], tools=native_env().tool_schemas()))
    assert error.value.param == "tools"
    assert engine.prepare(_request([{"role": "user", "content": "hi"}])).tool_names == []
