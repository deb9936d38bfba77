import dataclasses
import re
import typing
from pathlib import Path

import pytest
from pydantic import BaseModel

from userrl.config import (
    CheckpointConfig,
    ConfigError,
    GymSpec,
    TrainingConfig,
    UserRLConfig,
    load_config,
    parse_config,
)
from userrl.trainer import TrainerConfig

EXPERIMENTS = Path(__file__).resolve().parents[2] / "experiments"


def test_defaults_follow_the_userrl_recipe():
    config = parse_config({})
    assert config.training.trajectory_score == "mean"
    assert config.training.turn_credit == "equalized"
    assert config.training.gamma == 0.8
    assert (config.training.clip_ratio_low, config.training.clip_ratio_high, config.training.clip_ratio_c) == (0.2, 0.2, 3.0)
    assert config.env.max_turns == 16


def test_yaml_and_dotted_overrides(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("training:\n  lr: 1.0e-5\n  group_size: 4\n")
    config = load_config(path, ["training.lr=1e-6", "env.protocol=bracket", "training.turn_credit=R2G"])
    assert config.training.lr == pytest.approx(1e-6)
    assert config.training.group_size == 4
    assert config.env.protocol == "bracket"
    assert config.training.turn_credit == "r2g"


def test_unknown_key_names_the_closest_valid_one():
    with pytest.raises(ConfigError, match=r"training\.lrr: unknown key; did you mean 'training\.lr'"):
        load_config(None, ["training.lrr=1e-6"])
    with pytest.raises(ConfigError, match=r"polcy: unknown key; did you mean 'policy'"):
        load_config(None, ["polcy.model=x"])


def test_ill_typed_value_names_the_key():
    with pytest.raises(ConfigError, match=r"training\.group_size"):
        load_config(None, ["training.group_size=many"])
    with pytest.raises(ConfigError, match=r"env\.protocol"):
        load_config(None, ["env.protocol=morse"])


def test_unknown_credit_method_lists_valid_ones():
    with pytest.raises(ConfigError, match="equalized"):
        load_config(None, ["training.turn_credit=magic"])


def test_sum_alias_warns_and_means_mean():
    with pytest.warns(DeprecationWarning):
        config = load_config(None, ["training.trajectory_score=Sum"])
    assert config.training.trajectory_score == "mean"


def test_missing_file_is_a_clear_error(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "nope.yaml")


def test_shipped_configs_validate():
    for path in [*EXPERIMENTS.glob("*.yaml"), *EXPERIMENTS.glob("learn/*.yaml")]:
        load_config(path)


def test_a_config_starts_from_its_base(tmp_path):
    (tmp_path / "common.yaml").write_text("training: {lr: 2.0e-5, batch_size: 8}\n"
                                          "env: {gyms: [{name: function}, {name: telepathy}], max_turns: 4}\n")
    (tmp_path / "one.yaml").write_text("base: common.yaml\ntraining: {lr: 1.0e-6}\nenv: {gyms: [{name: telepathy}]}\n")
    config = load_config(tmp_path / "one.yaml", ["training.batch_size=2"])
    # the file's keys in place of the base's (a list whole), the base's other keys kept, overrides last
    assert (config.training.lr, config.training.batch_size, config.env.max_turns) == (1e-6, 2, 4)
    assert [g.name for g in config.env.gyms] == ["telepathy"]
    (tmp_path / "loop.yaml").write_text("base: loop2.yaml\n")
    (tmp_path / "loop2.yaml").write_text("base: loop.yaml\n")
    with pytest.raises(ConfigError, match=r"loop2.yaml: base 'loop.yaml' is a file this config already starts from"):
        load_config(tmp_path / "loop.yaml")
    (tmp_path / "missing.yaml").write_text("base: nope.yaml\n")
    with pytest.raises(ConfigError, match=r"base of .*missing.yaml .*nope.yaml does not exist"):
        load_config(tmp_path / "missing.yaml")
    (tmp_path / "shape.yaml").write_text("base: common.yaml\ntraining: {lr: {x: 1}}\n")  # lr is no section
    with pytest.raises(ConfigError, match=r"training.lr.x, over its base: 'lr' is not a section"):
        load_config(tmp_path / "shape.yaml")


def test_the_mua_config_follows_mua_rls_training_settings():
    """docs/spec/ALGORITHMS.md §5.1: GRPO on the binary score broadcast to every token (sum + equalized), clip
    0.2/0.2, dual clip 3.0, token-mean, KL low_var_kl 0.001, no entropy, no critic, lr 1e-6, 30 turns."""
    config = load_config(EXPERIMENTS / "mua.yaml")
    t = config.training
    assert (t.trajectory_score, t.turn_credit, t.adv_estimator) == ("sum", "equalized", "grpo_multiturn")
    assert (t.clip_ratio_low, t.clip_ratio_high, t.clip_ratio_c, t.loss_agg_mode) == (0.2, 0.2, 3.0, "token-mean")
    assert (t.use_kl_loss, t.kl_loss_type, t.kl_loss_coef, t.entropy_coeff, t.lr) == (
        True, "low_var_kl", 0.001, 0.0, 1e-6)
    assert (config.env.max_turns, config.env.protocol, config.policy.temperature) == (30, "native_tools", 1.0)


def test_builder_matches_yaml():
    built = (TrainerConfig().environment(protocol="bracket", max_turns=5)
             .training(lr=2e-6, group_size=4).policy(model="tiny-random").to_config())
    assert built.env.protocol == "bracket" and built.env.max_turns == 5
    assert built.training.group_size == 4 and built.policy.model == "tiny-random"
    with pytest.raises(ConfigError, match="did you mean"):
        TrainerConfig().training(group_sise=4).to_config()


def test_flat_params_are_dotted():
    flat = parse_config({}).flat()
    assert flat["training.lr"] == 1e-6
    assert flat["env.gyms"][0]["name"] == "function"


def test_relative_paths_become_absolute_for_the_workers(tmp_path, monkeypatch):
    """Ray Train runs learners in folders of their own: relative folders are resolved on the driver."""
    monkeypatch.chdir(tmp_path)
    config = parse_config({"experiment": {"output_dir": "runs"}, "checkpointing": {"resume_from": "ck/iter_000002"},
                           "sft": {"path": "~/demos.jsonl"}})
    absolute = config.with_absolute_paths()
    assert absolute.experiment.output_dir == str(tmp_path / "runs")
    assert absolute.checkpointing.resume_from == str(tmp_path / "ck" / "iter_000002")
    assert absolute.sft.path == str(Path.home() / "demos.jsonl")
    assert absolute.env.data_root is None
    assert config.experiment.output_dir == "runs"  # the original is left as it was


def test_learners_sharing_a_gpu_reserve_their_fraction():
    """Ray Train would reserve a whole GPU per learner; colocating with a vLLM replica needs a fraction."""
    from userrl.trainer import learner_resources

    assert learner_resources(TrainerConfig().to_config()) == {"CPU": 1.0}
    shared = load_config(EXPERIMENTS / "gpu.yaml")
    assert learner_resources(shared) == {"CPU": 1.0, "GPU": 0.5}
    assert shared.learners.num_gpus_per_learner + shared.policy.num_gpus_per_replica == 1.0


def _config_models(model: type[BaseModel], seen: list[type[BaseModel]]) -> list[type[BaseModel]]:
    """`model` and every pydantic model its fields hold, however nested (lists, unions, optionals)."""
    if model not in seen:
        seen.append(model)
        for field in model.model_fields.values():
            stack = [field.annotation]
            while stack:
                annotation = stack.pop()
                if isinstance(annotation, type) and issubclass(annotation, BaseModel):
                    _config_models(annotation, seen)
                stack.extend(typing.get_args(annotation))
    return seen


def test_every_config_field_has_a_description():
    models = _config_models(UserRLConfig, [])
    assert GymSpec in models and CheckpointConfig in models and len(models) >= 12  # the walk reaches nested ones
    missing = [f"{model.__name__}.{name}" for model in models for name, field in model.model_fields.items()
               if not (field.description or "").strip()]
    assert missing == []


def test_training_settings_are_the_grpo_estimator_settings():
    """GRPOConfig's fields are read from `training` by name: a new estimator field needs a config key."""
    from userrl.algorithms import GRPOConfig
    from userrl.estimators import make_estimator

    assert {f.name for f in dataclasses.fields(GRPOConfig)} <= set(TrainingConfig.model_fields)
    assert make_estimator(parse_config({}), 0).grpo == GRPOConfig()  # the same defaults on both sides
    built = make_estimator(load_config(None, ["training.turn_credit=R2G", "training.gamma=0.5",
                                              "training.mean_score_round=null", "training.norm_adv_by_std=false"]),
                           0).grpo
    assert (built.turn_credit, built.gamma, built.mean_score_round, built.norm_adv_by_std) == ("r2g", 0.5, None, False)


def test_checkpoint_keep_accepts_null_and_refuses_zero():
    assert parse_config({"checkpointing": {"keep": None}}).checkpointing.keep is None
    with pytest.raises(ConfigError, match=r"checkpointing\.keep"):
        parse_config({"checkpointing": {"keep": 0}})


@pytest.mark.parametrize(("override", "named"), [
    ("policy.vllm.gpu_memory_utilization=2", "policy.vllm.gpu_memory_utilization"),
    ("policy.vllm.sleep_mode=maybe", "policy.vllm.sleep_mode"),
    ("env.llm.attempts=0", "attempts must be an integer >= 1"),
    ("env.llm={bogus: 1}", "unknown LLM config keys ['bogus']"),
])
def test_typed_vllm_and_llm_settings_fail_when_loaded(override, named):
    """policy.vllm's own keys and env.llm (the role client's settings) are checked when the config loads."""
    with pytest.raises(ConfigError, match=re.escape(named)):
        load_config(None, [override])


def test_vllm_engine_arguments_pass_through_and_llm_settings_stay_as_written():
    config = load_config(None, ["policy.vllm={max_num_batched_tokens: 4096, sessions: false}",
                                "env.llm={model: m, attempts: 2}"])
    assert config.policy.vllm == {"sessions": False, "max_num_batched_tokens": 4096}
    assert config.env.llm == {"model": "m", "attempts": 2}


def test_unknown_gym_keywords_fail_when_loaded_and_name_what_the_gym_takes():
    with pytest.raises(ConfigError, match=r"unknown keyword\(s\) \['no_such_argument'\] for gym 'turtle'.*oracle_history_turns"):
        load_config(None, ["env.gyms=[{name: turtle, kwargs: {no_such_argument: 1}}]"])
    config = load_config(None, ["env.gyms=[{name: turtle, kwargs: {oracle_history_turns: 2}}]"])
    assert config.env.gyms[0].kwargs == {"oracle_history_turns": 2}


def test_episode_budgets_are_the_config_keys_of_the_same_names():
    from userrl.rollout import RolloutLimits

    assert RolloutLimits.from_config(parse_config({})) == RolloutLimits()  # the same defaults on both sides
    config = load_config(None, ["env.max_turns=3", "policy.max_new_tokens=7", "policy.max_model_len=99",
                                "policy.max_response_len=50", "policy.temperature=0.5", "policy.top_p=0.9",
                                "env.show_reward_in_feedback=true", "env.role_failure=fallback"])
    assert RolloutLimits.from_config(config) == RolloutLimits(3, 7, 99, 50, 0.5, 0.9, True, "fallback")
    assert RolloutLimits.from_config(config, temperature=0.0).temperature == 0.0


def test_vllm_settings_have_one_home_for_their_defaults():
    """`policy.vllm` keeps what the config sets; VLLMSettings fills the rest, for the config and the engine."""
    config = load_config(None, ["policy.vllm.sessions=false", "policy.vllm.block_size=16"])
    assert config.policy.vllm == {"sessions": False, "block_size": 16}
    settings = config.policy.vllm_settings()
    assert (settings.sessions, settings.weight_sync, settings.sleep_mode, settings.gpu_memory_utilization) == (
        False, "group", False, 0.5)
    assert settings.model_dump()["block_size"] == 16  # a vLLM engine argument passes through to the engine
