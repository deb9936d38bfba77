"""The action-protocol registry: names, lookup errors, HumanLM's protocol loaded on first use, each protocol's
rendering read back by its own parser, and callers that ask the registered object (a new protocol works)."""

import subprocess
import sys

import pytest

from userrl.chat import ChatFormat
from userrl.config import ConfigError, load_config
from userrl.coordinator import rollout_metrics
from userrl.protocols import PROTOCOL_CLASSES, ActionProtocol, get_protocol, protocol_names, register_protocol
from userrl.protocols.bracket import BracketProtocol
from userrl.trajectory import Trajectory


def test_the_four_protocols_are_registered_under_their_names():
    assert protocol_names() == ("bracket", "native_tools", "tool_call", "user_reply")
    for name in protocol_names():
        protocol = get_protocol(name)
        assert isinstance(protocol, ActionProtocol) and protocol.name == name
        assert get_protocol(name) is protocol  # one stateless object per protocol


def test_an_unknown_protocol_names_the_known_ones():
    with pytest.raises(ValueError, match="unknown action protocol 'morse'; known: bracket, native_tools, tool_call, "
                                         "user_reply"):
        get_protocol("morse")
    with pytest.raises(ConfigError, match=r"env\.protocol.*'morse'.*bracket, native_tools, tool_call, user_reply"):
        load_config(None, ["env.protocol=morse"])


def test_the_core_does_not_import_humanlm_until_user_reply_is_asked_for():
    code = ("import sys, userrl.chat, userrl.protocols, userrl.openai_policy, userrl.chat_template\n"
            "assert not [m for m in sys.modules if m.startswith('userrl.humanlm')]\n"
            "from userrl.protocols import get_protocol\n"
            "assert get_protocol('user_reply').stop_strings and 'userrl.humanlm.protocol' in sys.modules\n")
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.parametrize(("name", "choice", "content", "action"), [
    ("bracket", "answer", "42", "[answer] 42"),
    ("tool_call", "search", 'a "quoted" query', '[search] a "quoted" query'),
    ("native_tools", "answer", '{"name": "get_order", "arguments": {"id": 7}}',
     '[answer] {"name": "get_order", "arguments": {"id": 7}}'),
    ("native_tools", "action", "Which order?", "[action] Which order?"),
    ("user_reply", "answer", "<response>fine</response>", "[answer] <response>fine</response>"),
])
def test_each_protocol_parses_back_what_it_renders(name, choice, content, action):
    protocol = get_protocol(name)
    assert protocol.parse(protocol.render_action(choice, content)).action == action


def test_feedback_files_one_tool_message_per_call():
    for name in ("bracket", "tool_call", "native_tools"):
        protocol = get_protocol(name)
        text = "\n".join([protocol.render_action("answer", '{"name": "a", "arguments": {}}')] * 3)
        messages = protocol.feedback_messages(protocol.parse(text), "done")
        assert messages == [{"role": "tool", "content": "done"}] + [
            {"role": "tool", "content": protocol.ignored_call_notice}] * 2
    assert get_protocol("user_reply").feedback_messages(get_protocol("user_reply").parse("x"), "done") == []


def test_a_registered_protocol_is_what_the_callers_use(tokenizer):
    @register_protocol
    class Shout(BracketProtocol):
        name = "shout"

        def render_action(self, choice: str, content: str) -> str:
            return super().render_action(choice, content.upper())

        def episode_metrics(self, trajectories):
            return {"shout": {"episodes": float(len(trajectories))}}

    try:
        assert "shout" in protocol_names()
        assert load_config(None, ["env.protocol=shout"]).env.protocol == "shout"
        chat = ChatFormat(tokenizer, "shout")
        assert chat.protocol is get_protocol("shout") and chat.render_action("answer", "yes") == "[answer] YES"
        metrics = rollout_metrics([Trajectory(uid="u", group_id="g", env_name="function", item_key="0")], 1.0, protocol="shout")
        assert metrics["rollout/shout/episodes"] == 1.0
    finally:
        del PROTOCOL_CLASSES["shout"]


def test_an_openai_policy_refuses_a_protocol_it_cannot_play():
    from userrl.openai_policy import OpenAIPolicy, parse_policy

    with pytest.raises(ValueError, match="env.protocol='user_reply': an OpenAI-compatible policy plays 'bracket'"):
        OpenAIPolicy(parse_policy("openai:m@http://localhost:1/v1"), "user_reply")
