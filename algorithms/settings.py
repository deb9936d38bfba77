"""The advantage estimators' settings, declared once: the math reads these dataclasses, and the run config's
`training` keys, defaults, bounds and descriptions are built from the same fields (userrl/config.py).

Imports neither torch nor numpy, so the config (and the CLI) reads it without loading torch.
"""

from __future__ import annotations

from dataclasses import Field, dataclass, field, fields
from typing import Any, ClassVar

ADV_ESTIMATORS = ("grpo_multiturn", "gae", "gae_multiturn", "gae_bilevel", "gae_bilevel_weighted")
GAE_ESTIMATORS = ADV_ESTIMATORS[1:]
BILEVEL_ESTIMATORS = ("gae_bilevel", "gae_bilevel_weighted")
TRAJECTORY_SCORES = ("mean", "sum", "r2g")
TURN_CREDITS = ("equalized", "r2g", "em")
MT_GAE_RETURNS = ("adv_plus_value", "cumulative")


def setting(default: Any, doc: str, *, choices: tuple[str, ...] = (), ge: float | None = None,
            le: float | None = None, only: tuple[str, ...] | None = None) -> Any:
    """A settings field: its default, allowed names or bounds, and description (the config's key reads them).

    `only`: the estimators that read it, when fewer than its settings class serves.
    """
    return field(default=default, metadata={"doc": doc, "choices": choices, "ge": ge, "le": le, "only": only})


def setting_fields(settings: type) -> list[Field]:
    """The fields of a settings class declared with `setting` (the config keys; others are set by the caller)."""
    return [f for f in fields(settings) if "doc" in f.metadata]


def settings_from(settings: type, source: Any, **extra: Any) -> Any:
    """`settings` with each of its `setting` fields read off `source`'s attribute of the same name (the run
    config's `training`); `extra` sets the fields that are no config keys."""
    return settings(**{f.name: getattr(source, f.name) for f in setting_fields(settings)}, **extra)


def check_settings(settings: Any) -> None:
    """ValueError naming the field when a settings value is not one of its names or lies outside its bounds."""
    for f in setting_fields(type(settings)):
        value, meta = getattr(settings, f.name), f.metadata
        if meta["choices"] and value not in meta["choices"]:
            raise ValueError(f"unknown {f.name} {value!r}; valid: {', '.join(meta['choices'])}")
        if value is not None and ((meta["ge"] is not None and value < meta["ge"])
                                  or (meta["le"] is not None and value > meta["le"])):
            raise ValueError(f"{f.name} must lie in [{meta['ge']}, {meta['le']}], got {value}")


def check_name(kind: str, name: str, valid: tuple[str, ...]) -> str:
    """`name` if it is one of `valid`, else ValueError listing them (the math takes canonical names only)."""
    if name not in valid:
        raise ValueError(f"unknown {kind} {name!r}; valid: {', '.join(valid)}")
    return name


@dataclass(frozen=True)
class GRPOConfig:
    """Settings of the multi-turn GRPO estimator (docs/spec/ALGORITHMS.md §2.8).

    Names are canonical (the config maps aliases).
    """

    estimators: ClassVar[tuple[str, ...]] = ("grpo_multiturn",)

    trajectory_score: str = setting(
        "mean", "Turn rewards -> trajectory score: mean (UserRL's 'Sum', rounded), sum, or r2g (discounted by "
        "gamma).", choices=TRAJECTORY_SCORES)
    turn_credit: str = setting(
        "equalized", "How a trajectory's normalized score is spread over its turns: equalized, r2g "
        "(reward-to-go) or em (exponential map of the turn reward).", choices=TURN_CREDITS)
    gamma: float = setting(0.8, "Discount of GRPO's r2g score and credits.", ge=0, le=1)
    norm_adv_by_std: bool = setting(True, "Divide group-centered scores by the group's std (+ eps); false = "
                                    "centering only.")
    eps: float = setting(1e-6, "Added to the group std before dividing.")
    mean_score_round: int | None = setting(
        4, "Decimals of the mean score (UserRL's 4, so tied groups match the original); null = exact.")

    def __post_init__(self) -> None:
        check_settings(self)


@dataclass(frozen=True)
class GAEConfig:
    """Settings of the GAE estimators (docs/spec/ALGORITHMS.md Appendix B).

    Every discount, lambda and weight lies in [0, 1].
    """

    estimators: ClassVar[tuple[str, ...]] = GAE_ESTIMATORS

    estimator: str = "gae"  # the config's training.adv_estimator
    gamma: float = setting(1.0, "Token-level discount of the GAE estimators.", ge=0, le=1)
    lam: float = setting(1.0, "GAE lambda (token level; GAE estimators only).", ge=0, le=1)
    gamma_H: float = setting(0.95, "Turn-level discount (gae_bilevel*, docs/spec/ALGORITHMS.md §4.4).",
                             ge=0, le=1, only=BILEVEL_ESTIMATORS)
    lam_H: float = setting(0.95, "Turn-level GAE lambda (gae_bilevel*, docs/spec/ALGORITHMS.md §4.4).",
                           ge=0, le=1, only=BILEVEL_ESTIMATORS)
    turn_level_weight: float = setting(
        0.1, "w of the cross-level blend (gae_bilevel_weighted, docs/spec/ALGORITHMS.md §4.5).",
        ge=0, le=1, only=("gae_bilevel_weighted",))
    mt_gae_returns: str = setting(
        "adv_plus_value", "Critic targets of gae_multiturn: A + V, or the discounted reward sum over agent tokens "
        "(docs/spec/ALGORITHMS.md §4.3).", choices=MT_GAE_RETURNS, only=("gae_multiturn",))

    def __post_init__(self) -> None:
        check_name("GAE estimator", self.estimator, GAE_ESTIMATORS)
        check_settings(self)


#: The settings classes of the estimators, each serving its `estimators`.
ESTIMATOR_SETTINGS: tuple[type, ...] = (GRPOConfig, GAEConfig)


def settings_of(estimator: str) -> type:
    """The settings class of an advantage estimator."""
    for settings in ESTIMATOR_SETTINGS:
        if estimator in settings.estimators:
            return settings
    raise ValueError(f"unknown advantage estimator {estimator!r}; valid: {', '.join(ADV_ESTIMATORS)}")
