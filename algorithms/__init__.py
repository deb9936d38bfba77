"""Pure-math pieces of the learner: GRPO and GAE advantages, token rewards, actor and critic losses.

Only torch and numpy are imported here, so everything can be unit-tested on a CPU without Ray. Names are
loaded from their module on first use: the run config reads `settings` (no torch) without loading the rest.
"""

from __future__ import annotations

import importlib
from typing import Any

#: Each public name and the module that defines it.
_HOMES: dict[str, str] = {
    **dict.fromkeys(("ADV_ESTIMATORS", "BILEVEL_ESTIMATORS", "ESTIMATOR_SETTINGS", "GAE_ESTIMATORS",
                     "MT_GAE_RETURNS", "TRAJECTORY_SCORES", "TURN_CREDITS", "GAEConfig", "GRPOConfig",
                     "settings_from", "settings_of"), "settings"),
    **dict.fromkeys(("bilevel_gae", "explained_variance", "gae_advantages", "high_variance_groups",
                     "multiturn_gae", "value_loss", "value_loss_mask", "vanilla_gae", "weighted_bilevel_gae",
                     "whiten"), "gae"),
    **dict.fromkeys(("broadcast_advantages", "group_moments", "group_normalize", "group_statistics",
                     "groups_with_signal", "grpo_multiturn_advantages", "token_credits", "trajectory_score",
                     "turn_credits"), "grpo"),
    **dict.fromkeys(("AGG_MODES", "KL_KINDS", "aggregate", "kl_penalty", "linear_token_logprobs",
                     "masked_token_mean", "policy_loss", "sft_loss", "token_entropy", "token_logprobs"), "loss"),
    **dict.fromkeys(("REWARD_PLACEMENTS", "place_token_rewards"), "rewards"),
}

__all__ = sorted(_HOMES)


def __getattr__(name: str) -> Any:
    """Load a public name from its module on first use (PEP 562)."""
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{_HOMES[name]}", __name__), name)
    globals()[name] = value  # later look-ups skip this function
    return value


def __dir__() -> list[str]:
    """The public names, for completion."""
    return __all__
