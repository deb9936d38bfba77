"""Training task sources: the TaskSource interface, and the registry of the sources a config may ask for
(e.g. a plug-in's curriculum). The default source, the gyms' fixed mixture, is userrl/coordinator.TaskMixture."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from userrl.plugins import load_plugins

if TYPE_CHECKING:
    from userrl.actors.env_runner import EpisodeSpec
    from userrl.config import UserRLConfig
    from userrl.envs import Task
    from userrl.trajectory import Trajectory


class TaskSource(Protocol):
    """Where each training iteration's tasks come from. A source may learn from the scored episodes
    (`observe`), so its state goes into every checkpoint and comes back on resume: what it draws for an
    iteration must depend only on (experiment seed, iteration, state), so that resume is exact."""

    def next_tasks(self, count: int, iteration: int) -> list[Task]:
        """`count` tasks for one iteration (called once per iteration, after `observe` of the one before)."""
        ...

    def observe(self, iteration: int, specs: Sequence[EpisodeSpec], trajectories: Sequence[Trajectory]) -> dict[str, float]:
        """Learn from an iteration's scored episodes (trajectories in the order of specs); returns metrics."""
        ...

    def all_tasks(self) -> list[Task]:
        """Every task the source starts from (the SFT warm start's demonstrations are drawn from them)."""
        ...

    def state_dict(self) -> dict[str, Any]:
        """The state a checkpoint keeps, as JSON-able data ({} when there is none)."""
        ...

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore what `state_dict` gave."""
        ...


#: A task source's factory: the source when the config asks for it, else None.
TaskSourceFactory = Callable[["UserRLConfig"], "TaskSource | None"]

#: Registry name -> factory; make_task_source takes the first that gives a source.
TASK_SOURCES: dict[str, TaskSourceFactory] = {}


def register_task_source(name: str, factory: TaskSourceFactory) -> None:
    """Add a task source (re-registering a name replaces it)."""
    TASK_SOURCES[name] = factory


def registered_task_sources() -> dict[str, TaskSourceFactory]:
    """Every registered task source, in the order registered (loading the plug-ins first)."""
    load_plugins()
    return TASK_SOURCES
