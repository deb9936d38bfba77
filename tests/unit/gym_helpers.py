"""Helpers shared by the gym test modules: stepping, the env checker, a fake model client, fake original data."""

from __future__ import annotations

import importlib
import json
import os
import random
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pytest
from gymnasium.utils.env_checker import check_env

from userrl.envs.json_extract import extract_json_object
from userrl.envs.llm import RoleCall

#: The shared original UserRL data (absent on some machines: tests that need it are skipped there).
DATA_ROOT = Path(
    os.environ.get("USERRL_DATA_ROOT", Path(__file__).resolve().parents[3] / "shared" / "userrl-data")
)


def needs_shared_file(path: Path) -> pytest.MarkDecorator:
    """Skip the test unless the shared data holds path."""
    return pytest.mark.skipif(not path.is_file(), reason=f"shared UserRL data not found at {DATA_ROOT}")


# ---------------------------------------------------------------- envs


def invalid_action_feedback(env_cls: type) -> str:
    """A gym's reply to an action without a choice it handles (the INVALID_ACTION of its env module, or of
    the module of the nearest base class that has one, such as the grid games' `userrl.envs.grid`)."""
    modules = (importlib.import_module(cls.__module__) for cls in env_cls.__mro__)
    return next(m.INVALID_ACTION for m in modules if hasattr(m, "INVALID_ACTION"))


def step(env: Any, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
    """env.step(action) with the observation reduced to its feedback text."""
    obs, reward, terminated, truncated, info = env.step(action)
    return obs["feedback"], reward, terminated, truncated, info


def check_env_without_warnings(env: Any) -> None:
    """gymnasium's env checker on the unwrapped env, with every warning raised as an error."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_env(env.unwrapped, skip_render_check=True)


@contextmanager
def global_rngs_untouched(seed: int = 7) -> Iterator[None]:
    """Assert that the block leaves the global random and numpy generators as it found them."""
    random.seed(seed)
    np.random.seed(seed)
    py_state, np_state = random.getstate(), np.random.get_state()[1].copy()
    yield
    assert random.getstate() == py_state and np.array_equal(np.random.get_state()[1], np_state)


class FakeRoleClient:
    """Test double of the model client: each call tries its raw replies in order, like retries."""

    def __init__(self, *calls: list[str]) -> None:
        self.calls = list(calls)
        self.seen: list[tuple[str, str, str]] = []

    async def complete_json(
        self,
        role: str,
        system: str,
        user: str,
        validate: Callable[[dict[str, Any]], Any],
        *,
        max_tokens: int | None = None,
        temperature: float | None = None,
    ) -> tuple[Any, RoleCall]:
        self.seen.append((role, system, user))
        replies = self.calls.pop(0)
        for attempt, reply in enumerate(replies, start=1):
            try:
                return validate(extract_json_object(reply)), RoleCall(role, attempt, True, 0.01)
            except (ValueError, KeyError, TypeError):
                continue
        return None, RoleCall(role, len(replies), False, 0.02)

    async def complete_text(self, *args: Any, **kwargs: Any) -> tuple[str | None, RoleCall]:
        raise AssertionError("these roles return JSON only")


# ---------------------------------------------------------------- fake original data folders


def original_row(
    data_source: str,
    index: int,
    create_kwargs: dict[str, Any],
    *,
    split: str = "train",
    user: str = "go",
    reward_model: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """One parquet row in the original files' shape; the env is made from its create_kwargs."""
    row: dict[str, Any] = {
        "data_source": data_source,
        "prompt": [{"content": "sys", "role": "system"}, {"content": user, "role": "user"}],
    }
    if reward_model is not None:
        row["reward_model"] = reward_model
    row["extra_info"] = {
        "split": split,
        "index": index,
        "tools_kwargs": {"interact_with_env": {"create_kwargs": create_kwargs}},
    }
    return row


def write_json(path: Path, content: object) -> None:
    """Write content as JSON (a str is written as it is, e.g. to make a corrupt file), creating folders."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(content if isinstance(content, str) else json.dumps(content), encoding="utf-8")


def write_parquet(path: Path, rows: list[dict[str, Any]]) -> None:
    """Write rows as a parquet file, creating folders."""
    path.parent.mkdir(parents=True, exist_ok=True)
    pl.DataFrame(rows).write_parquet(path)
