"""The sequential mode's training task source (docs/spec/ALGORITHMS.md §5.2 "Optional curriculum"): the hierarchy map draws each
step's level and prompts, and learns from their scores.

Each iteration `next_tasks` asks the map (curriculum.HierarchyMap) for a level h and a batch of entries, with
a generator seeded by (experiment seed, iteration) as the fixed mixture's draws are; the step's tasks are
field FIELD_NAMES[h]'s items of those rows, each prompt carrying its entry's prefix blocks
(format.field_messages). After the group scorer has written the rewards, `observe` offers every sample to the
map (its row, level, prefix, strictly parsed value and reward) and refreshes it with the step's number
(iteration + 1: pools merge at steps 3, 6, 9, ...). The map is the source's state: the train loop saves it in
every model checkpoint and restores it on resume (the spec's "every 50 steps with the model" becomes every
checkpoint, so that resuming from any checkpoint is exact).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from userrl.actors.env_runner import EpisodeSpec
from userrl.config import UserRLConfig
from userrl.envs import Task
from userrl.humanlm.curriculum import HierarchyMap
from userrl.humanlm.env import GYM_NAME, item_task, load_reply_task
from userrl.humanlm.fields import FIELD_NAMES, field_level
from userrl.humanlm.format import parse_strict
from userrl.humanlm.scoring import reply_text
from userrl.trajectory import Trajectory

#: `kind` of the state this source checkpoints.
STATE_KIND = "humanlm_hierarchy_map"


class CurriculumTaskSource:
    """A TaskSource (userrl/coordinator.py) over the train split's rows in sequential mode, led by a HierarchyMap."""

    def __init__(self, config: UserRLConfig) -> None:
        h, spec = config.humanlm, config.env.gyms[0]
        self.split, self.seed, self.thinking = spec.split, config.experiment.seed, h.thinking
        self.task = load_reply_task(spec.split, mode="sequential", data_files=h.data_files or None,
                                    gyms=tuple(h.gyms), prompt_budget=h.prompt_budget,
                                    thinking=h.thinking)
        rows = len(self.task.kept)
        batch = config.training.batch_size
        if rows < batch:
            raise ValueError(f"humanlm.curriculum: level 0 draws training.batch_size={batch} distinct rows a step, but "
                             f"the {spec.split} split keeps {rows}; lower training.batch_size or add rows")
        self.map = HierarchyMap(rows)
        # The map's row numbers are positions among the kept rows; a task names its row by its index in the file.
        self._position = {index: position for position, index in enumerate(self.task.kept)}
        self.rows_digest = hashlib.sha256("\n".join(self.task.rows[i].target_id for i in self.task.kept)
                                          .encode()).hexdigest()

    def next_tasks(self, count: int, iteration: int) -> list[Task]:
        """The map's draw for this iteration: one level, `count` rows of it with their prefixes."""
        level, entries = self.map.sample(np.random.default_rng([self.seed, iteration]), count)
        name = FIELD_NAMES[level]
        return [item_task(self.task.item(e.row_index, name, e.prefix_blocks), self.split) for e in entries]

    def observe(self, iteration: int, specs: Sequence[EpisodeSpec], trajectories: Sequence[Trajectory]) -> dict[str, float]:
        """Offer every scored sample to the map, then refresh it as step iteration + 1; the map's sizes as metrics."""
        step, proposed, levels = iteration + 1, 0, set()
        for spec, traj in zip(specs, trajectories, strict=True):
            if traj.aborted or spec.task.gym != GYM_NAME:  # an aborted sample has no score to learn from
                continue
            data = spec.task.data
            level = field_level(data["field"])
            levels.add(level)
            # Training parses strictly: a reply that does not parse has no value (and scored 0).
            value = parse_strict(reply_text(traj), data["field"], self.thinking).values.get(data["field"], "")
            proposed += self.map.record(self._position[data["row_index"]], level, data["prefix_blocks"], value,
                                        traj.episode_return, step)
        refreshed = self.map.refresh(step)
        metrics = {"curriculum/proposed": float(proposed), "curriculum/pending": float(len(self.map.pending)),
                   "curriculum/refreshed": float(refreshed)}
        if len(levels) == 1:
            metrics["curriculum/level"] = float(levels.pop())
        metrics.update({f"curriculum/pool/{FIELD_NAMES[level]}": float(len(pool))
                        for level, pool in sorted(self.map.pools.items())})
        return metrics

    def all_tasks(self) -> list[Task]:
        """Every row's item of every field with no prefix (the SFT warm start's demonstrations come from them)."""
        return [item_task(self.task.item(i, name), self.split) for name in FIELD_NAMES
                for i in range(len(self.task.kept))]

    def state_dict(self) -> dict[str, Any]:
        """The map, and a digest of the rows it numbers (a resume over other rows is refused)."""
        return {"kind": STATE_KIND, "rows_digest": self.rows_digest, "map": self.map.state_dict()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore the map of a checkpoint written over the same rows."""
        if state.get("kind") != STATE_KIND:
            raise ValueError(f"humanlm.curriculum: the checkpoint's task source state is {state.get('kind')!r}, "
                             f"not a hierarchy map; resume from a checkpoint of a humanlm.curriculum=true run")
        if state["rows_digest"] != self.rows_digest:
            raise ValueError("humanlm.curriculum: the checkpoint's hierarchy map numbers other rows than this run's "
                             "train split; resume with the same humanlm.data_files, humanlm.gyms and "
                             "humanlm.prompt_budget")
        self.map = HierarchyMap.from_state_dict(state["map"])
