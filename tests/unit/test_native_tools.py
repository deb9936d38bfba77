"""env.protocol=native_tools on Tau (docs/spec/ALGORITHMS.md §5.1).

The prompt, masks token by token, the customer, bad calls.
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import json
from typing import Any

import numpy as np
import pytest
from transformers import AutoTokenizer

from userrl.chat import ChatFormat
from userrl.engines.base import GenerationOutput, GenerationRequest
from userrl.envs import GYMS, MultiTurnEnv, Task, load_tasks, make_env, make_solver
from userrl.envs.base import INVALID_TOOL_CALL
from userrl.envs.llm import RoleCall
from userrl.envs.tau.customer import GREETING, STOP_TOKEN
from userrl.envs.tau.env import CUSTOMER_GONE
from userrl.envs.tau.tools import catalogue_text, domain_tools
from userrl.protocols.native_tools import (
    NATIVE_IGNORED_CALL_NOTICE,
    NATIVE_TOOL_INSTRUCTIONS,
    parse_native_tools,
)
from userrl.rollout import RolloutLimits, TokenPolicy, run_episode
from userrl.sft import solver_demonstrations
from userrl.trajectory import ROLE_IDS, Trajectory

LIMITS = RolloutLimits(max_turns=30, max_new_tokens=512, max_model_len=16384, max_response_len=12288)
#: A builtin retail task whose gold actions cancel an order (the solver plays it to reward 1).
TASK = next(t for t in load_tasks("tau", "train") if t.data["actions"][-1]["name"] == "cancel_pending_order")
ORDER_ID = TASK.data["actions"][-1]["kwargs"]["order_id"]

# A template that renders `tools` itself (Qwen-like), to check the schemas go through it untouched.
TOOLS_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}"
    "{% if loop.first and tools %}\n\n# Tools\n<tools>{% for tool in tools %}\n{{ tool | tojson }}{% endfor %}"
    "\n</tools>{% endif %}<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def native_env(task: Task = TASK, **kwargs: Any) -> MultiTurnEnv:
    """A Tau env as env.protocol=native_tools builds it (customer_failure=end) with room for 30 turns."""
    return make_env("tau", copy.deepcopy(task), **{"max_steps": 60, "customer_failure": "end", **kwargs})


def call(name: str, **arguments: Any) -> str:
    """A native tool-call block."""
    return f'<tool_call>\n{json.dumps({"name": name, "arguments": arguments})}\n</tool_call>'


class Scripted:
    """The model's stand-in: fixed assistant texts, one per turn, then the Tau solver (or silence)."""

    def __init__(self, chat: ChatFormat, texts: list[str] = (), task: Task | None = None):
        self.chat, self.texts = chat, list(texts)
        self.solver = make_solver("tau", task, np.random.default_rng(0), 30) if task is not None else None
        self.feedback: str | None = None
        self.results: list[Any] = []

    def next_text(self) -> str:
        if self.texts:
            return self.texts.pop(0)
        if self.solver is None:
            return ""
        choice, content = self.solver.next_action(self.feedback)
        while choice == "search":  # the catalogue is in the native prompt already
            choice, content = self.solver.next_action(catalogue_text("retail"))
        return "" if choice == "finish" else self.chat.render_action(choice, content)

    async def __call__(self, request: GenerationRequest) -> GenerationOutput:
        ids = self.chat._encode(self.next_text()) + [self.chat.tokenizer.eos_token_id]
        return GenerationOutput(ids, [-0.5] * len(ids), "stop")


def play(chat: ChatFormat, model: Scripted, env: MultiTurnEnv | None = None, task: Task = TASK,
         limits: RolloutLimits = LIMITS) -> Trajectory:
    env = env if env is not None else native_env(task)
    original = env.astep

    async def astep(action: str) -> Any:
        result = await original(action)
        model.feedback = result.observation["feedback"]
        model.results.append(result)
        return result

    env.astep = astep
    return asyncio.run(run_episode(env, task, TokenPolicy(chat, model), limits, uid="u", group_id="g"))


# ---------------------------------------------------------------- masks, token by token


def reference_labels(tokenizer: Any, messages: list[dict[str, str]], tools: list[dict[str, Any]]) -> tuple[str, list]:
    """The template's rendering of `messages` and the (role, loss_mask) of each character, from 5.1's table.

    Message boundaries come from rendering growing prefixes; an assistant message is its header (mask 0) and
    its text up to and including the end-of-turn token (mask 1); what follows belongs to the next message.
    """
    kwargs = {"tools": tools} if tools else {}

    def render(ms: list[dict[str, str]], generation: bool = False) -> str:
        return tokenizer.apply_chat_template(ms, tokenize=False, add_generation_prompt=generation, **kwargs) if ms else ""

    text, labels, pending = render(messages), [], 0
    for i, message in enumerate(messages):
        start, end = len(render(messages[:i])), len(render(messages[: i + 1]))
        role = ROLE_IDS[message["role"]]
        if message["role"] == "assistant":
            header_end = len(render(messages[:i], True))
            sampled_end = text.index(tokenizer.eos_token, header_end) + len(tokenizer.eos_token)
            labels += [(role, 0)] * (pending + header_end - start) + [(role, 1)] * (sampled_end - header_end)
            pending = end - sampled_end
        else:
            labels += [(role, 0)] * (pending + end - start)
            pending = 0
    return text[:len(labels)], labels  # after a final assistant turn, the template's trailing text is no one's


def assert_token_exact(tokenizer: Any, traj: Trajectory, tools: list[dict[str, Any]] | None = None) -> None:
    traj.check()
    text, labels = reference_labels(tokenizer, traj.messages, tools or [])
    pieces = [tokenizer.decode([t]) for t in traj.input_ids]
    assert "".join(pieces) == text  # the assembled ids decode to the reference rendering, nothing more or less
    at = 0
    for i, piece in enumerate(pieces):
        span = set(labels[at:at + len(piece)])
        assert span == {(traj.role_ids[i], traj.loss_mask[i])}, (i, piece, span)
        at += len(piece)
    # turn ids: -1 on the prompt, then each turn's span (header, sampled tokens, feedback) in order
    assert traj.turn_ids[:traj.prompt_len] == [-1] * traj.prompt_len
    response = traj.turn_ids[traj.prompt_len:]
    assert response == sorted(response) and set(response) == set(range(len(traj.turns)))
    assert [response.index(k) for k in range(len(traj.turns))] == traj.turn_starts
    # the sampled tokens of each turn decode to the assistant messages
    assistant = [m["content"] for m in traj.messages if m["role"] == "assistant"]
    for k, content in enumerate(assistant):
        ids = [t for t, m, turn in zip(traj.input_ids, traj.loss_mask, traj.turn_ids, strict=True) if m and turn == k]
        assert tokenizer.decode(ids, skip_special_tokens=True) == content and ids[-1] == tokenizer.eos_token_id


def test_solver_episode_masks_match_the_table_token_by_token(tokenizer):
    chat = ChatFormat(tokenizer, "native_tools")
    traj = play(chat, Scripted(chat, task=TASK))
    assert_token_exact(tokenizer, traj)
    assert traj.stop_reason == "env_done" and traj.episode_return == 1.0 and not traj.aborted
    roles = [m["role"] for m in traj.messages]
    assert roles[:3] == ["system", "user", "assistant"] and {"tool", "user"} <= set(roles[3:])
    # tool results are role 3, customer replies role 1, both after an assistant turn and outside the loss
    for turn, message in zip(traj.turns, [m for m in traj.messages[2:] if m["role"] != "assistant"], strict=True):
        assert message["role"] == ("user" if turn.choice == "action" else "tool") and turn.executed
        # tool turns name the tool they ran, and the solver's calls never err
        assert turn.tool == ("" if turn.choice == "action" else json.loads(turn.content)["name"])
        assert not turn.tool_error
    assert STOP_TOKEN in traj.messages[-1]["content"] and traj.messages[-1]["role"] == "user"
    assert {ROLE_IDS["tool"], ROLE_IDS["user"]} <= set(traj.role_ids[traj.prompt_len:])


def test_prompt_is_the_policy_the_first_message_and_every_tool(tokenizer):
    chat = ChatFormat(tokenizer, "native_tools")
    env = native_env()
    (system, user), tools = chat.episode_opening(TASK, env)
    policy = env._domain.policy().strip()
    schemas = "\n".join(json.dumps(tool.schema()["function"]) for tool in domain_tools("retail").values())
    assert system["content"] == policy + "\n\n" + NATIVE_TOOL_INSTRUCTIONS.format(schemas=schemas)
    assert user == {"role": "user", "content": TASK.data["obs"].strip()}
    assert [t["function"]["name"] for t in tools] == list(domain_tools("retail")) and len(tools) == 16
    assert GREETING not in system["content"] + user["content"]  # the agent never sees the simulator's seed
    # every member of a GRPO group starts from the same ids (the recorded first message, not a fresh one)
    first, second = (play(chat, Scripted(chat, [""])) for _ in range(2))
    assert first.input_ids[:first.prompt_len] == second.input_ids[:second.prompt_len]
    assert first.role_ids[:first.prompt_len][-1] == ROLE_IDS["assistant"]


def test_airline_schemas_cover_its_fourteen_tools():
    names = [tool.schema()["function"]["name"] for tool in domain_tools("airline").values()]
    assert len(names) == 14 and {"think", "calculate", "transfer_to_human_agents", "book_reservation"} <= set(names)


def test_a_template_that_renders_tools_gets_the_schemas_through_tools(tiny_model):
    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    tokenizer.chat_template = TOOLS_TEMPLATE
    chat = ChatFormat(tokenizer, "native_tools")
    assert chat.template_tools
    traj = play(chat, Scripted(chat, task=TASK))
    schemas = native_env().tool_schemas()
    assert traj.messages[0]["content"] == native_env()._domain.policy().strip()  # nothing appended
    assert '"name": "cancel_pending_order"' in tokenizer.decode(traj.input_ids[:traj.prompt_len])
    assert_token_exact(tokenizer, traj, schemas)
    assert traj.episode_return == 1.0


# ---------------------------------------------------------------- parsing


@pytest.mark.parametrize(("text", "calls", "n_calls", "speaks"), [
    ("Hello, how can I help?", [("action", "Hello, how can I help?")], 0, True),
    ("<think>plan</think>  Hi there ", [("action", "Hi there")], 0, True),
    ("   ", [], 0, False),
    ("I will call transfer_to_human_agents now.", [("action", "I will call transfer_to_human_agents now.")], 0, True),
    (call("think", thought="x"), [("answer", '{"name": "think", "arguments": {"thought": "x"}}')], 1, False),
    ('<tool_call>{"name": "think", "arguments": "{\\"thought\\": \\"x\\"}"}</tool_call>',
     [("answer", '{"name": "think", "arguments": {"thought": "x"}}')], 1, False),
    ('<tool_call>{"name": "list_all_product_types"}</tool_call>',
     [("answer", '{"name": "list_all_product_types", "arguments": {}}')], 1, False),
    ('<tool_call>{"name": "get_order_details", "arguments": </tool_call>', [], 1, False),
    ('<tool_call>{"name": "x", "arguments": {"a": NaN}}</tool_call>', [], 1, False),
    ('<tool_call>{"name": "", "arguments": {}}</tool_call>', [], 1, False),
    ('<tool_call>{"name": "x", "arguments": [1]}</tool_call>', [], 1, False),
    ('<tool_call>{"name": "x", "arguments": "not json"}</tool_call>', [], 1, False),
    ("<tool_call>" + "[" * 100_000, [], 1, False),
    ("<tool_call>{broken}</tool_call>" + call("think", thought="y"),
     [("answer", '{"name": "think", "arguments": {"thought": "y"}}')], 2, False),
])
def test_parse_native_tools(text, calls, n_calls, speaks):
    parsed = parse_native_tools(text)
    assert (parsed.calls, parsed.n_tool_calls, parsed.speaks) == (calls, n_calls, speaks)


def test_render_action_round_trips_through_the_parser(tokenizer):
    chat = ChatFormat(tokenizer, "native_tools")
    content = json.dumps({"name": "get_order_details", "arguments": {"order_id": ORDER_ID}})
    assert chat.parse(chat.render_action("answer", content)).action == f"[answer] {content}"
    assert chat.parse(chat.render_action("action", "Your order?")).action == "[action] Your order?"
    with pytest.raises(ValueError, match="native_tools has no step"):
        chat.render_action("search", "tools")


# ---------------------------------------------------------------- bad calls in an episode


def first_turn(tokenizer, texts: list[str]) -> tuple[Trajectory, Scripted]:
    chat = ChatFormat(tokenizer, "native_tools")
    model = Scripted(chat, texts)
    traj = play(chat, model)
    assert_token_exact(tokenizer, traj)
    return traj, model


@pytest.mark.parametrize(("text", "feedback"), [
    (call("refund_everything"), "Unknown action refund_everything"),
    (call("get_order_details", order_id=5), "Error: "),
    (call("get_order_details", order_id=ORDER_ID, verbose=True), "Error: "),
    (call("get_order_details", order_id=json.dumps({"order_id": ORDER_ID})), "Error: order not found"),
    (call("get_order_details"), "Error: "),
])
def test_bad_tool_calls_get_the_tool_error_and_the_episode_goes_on(tokenizer, text, feedback):
    traj, model = first_turn(tokenizer, [text, "Sorry about that."])
    first = traj.turns[0]
    assert first.executed and first.choice == "answer" and first.feedback.startswith(feedback)
    assert traj.messages[3] == {"role": "tool", "content": first.feedback}
    info = model.results[0].info
    assert info["error"] is None and info["tool_calls"] + info["invalid_tool_calls"] == 1
    assert (info["tool_errors"] == 1) == feedback.startswith("Error")
    # The turn record names the tool and its error (MUA-RL's metrics); an unknown name is no tool of the domain.
    name = json.loads(first.content)["name"]
    assert info["tool_call"] == {"name": name if name in domain_tools("retail") else INVALID_TOOL_CALL, "error": True}
    assert (first.tool, first.tool_error) == (info["tool_call"]["name"], True)
    assert traj.turns[1].choice == "action" and traj.messages[5]["role"] == "user"  # the episode went on
    assert (traj.turns[1].tool, traj.turns[1].tool_error) == ("", False)
    assert model.results[1].info["tool_call"] is None  # a customer message calls no tool
    assert traj.stop_reason == "no_tool_call" and len(traj.turns) == 3  # the third, empty message ends it


def test_arguments_as_a_json_string_run(tokenizer):
    arguments = json.dumps({"order_id": ORDER_ID})
    text = f'<tool_call>{{"name": "get_order_details", "arguments": {json.dumps(arguments)}}}</tool_call>'
    traj, _ = first_turn(tokenizer, [text])
    assert traj.turns[0].feedback.startswith('{"order_id": "' + ORDER_ID)


def test_several_calls_run_only_the_first(tokenizer):
    cancel = call("cancel_pending_order", order_id=ORDER_ID, reason="no longer needed")
    traj, model = first_turn(tokenizer, [call("think", thought="one") + "\n" + cancel])
    assert traj.turns[0].n_tool_calls == 2 and json.loads(traj.turns[0].content)["name"] == "think"
    assert [m["content"] for m in traj.messages[3:5]] == ["", NATIVE_IGNORED_CALL_NOTICE]
    assert model.results[0].info["tool_calls"] == 1 and len(model.results) == 1  # the cancel never ran


def test_a_malformed_call_ends_the_episode(tokenizer):
    traj, model = first_turn(tokenizer, ['Let me check. <tool_call>{"name": "get_order_details", "arguments": {</tool_call>'])
    assert traj.stop_reason == "no_tool_call" and len(traj.turns) == 1 and not model.results
    assert traj.turns[0].n_tool_calls == 1 and not traj.turns[0].executed and traj.turn_rewards == [0.0]


def test_the_terminal_tool_mid_sentence_ends_the_episode_and_is_scored(tokenizer):
    text = "I will hand you over now. " + call("transfer_to_human_agents", summary="cancel") + " Goodbye!"
    traj, model = first_turn(tokenizer, [text])
    assert traj.stop_reason == "env_done" and traj.turns[0].terminated and traj.turns[0].feedback == "Transfer successful"
    info = model.results[0].info
    assert info["end_reason"] == "transfer" and info["db_match"] is False and traj.episode_return == 0.0
    assert model.results[0].info["action_history"][0].startswith("[answer] ")  # the text never reached the customer


def test_an_empty_message_ends_the_episode(tokenizer):
    traj, model = first_turn(tokenizer, [""])
    assert traj.stop_reason == "no_tool_call" and traj.turns[0].n_tool_calls == 0 and not model.results


def test_thirty_counted_turns_cap_the_episode(tokenizer):
    chat = ChatFormat(tokenizer, "native_tools")
    traj = play(chat, Scripted(chat, [call("think", thought=str(i)) for i in range(40)]))
    assert traj.stop_reason == "max_turns" and len(traj.turns) == 30
    assert all(t.executed for t in traj.turns) and traj.episode_return == 0.0


# ---------------------------------------------------------------- the customer in the loop


class FakeCustomer:
    """The customer model's double: canned replies; None = every attempt failed, "" = an empty reply."""

    def __init__(self, replies: list[str | None]):
        self.replies, self.conversations = list(replies), []

    async def complete_text(self, role: str, system: str, user: Any, **_: Any) -> tuple[str | None, RoleCall]:
        self.conversations.append(user)
        reply = self.replies.pop(0)
        return reply, RoleCall(role, 3 if reply is None else 1, reply is not None, 0.01)

    async def complete_json(self, *args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the customer speaks free text")


def llm_episode(tokenizer, replies, texts, role_failure="abort"):
    chat = ChatFormat(tokenizer, "native_tools")
    customer = FakeCustomer(replies)
    model = Scripted(chat, texts)
    limits = RolloutLimits(**{**vars(LIMITS), "role_failure": role_failure})
    traj = play(chat, model, native_env(backend="openai", llm=customer), limits=limits)
    return traj, model, customer


def test_the_simulator_sees_the_dialogue_without_tool_traffic(tokenizer):
    texts = ["Which order?", call("get_order_details", order_id=ORDER_ID), "It is cancelled now."]
    traj, _, customer = llm_episode(tokenizer, [f"Order {ORDER_ID}.", "Thanks! ###STOP###"], texts)
    assert traj.stop_reason == "env_done" and traj.messages[-1] == {"role": "user", "content": "Thanks! ###STOP###"}
    # GYMS §5's role-flipped chat: the agent's messages are the customer model's `user`, its own `assistant`.
    assert customer.conversations[-1] == [
        {"role": "user", "content": GREETING}, {"role": "assistant", "content": TASK.data["obs"]},
        {"role": "user", "content": "Which order?"}, {"role": "assistant", "content": f"Order {ORDER_ID}."},
        {"role": "user", "content": "It is cancelled now."}]


@pytest.mark.parametrize("reply", [None, "", "<think>nothing to say</think>"])
def test_a_failed_or_empty_customer_reply_ends_the_episode(tokenizer, reply):
    # role_failure=fallback keeps the ended episode (scored); the default abort drops it, counted
    traj, model, _ = llm_episode(tokenizer, [reply], ["Hello, what can I do?"], role_failure="fallback")
    assert traj.stop_reason == "env_done" and not traj.aborted
    assert traj.messages[-1] == {"role": "user", "content": CUSTOMER_GONE}
    info = model.results[0].info
    assert info["end_reason"] == "customer_failed" and info["customer_failures"] == 1
    assert traj.turns[0].failed_role_calls == 1 and traj.turns[0].terminated and traj.episode_return == 0.0
    traj, _, _ = llm_episode(tokenizer, [reply], ["Hello, what can I do?"])
    assert traj.aborted and traj.error == "role_call_failed:customer" and traj.turns[0].failed_role_calls == 1


def test_choice_protocols_keep_the_fallback_reply():
    env = make_env("tau", copy.deepcopy(TASK), backend="openai", llm=FakeCustomer([None]))
    env.reset()
    obs, reward, terminated, _, info = env.step("[action] hello")
    assert (obs["feedback"], terminated, info["customer_failures"]) == ("Sorry, could you say that again?", False, 1)


# ---------------------------------------------------------------- configuration


def test_native_tools_is_refused_for_gyms_without_tools():
    from userrl.config import ConfigError, load_config

    with pytest.raises(ConfigError, match=r"env.protocol=native_tools.*\['function'\].*\['tau'\]"):
        load_config(None, ["env.protocol=native_tools", "env.gyms=[{name: function}, {name: tau}]"])


def test_native_tools_config_sets_tau_native_rules():
    from userrl.config import load_config
    from userrl.env_runner_group import env_kwargs

    config = load_config(None, ["env.protocol=native_tools", "env.gyms=[{name: tau}]"])
    assert env_kwargs(config)["tau"]["customer_failure"] == "end"
    config = load_config(None, ["env.protocol=native_tools",
                                "env.gyms=[{name: tau, kwargs: {customer_failure: fallback}}]"])
    assert env_kwargs(config)["tau"]["customer_failure"] == "fallback"  # an explicit kwarg wins
    config = load_config(None, ["env.gyms=[{name: tau}]"])
    assert "customer_failure" not in env_kwargs(config)["tau"]


def test_a_gym_without_tools_gives_an_aborted_episode_not_a_crash(tokenizer):
    chat = ChatFormat(tokenizer, "native_tools")
    task = load_tasks("function", "test")[0]
    traj = asyncio.run(run_episode(make_env("function", task), task, TokenPolicy(chat, Scripted(chat)), LIMITS,
                                   uid="u", group_id="g"))
    assert traj.aborted and traj.error == "prompt_exception:ValueError"


@pytest.mark.parametrize("name", sorted(GYMS))
def test_every_gym_declares_whether_it_exposes_tools(name):
    task = load_tasks(name, "train")[0]
    env = make_env(name, task)
    assert GYMS[name].exposes_tools == bool(env.tool_schemas()) == (name == "tau")
    assert [m["role"] for m in env.native_prompt()] == ["system", "user"]
    for schema in env.tool_schemas():
        assert schema["type"] == "function" and schema["function"]["parameters"]["type"] == "object"


# ---------------------------------------------------------------- SFT demonstrations (sft.enabled, source solver)


@pytest.mark.parametrize("renders_tools", [False, True], ids=["tools_in_system", "template_renders_tools"])
def test_a_solver_demonstration_is_the_rollout_of_its_own_messages(tiny_model, renders_tools):
    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    if renders_tools:
        tokenizer.chat_template = TOOLS_TEMPLATE
    chat = ChatFormat(tokenizer, "native_tools")
    (demo,) = solver_demonstrations([TASK], chat, episodes=1, max_turns=30)
    # The real episode loop, with a policy that writes exactly the demonstration's assistant texts.
    texts = [m["content"] for m in demo.messages if m["role"] == "assistant"]
    traj = play(chat, Scripted(chat, texts))
    assert traj.stop_reason == "env_done" and traj.episode_return == 1.0 and len(traj.turns) == len(texts)
    assert demo.messages == traj.messages
    assert demo.prompt_len == traj.prompt_len and demo.input_ids == traj.input_ids
    assert (demo.role_ids, demo.loss_mask, demo.turn_ids, demo.turn_starts) == (
        traj.role_ids, traj.loss_mask, traj.turn_ids, traj.turn_starts)
    assert_token_exact(tokenizer, demo, native_env().tool_schemas() if renders_tools else None)
    # The loss covers the assistant texts, each closed by its end-of-turn token, and nothing else.
    expected: list[int] = []
    for message in demo.messages:
        if message["role"] == "assistant":
            expected += tokenizer.encode(message["content"], add_special_tokens=False) + [tokenizer.eos_token_id]
    assert [t for t, m in zip(demo.input_ids, demo.loss_mask, strict=True) if m] == expected


def test_a_native_demonstration_calls_tools_and_speaks_to_the_customer(tokenizer):
    chat = ChatFormat(tokenizer, "native_tools")
    (demo,) = solver_demonstrations([TASK], chat, episodes=1, max_turns=30)
    env = native_env()
    system, user, *rest = demo.messages
    assert system["content"].startswith(env._domain.policy().strip()) and '"name": "cancel_pending_order"' in (
        system["content"])  # SmolLM2's template ignores `tools`: the schemas are in the system message
    assert user == {"role": "user", "content": TASK.data["obs"].strip()}
    names = set(domain_tools("retail"))
    assert [m["role"] for m in rest[::2]] == ["assistant"] * len(rest[::2]) and len(rest) % 2 == 0
    for message, reply in zip(rest[::2], rest[1::2], strict=True):
        text = message["content"]
        if text.startswith("<tool_call>\n"):  # one tool call, its result after it as a tool message
            payload = json.loads(text.removeprefix("<tool_call>\n").removesuffix("\n</tool_call>"))
            assert payload["name"] in names and reply["role"] == "tool"
        else:  # plain text to the customer, the customer's reply after it as a user message
            assert "<tool_call>" not in text and text.strip() and reply["role"] == "user"
        assert "[search]" not in text and "Available Tools:" not in reply["content"]  # no tool look-up step
    gold = TASK.data["actions"][-1]
    assert {"role": "assistant", "content": call(gold["name"], **gold["kwargs"])} in rest  # the change itself
    assert rest[-1]["role"] == "user" and STOP_TOKEN in rest[-1]["content"]
    assert {"user", "tool"} == {m["role"] for m in rest[1::2]}
    with pytest.raises(RuntimeError, match="before the first move"):
        solver = make_solver("tau", TASK, np.random.default_rng(0))
        solver.next_action(None)
        solver.start_native("late")


class ChoiceOnlySolver:
    """A solver that plays the choice protocols only (no NativeToolsSolver)."""

    def __init__(self, task: Task, rng: np.random.Generator) -> None:
        pass

    def next_action(self, last_feedback: str | None) -> tuple[str, str]:
        return "search", "tools"


def test_sft_with_native_tools_needs_a_solver_that_plays_them(monkeypatch, tokenizer):
    from userrl.config import ConfigError, load_config
    from userrl.envs.registry import RECORDS

    native = ["env.protocol=native_tools", "env.gyms=[{name: tau}]", "sft.enabled=true"]
    assert load_config(None, native).sft.enabled  # Tau's solver writes native demonstrations
    from userrl.cli import sft_config

    assert sft_config(None, native[:2]).sft.enabled  # `userrl sft` too
    monkeypatch.setitem(RECORDS, "tau", dataclasses.replace(RECORDS["tau"], solver=ChoiceOnlySolver))
    with pytest.raises(ConfigError, match=r"sft.enabled=true with env.protocol=native_tools: the solvers of "
                                          r"\['tau'\] cannot write native-tools demonstrations; set sft.source=file"):
        load_config(None, native)
    assert load_config(None, [*native, "sft.source=file", "sft.path=demos.jsonl"]).sft.source == "file"
    with pytest.raises(ValueError, match=r"sft.enabled=true with env.protocol=native_tools: the tau gym's solver"):
        solver_demonstrations([TASK], ChatFormat(tokenizer, "native_tools"), episodes=1)


# ---------------------------------------------------------------- the easy tier (difficulty 0)


@pytest.mark.parametrize("change", ["cancel_pending_order", "modify_user_address"])
def test_easy_tier_offers_its_few_tools_and_the_solver_plays_it_natively(tokenizer, change):
    """An easy task's prompt names only the tier's four tools (about half the tokens of all sixteen), a call
    to any other tool is refused as unknown, and the solver's native episode reaches reward 1 with them."""
    from userrl.envs.tau.generate_tasks import EASY_TOOLS

    task = next(t for t in load_tasks("tau", "test", difficulty=[0]) if t.data["actions"][-1]["name"] == change)
    full = next(t for t in load_tasks("tau", "test", difficulty=[1]) if t.data["actions"][-1]["name"] == change)
    chat = ChatFormat(tokenizer, "native_tools")
    (system, _), tools = chat.episode_opening(task, native_env(task))
    assert [t["function"]["name"] for t in tools] == [n for n in domain_tools("retail") if n in EASY_TOOLS]
    assert "get_user_details" not in system["content"] and '"name": "modify_user_address"' in system["content"]

    def prompt_tokens(t: Task) -> int:
        return play(chat, Scripted(chat, [""]), task=t).prompt_len

    easy_tokens, full_tokens = prompt_tokens(task), prompt_tokens(full)
    assert easy_tokens < 1500 < 2500 < full_tokens, (easy_tokens, full_tokens)

    refused = play(chat, Scripted(chat, [call("get_user_details", user_id=task.data["user_id"]), ""]), task=task)
    assert refused.turns[0].tool_error and refused.episode_return == 0.0
    traj = play(chat, Scripted(chat, task=task), task=task)
    assert traj.episode_return == 1.0
    assert_token_exact(tokenizer, traj, tools if chat.template_tools else None)
