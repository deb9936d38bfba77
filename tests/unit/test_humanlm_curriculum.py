"""The hierarchy-map curriculum (docs/spec/ALGORITHMS.md §5.2).

Threshold 0.9, best per (prompt, level), refresh every 3, checkpoint.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from userrl.humanlm.curriculum import HierarchyMap


def test_only_non_empty_fields_at_the_threshold_propose_the_next_level() -> None:
    hmap = HierarchyMap(n_rows=4)
    assert not hmap.record(0, 0, (), "Agree", 0.89, step=1)
    assert not hmap.record(0, 0, (), "  ", 1.0, step=1)
    assert hmap.record(0, 0, (), "Agree", 0.9, step=1)
    assert not hmap.record(0, 6, (), "reply", 1.0, step=1)  # the response field has no next level
    entry = hmap.pending[(0, 1)]
    assert entry.prefix_blocks == (("stance", "Agree"),) and entry.level == 1


def test_best_entry_per_prompt_and_level_newest_on_ties() -> None:
    hmap = HierarchyMap(n_rows=4)
    hmap.record(0, 0, (), "A", 0.95, step=1)
    assert not hmap.record(0, 0, (), "B", 0.92, step=2)  # lower reward loses
    assert hmap.record(0, 0, (), "C", 0.95, step=2)  # tie: newest wins
    assert hmap.pending[(0, 1)].prefix_blocks == (("stance", "C"),)


def test_refresh_every_three_steps_and_level_sampling() -> None:
    hmap = HierarchyMap(n_rows=4)
    for row in range(2):
        hmap.record(row, 0, (), f"s{row}", 0.95, step=1)
    assert not hmap.refresh(1) and not hmap.refresh(2) and hmap.levels(2) == [0]
    assert hmap.refresh(3) and hmap.levels(2) == [0, 1] and hmap.levels(3) == [0]
    assert hmap.levels(5) == []
    rng = np.random.default_rng(0)
    drawn = {hmap.sample(rng, 2)[0] for _ in range(40)}
    assert drawn == {0, 1}  # uniform over the ready levels
    level, batch = hmap.sample(np.random.default_rng(1), 2)
    assert len(batch) == 2 and all(e.level == level for e in batch)
    with pytest.raises(ValueError, match="no level holds a batch of 5"):
        hmap.sample(rng, 5)


def test_checkpoint_round_trip() -> None:
    hmap = HierarchyMap(n_rows=3)
    hmap.record(1, 0, (), "s", 0.97, step=3)
    hmap.refresh(3)
    hmap.record(1, 1, (("stance", "s"),), "calm", 0.91, step=4)
    state = json.loads(json.dumps(hmap.state_dict()))
    again = HierarchyMap.from_state_dict(state)
    assert again.pools == hmap.pools and again.pending == hmap.pending
