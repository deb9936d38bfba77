"""Choosing an advantage estimator (issue #16): its keys, RAGEN's presets, and clear errors before any actor."""

import json
from pathlib import Path

import pytest

from userrl.config import ConfigError, load_config, parse_config
from userrl.estimators import estimator_turn_rewards, make_estimator
from userrl.models import check_critic_model
from userrl.trajectory import Trajectory, TurnRecord


def test_every_estimator_of_the_algorithms_is_a_config_choice_with_its_own_defaults():
    from userrl.algorithms import ADV_ESTIMATORS, GAE_ESTIMATORS, GAEConfig, GRPOConfig

    for name in ADV_ESTIMATORS:
        estimator = make_estimator(load_config(None, [f"training.adv_estimator={name}"]), 0)
        if name in GAE_ESTIMATORS:
            assert estimator.gae == GAEConfig(estimator=name)  # gamma 1.0, not GRPO's 0.8
        else:
            assert estimator.grpo == GRPOConfig()


def test_the_keys_only_some_estimators_read_come_from_the_settings_declarations():
    from userrl.config import ESTIMATOR_KEYS

    assert ESTIMATOR_KEYS["turn_credit"] == ("grpo_multiturn",)
    assert ESTIMATOR_KEYS["gamma_H"] == ("gae_bilevel", "gae_bilevel_weighted")
    assert ESTIMATOR_KEYS["turn_level_weight"] == ("gae_bilevel_weighted",)
    assert ESTIMATOR_KEYS["mt_gae_returns"] == ("gae_multiturn",)
    assert "gamma" not in ESTIMATOR_KEYS  # every estimator reads it


def test_gamma_defaults_per_estimator_and_gae_settings_reach_the_estimator():
    assert load_config(None, []).training.gamma == 0.8  # UserRL's GRPO discount
    config = load_config(None, ["training.adv_estimator=gae_bilevel_weighted", "training.lam=0.9",
                                "training.gamma_H=0.5", "training.turn_level_weight=0.3"])
    assert config.training.uses_critic and config.training.gamma == 1.0  # RAGEN's
    gae = make_estimator(config, 0).gae
    assert (gae.estimator, gae.gamma, gae.lam, gae.gamma_H, gae.lam_H, gae.turn_level_weight) == (
        "gae_bilevel_weighted", 1.0, 0.9, 0.5, 0.95, 0.3)


def test_presets_fill_only_what_the_config_leaves_out():
    ragen = load_config(None, ["training.preset=ragen", "training.clip_ratio_high=0.3"]).training
    assert (ragen.adv_estimator, ragen.clip_ratio_low, ragen.clip_ratio_high, ragen.entropy_coeff, ragen.gamma,
            ragen.lam) == ("gae", 0.2, 0.3, 0.001, 1.0, 1.0)
    multi = load_config(None, ["training.preset=ragen_multiturn"]).training
    assert (multi.adv_estimator, multi.gamma_H, multi.lam_H, multi.turn_level_weight, multi.use_kl_loss,
            multi.kl_loss_coef) == ("gae_bilevel_weighted", 1.0, 1.0, 0.1, True, 0.001)  # docs/spec/ALGORITHMS.md §4.9: all four at 1
    # The preset's bi-level keys are not forced onto an estimator that does not read them.
    other = load_config(None, ["training.preset=ragen_multiturn", "training.adv_estimator=gae"]).training
    assert other.adv_estimator == "gae"
    # A config read back from its own dump is the same config (what Ray Train's workers do).
    config = load_config(None, ["training.preset=ragen", "critic.mask_obs=false"])
    assert parse_config(config.model_dump(mode="json")) == config


@pytest.mark.parametrize(("overrides", "named"), [
    (["training.adv_estimator=ppo"], r"training\.adv_estimator"),
    (["training.lam=0.9"], r"training\.lam=0\.9: not used by training\.adv_estimator=grpo_multiturn"),
    (["training.adv_estimator=gae", "training.turn_credit=r2g"], r"training\.turn_credit='r2g'.*adv_estimator=gae"),
    (["training.adv_estimator=gae", "training.gamma_H=0.5"], r"gamma_H: gae_bilevel, gae_bilevel_weighted"),
    (["training.adv_estimator=gae_bilevel", "training.mt_gae_returns=cumulative"], r"mt_gae_returns: gae_multiturn"),
    (["critic.mask_obs=false"], r"critic\.mask_obs: training\.adv_estimator=grpo_multiturn has no critic"),
    (["critic.lr=1e-4"], r"critic\.lr"),
    (["training.adv_estimator=gae", "critic.mask_obs=false", "env.max_turns=1"], r"critic\.mask_obs=false.*max_turns=1"),
    (["training.rollout_filter_ratio=0"], r"training\.rollout_filter_ratio"),
    (["training.format_penalty=0.5"], r"training\.format_penalty"),
])
def test_bad_estimator_settings_name_the_key(overrides, named):
    with pytest.raises(ConfigError, match=named):
        load_config(None, overrides)


def test_outcome_reward_placement_may_choose_the_trajectory_score():
    training = load_config(None, ["training.adv_estimator=gae", "training.reward_placement=outcome",
                                  "training.trajectory_score=sum"]).training
    assert training.trajectory_score == "sum"


def test_a_critic_of_another_architecture_is_refused(tiny_model, tmp_path):
    assert check_critic_model(tiny_model, tiny_model) == tiny_model
    config = json.loads((Path(tiny_model) / "config.json").read_text())
    config["vocab_size"] = 77
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(ConfigError, match=r"critic\.model=.*vocabulary of 77.*policy's architecture"):
        check_critic_model(str(tmp_path), tiny_model)


def test_format_penalty_lands_on_the_turn_without_an_action():
    trajectory = Trajectory(uid="u", group_id="g", env_name="function", item_key="k", stop_reason="no_tool_call",
                            turns=[TurnRecord(reward=0.5, executed=True, n_sampled=3), TurnRecord(n_sampled=4)])
    assert estimator_turn_rewards(trajectory, -0.1) == [0.5, -0.1]
    assert trajectory.turn_rewards == [0.5, 0.0]  # the record stays as played
    assert estimator_turn_rewards(trajectory, 0.0) == [0.5, 0.0]
    trajectory.stop_reason = "env_done"
    assert estimator_turn_rewards(trajectory, -0.1) == [0.5, 0.0]
