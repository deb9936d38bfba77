"""Pure-math pieces of the learner: GRPO multi-turn advantages, token rewards and actor losses.

Only torch and numpy are imported here, so everything can be unit-tested on a CPU without Ray.
"""

from .grpo import (
    TRAJECTORY_SCORES,
    TURN_CREDITS,
    GRPOConfig,
    broadcast_advantages,
    canonical_credit_method,
    canonical_score_method,
    group_moments,
    group_normalize,
    group_statistics,
    grpo_multiturn_advantages,
    token_credits,
    trajectory_score,
    turn_credits,
)
from .loss import (
    AGG_MODES,
    KL_KINDS,
    aggregate,
    kl_penalty,
    masked_token_mean,
    policy_loss,
    sft_loss,
    token_entropy,
    token_logprobs,
)
from .rewards import REWARD_PLACEMENTS, place_token_rewards

__all__ = [
    "AGG_MODES",
    "KL_KINDS",
    "REWARD_PLACEMENTS",
    "TRAJECTORY_SCORES",
    "TURN_CREDITS",
    "GRPOConfig",
    "aggregate",
    "broadcast_advantages",
    "canonical_credit_method",
    "canonical_score_method",
    "group_moments",
    "group_normalize",
    "group_statistics",
    "grpo_multiturn_advantages",
    "kl_penalty",
    "masked_token_mean",
    "place_token_rewards",
    "policy_loss",
    "sft_loss",
    "token_credits",
    "token_entropy",
    "token_logprobs",
    "trajectory_score",
    "turn_credits",
]
