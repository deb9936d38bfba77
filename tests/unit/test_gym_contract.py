"""The contract every registered gym keeps (docs/spec/GYMS.md §0.2-§0.3, §0.6-§0.9).

One parametrized test per rule. Gym-specific behaviour (feedback wording, rewards, roles) stays in
tests/unit/test_<gym>_gym.py; what is the same for all eight lives here, checked on each gym's first builtin
train task.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

import gymnasium
import numpy as np
import pytest
from gym_helpers import (
    FakeRoleClient,
    check_env_without_warnings,
    global_rngs_untouched,
    invalid_action_feedback,
)

from userrl.envs import GYMNASIUM_IDS, GYMS, Task, load_tasks, make_env, solve_episode, uses_role_client
from userrl.envs.base import BACKENDS, ENDED_FEEDBACK, TOOL_CHOICES
from userrl.envs.registry import gym_record
from userrl.envs.solving import UngroundedTask

NAMES = sorted(GYMS)
COMMON_INFO_KEYS = {"raw_action", "action_history", "total_reward", "error", "lm_calls"}


@cache
def train_keys(name: str) -> frozenset[str]:
    """The item keys of the gym's builtin train split."""
    return frozenset(t.item_key for t in load_tasks(name, "train"))


def first_task(name: str) -> Task:
    """A fresh copy of the gym's first builtin train task."""
    return load_tasks(name, "train")[0]


def role_kwargs(name: str, backend: str) -> dict[str, Any]:
    """Constructor keywords for a backend: a model backend gets a (never called) role client."""
    if backend != "scripted" and GYMS[name].uses_role_client:
        return {"backend": backend, "llm": FakeRoleClient()}
    return {"backend": backend}


# ---------------------------------------------------------------- registry


@pytest.mark.parametrize("name", NAMES)
def test_registry_record(name: str) -> None:
    record = gym_record(name)
    assert record.name == name and record.env_cls.gym_name == name and GYMS[name] is record.env_cls
    assert GYMNASIUM_IDS[name] == record.gymnasium_id and record.gymnasium_id in gymnasium.registry
    assert record.solver is not None
    tasks = load_tasks(name, "train")
    assert tasks and all(t.gym == name and t.split == "train" and t.source == "builtin" for t in tasks)
    # The declaration and the role list agree: a gym with model-backed roles names them.
    assert uses_role_client(name) is record.env_cls.uses_role_client is bool(record.env_cls.role_names)


def test_every_gym_is_registered() -> None:
    assert NAMES == ["frozenlake", "function", "intention", "persuade", "search", "sokoban", "tau", "telepathy",
                     "travel", "turtle"]


@pytest.mark.parametrize("name", NAMES)
def test_unknown_source_and_missing_data_root(name: str) -> None:
    with pytest.raises(ValueError, match="unknown task source 'web'"):
        load_tasks(name, "train", source="web")
    with pytest.raises(ValueError, match="source='userrl' needs data_root"):
        load_tasks(name, "train", source="userrl")


@pytest.mark.parametrize(
    ("name", "filters", "message"),
    [
        ("function", {"difficulty": 9}, r"unknown function difficulty levels \[9\]; known: \[0, 1, 2, 3, 4\]"),
        ("search", {"hops": [1, 3]}, r"unknown search hop counts \[3\]; known: \[1, 2\]"),
        ("telepathy", {"category": "dragon"}, r"unknown telepathy categories \['dragon'\]"),
        ("travel", {"subset": "travel99"}, r"unknown travel sub-sets \['travel99'\]"),
        ("tau", {"domain": "bank"}, r"unknown tau domain 'bank'"),
    ],
)
def test_loader_filters_refuse_unknown_labels(name: str, filters: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        load_tasks(name, "train", **filters)


@pytest.mark.parametrize(("name", "name_filter"), [("function", "difficulty"), ("search", "hops"), ("telepathy", "category")])
def test_builtin_only_filters_are_refused_for_the_original_data(name: str, name_filter: str, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=f"the {name_filter} filter applies to builtin {name} tasks only"):
        load_tasks(name, "test", source="userrl", data_root=tmp_path, **{name_filter: 1})


# ---------------------------------------------------------------- gymnasium


@pytest.mark.parametrize("name", NAMES)
def test_gymnasium_make_with_a_task(name: str) -> None:
    task = first_task(name)
    env = gymnasium.make(GYMNASIUM_IDS[name], task=task, max_steps=5)
    obs, info = env.reset()
    assert env.observation_space.contains(obs) and set(info) >= COMMON_INFO_KEYS
    assert isinstance(env.unwrapped, GYMS[name]) and env.unwrapped.max_steps == 5
    # A seed given to reset keeps the task the env was made for.
    env.reset(seed=3)
    assert env.unwrapped.task.item_key == task.item_key
    env.close()
    assert isinstance(make_env(name, task), GYMS[name])


@pytest.mark.parametrize("name", NAMES)
def test_reset_with_a_seed_draws_a_train_task(name: str) -> None:
    gym_id = GYMNASIUM_IDS[name]
    env = gymnasium.make(gym_id)
    obs, _ = env.reset(seed=0)
    task = env.unwrapped.task
    assert task.gym == name and task.split == "train" and task.item_key in train_keys(name)
    assert env.observation_space.contains(obs)
    assert isinstance(env.step("[finish]")[0]["feedback"], str)
    # The same seed draws the same task in a fresh env, with the same first observation.
    again, _ = gymnasium.make(gym_id).reset(seed=0)
    assert again == obs
    drawn = set()
    for seed in range(12):
        fresh = gymnasium.make(gym_id)
        fresh.reset(seed=seed)
        drawn.add(fresh.unwrapped.task.item_key)
    assert len(drawn) > 1 and drawn <= train_keys(name)
    # reset without a seed goes on drawing from the same stream; an explicit task stops the drawing.
    env.reset()
    assert env.unwrapped.task.item_key in train_keys(name)
    chosen = first_task(name)
    env.reset(options={"task": chosen})
    env.reset(seed=5)
    assert env.unwrapped.task.item_key == chosen.item_key


@pytest.mark.parametrize("via", ["direct", "make", "make_without_task"])
@pytest.mark.parametrize("name", NAMES)
def test_env_checker_passes_without_warnings(name: str, via: str) -> None:
    if via == "direct":
        env = GYMS[name](first_task(name))
    elif via == "make":
        env = gymnasium.make(GYMNASIUM_IDS[name], task=first_task(name))
    else:
        env = gymnasium.make(GYMNASIUM_IDS[name])
    check_env_without_warnings(env)


@pytest.mark.parametrize("name", NAMES)
def test_observations_lie_in_the_observation_space(name: str) -> None:
    env = make_env(name, first_task(name), max_steps=8)
    env.reset()
    for action in ("[action] 1 2 3 4 ünïcödé", "[search] 中文 ∞", "[answer] ∞ 中文", "🙂", "[answer] {}"):
        obs, reward, terminated, truncated, info = env.step(action)
        assert env.observation_space.contains(obs), obs
        assert np.isfinite(reward) and info["error"] is None
        if terminated or truncated:
            break
    assert env.action_space.contains("[answer] ∞ 中文")


# ---------------------------------------------------------------- common step rules (§0.3)


@pytest.mark.parametrize("name", NAMES)
def test_an_action_without_a_known_choice_gets_the_gyms_feedback(name: str) -> None:
    env = make_env(name, first_task(name))
    env.reset()
    feedback = invalid_action_feedback(GYMS[name])
    for action in ("hello there", "[Answer] x", "answer: x", ""):
        obs, reward, terminated, truncated, info = env.step(action)
        assert (obs["feedback"], reward, terminated, truncated) == (feedback, 0.0, False, False)
        assert info["raw_action"] == action and info["error"] is None


@pytest.mark.parametrize("name", NAMES)
def test_truncation_at_max_steps_then_the_episode_has_ended(name: str) -> None:
    env = make_env(name, first_task(name), max_steps=3)
    env.reset()
    results = [env.step("not an action") for _ in range(3)]
    assert [r[3] for r in results] == [False, False, True] and not any(r[2] for r in results)
    assert results[-1][4]["action_history"] == ["not an action"] * 3
    last = results[-1][0]
    if "step_count" in env.observation_space.spaces:
        assert last["step_count"] == 3 and last["episode_complete"] is True
    obs, reward, terminated, truncated, info = env.step("[finish]")
    assert (obs["feedback"], reward, terminated, truncated) == (ENDED_FEEDBACK, 0.0, True, False)
    assert info["lm_calls"] == []


@pytest.mark.parametrize("name", NAMES)
def test_finish_terminates(name: str) -> None:
    env = make_env(name, first_task(name))
    env.reset()
    obs, _, terminated, truncated, info = env.step("[finish]")
    assert terminated and not truncated and obs["feedback"].strip() and info["error"] is None


@pytest.mark.parametrize("name", NAMES)
def test_info_keys_on_reset_and_step(name: str) -> None:
    env = make_env(name, first_task(name))
    _, info = env.reset()
    assert set(info) >= COMMON_INFO_KEYS and info["raw_action"] is None and info["total_reward"] == 0.0
    _, reward, _, _, info = env.step("[action] hello")
    assert set(info) >= COMMON_INFO_KEYS
    assert info["action_history"] == ["[action] hello"] and info["total_reward"] == reward
    assert info["error"] is None and info["lm_calls"] == []  # the scripted backend calls no model


@pytest.mark.parametrize("name", NAMES)
def test_a_task_of_another_gym_is_refused(name: str) -> None:
    other = next(n for n in NAMES if n != name)
    env = make_env(name)
    with pytest.raises(ValueError, match="belongs to gym"):
        env.reset(options={"task": first_task(other)})


@pytest.mark.parametrize("name", NAMES)
def test_no_global_rng_is_touched(name: str) -> None:
    with global_rngs_untouched():
        env = gymnasium.make(GYMNASIUM_IDS[name])
        env.reset(seed=1)
        for action in ("[action] is it big?", "[search] tools", "[answer] 42", "[finish]"):
            env.step(action)
        play_one_solved_episode(name)


# ---------------------------------------------------------------- backends and roles (§0.6, §0.7)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", NAMES)
def test_every_gym_accepts_the_backend_names(name: str, backend: str) -> None:
    env = make_env(name, first_task(name), **role_kwargs(name, backend))
    assert env.backend == backend
    assert set(env.role_backends) == set(GYMS[name].role_names)
    assert set(env.role_backends.values()) <= {backend}


@pytest.mark.parametrize("backend", ["llm", "gpt-4o", "", None, 1])
@pytest.mark.parametrize("name", NAMES)
def test_other_backend_names_are_refused(name: str, backend: Any) -> None:
    with pytest.raises(ValueError, match=r"backend must be one of \['scripted', 'openai', 'local'\]"):
        make_env(name, first_task(name), backend=backend)


@pytest.mark.parametrize("name", [n for n in NAMES if GYMS[n].uses_role_client])
def test_role_backends_are_checked(name: str) -> None:
    role = GYMS[name].role_names[0]
    with pytest.raises(ValueError, match=rf"role_backends\['{role}'\] must be one of \['scripted', 'openai'"):
        make_env(name, first_task(name), role_backends={role: "llm"})
    with pytest.raises(ValueError, match=r"role_backends has unknown roles \['nobody'\]"):
        make_env(name, first_task(name), role_backends={"nobody": "scripted"})
    with pytest.raises(ValueError, match="no llm RoleClient was given"):
        make_env(name, first_task(name), backend="openai")
    with pytest.raises(ValueError, match="no llm RoleClient was given"):
        make_env(name, first_task(name), role_backends={role: "local"})
    mixed = make_env(name, first_task(name), backend="scripted", role_backends={role: "openai"}, llm=FakeRoleClient())
    assert mixed.role_backends[role] == "openai"
    assert all(b == "scripted" for r, b in mixed.role_backends.items() if r != role)


@pytest.mark.parametrize("name", NAMES)
def test_the_env_runner_passes_a_client_exactly_to_the_gyms_that_take_one(name: str) -> None:
    from userrl.actors.env_runner import (
        accepts_llm,  # the rollout side's question, answered by the declaration
    )

    client = FakeRoleClient()
    if accepts_llm(name):
        assert make_env(name, first_task(name), backend="openai", llm=client).llm is client
    else:
        with pytest.raises(TypeError):
            make_env(name, first_task(name), backend="openai", llm=client)


@pytest.mark.parametrize("name", [n for n in NAMES if not GYMS[n].uses_role_client])
def test_a_gym_without_roles_takes_no_client(name: str) -> None:
    with pytest.raises(TypeError, match="no model-backed roles"):
        make_env(name, first_task(name), llm=FakeRoleClient())
    # A model backend is still a valid name: there is simply nothing for it to run.
    assert make_env(name, first_task(name), backend="openai").role_backends == {}


# ---------------------------------------------------------------- reward presets (§0.9)


@pytest.mark.parametrize("name", NAMES)
def test_reward_presets(name: str) -> None:
    for preset in ("train", "eval"):
        assert make_env(name, first_task(name), reward_preset=preset).reward_preset == preset
    assert make_env(name, first_task(name)).reward_preset == "train"
    with pytest.raises(ValueError, match=r"reward_preset must be one of \['eval', 'train'\], got 'best'"):
        make_env(name, first_task(name), reward_preset="best")


# ---------------------------------------------------------------- scripted solvers


def play_one_solved_episode(name: str) -> list[tuple[str, str, str, float]]:
    """The registry's solver on the first train task it can ground (some refuse some tasks)."""
    for task in load_tasks(name, "train")[:40]:
        try:
            return solve_episode(make_env(name), task, np.random.default_rng(0))
        except UngroundedTask:
            continue
    raise AssertionError(f"no {name} train task among the first 40 could be solved")


@pytest.mark.parametrize("name", NAMES)
def test_the_solver_plays_an_episode_to_its_end(name: str) -> None:
    steps = play_one_solved_episode(name)
    assert 1 <= len(steps) <= 16
    assert {choice for choice, _, _, _ in steps} <= {*TOOL_CHOICES, "finish"}
    assert all(feedback.strip() for _, _, feedback, _ in steps)
    assert sum(reward for *_, reward in steps) > 0  # a demonstration that earns nothing teaches nothing
