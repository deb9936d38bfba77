"""The fault hooks of the reliability tests: which spec fires where, and only once per fit."""

import signal

import pytest

from userrl import faults
from userrl.faults import FaultInjector, parse


def test_parse():
    assert parse("update:4") == ("update", 4, None)
    assert parse("update:4:0") == ("update", 4, 0)
    assert parse("checkpoint:2") == ("checkpoint", 2, None)
    for bad in ("update", "update:x", "checkpoint:2:1", "rollout:3", "update:1:2:3", ""):
        with pytest.raises(ValueError, match="USERRL_FAULT"):
            parse(bad)


@pytest.fixture
def kills(monkeypatch):
    sent = []
    monkeypatch.setattr(faults.os, "kill", lambda pid, sig: sent.append(sig))
    return sent


def test_update_fault_fires_once_on_its_rank_and_iteration(tmp_path, kills):
    other_rank = FaultInjector("update:3", rank=0, world_size=2, marker_dir=tmp_path, fit_id="f", start=0)
    injector = FaultInjector("update:3", rank=1, world_size=2, marker_dir=tmp_path, fit_id="f", start=0)
    reported = []
    report = injector.observing(reported.append)
    for iteration in (1, 2):
        injector("update")
        other_rank("update")
        report({"phase": "rl", "iteration": iteration})
    assert kills == []
    injector("checkpoint", 3)  # another point
    other_rank("update")
    assert kills == []
    injector("update")  # the update of iteration 3 on rank 1
    assert kills == [signal.SIGKILL] and (tmp_path / "f-update-3").is_file()
    restarted = FaultInjector("update:3", rank=1, world_size=2, marker_dir=tmp_path, fit_id="f", start=2)
    restarted("update")  # the same point after the restart: the marker says it fired
    assert kills == [signal.SIGKILL] and len(reported) == 2
    FaultInjector("update:3", rank=1, world_size=2, marker_dir=tmp_path, fit_id="g", start=2)("update")
    assert len(kills) == 2  # another fit fires again


def test_checkpoint_fault_is_rank_0_and_a_lone_learner_takes_update_faults(tmp_path, kills):
    FaultInjector("checkpoint:2", rank=1, world_size=2, marker_dir=tmp_path, fit_id="f", start=0)("checkpoint", 2)
    checkpoint = FaultInjector("checkpoint:2", rank=0, world_size=2, marker_dir=tmp_path, fit_id="f", start=0)
    checkpoint("checkpoint", 1)
    assert kills == []
    checkpoint("checkpoint", 2)
    assert kills == [signal.SIGKILL]
    FaultInjector("update:1", rank=0, world_size=1, marker_dir=tmp_path, fit_id="f", start=0)("update")
    assert len(kills) == 2
    FaultInjector(None, rank=0, world_size=1, marker_dir=tmp_path, fit_id="f", start=0)("update")
    assert len(kills) == 2
