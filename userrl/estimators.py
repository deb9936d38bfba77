"""Advantage estimators: a batch's turn rewards -> per-token advantages (and, with a critic, its targets).

One class per family of `training.adv_estimator`; `make_estimator` picks it once, so the train loop (which
computes the advantages, as verl's trainer does) never branches on the estimator; the learner is asked only for
the critic's values. The math lives in `userrl.algorithms`; this is the glue from trajectories to it.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass

import torch

from userrl.algorithms import (
    GAEConfig,
    GRPOConfig,
    explained_variance,
    gae_advantages,
    grpo_multiturn_advantages,
    place_token_rewards,
    settings_from,
    trajectory_score,
    value_loss_mask,
)
from userrl.batch import TensorBatch, collate
from userrl.config import UserRLConfig
from userrl.trajectory import Trajectory

# The critic's values per trajectory, aligned with input_ids (collective: every rank calls it).
ValueFunction = Callable[[list[Trajectory]], list[torch.Tensor]]


def estimator_turn_rewards(trajectory: Trajectory, format_penalty: float = 0.0) -> list[float]:
    """The turn rewards the estimator sees: with a format penalty, the turn that ended the episode without a
    well-formed action (stop reason no_tool_call) gets it added; the trajectory's own record stays as played."""
    rewards = trajectory.turn_rewards
    if format_penalty and trajectory.stop_reason == "no_tool_call" and trajectory.turns[-1:] and (
            trajectory.turns[-1].n_sampled > 0):  # on a sampled token (docs/spec/ALGORITHMS.md §1.6)
        rewards[-1] += format_penalty
    return rewards


@dataclass
class ValueTargets:
    """What the critic's update needs from the advantage pass: values before the update, returns (per trajectory,
    aligned with input_ids), and the pass's critic statistics for logging."""

    old_values: list[torch.Tensor]
    returns: list[torch.Tensor]
    stats: dict[str, float]


Estimate = tuple[list[torch.Tensor], dict[str, float], ValueTargets | None]


class AdvantageEstimator(ABC):
    """Turns a batch's rewards into advantages per trajectory (aligned with input_ids), group statistics and,
    for an estimator with a critic, the critic's targets. Built once by `make_estimator`, it holds the settings
    it reads and never goes back to the run config."""

    def __init__(self, pad_token_id: int, grpo: GRPOConfig, format_penalty: float = 0.0):
        self.pad_token_id = pad_token_id
        self.grpo = grpo
        self.format_penalty = format_penalty

    def estimate(self, trajectories: list[Trajectory], values: ValueFunction) -> Estimate:
        """Advantages, statistics and value targets (None without a critic); `values` is called only by an
        estimator with a critic."""
        rewards = [estimator_turn_rewards(t, self.format_penalty) for t in trajectories]
        return self.from_rewards(trajectories, collate(trajectories, self.pad_token_id), rewards, values)

    @abstractmethod
    def from_rewards(self, trajectories: list[Trajectory], batch: TensorBatch, rewards: list[list[float]],
                     values: ValueFunction) -> Estimate:
        """The estimate from the batch's collated tensors and its turn rewards (as the estimator sees them)."""


class GRPOMultiTurnEstimator(AdvantageEstimator):
    """GRPO-multiturn: group-normalized trajectory scores, turn-level credit (docs/spec/ALGORITHMS.md §2)."""

    def from_rewards(self, trajectories: list[Trajectory], batch: TensorBatch, rewards: list[list[float]],
                     values: ValueFunction) -> Estimate:
        """Group-normalized advantages; no critic targets."""
        advantages, stats = grpo_multiturn_advantages(
            rewards, [t.group_id for t in trajectories], batch.loss_mask, batch.turn_ids, self.grpo)
        return [advantages[i, : len(t.input_ids)] for i, t in enumerate(trajectories)], stats, None


class GAEEstimator(AdvantageEstimator):
    """RAGEN's GAE estimators (docs/spec/ALGORITHMS.md §4): token rewards against the critic's values."""

    def __init__(self, pad_token_id: int, grpo: GRPOConfig, format_penalty: float, gae: GAEConfig,
                 reward_placement: str, whiten_advantages: bool, mask_obs: bool):
        super().__init__(pad_token_id, grpo, format_penalty)
        self.gae = gae
        self.reward_placement = reward_placement
        self.whiten_advantages = whiten_advantages
        self.mask_obs = mask_obs

    def from_rewards(self, trajectories: list[Trajectory], batch: TensorBatch, rewards: list[list[float]],
                     values: ValueFunction) -> Estimate:
        """GAE advantages and returns; the critic's statistics for logging."""
        old_values = values(trajectories)
        scores = [trajectory_score(r, self.grpo.trajectory_score, self.gae.gamma, self.grpo.mean_score_round)
                  for r in rewards]
        token_rewards = place_token_rewards(batch.loss_mask, batch.turn_ids, rewards, self.reward_placement, scores)
        lengths = [len(t.input_ids) for t in trajectories]
        masks = [batch.loss_mask[i, :n] for i, n in enumerate(lengths)]
        advantages, returns = gae_advantages([token_rewards[i, :n] for i, n in enumerate(lengths)], old_values,
                                             masks, self.gae, self.whiten_advantages)
        critic_mask = [value_loss_mask(m, self.mask_obs) for m in masks]
        flat = {name: torch.cat(rows) for name, rows in
                (("values", old_values), ("returns", returns), ("mask", critic_mask))}
        counted = max(float(flat["mask"].sum()), 1.0)
        stats = {"explained_variance": explained_variance(flat["values"], flat["returns"], flat["mask"]),
                 "value_mean": float((flat["values"] * flat["mask"]).sum()) / counted,
                 "return_mean": float((flat["returns"] * flat["mask"]).sum()) / counted,
                 "score_mean": float(sum(scores) / max(len(scores), 1))}
        return advantages, {"score_mean": stats["score_mean"]}, ValueTargets(old_values, returns, stats)


def make_estimator(config: UserRLConfig, pad_token_id: int) -> AdvantageEstimator:
    """The estimator of `training.adv_estimator`, handed its settings (the `training` keys its settings classes
    declare) once: the GAE family trains a critic, grpo_multiturn does not."""
    tc = config.training
    grpo = settings_from(GRPOConfig, tc)
    if not tc.uses_critic:
        return GRPOMultiTurnEstimator(pad_token_id, grpo, tc.format_penalty)
    return GAEEstimator(pad_token_id, grpo, tc.format_penalty, settings_from(GAEConfig, tc, estimator=tc.adv_estimator),
                        tc.reward_placement, tc.whiten_advantages, config.critic.mask_obs)
