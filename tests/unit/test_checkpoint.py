"""userrl/checkpoint.py: the checkpoint layout, the check of a user-given folder, the newest complete
checkpoint, staged folders and atomic file writes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from userrl.checkpoint import (
    CRITIC_DIR,
    META_FILE,
    MODEL_DIR,
    STAGING_SUFFIX,
    Checkpoint,
    checkpoint_of_model,
    checkpoints_dir,
    iteration_in_name,
    latest_complete,
    model_folder,
    remove_staging,
    staged,
    write_atomic,
)


def _checkpoint(path: Path, iteration: int = 3, *, model: bool = True, meta: bool = True, **extra) -> Path:
    """A folder in the layout Learner.save_checkpoint writes (a stand-in model/config.json)."""
    path.mkdir(parents=True)
    if model:
        (path / MODEL_DIR).mkdir()
        (path / MODEL_DIR / "config.json").write_text("{}")
    if meta:
        (path / META_FILE).write_text(json.dumps({"iteration": iteration, "policy_version": iteration + 1,
                                                  "config": {"env": {"protocol": "bracket"}}, **extra}))
    return path


# ------------------------------------------------------------------------------------------ the layout


def test_a_run_names_its_checkpoints_by_iteration(tmp_path):
    checkpoint = Checkpoint.of_run(tmp_path, 12)
    assert checkpoint.path == checkpoints_dir(tmp_path) / "iter_000012" == tmp_path / "checkpoints" / "iter_000012"
    assert checkpoint.model_dir == checkpoint.path / "model" and checkpoint.meta_file.name == "meta.json"
    assert checkpoint.critic_dir.name == CRITIC_DIR and checkpoint.staging_path.name == "iter_000012.tmp"
    assert iteration_in_name(checkpoint.path) == 12
    assert iteration_in_name(checkpoint.staging_path) is None and iteration_in_name(tmp_path / "notes") is None


def test_meta_is_read_once(tmp_path):
    checkpoint = Checkpoint(_checkpoint(tmp_path / "iter_000003"))
    assert (checkpoint.iteration, checkpoint.policy_version, checkpoint.protocol) == (3, 4, "bracket")
    checkpoint.meta_file.write_text(json.dumps({"iteration": 99}))
    assert checkpoint.iteration == 3  # the first read is kept
    assert Checkpoint(checkpoint.path).iteration == 99
    assert checkpoint.fit_id is None


def test_protocol_defaults_to_the_configs_default(tmp_path):
    checkpoint = Checkpoint(_checkpoint(tmp_path / "iter_000001"))
    checkpoint.meta_file.write_text(json.dumps({"iteration": 1, "policy_version": 1}))
    assert checkpoint.protocol == "tool_call"


def test_the_module_imports_neither_torch_nor_ray_nor_the_rest_of_userrl():
    code = ("import sys, userrl.checkpoint; "
            "print(sorted(m for m in sys.modules if m in ('torch', 'ray') or m.startswith('userrl.')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert out.stdout.strip() == "['userrl.checkpoint']"


# ---------------------------------------------------------------------------------- a user-given folder


def test_open_checks_and_resolves_a_complete_folder(tmp_path, monkeypatch):
    _checkpoint(tmp_path / "iter_000003")
    monkeypatch.chdir(tmp_path)
    checkpoint = Checkpoint.open("iter_000003", "--checkpoint")
    assert checkpoint.path == (tmp_path / "iter_000003").resolve() and checkpoint.path.is_absolute()
    assert checkpoint.model_dir == checkpoint.path / "model"


@pytest.mark.parametrize("source, shown", [("--checkpoint", "--checkpoint {}"),
                                           ("checkpointing.resume_from", "checkpointing.resume_from={}")])
def test_a_missing_folder_names_the_flag_or_field_and_the_fix(tmp_path, source, shown):
    missing = tmp_path / "nope"
    with pytest.raises(FileNotFoundError) as error:
        Checkpoint.open(missing, source)
    message = str(error.value)
    assert message.startswith(shown.format(missing) + " is not a userrl checkpoint folder: no such folder")
    assert "runs/<name>/checkpoints/iter_NNNNNN" in message and "userrl train" in message


def test_a_folder_without_meta_json_is_incomplete(tmp_path):
    folder = _checkpoint(tmp_path / "iter_000003", meta=False)
    with pytest.raises(FileNotFoundError, match=r"not a userrl checkpoint folder: no meta\.json .*incomplete"):
        Checkpoint.open(folder, "--checkpoint")


def test_a_folder_without_model_is_refused(tmp_path):
    folder = _checkpoint(tmp_path / "iter_000003", model=False)
    with pytest.raises(FileNotFoundError, match="not a userrl checkpoint folder: no model/config.json"):
        Checkpoint.open(folder, "--checkpoint")
    (folder / MODEL_DIR).mkdir()  # an empty model/ is no model either
    with pytest.raises(FileNotFoundError, match="no model/config.json"):
        Checkpoint.open(folder, "--checkpoint")


def test_a_half_written_folder_is_refused(tmp_path):
    folder = _checkpoint(tmp_path / f"iter_000003{STAGING_SUFFIX}")  # meta.json is written before the rename
    with pytest.raises(FileNotFoundError, match="half-written"):
        Checkpoint.open(folder, "checkpointing.resume_from")


# ------------------------------------------------------------------------------ the newest complete one


def test_latest_complete_skips_staging_incomplete_and_unreadable_folders(tmp_path):
    folder = checkpoints_dir(tmp_path)
    assert latest_complete(folder) is None  # no folder yet
    _checkpoint(folder / "iter_000002", 2)
    _checkpoint(folder / "iter_000010", 10)
    _checkpoint(folder / "iter_000012.tmp", 12)  # a killed writer's, meta.json included
    _checkpoint(folder / "iter_000011", 11, meta=False)  # no meta.json: incomplete
    (_checkpoint(folder / "iter_000013", 13).joinpath(META_FILE)).write_text('{"iterat')  # cut short
    (folder / "notes.txt").write_text("mine")
    assert latest_complete(folder).path == folder / "iter_000010"


def test_latest_complete_orders_by_the_recorded_iteration_and_filters_by_fit(tmp_path):
    folder = checkpoints_dir(tmp_path)
    _checkpoint(folder / "iter_000004", 4, fit_id="a")
    _checkpoint(folder / "iter_000006", 6, fit_id="b")  # an earlier fit's, further along
    _checkpoint(folder / "iter_000005", 5, fit_id="a")
    assert latest_complete(folder).iteration == 6
    assert latest_complete(folder, fit_id="a").path.name == "iter_000005"
    assert latest_complete(folder, fit_id="c") is None


def test_remove_staging_removes_only_tmp_folders(tmp_path):
    folder = checkpoints_dir(tmp_path)
    _checkpoint(folder / "iter_000002", 2)
    _checkpoint(folder / "iter_000004.tmp", 4)
    assert [p.name for p in remove_staging(folder)] == ["iter_000004.tmp"]
    assert sorted(p.name for p in folder.iterdir()) == ["iter_000002"]


# ---------------------------------------------------------------------------------------------- writing


def test_staged_renames_into_place_and_replaces_an_older_folder(tmp_path):
    target = _checkpoint(tmp_path / "iter_000002", 2)
    (target / "stale.txt").write_text("from an earlier run")
    with staged(target) as staging:
        assert staging.name == "iter_000002.tmp" and staging.is_dir() and not any(staging.iterdir())
        Checkpoint(staging).meta_file.write_text(json.dumps({"iteration": 2, "policy_version": 3}))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["iter_000002"]
    assert sorted(p.name for p in target.iterdir()) == [META_FILE] and Checkpoint(target).policy_version == 3


def test_a_failed_staged_write_leaves_the_old_folder_and_the_tmp_one(tmp_path):
    target = _checkpoint(tmp_path / "iter_000002", 2)
    with pytest.raises(RuntimeError), staged(target) as staging:
        (staging / "optimizer.pt").write_text("half")
        raise RuntimeError("killed")
    assert Checkpoint(target).iteration == 2 and (target / MODEL_DIR).is_dir()
    assert (tmp_path / "iter_000002.tmp" / "optimizer.pt").is_file()  # as a killed writer leaves it
    assert latest_complete(tmp_path).path == target
    with staged(target) as staging:  # the next write starts from an empty staging folder
        assert not any(staging.iterdir())


def test_write_atomic_leaves_no_temp_file(tmp_path):
    path = tmp_path / "metrics.json"
    write_atomic(path, lambda tmp: tmp.write_text('{"a": 1}'))
    write_atomic(path, lambda tmp: tmp.write_text('{"a": 2}'))  # replaces
    assert json.loads(path.read_text()) == {"a": 2}
    assert [p.name for p in tmp_path.iterdir()] == ["metrics.json"]


def test_write_atomic_never_leaves_a_half_written_file(tmp_path):
    path = tmp_path / "metrics.json"

    def half(tmp: Path) -> None:
        tmp.write_text('{"a": ')
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        write_atomic(path, half)
    assert list(tmp_path.iterdir()) == []  # neither the file nor a temp file
    path.write_text('{"a": 1}')
    with pytest.raises(OSError):
        write_atomic(path, half)
    assert path.read_text() == '{"a": 1}' and [p.name for p in tmp_path.iterdir()] == ["metrics.json"]


def test_write_atomic_writes_beside_the_target_under_a_hidden_name(tmp_path):
    seen = []
    write_atomic(tmp_path / "episodes.parquet", lambda tmp: seen.append(tmp) or tmp.write_bytes(b"x"))
    (tmp,) = seen
    assert tmp.parent == tmp_path and tmp.name.startswith(".episodes.parquet.") and tmp.suffix == STAGING_SUFFIX


# ------------------------------------------------------------------------------------ the model folder


def _plain_model(path: Path) -> str:
    """A Hugging Face folder that is no checkpoint's (an export, a downloaded model)."""
    path.mkdir()
    (path / "config.json").write_text("{}")
    return str(path)


def test_model_folder_maps_a_checkpoint_to_its_model_and_leaves_the_rest(tmp_path):
    folder = _checkpoint(tmp_path / "iter_000003")
    assert model_folder(str(folder)) == str(folder / MODEL_DIR)
    assert model_folder(str(folder / MODEL_DIR)) == str(folder / MODEL_DIR)
    plain = _plain_model(tmp_path / "exported")
    assert model_folder(plain) == plain and model_folder("smollm2-135m") == "smollm2-135m"
    assert model_folder(str(_checkpoint(tmp_path / "iter_000004", meta=False))) == str(tmp_path / "iter_000004")


def test_checkpoint_of_model_finds_the_owner_of_a_model_folder(tmp_path):
    folder = _checkpoint(tmp_path / "iter_000003")
    assert checkpoint_of_model(folder / MODEL_DIR).path == folder
    assert checkpoint_of_model(folder) is None
    assert checkpoint_of_model(_plain_model(tmp_path / MODEL_DIR)) is None  # named model/, but no checkpoint's
