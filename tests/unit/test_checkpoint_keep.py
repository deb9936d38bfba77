"""`checkpointing.keep`: after a checkpoint is written, older ones beyond the newest `keep` are deleted."""

from __future__ import annotations

from pathlib import Path

from userrl.train_loop import prune_checkpoints


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
