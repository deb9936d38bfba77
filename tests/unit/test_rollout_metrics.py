"""Rollout metrics: aborted episodes are counted (in all and per gym) and never enter a mean as a 0;
role calls and failed role calls are counted per gym (reliability scenario 3)."""

from __future__ import annotations

import pytest

from userrl.coordinator import rollout_metrics
from userrl.rollout import abort_trajectory
from userrl.trajectory import Trajectory, TurnRecord


def _traj(gym: str, rewards: list[float], *, role_calls: int = 0, failed: int = 0, aborted: bool = False) -> Trajectory:
    traj = Trajectory(uid=f"{gym}-{len(rewards)}-{aborted}", group_id="g", env_name=gym, item_key="k")
    for i, reward in enumerate(rewards):
        traj.turns.append(TurnRecord(reward=reward, executed=True, terminated=i == len(rewards) - 1,
                                     role_calls=role_calls, failed_role_calls=failed))
    return abort_trajectory(traj, "role_call_failed:user") if aborted else traj


def test_aborted_episodes_are_counted_and_left_out_of_every_mean():
    trajectories = [
        _traj("turtle", [0.0, 1.0], role_calls=1),
        _traj("turtle", [0.0, 0.0], role_calls=1),
        _traj("turtle", [0.0], role_calls=1, failed=1, aborted=True),
        _traj("function", [1.0]),
    ]
    metrics = rollout_metrics(trajectories, seconds=1.0)
    assert metrics["rollout/episodes"] == 4 and metrics["rollout/aborted"] == 1
    # Means over the three played episodes: returns 1, 0, 1.
    assert metrics["rollout/reward_mean"] == pytest.approx(2 / 3)
    assert metrics["rollout/success_rate"] == pytest.approx(2 / 3)
    assert metrics["rollout/turns_mean"] == pytest.approx(5 / 3)
    assert metrics["rollout/reward_mean/turtle"] == pytest.approx(0.5)
    assert metrics["rollout/aborted/turtle"] == 1 and metrics["rollout/aborted/function"] == 0
    # Two turns of each played turtle episode + the aborted one's turn made a role call; one failed.
    assert metrics["rollout/role_calls/turtle"] == 5 and metrics["rollout/failed_role_calls/turtle"] == 1
    assert metrics["rollout/stop_aborted"] == pytest.approx(0.25)


def test_a_batch_of_aborted_episodes_has_counts_and_no_means():
    metrics = rollout_metrics([_traj("turtle", [0.0], role_calls=1, failed=1, aborted=True)], seconds=1.0)
    assert metrics["rollout/aborted"] == 1 and metrics["rollout/failed_role_calls/turtle"] == 1
    assert "rollout/reward_mean" not in metrics and "rollout/reward_mean/turtle" not in metrics
