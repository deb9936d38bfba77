"""`checkpointing.keep`: after a checkpoint is written, older ones beyond the newest `keep` are deleted; and
`checkpointing.keep_best`: the best one by a held-out metric is named in best.json and kept."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from userrl.checkpoint import BEST_FILE, BestCheckpoint, prune_checkpoints
from userrl.config import load_config
from userrl.errors import ConfigError


def _fake_checkpoints(folder: Path, iterations: list[int]) -> None:
    for iteration in iterations:
        path = folder / f"iter_{iteration:06d}"
        (path / "model").mkdir(parents=True)
        (path / "meta.json").write_text(f'{{"iteration": {iteration}}}')


def _names(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def test_keeps_the_newest_and_the_warm_start(tmp_path):
    _fake_checkpoints(tmp_path, [0, 1, 2, 3, 4])
    removed = prune_checkpoints(tmp_path / "iter_000004", keep=2)
    assert [p.name for p in removed] == ["iter_000001", "iter_000002"]
    assert _names(tmp_path) == ["iter_000000", "iter_000003", "iter_000004"]


def test_keep_one_leaves_only_the_one_just_written(tmp_path):
    _fake_checkpoints(tmp_path, [2, 4, 6])
    prune_checkpoints(tmp_path / "iter_000006", keep=1)
    assert _names(tmp_path) == ["iter_000006"]


def test_never_the_one_written_nor_newer_ones_of_an_earlier_run(tmp_path):
    """Resumed from iter_000002 into a folder where an earlier run got to iter_000005."""
    _fake_checkpoints(tmp_path, [1, 2, 3, 4, 5])
    prune_checkpoints(tmp_path / "iter_000003", keep=1)
    assert _names(tmp_path) == ["iter_000003", "iter_000004", "iter_000005"]


def test_other_files_half_written_folders_and_keep_null_are_left(tmp_path):
    _fake_checkpoints(tmp_path, [1, 2, 3])
    (tmp_path / "iter_000004.tmp").mkdir()  # being written (or left by a killed writer: the loop cleans those)
    (tmp_path / "notes.txt").write_text("mine")
    assert prune_checkpoints(tmp_path / "iter_000003", keep=None) == []
    assert _names(tmp_path) == ["iter_000001", "iter_000002", "iter_000003", "iter_000004.tmp", "notes.txt"]
    prune_checkpoints(tmp_path / "iter_000003", keep=2)
    assert _names(tmp_path) == ["iter_000002", "iter_000003", "iter_000004.tmp", "notes.txt"]


def test_the_best_checkpoint_is_never_pruned(tmp_path):
    _fake_checkpoints(tmp_path, [0, 1, 2, 3, 4])
    removed = prune_checkpoints(tmp_path / "iter_000004", keep=1, protected=tmp_path / "iter_000002")
    assert [p.name for p in removed] == ["iter_000001", "iter_000003"]
    assert _names(tmp_path) == ["iter_000000", "iter_000002", "iter_000004"]


def test_best_checkpoint_keeps_the_first_best_value_and_comes_back_from_its_file(tmp_path):
    best = BestCheckpoint(tmp_path, "eval/success_rate")
    assert not best.improves({"eval/reward_mean": 1.0})  # another metric: nothing to rank
    assert not best.improves({"eval/success_rate": float("nan")})  # no episode scored
    assert best.improves({"eval/success_rate": 0.0})  # anything beats nothing
    best.record(0.25, 0, "models/start")
    assert not best.improves({"eval/success_rate": 0.25})  # a tie keeps the earlier one
    assert best.improves({"eval/success_rate": 0.5})
    best.record(0.5, 4, tmp_path / "iter_000004")
    again = BestCheckpoint(tmp_path, "eval/success_rate")  # a resumed run
    assert (again.value, again.iteration, again.path) == (0.5, 4, str(tmp_path / "iter_000004"))
    assert json.loads((tmp_path / BEST_FILE).read_text())["metric"] == "eval/success_rate"
    # Another metric or direction starts afresh; lower is better with mode min.
    fresh = BestCheckpoint(tmp_path, "eval/turns_mean", mode="min")
    assert fresh.value is None and fresh.improves({"eval/turns_mean": 9.0})
    fresh.record(3.0, 2, "p")
    assert fresh.improves({"eval/turns_mean": 2.0}) and not fresh.improves({"eval/turns_mean": 4.0})


def test_keep_best_needs_an_evaluation_metric_and_evaluations():
    with pytest.raises(ConfigError, match="keep_best must name a held-out metric"):
        load_config(None, ["checkpointing.keep_best=rollout/success_rate", "evaluation.interval=2"])
    with pytest.raises(ConfigError, match="evaluation.interval=0 runs none"):
        load_config(None, ["checkpointing.keep_best=eval/success_rate"])
    config = load_config(None, ["checkpointing.keep_best=eval/success_rate", "evaluation.interval=2"])
    assert config.checkpointing.keep_best == "eval/success_rate" and config.checkpointing.best_mode == "max"
