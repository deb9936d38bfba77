"""The common env contract (docs/spec/GYMS.md §0.2-§0.3, §0.8).

Parsing, the bridge, step rules, rng, timeouts, registry.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import random
import subprocess
import sys
import threading
from typing import Any, ClassVar

import gymnasium
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import userrl.envs as E
from userrl.envs.base import (
    ACTION_CHOICES,
    ENDED_FEEDBACK,
    EXCEPTION_FEEDBACK,
    TIMEOUT_FEEDBACK,
    TOOL_CHOICES,
    MultiTurnEnv,
    StepResult,
    Task,
    item_key_hash,
    make_rng,
    parse_action,
    tool_call_to_action,
)

PROMPT = [{"role": "system", "content": "sys"}, {"role": "user", "content": "go"}]


def tiny_task(key: str = "item-1") -> Task:
    return Task(gym="tiny", item_key=key, prompt=PROMPT, data={})


class TinyEnv(MultiTurnEnv):
    """A minimal gym: `[answer] ok` terminates with reward 1; `[action] sleep` hangs; `[action] boom` raises."""

    gym_name: ClassVar[str] = "tiny"

    def _configure(self, *, sleep_s: float = 10.0) -> None:
        self.sleep_s = sleep_s
        self.calls = 0
        self.closed_calls = 0

    def _observation_fields(self) -> dict[str, gymnasium.spaces.Space]:
        return {"step_count": self.count_space(), "episode_complete": E.base.BOOL_SPACE}

    def _reset_impl(self) -> tuple[str, dict[str, Any], dict[str, Any]]:
        return "welcome", {}, {"tiny": True}

    async def _astep_impl(self, choice: str, content: str) -> tuple[str, float, bool, dict, dict]:
        self.calls += 1
        if content == "sleep":
            await asyncio.sleep(self.sleep_s)
        if content == "boom":
            raise KeyError("boom")
        if content == "inner-timeout":
            raise TimeoutError("a client timed out")
        if content == "bad-feedback":
            return 42, 0.0, False, {}, {}  # type: ignore[return-value]
        if choice == "answer" and content == "ok":
            return "right", 1.0, True, {}, {"tiny": True}
        return f"{choice}:{content}", 0.0, False, {}, {"tiny": True}

    def _close_impl(self) -> None:
        self.closed_calls += 1


# ---------------------------------------------------------------- parse_action / tool_call_to_action


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("[action] 1 2 3 4", ("action", "1 2 3 4")),
        ("  [answer]   42  ", ("answer", "42")),
        ("[search]test", ("search", "test")),
        ("[finish]", ("finish", "")),
        ("[finish] now", ("finish", "now")),
        ("[Answer] 5", ("none", "[Answer] 5")),
        ("answer 5", ("none", "answer 5")),
        ("  hello  ", ("none", "hello")),
        ("", ("none", "")),
        ("x [answer] 5", ("none", "x [answer] 5")),
    ],
)
def test_parse_action(text: str, expected: tuple[str, str]) -> None:
    assert parse_action(text) == expected


@pytest.mark.parametrize(
    ("choice", "content", "expected"),
    [
        ("answer", "42", "[answer] 42"),
        ("action", "1 2 3 4", "[action] 1 2 3 4"),
        ("search", "test", "[search] test"),
        ("answer", "[answer] 42", "[answer] 42"),
        ("answer", "  [answer] 42", "  [answer] 42"),
        ("answer", "[search] test", "[answer] [search] test"),
        ("finish", "whatever", "[finish]"),
        ("other", "hello", "hello"),
        ("Answer", "5", "5"),
        (None, "hello", "hello"),
        ("answer", None, "[answer] "),
        (None, None, ""),
        ("answer", 8, "[answer] 8"),
        ("action", [1, 2, 3, 4], "[action] [1, 2, 3, 4]"),
    ],
)
def test_tool_call_to_action(choice: Any, content: Any, expected: str) -> None:
    assert tool_call_to_action(choice, content) == expected


@settings(max_examples=300, deadline=None)
@given(st.text())
def test_parse_action_never_crashes(text: str) -> None:
    choice, content = parse_action(text)
    assert choice in (*ACTION_CHOICES, "none")
    assert content == content.strip()


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(TOOL_CHOICES), st.text())
def test_bridge_round_trip(choice: str, content: str) -> None:
    parsed_choice, parsed_content = parse_action(tool_call_to_action(choice, content))
    assert parsed_choice == choice
    if not content.lstrip().startswith(f"[{choice}]"):
        assert parsed_content == content.strip()


# ---------------------------------------------------------------- Task / StepResult


def test_task_requires_system_then_user() -> None:
    with pytest.raises(ValueError, match="system, user"):
        Task("tiny", "k", [{"role": "user", "content": "x"}], {})
    with pytest.raises(ValueError, match="system, user"):
        Task("tiny", "k", [*PROMPT, {"role": "assistant", "content": "x"}], {})
    task = tiny_task()
    assert task.split == "train" and task.difficulty is None and task.source == "builtin"


def test_step_result_tuple_and_aborted() -> None:
    result = StepResult({"feedback": "x"}, 0.5, False, True, {"error": None})
    assert result.as_tuple() == ({"feedback": "x"}, 0.5, False, True, {"error": None})
    assert not result.aborted
    assert StepResult({"feedback": "x"}, 0.0, True, False, {"error": "step_timeout"}).aborted


# ---------------------------------------------------------------- common step rules


def test_reset_requires_a_task() -> None:
    env = TinyEnv()
    with pytest.raises(ValueError, match="needs a task"):
        env.reset()
    obs, info = env.reset(options={"task": tiny_task()})
    assert obs == {"feedback": "welcome", "step_count": 0, "episode_complete": False}
    assert info["raw_action"] is None and info["action_history"] == [] and info["total_reward"] == 0.0
    assert info["error"] is None and info["lm_calls"] == [] and info["tiny"] is True


def test_reset_rejects_unknown_options_and_wrong_gym() -> None:
    env = TinyEnv(tiny_task())
    with pytest.raises(ValueError, match="unknown reset options"):
        env.reset(options={"tsak": tiny_task()})
    with pytest.raises(ValueError, match="belongs to gym"):
        env.reset(options={"task": Task("function", "k", PROMPT, {})})
    with pytest.raises(TypeError, match="Task"):
        env.reset(options={"task": {"gym": "tiny"}})


def test_step_before_reset_is_an_error() -> None:
    with pytest.raises(RuntimeError, match="reset"):
        TinyEnv(tiny_task()).step("[answer] ok")


def test_constructor_validation() -> None:
    with pytest.raises(ValueError, match="max_steps"):
        TinyEnv(max_steps=0)
    with pytest.raises(ValueError, match="seed"):
        TinyEnv(seed=-1)
    with pytest.raises(ValueError, match="step_timeout_s"):
        TinyEnv(step_timeout_s=0)
    with pytest.raises(TypeError, match="unexpected keyword"):
        MultiTurnEnv(foo=1)


def test_step_counts_info_and_history() -> None:
    env = TinyEnv(tiny_task())
    env.reset()
    obs, reward, terminated, truncated, info = env.step("[search] x")
    assert obs == {"feedback": "search:x", "step_count": 1, "episode_complete": False}
    assert (reward, terminated, truncated) == (0.0, False, False)
    assert info["raw_action"] == "[search] x" and info["action_history"] == ["[search] x"]
    obs, reward, terminated, truncated, info = env.step("[answer] ok")
    assert (obs["feedback"], reward, terminated, truncated) == ("right", 1.0, True, False)
    assert obs["episode_complete"] is True and obs["step_count"] == 2
    assert info["action_history"] == ["[search] x", "[answer] ok"] and info["total_reward"] == 1.0


def test_truncation_at_max_steps_and_after_end() -> None:
    env = TinyEnv(tiny_task(), max_steps=3)
    env.reset()
    flags = [env.step("[action] x")[2:4] for _ in range(3)]
    assert flags == [(False, False), (False, False), (False, True)]
    obs, reward, terminated, truncated, info = env.step("[answer] ok")
    assert (obs["feedback"], reward, terminated, truncated) == (ENDED_FEEDBACK, 0.0, True, False)
    # The after-end step changes no state.
    assert obs["step_count"] == 3 and env.step_count == 3 and len(info["action_history"]) == 3
    assert info["raw_action"] == "[answer] ok" and info["error"] is None


def test_terminating_on_last_step_is_not_truncated() -> None:
    env = TinyEnv(tiny_task(), max_steps=2)
    env.reset()
    env.step("[action] x")
    _, reward, terminated, truncated, _ = env.step("[answer] ok")
    assert (reward, terminated, truncated) == (1.0, True, False)


def test_reset_starts_a_fresh_episode() -> None:
    env = TinyEnv(tiny_task(), max_steps=1)
    env.reset()
    env.step("[action] x")
    obs, info = env.reset()
    assert obs["step_count"] == 0 and info["action_history"] == [] and not env.done
    assert env.step("[answer] ok")[2] is True


# ---------------------------------------------------------------- step timeouts and exceptions (§0.8)


def test_step_timeout_ends_and_closes_the_env() -> None:
    env = TinyEnv(tiny_task(), step_timeout_s=0.05)
    env.reset()
    obs, reward, terminated, truncated, info = env.step("[action] sleep")
    assert (obs["feedback"], reward, terminated, truncated) == (TIMEOUT_FEEDBACK, 0.0, True, False)
    assert info["error"] == "step_timeout" and obs["episode_complete"] is True
    assert env.closed_calls == 1 and env.last_error == "step_timeout"
    # Never re-run: a later step does not reach the gym, and the env cannot be reset.
    obs, *_ = env.step("[action] sleep")
    assert obs["feedback"] == ENDED_FEEDBACK and env.calls == 1
    with pytest.raises(RuntimeError, match="discarded"):
        env.reset()


def test_step_exception_ends_the_episode(caplog: pytest.LogCaptureFixture) -> None:
    env = TinyEnv(tiny_task())
    env.reset()
    with caplog.at_level(logging.ERROR, logger="userrl.envs.base"):
        obs, reward, terminated, truncated, info = env.step("[action] boom")
    assert (obs["feedback"], reward, terminated, truncated) == (EXCEPTION_FEEDBACK, 0.0, True, False)
    assert info["error"] == "step_exception:KeyError"
    assert "KeyError" in caplog.text and env.closed_calls == 1
    assert env.step("[answer] ok")[0]["feedback"] == ENDED_FEEDBACK and env.calls == 1


def test_timeout_raised_inside_a_step_is_an_exception_not_a_step_timeout() -> None:
    env = TinyEnv(tiny_task())
    env.reset()
    assert env.step("[action] inner-timeout")[4]["error"] == "step_exception:TimeoutError"


def test_malformed_step_result_is_a_step_exception() -> None:
    env = TinyEnv(tiny_task())
    env.reset()
    assert env.step("[action] bad-feedback")[4]["error"] == "step_exception:TypeError"


def test_close_is_idempotent() -> None:
    env = TinyEnv(tiny_task())
    env.close()
    env.close()
    assert env.closed_calls == 1
    with pytest.raises(RuntimeError, match="closed"):
        env.reset()


# ---------------------------------------------------------------- sync / async stepping


def test_astep_returns_step_result() -> None:
    async def main() -> StepResult:
        env = TinyEnv(tiny_task())
        env.reset()
        return await env.astep("[answer] ok")

    result = asyncio.run(main())
    assert isinstance(result, StepResult) and result.terminated and result.reward == 1.0


def test_sync_step_inside_a_running_loop() -> None:
    async def main() -> tuple:
        env = TinyEnv(tiny_task())
        env.reset()
        return env.step("[answer] ok")

    assert asyncio.run(main())[2] is True


def test_sync_step_from_a_thread_while_a_loop_runs() -> None:
    env = TinyEnv(tiny_task())
    env.reset()
    results: list[tuple] = []

    async def main() -> None:
        thread = threading.Thread(target=lambda: results.append(env.step("[answer] ok")))
        thread.start()
        while thread.is_alive():
            await asyncio.sleep(0.01)

    asyncio.run(main())
    assert results[0][2] is True


def test_concurrent_steps_on_one_env_are_refused() -> None:
    async def main() -> None:
        env = TinyEnv(tiny_task(), sleep_s=0.2)
        env.reset()
        first = asyncio.create_task(env.astep("[action] sleep"))
        await asyncio.sleep(0.01)
        with pytest.raises(RuntimeError, match="already running"):
            await env.astep("[answer] ok")
        assert (await first).info["error"] is None

    asyncio.run(main())


# ---------------------------------------------------------------- randomness (0.3.1)


def test_item_key_hash_matches_the_spec() -> None:
    expected = int.from_bytes(hashlib.sha256(b"func-1").digest()[:8], "big")
    assert item_key_hash("func-1") == expected


def test_rng_depends_only_on_seed_and_item_key() -> None:
    a, b = TinyEnv(tiny_task("k1")), TinyEnv(tiny_task("k1"))
    a.reset()
    b.reset()
    assert a.rng.integers(1 << 62, size=4).tolist() == b.rng.integers(1 << 62, size=4).tolist()
    ref = np.random.default_rng([42, item_key_hash("k1")]).integers(1 << 62, size=4).tolist()
    a.reset()
    assert a.rng.integers(1 << 62, size=4).tolist() == ref
    assert a.np_random is a.rng
    c = TinyEnv(tiny_task("k2"))
    c.reset()
    assert c.rng.integers(1 << 62, size=4).tolist() != ref
    d = TinyEnv(tiny_task("k1"), seed=7)
    d.reset()
    assert d.rng.integers(1 << 62, size=4).tolist() != ref
    # A seed given to reset replaces the base seed.
    d.reset(seed=42)
    assert d.rng.integers(1 << 62, size=4).tolist() == ref and d.seed == 42


def test_seed_none_gives_fresh_entropy() -> None:
    draws = {int(make_rng(None, "k").integers(1 << 62)) for _ in range(3)}
    assert len(draws) == 3


def test_no_global_rng_is_touched() -> None:
    random.seed(1234)
    np.random.seed(1234)
    py_state, np_state = random.getstate(), np.random.get_state()
    env = TinyEnv(tiny_task())
    for _ in range(3):
        env.reset()
        env.rng.random()
        env.step("[action] x")
    assert random.getstate() == py_state
    assert all(np.array_equal(x, y) for x, y in zip(np.random.get_state(), np_state, strict=True))


# ---------------------------------------------------------------- registry


def test_registry_contents_and_exports() -> None:
    assert E.GYMS["function"].gym_name == "function"
    assert E.GYMNASIUM_IDS["function"] == "userrl/Function-v0"
    for name in ("Task", "StepResult", "MultiTurnEnv", "parse_action", "tool_call_to_action", "make_env"):
        assert hasattr(E, name)


def test_unknown_gym_names_the_known_ones_and_suggests() -> None:
    with pytest.raises(ValueError, match=r"unknown gym 'fucntion'.*function.*did you mean 'function'"):
        E.make_env("fucntion")
    with pytest.raises(ValueError, match="unknown gym 'nope'"):
        E.load_tasks("nope")
    with pytest.raises(ValueError, match="nope"):
        E.make_solver("nope", tiny_task(), np.random.default_rng(0))


def test_register_is_idempotent() -> None:
    E.register_gym("function", E.GYMS["function"], E.registry.TASK_LOADERS["function"])
    assert "userrl/Function-v0" in gymnasium.registry


def test_import_pulls_in_no_torch_or_ray() -> None:
    code = "import sys, userrl.envs; print('torch' in sys.modules, 'ray' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False"]
