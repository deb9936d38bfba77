"""Gym registry: names -> env classes, task loaders and scripted solvers; gymnasium ids."""

from __future__ import annotations

import difflib
import importlib
import logging
import pkgutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gymnasium
import numpy as np

from userrl.envs.base import MultiTurnEnv, Task

logger = logging.getLogger(__name__)

GYMS: dict[str, type[MultiTurnEnv]] = {}
#: Gym subpackages that failed to import, with the reason (shown when someone asks for that gym).
_SKIPPED: dict[str, str] = {}
TASK_LOADERS: dict[str, Callable[..., list[Task]]] = {}
SOLVERS: dict[str, Callable[[Task, np.random.Generator], Any]] = {}
#: Registry name -> gymnasium id, e.g. "function" -> "userrl/Function-v0".
GYMNASIUM_IDS: dict[str, str] = {}


def register_gym(
    name: str,
    env_cls: type[MultiTurnEnv],
    load_tasks: Callable[..., list[Task]],
    solver: Callable[[Task, np.random.Generator], Any] | None = None,
    gymnasium_id: str | None = None,
) -> None:
    """Add a gym to the registry and to gymnasium (idempotent: re-registering the same gym is a no-op)."""
    GYMS[name] = env_cls
    TASK_LOADERS[name] = load_tasks
    if solver is not None:
        SOLVERS[name] = solver
    gym_id = gymnasium_id or f"userrl/{name.capitalize()}-v0"
    GYMNASIUM_IDS[name] = gym_id
    if gym_id not in gymnasium.registry:
        # The env enforces max_steps itself, so no TimeLimit wrapper (max_episode_steps stays None).
        gymnasium.register(id=gym_id, entry_point=f"{env_cls.__module__}:{env_cls.__qualname__}")


def _unknown(name: str, known: dict[str, Any], what: str = "gym") -> ValueError:
    if name in _SKIPPED:
        return ValueError(f"{what} {name!r} could not be loaded: {_SKIPPED[name]}")
    close = difflib.get_close_matches(str(name).lower(), list(known), n=1)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    return ValueError(f"unknown {what} {name!r}; known: {', '.join(sorted(known))}{hint}")


def get_gym(name: str) -> type[MultiTurnEnv]:
    """The env class registered under name (ValueError with a suggestion when unknown)."""
    if name not in GYMS:
        raise _unknown(name, GYMS)
    return GYMS[name]


def make_env(name: str, task: Task | None = None, **kwargs: Any) -> MultiTurnEnv:
    """Build the env of gym `name`, optionally for a task; kwargs go to the env constructor."""
    return get_gym(name)(task, **kwargs)


def load_tasks(
    name: str,
    split: str = "train",
    source: str = "builtin",
    data_root: str | Path | None = None,
    **filters: Any,
) -> list[Task]:
    """Load the tasks of gym `name` (filters such as difficulty go to the gym's loader)."""
    if name not in TASK_LOADERS:
        raise _unknown(name, TASK_LOADERS)
    return TASK_LOADERS[name](split=split, source=source, data_root=data_root, **filters)


def make_solver(name: str, task: Task, rng: np.random.Generator) -> Any:
    """The privileged scripted solver of gym `name` for one task (has next_action(last_feedback))."""
    if name not in SOLVERS:
        raise _unknown(name, SOLVERS, "gym with a solver")
    return SOLVERS[name](task, rng)


def discover_gyms() -> None:
    """Import every gym subpackage of userrl.envs; each registers itself at import."""
    for module in pkgutil.iter_modules([str(Path(__file__).parent)]):
        if module.ispkg and module.name not in _SKIPPED:
            try:
                importlib.import_module(f"userrl.envs.{module.name}")
            except Exception as error:  # noqa: BLE001 - one broken gym must not take the others down (0.11)
                _SKIPPED[module.name] = f"{type(error).__name__}: {error}"
                logger.warning("gym package %r skipped: %s", module.name, _SKIPPED[module.name])
