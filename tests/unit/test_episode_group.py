"""`episode_group`: the one set-up of Ray and an EnvRunnerGroup for playing episodes (training, evaluate,
evaluate-user) stops the group, and a Ray it started, however the block ends."""

from __future__ import annotations

import pytest

from userrl import env_runner_group
from userrl.config import UserRLConfig


class _Recorder:
    def __init__(self, monkeypatch, *, owns_ray: bool, fail_build: bool = False):
        self.events: list[str] = []
        recorder = self

        class FakeGroup:
            def __init__(self, config, model_path):
                if fail_build:
                    raise RuntimeError("no replica")
                recorder.events.append(f"group {model_path}")

            def stop(self):
                recorder.events.append("group stopped")

        monkeypatch.setattr(env_runner_group, "init_ray", lambda config: self.events.append("ray") or owns_ray)
        monkeypatch.setattr(env_runner_group, "EnvRunnerGroup", FakeGroup)
        monkeypatch.setattr(env_runner_group.ray, "shutdown", lambda: self.events.append("ray stopped"))


def test_the_group_and_an_owned_ray_stop_at_the_end(monkeypatch):
    recorder = _Recorder(monkeypatch, owns_ray=True)
    with env_runner_group.episode_group(UserRLConfig(), "/m") as group:
        assert group is not None and recorder.events == ["ray", "group /m"]
    assert recorder.events == ["ray", "group /m", "group stopped", "ray stopped"]


def test_a_ray_it_did_not_start_stays_up_and_errors_pass_through(monkeypatch):
    recorder = _Recorder(monkeypatch, owns_ray=False)
    with pytest.raises(KeyError), env_runner_group.episode_group(UserRLConfig(), "/m"):
        raise KeyError("played badly")
    assert recorder.events == ["ray", "group /m", "group stopped"]


def test_an_owned_ray_stops_when_the_group_cannot_be_built(monkeypatch):
    recorder = _Recorder(monkeypatch, owns_ray=True, fail_build=True)
    with pytest.raises(RuntimeError, match="no replica"), env_runner_group.episode_group(UserRLConfig(), "/m"):
        pass
    assert recorder.events == ["ray", "ray stopped"]
