"""The optional hierarchy-map curriculum of the sequential mode (docs/spec/ALGORITHMS.md §5.2 "Optional curriculum").

Level h trains field h. A sample at level h whose non-empty field scores at least the field's threshold
(0.9) proposes a prompt for level h+1: its own prefix plus that field's block. Only the best entry per
(row, level) is kept (highest reward, newest on ties). Proposals wait in a pending buffer and join the
pools every `refresh_every` (3) steps; each step samples a level uniformly among the levels whose pool
holds at least one batch (level 0 holds every row). The spec checkpoints the map every 50 steps; ours goes
into every model checkpoint (userrl/humanlm/curriculum_source.py), so a resume restores it exactly.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from userrl.humanlm.fields import FIELD_NAMES, get_field

REFRESH_EVERY = 3


@dataclass(frozen=True)
class Entry:
    """A level-h prompt: the row, the (field, value) blocks of levels 0..h-1, the reward that earned it, when."""

    row_index: int
    level: int
    prefix_blocks: tuple[tuple[str, str], ...]
    reward: float
    step: int


class HierarchyMap:
    """Pools of prompts per level above 0, the best entry per (row, level)."""

    def __init__(self, n_rows: int, refresh_every: int = REFRESH_EVERY) -> None:
        if n_rows < 1 or refresh_every < 1:
            raise ValueError("n_rows and refresh_every must be at least 1")
        self.n_rows, self.refresh_every = n_rows, refresh_every
        self.pools: dict[int, dict[int, Entry]] = {}
        self.pending: dict[tuple[int, int], Entry] = {}

    @staticmethod
    def _better(new: Entry, old: Entry | None) -> bool:
        # Highest reward wins; on a tie the newer entry replaces the older one.
        return old is None or new.reward > old.reward or (new.reward == old.reward and new.step >= old.step)

    def record(self, row_index: int, level: int, prefix_blocks: Sequence[tuple[str, str]], value: str,
               reward: float, step: int) -> bool:  # fmt: skip
        """Offer a scored sample at `level`; True when it proposes (pending) a level+1 prompt."""
        field = get_field(FIELD_NAMES[level])
        if field.threshold is None or not value.strip() or reward < field.threshold:
            return False
        entry = Entry(
            row_index, level + 1, (*map(tuple, prefix_blocks), (field.name, value.strip())), reward, step
        )
        key = (row_index, level + 1)
        current = self.pending.get(key)
        if not self._better(entry, current):
            return False
        self.pending[key] = entry
        return True

    def refresh(self, step: int) -> bool:
        """Every refresh_every steps, merge the pending proposals into the pools (best per row and level)."""
        if step % self.refresh_every:
            return False
        for (row, level), entry in sorted(self.pending.items()):
            pool = self.pools.setdefault(level, {})
            if self._better(entry, pool.get(row)):
                pool[row] = entry
        self.pending.clear()
        return True

    def levels(self, batch_size: int) -> list[int]:
        """The levels whose pool holds at least one batch (level 0: all rows)."""
        ready = [0] if self.n_rows >= batch_size else []
        return ready + sorted(level for level, pool in self.pools.items() if len(pool) >= batch_size)

    def sample(self, rng: np.random.Generator, batch_size: int) -> tuple[int, list[Entry]]:
        """A level drawn uniformly among the ready ones, and a batch of its entries (without replacement)."""
        ready = self.levels(batch_size)
        if not ready:
            raise ValueError(f"no level holds a batch of {batch_size} (level 0 has {self.n_rows} rows)")
        level = ready[int(rng.integers(len(ready)))]
        if level == 0:
            picks = rng.choice(self.n_rows, size=batch_size, replace=False)
            return 0, [Entry(int(i), 0, (), 0.0, -1) for i in picks]
        pool = [self.pools[level][k] for k in sorted(self.pools[level])]
        picks = rng.choice(len(pool), size=batch_size, replace=False)
        return level, [pool[int(i)] for i in picks]

    def state_dict(self) -> dict[str, Any]:
        """The whole map as plain JSON-able data."""
        return {
            "n_rows": self.n_rows,
            "refresh_every": self.refresh_every,
            "pools": [asdict(e) for pool in self.pools.values() for e in pool.values()],
            "pending": [asdict(e) for e in self.pending.values()],
        }

    @classmethod
    def from_state_dict(cls, state: Mapping[str, Any]) -> HierarchyMap:
        """Rebuild a map from state_dict()."""
        out = cls(state["n_rows"], state["refresh_every"])

        def entry(raw: Mapping[str, Any]) -> Entry:
            blocks = tuple((str(a), str(b)) for a, b in raw["prefix_blocks"])
            return Entry(
                int(raw["row_index"]), int(raw["level"]), blocks, float(raw["reward"]), int(raw["step"])
            )

        for raw in state["pools"]:
            e = entry(raw)
            out.pools.setdefault(e.level, {})[e.row_index] = e
        for raw in state["pending"]:
            e = entry(raw)
            out.pending[(e.row_index, e.level)] = e
        return out
