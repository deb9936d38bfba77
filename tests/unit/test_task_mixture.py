"""The fixed task mixture: gyms drawn by weight, and held-out gyms (weight 0) evaluated but never trained on."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from userrl.config import UserRLConfig
from userrl.coordinator import TaskMixture


def _config(*gyms: tuple[str, float]) -> UserRLConfig:
    return UserRLConfig.model_validate({"env": {"gyms": [{"name": n, "weight": w} for n, w in gyms]}})


def test_a_held_out_gym_is_evaluated_and_never_trained_on():
    config = _config(("function", 1.0), ("telepathy", 0.0))
    training = TaskMixture(config)
    assert training.gyms == ["function"]
    assert {task.gym for task in training.all_tasks()} == {"function"}  # the SFT warm start's tasks too
    assert {task.gym for task in training.sample(200, iteration=3)} == {"function"}
    evaluation = TaskMixture(config, split="test")
    assert evaluation.gyms == ["function", "telepathy"]
    assert [task.gym for task in evaluation.first(2)] == ["function", "function", "telepathy", "telepathy"]


def test_weights_draw_in_proportion():
    mixture = TaskMixture(_config(("function", 3.0), ("telepathy", 1.0)))
    drawn = [task.gym for task in mixture.sample(4000, iteration=0)]
    assert abs(drawn.count("function") / 4000 - 0.75) < 0.03  # binomial sd 0.007


def test_a_mixture_with_nothing_to_train_on_is_refused():
    with pytest.raises(ValidationError, match="every weight is 0"):
        _config(("function", 0.0), ("telepathy", 0.0))
    with pytest.raises(ValidationError, match="greater than or equal to 0"):
        _config(("function", -1.0))
