"""Fuzzing every gym's step (reliability scenario 8): bad actions and tool calls never crash a gym.

Random strings, prefixes with junk, brackets without content, huge inputs, unicode, and tool calls with
wrong types or broken JSON go through `tool_call_to_action` and `step`, on fresh episodes and on episodes
the gym's scripted solver has already advanced. Every step must give the gym's own feedback: a non-empty
string (only Tau's `think` tool observes "", as specified), no exception inside the step (info["error"]
stays None), a finite reward, an observation in the observation space; an action without a known choice
gets the gym's invalid-action reply.

Tau also gets fuzzed assistant messages of the native_tools protocol (unknown tools, wrong argument types,
extra arguments, JSON in strings, several calls, the terminal tool mid-sentence, broken blocks): each is
parsed as the rollout parses it and either ends the episode (no well-formed call) or is one step.

USERRL_GYM_FUZZ_ACTIONS sets the number of fuzzed actions over the eight gyms: 2,000 by default (a few
seconds to half a minute here), 10,000 for the reliability scenario (USERRL_GYM_FUZZ_ACTIONS=10000).
"""

from __future__ import annotations

import copy
import json
import math
import os
import time
from functools import cache
from typing import Any

import numpy as np
import pytest
from gym_helpers import invalid_action_feedback
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from userrl.envs import GYMS, Task, load_tasks, make_env, make_solver, parse_action, tool_call_to_action
from userrl.envs.base import ENDED_FEEDBACK, EXCEPTION_FEEDBACK, TIMEOUT_FEEDBACK
from userrl.envs.json_extract import strip_think
from userrl.envs.solving import UngroundedTask
from userrl.envs.tau.parsing import parse_tool_call
from userrl.envs.tau.tools import domain_tools
from userrl.protocols.native_tools import parse_native_tools
from userrl.protocols.tool_blocks import TOOL_BLOCK

NAMES = sorted(GYMS)
TOTAL_ACTIONS = int(os.environ.get("USERRL_GYM_FUZZ_ACTIONS", "2000"))
ACTIONS_PER_EPISODE = 5
EPISODES_PER_GYM = max(1, -(-TOTAL_ACTIONS // (len(NAMES) * ACTIONS_PER_EPISODE)))
#: Fuzzed episodes start from one of the first train tasks, after 0 to MAX_PREFIX solver steps.
TASKS_PER_GYM = 12
MAX_PREFIX = 4
#: Far below the 120 s step timeout, far above any real step: a step slower than this is a hang in waiting.
STEP_SECONDS = 10.0

# ---------------------------------------------------------------- strategies

PREFIXES = ["[action] ", "[answer] ", "[search] ", "[finish]", "[action]", "[answer]", "[search]",
            " [answer] ", "[ACTION] ", "[answer", "answer] ", "[]", "[ ]", "[[answer]] ", "[finish] x"]
BRACKETS = ["[", "]", "[]", "{}", "()", "[[]]", "{{}}", "<>", "<think>", "</think>", "```", "```json\n```",
            "[answer] []", "[answer] {}", "[action] ()", "[search] []", "[answer] [[", "[answer] }}{{"]
#: Broken or ill-typed JSON tool calls (the Tau answer format, and a JSON shape for every other gym).
BROKEN_JSON = ['{"name": "get_order_details", "arguments": ', '{"name": 5, "arguments": {}}', '{"name": null}',
               '{"name": "", "arguments": {}}', '{"name": "x", "arguments": "not json"}', '{"arguments": {}}',
               '{"name": "calculate", "arguments": [1, 2]}', '{"name": "think", "arguments": {"thought": {}}}',
               'get_user_details: {"user_id": ', '{"name": "exchange_delivered_order_items", "arguments": null}',
               '{"name": "find_user_id_by_email", "arguments": "{\\"email\\": 5}"}', "null", "[]", "1e999",
               '{"name": "get_order_details", "arguments": {"order_id": NaN}}', '{' * 200, '}' * 200]
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=30),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=12,
)


def huge(text: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    """A short text repeated into 10k-120k characters (cheap to generate, large to parse)."""
    return st.builds(lambda s, n: (s * (n // max(1, len(s)) + 1))[:n], text, st.integers(10_000, 120_000))


def gym_words(name: str) -> list[str]:
    """Contents a gym reads specially: numbers, option ids, tool names, the 'test' and 'tools' keywords."""
    words = ["test", "tools", "help", "policy", "1 2 3 4", "3 5 5 3", "-1e308 0 0 0", "0 0 0 0", "H1", "F3",
             "R12", "H11, F3", "Yes", "Lion", "nan", "inf", "-0", "1" * 400, "9" * 5000, "Ⅻ", "٣"]
    if name == "tau":
        words += sorted(domain_tools("retail"))
    return words


def tool_call_json(name: str) -> st.SearchStrategy[str]:
    """A JSON tool call with a known (or made-up) tool name and arguments of any type."""
    names = st.sampled_from(gym_words(name)) | st.text(max_size=12)
    return st.builds(
        lambda n, a, wrap: json.dumps({"name": n, "arguments": a} if wrap else {n: a}),
        names, JSON_VALUES, st.booleans(),
    )


def tau_tool_call() -> st.SearchStrategy[str]:
    """A retail tool called with its own argument names, given real ids of the fuzzed tasks or junk."""
    tools = domain_tools("retail")
    real = sorted(
        {json.dumps(v) for task in fuzz_tasks("tau") for a in task.data["actions"] for v in a["kwargs"].values()}
    )
    value = st.sampled_from(real).map(json.loads) | JSON_VALUES

    def call(name: str, values: list[Any], keep: list[bool], extra: dict[str, Any]) -> str:
        params = [p.name for p in tools[name].params]
        arguments = {p: v for p, v, k in zip(params, values, keep, strict=False) if k}
        return json.dumps({"name": name, "arguments": {**arguments, **extra}})

    return st.builds(
        call,
        st.sampled_from(sorted(tools)),
        st.lists(value, min_size=6, max_size=6),
        # Mostly every argument and no extra one, so that calls reach the tools' own checks.
        st.lists(st.sampled_from([True, True, True, False]), min_size=6, max_size=6),
        st.sampled_from([{}, {}, {}, {"x": 1}, {"order_id": None}]),
    )


def fuzz_input(name: str) -> st.SearchStrategy[str]:
    """One fuzzed step: a raw action string, or a tool call turned into one like a model's."""
    text = st.text(max_size=80) | st.text(st.characters(), max_size=40)
    content = st.one_of(
        text,
        st.sampled_from(gym_words(name) + BRACKETS + BROKEN_JSON),
        tau_tool_call() if name == "tau" else tool_call_json(name),
        huge(st.sampled_from(["{", "[", "a", "9 ", "Is it big? ", "中文", "\x00", "[answer] ", "H1 ", "<think>"]) | text),
    )
    raw = st.one_of(
        text,
        st.sampled_from(BRACKETS + BROKEN_JSON),
        st.builds(lambda p, c: p + c, st.sampled_from(PREFIXES), content),
    )
    choice = st.one_of(
        st.sampled_from(["action", "answer", "search", "finish", "none", "", "Answer", " answer"]),
        JSON_VALUES,
    )
    tool_call = st.builds(tool_call_to_action, choice, content | JSON_VALUES)
    return raw | tool_call


# ---------------------------------------------------------------- episodes


@cache
def fuzz_tasks(name: str) -> tuple[Task, ...]:
    """The first builtin train tasks of the gym (each episode plays a copy)."""
    return tuple(load_tasks(name, "train")[:TASKS_PER_GYM])


def advance(env: Any, name: str, task: Task, steps: int) -> bool:
    """Play up to `steps` solver steps (a mid-episode state); whether the episode is still running."""
    try:
        solver = make_solver(name, task, np.random.default_rng(0), env.max_steps)
        feedback = None
        for _ in range(steps):
            obs, _, terminated, truncated, _ = env.step(tool_call_to_action(*solver.next_action(feedback)))
            feedback = obs["feedback"]
            if terminated or truncated:
                return False
    except UngroundedTask:
        pass  # the solver gave up on this task: fuzz from where it stopped
    return not env.done


def is_think_call(name: str, action: str) -> bool:
    """Whether the action calls Tau's `think` tool, whose observation is "" (docs/spec/TAU_TOOLS.md §2)."""
    choice, content = parse_action(action)
    call = parse_tool_call(content) if name == "tau" and choice == "answer" else None
    return call is not None and call.name == "think"


def check_step(env: Any, name: str, action: str) -> None:
    """One fuzzed step gets the gym's feedback and nothing escapes or breaks the episode's contract."""
    was_done = env.done
    start = time.perf_counter()
    obs, reward, terminated, truncated, info = env.step(action)
    seconds = time.perf_counter() - start
    feedback = obs["feedback"]
    where = f"{name}: action {action[:200]!r} -> {str(feedback)[:200]!r}"
    assert seconds < STEP_SECONDS, f"{where} took {seconds:.1f} s"
    assert isinstance(feedback, str) and (feedback.strip() or is_think_call(name, action)), where
    assert info["error"] is None and feedback not in (EXCEPTION_FEEDBACK, TIMEOUT_FEEDBACK), where
    assert isinstance(reward, float) and math.isfinite(reward), where
    assert not (terminated and truncated) and env.observation_space.contains(obs), where
    if was_done:
        assert (feedback, reward, terminated) == (ENDED_FEEDBACK, 0.0, True), where
    elif parse_action(action)[0] == "none":
        assert feedback == invalid_action_feedback(GYMS[name]) and reward == 0.0, where


@pytest.mark.parametrize("name", NAMES)
def test_fuzzed_actions_get_the_gyms_feedback(name: str) -> None:
    played = []

    @settings(
        max_examples=EPISODES_PER_GYM,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example],
    )
    @given(
        task_index=st.integers(0, len(fuzz_tasks(name)) - 1),
        prefix=st.integers(0, MAX_PREFIX),
        actions=st.lists(fuzz_input(name), min_size=ACTIONS_PER_EPISODE, max_size=ACTIONS_PER_EPISODE),
    )
    def episode(task_index: int, prefix: int, actions: list[str]) -> None:
        task = copy.deepcopy(fuzz_tasks(name)[task_index])  # nothing carries over between episodes
        env = make_env(name, task)
        env.reset()
        advance(env, name, task, prefix)
        for action in actions:
            check_step(env, name, action)
        played.append(len(actions))

    episode()
    # Every generated episode ran to its end (hypothesis may add replays, never fewer examples).
    assert sum(played) >= EPISODES_PER_GYM * ACTIONS_PER_EPISODE


def test_many_unclosed_think_tags_stay_fast() -> None:
    # Found by fuzzing: Tau's tool-call parser strips <think> blocks, and 20,000 unclosed tags took 30 s.
    env = make_env("tau", load_tasks("tau", "train")[0])
    env.reset()
    start = time.perf_counter()
    check_step(env, "tau", "[answer] " + "<think>" * 20_000)
    assert time.perf_counter() - start < 1.0


# ---------------------------------------------------------------- native tool calls (env.protocol=native_tools)


def native_message() -> st.SearchStrategy[str]:
    """An assistant message of the native_tools protocol: plain text, or text around `<tool_call>` blocks that
    hold well-formed calls (real and made-up names, any argument types, extra arguments, arguments as a JSON
    string, JSON inside string values), broken JSON, or nothing; several blocks; unclosed blocks."""
    names = st.sampled_from(sorted(domain_tools("retail")) + ["transfer_to_human_agents"] * 4) | st.text(max_size=12)
    arguments = st.one_of(
        st.dictionaries(st.sampled_from(["order_id", "user_id", "email", "reason", "thought", "summary",
                                         "expression", "item_ids", "x"]), JSON_VALUES, max_size=4),
        JSON_VALUES,
        st.builds(json.dumps, st.dictionaries(st.text(max_size=8), JSON_VALUES, max_size=3)),
        st.builds(lambda v: {"order_id": json.dumps(v)}, JSON_VALUES),
    )
    well_formed = st.builds(lambda n, a: json.dumps({"name": n, "arguments": a}), names, arguments)
    payload = st.one_of(well_formed, tau_tool_call(), st.sampled_from(BROKEN_JSON), st.text(max_size=40))
    block = st.builds(lambda p, close: f"<tool_call>\n{p}\n" + ("</tool_call>" if close else ""),
                      payload, st.sampled_from([True, True, True, False]))
    words = st.text(max_size=60) | st.sampled_from(["", "Let me check. ", "I will transfer you now. ",
                                                    "transfer_to_human_agents", "<think>hmm</think>", " Bye!"])
    tool_message = st.builds(lambda before, blocks, after: before + "\n".join(blocks) + after,
                             words, st.lists(block, min_size=1, max_size=3), words)
    return words | tool_message


@settings(max_examples=max(20, TOTAL_ACTIONS // 40), deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(task_index=st.integers(0, TASKS_PER_GYM - 1), prefix=st.integers(0, MAX_PREFIX),
       messages=st.lists(native_message(), min_size=ACTIONS_PER_EPISODE, max_size=ACTIONS_PER_EPISODE))
def test_fuzzed_native_tool_messages_get_tau_feedback(task_index: int, prefix: int, messages: list[str]) -> None:
    # Each message goes through the native_tools parser: a message without a well-formed call ends
    # the episode (docs/spec/ALGORITHMS.md §5.1; the rollout counts it), every other one is one step with
    # the gym's feedback.
    task = copy.deepcopy(fuzz_tasks("tau")[task_index])
    env = make_env("tau", task, customer_failure="end")
    env.reset()
    advance(env, "tau", task, prefix)
    for message in messages:
        parsed, visible = parse_native_tools(message), strip_think(message)
        assert parsed.n_tool_calls == (len(TOOL_BLOCK.findall(visible)) if "<tool_call>" in visible else 0)
        if parsed.action is None:
            assert not parsed.calls and (parsed.n_tool_calls or not visible.strip())
            continue
        assert parsed.speaks == (parsed.n_tool_calls == 0)
        check_step(env, "tau", parsed.action)
