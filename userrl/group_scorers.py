"""Group scorers: the GroupScorer interface, and their registry under the names gyms declare
(MultiTurnEnv.group_scorer)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Protocol

from userrl.plugins import load_plugins

if TYPE_CHECKING:
    from userrl.actors.env_runner import EpisodeSpec
    from userrl.config import UserRLConfig
    from userrl.trajectory import Trajectory


class GroupScorer(Protocol):
    """Writes the rewards of trajectories that are scored per GRPO group after the rollout (e.g. user-reply
    tasks: a judge sees all of a group's replies in one call), in place, and returns its metrics."""

    def score(self, specs: Sequence[EpisodeSpec], trajectories: Sequence[Trajectory],
              evaluation: bool = False) -> dict[str, float]:
        """Score the batch (trajectories in the order of specs); evaluation: the validation judge and parsing."""
        ...


#: Registry name (a gym's `group_scorer`) -> the scorer's factory.
GROUP_SCORERS: dict[str, Callable[[UserRLConfig], GroupScorer]] = {}


def register_group_scorer(name: str, factory: Callable[[UserRLConfig], GroupScorer]) -> None:
    """Add a group scorer (re-registering a name replaces it)."""
    GROUP_SCORERS[name] = factory


def group_scorer_factory(name: str) -> Callable[[UserRLConfig], GroupScorer]:
    """The factory of the group scorer `name` (ValueError naming the known ones); plug-ins' scorers are
    registered on the first lookup of a name not known."""
    if name not in GROUP_SCORERS:
        load_plugins()
    if name not in GROUP_SCORERS:
        raise ValueError(f"unknown group scorer {name!r}; known: {', '.join(sorted(GROUP_SCORERS))}")
    return GROUP_SCORERS[name]
