"""Gym registry: one record per gym (env class, task loader, scripted solver, gymnasium id)."""

from __future__ import annotations

import difflib
import importlib
import inspect
import logging
import pkgutil
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from functools import cache, partial
from pathlib import Path
from typing import Any, Generic, TypeVar

import gymnasium
import numpy as np

from userrl.envs.base import MultiTurnEnv, Task
from userrl.envs.solving import NativeToolsSolver, Solver, play_episode
from userrl.plugins import load_plugins

logger = logging.getLogger(__name__)

_V = TypeVar("_V")


@dataclass(frozen=True)
class GymRecord:
    """Everything the registry knows about one gym."""

    name: str
    env_cls: type[MultiTurnEnv]
    #: load_tasks(split, source, data_root, **filters) -> tasks (see loading.source_loader).
    load_tasks: Callable[..., list[Task]]
    #: solver(task, rng) -> a scripted solver; a solver class with `uses_step_budget` also takes max_steps.
    solver: Callable[..., Solver] | None
    gymnasium_id: str


#: Registry name -> the gym's record.
RECORDS: dict[str, GymRecord] = {}
#: Gym subpackages that failed to import, with the reason (shown when someone asks for that gym).
_SKIPPED: dict[str, str] = {}


class _RecordView(Mapping[str, _V], Generic[_V]):
    """A read-only view of one field of every record (the registry's older dict-shaped names)."""

    def __init__(self, field: Callable[[GymRecord], _V | None]) -> None:
        self._field = field

    def __getitem__(self, name: str) -> _V:
        value = self._field(RECORDS[name])
        if value is None:
            raise KeyError(name)
        return value

    def __iter__(self) -> Iterator[str]:
        return iter([name for name, record in RECORDS.items() if self._field(record) is not None])

    def __len__(self) -> int:
        return sum(1 for _ in self)


GYMS: Mapping[str, type[MultiTurnEnv]] = _RecordView(lambda r: r.env_cls)
TASK_LOADERS: Mapping[str, Callable[..., list[Task]]] = _RecordView(lambda r: r.load_tasks)
SOLVERS: Mapping[str, Callable[..., Solver]] = _RecordView(lambda r: r.solver)
#: Registry name -> gymnasium id, e.g. "function" -> "userrl/Function-v0".
GYMNASIUM_IDS: Mapping[str, str] = _RecordView(lambda r: r.gymnasium_id)


def register_gym(
    name: str,
    env_cls: type[MultiTurnEnv],
    load_tasks: Callable[..., list[Task]],
    solver: Callable[..., Solver] | None = None,
    gymnasium_id: str | None = None,
) -> None:
    """Add a gym to the registry and to gymnasium (idempotent: re-registering the same gym is a no-op).

    A solver or gymnasium id left out keeps the one already registered under name.
    """
    previous = RECORDS.get(name)
    if solver is None and previous is not None:
        solver = previous.solver
    gym_id = gymnasium_id or (previous.gymnasium_id if previous else f"userrl/{name.capitalize()}-v0")
    RECORDS[name] = GymRecord(name, env_cls, load_tasks, solver, gym_id)
    train_tasks.cache_clear()
    env_cls.train_task_source = partial(train_tasks, name)
    if gym_id not in gymnasium.registry:
        # The env enforces max_steps itself, so no TimeLimit wrapper (max_episode_steps stays None).
        gymnasium.register(id=gym_id, entry_point=f"{env_cls.__module__}:{env_cls.__qualname__}")


def _unknown(name: str, known: Mapping[str, Any], what: str = "gym") -> ValueError:
    if name in _SKIPPED:
        return ValueError(f"{what} {name!r} could not be loaded: {_SKIPPED[name]}")
    close = difflib.get_close_matches(str(name).lower(), list(known), n=1)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    return ValueError(f"unknown {what} {name!r}; known: {', '.join(sorted(known))}{hint}")


def gym_record(name: str) -> GymRecord:
    """The record of gym `name` (ValueError with a suggestion when unknown); plug-ins' gyms are registered
    on the first lookup of a name not built in (in every process: env runners too)."""
    if name not in RECORDS:
        load_plugins()
    if name not in RECORDS:
        raise _unknown(name, RECORDS)
    return RECORDS[name]


def get_gym(name: str) -> type[MultiTurnEnv]:
    """The env class registered under name (ValueError with a suggestion when unknown)."""
    return gym_record(name).env_cls


def uses_role_client(name: str) -> bool:
    """Whether gym `name` has model-backed roles, i.e. its env takes an `llm` RoleClient."""
    return gym_record(name).env_cls.uses_role_client


def env_keywords(name: str) -> set[str]:
    """The constructor keywords gym `name` accepts: the base env's and its own (`_configure`'s)."""
    cls = get_gym(name)
    keywords = set()
    for function in (MultiTurnEnv.__init__, cls._configure):
        keywords |= {p.name for p in inspect.signature(function).parameters.values()
                     if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD) and p.name not in ("self", "task")}
    return keywords


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
    return gym_record(name).load_tasks(split=split, source=source, data_root=data_root, **filters)


@cache
def train_tasks(name: str) -> tuple[Task, ...]:
    """The builtin train tasks of gym `name`, loaded once per process (empty for an unregistered gym)."""
    return tuple(load_tasks(name, "train")) if name in RECORDS else ()


def solver_plays_native_tools(name: str) -> bool:
    """Whether gym `name` has a solver that writes native-tools demonstrations (a NativeToolsSolver class)."""
    solver = gym_record(name).solver
    return isinstance(solver, type) and issubclass(solver, NativeToolsSolver)


def make_solver(name: str, task: Task, rng: np.random.Generator, max_steps: int | None = None) -> Solver:
    """The privileged scripted solver of gym `name` for one task (has next_action(last_feedback)).

    max_steps is the episode's step budget, for the solvers that plan within it (`uses_step_budget`).
    """
    record = RECORDS.get(name)
    if record is None or record.solver is None:
        raise _unknown(name, SOLVERS, "gym with a solver")
    if max_steps is not None and getattr(record.solver, "uses_step_budget", False):
        return record.solver(task, rng, max_steps)
    return record.solver(task, rng)


def solve_episode(env: MultiTurnEnv, task: Task, rng: np.random.Generator) -> list[tuple[str, str, str, float]]:
    """Reset env on task and play its gym's solver to the end: one (choice, content, feedback, reward) per step."""
    return play_episode(env, task, make_solver(task.gym, task, rng, env.max_steps))


def discover_gyms() -> None:
    """Import every gym subpackage of userrl.envs; each registers itself at import."""
    for module in pkgutil.iter_modules([str(Path(__file__).parent)]):
        if module.ispkg and module.name not in _SKIPPED:
            try:
                importlib.import_module(f"userrl.envs.{module.name}")
            except Exception as error:  # noqa: BLE001 - one broken gym must not take the others down (0.11)
                _SKIPPED[module.name] = f"{type(error).__name__}: {error}"
                logger.warning("gym package %r skipped: %s", module.name, _SKIPPED[module.name])
