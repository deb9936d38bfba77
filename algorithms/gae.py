"""RAGEN's token-level advantage estimators with a critic, and the critic's loss.

Spec: docs/spec/ALGORITHMS.md §4.

Per trajectory, on 1-D tensors of one length T (rewards r, critic values V, agent mask m):

* ``vanilla_gae``           env tokens are ordinary steps                              (§4.2)
* ``multiturn_gae``         env tokens skipped: no TD error, no discount (masked form)  (§4.3)
* ``bilevel_gae``           a turn-level GAE bootstraps the last token of every turn    (§4.4)
* ``weighted_bilevel_gae``  bi-level, each agent token blended with its turn's A_H     (§4.5)

``gae_advantages`` runs one of them over a batch of rows and whitens (§4.6). The critic side is
``value_loss_mask`` and ``value_loss`` (§4.7); ``high_variance_groups`` is RAGEN's StarPO-S filter (§4.9).

A turn is a maximal run of mask-1 positions (§4.1); rewards never decide where a turn ends. The
recurrences run backwards over Python floats (float64), one readable loop each; the results come back as
tensors of the values' float dtype on the values' device.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from .settings import MT_GAE_RETURNS, GAEConfig, check_name

# ---------------------------------------------------------------------------------------------------
# Per-trajectory estimators (4.2 - 4.5)
# ---------------------------------------------------------------------------------------------------


def vanilla_gae(
    rewards: torch.Tensor, values: torch.Tensor, mask: torch.Tensor, gamma: float, lam: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """GAE over every position, env tokens included (§4.2); returns (A, R = A + V)."""
    r, v, _ = _row(rewards, values, mask)
    advantages = [0.0] * len(r)
    next_value, next_adv = 0.0, 0.0  # V_T := 0, A_T := 0
    for t in reversed(range(len(r))):
        delta = r[t] + gamma * next_value - v[t]
        next_adv = delta + gamma * lam * next_adv
        advantages[t] = next_adv
        next_value = v[t]
    returns = [a + value for a, value in zip(advantages, v, strict=True)]
    return _like(advantages, values), _like(returns, values)


def multiturn_gae(
    rewards: torch.Tensor,
    values: torch.Tensor,
    mask: torch.Tensor,
    gamma: float,
    lam: float,
    returns: str = "adv_plus_value",
) -> tuple[torch.Tensor, torch.Tensor]:
    """GAE that skips env tokens (4.3, masked form); returns (A, R) with R = A + V or the discounted reward-to-go.

    Env positions have no TD error and pass A on with factor 1, so one discount step separates the last
    token of a turn from the first token of the next. Rewards on env positions are dropped.
    """
    check_name("mt_gae_returns", returns, MT_GAE_RETURNS)
    r, v, m = _row(rewards, values, mask)
    length = len(r)
    g = [gamma if m_t else 1.0 for m_t in m]
    lam_t = [lam if m_t else 1.0 for m_t in m]

    advantages = [0.0] * length
    next_adv, value_skip = 0.0, 0.0  # A_T := 0; m_T := 1 and V_T := 0, so V_skip = 0 at t = T-1
    for t in reversed(range(length)):
        if t + 1 < length and m[t + 1]:
            value_skip = v[t + 1]  # the value of the next agent token
        delta = (r[t] + g[t] * value_skip - v[t]) if m[t] else 0.0
        next_adv = delta + g[t] * lam_t[t] * next_adv
        advantages[t] = next_adv

    if returns == "adv_plus_value":
        targets = [a + value for a, value in zip(advantages, v, strict=True)]
    else:
        targets, reward_to_go = [0.0] * length, 0.0  # G_T := 0
        for t in reversed(range(length)):
            reward_to_go = g[t] * reward_to_go + (r[t] if m[t] else 0.0)
            targets[t] = reward_to_go
    return _like(advantages, values), _like(targets, values)


def bilevel_gae(
    rewards: torch.Tensor,
    values: torch.Tensor,
    mask: torch.Tensor,
    gamma: float,
    lam: float,
    gamma_H: float,
    lam_H: float,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Bi-level GAE (§4.4): turn-level A_H, then token-level GAE on agent tokens; returns (A, R, A_H by turn).

    Turn k's reward R_k is the sum of r over its positions: its agent tokens and the env tokens after them,
    up to the next turn start (the last turn: up to T). Rewards before the first turn (a prompt) belong to
    no turn and are dropped. 1.6 only ever places rewards on agent tokens, where all readings agree.
    A and R are 0 at env positions.
    """
    advantages, targets, adv_turn, _ = _bilevel(*_row(rewards, values, mask), gamma, lam, gamma_H, lam_H)
    return _like(advantages, values), _like(targets, values), _like(adv_turn, values)


def weighted_bilevel_gae(
    rewards: torch.Tensor,
    values: torch.Tensor,
    mask: torch.Tensor,
    gamma: float,
    lam: float,
    gamma_H: float,
    lam_H: float,
    turn_level_weight: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Bi-level GAE with A_p <- (1 - w) A_p + w A_H[turn of p] on agent tokens (§4.5); R is not re-blended."""
    r, v, m = _row(rewards, values, mask)
    advantages, targets, adv_turn, turn = _bilevel(r, v, m, gamma, lam, gamma_H, lam_H)
    w = turn_level_weight
    blended = [
        (1.0 - w) * a + w * adv_turn[k] if m_t else a for a, k, m_t in zip(advantages, turn, m, strict=True)
    ]
    return _like(blended, values), _like(targets, values)


def _bilevel(
    r: list[float], v: list[float], m: list[int], gamma: float, lam: float, gamma_H: float, lam_H: float
) -> tuple[list[float], list[float], list[float], list[int]]:
    """4.4 on lists: (A, R, A_H, turn index of every position)."""
    length = len(r)
    turn = _turn_index(m)
    starts = [t for t in range(length) if m[t] and (t == 0 or not m[t - 1])]
    n_turns = len(starts)
    turn_rewards = [0.0] * n_turns
    for t in range(length):
        if turn[t] >= 0:
            turn_rewards[turn[t]] += r[t]

    # Turn level, values read at each turn's first token.
    adv_turn = [0.0] * n_turns
    next_value, next_adv = 0.0, 0.0  # V_{s_N} := 0, A_H[N] := 0
    for k in reversed(range(n_turns)):
        delta = turn_rewards[k] + gamma_H * next_value - v[starts[k]]
        next_adv = delta + gamma_H * lam_H * next_adv
        adv_turn[k] = next_adv
        next_value = v[starts[k]]

    # Token level, over agent positions backwards, with a running advantage.
    agent = [t for t in range(length) if m[t]]
    advantages, targets = [0.0] * length, [0.0] * length
    run = 0.0
    for i in reversed(range(len(agent))):
        p, k = agent[i], turn[agent[i]]
        if i == len(agent) - 1:  # the final agent token of the trajectory
            run = 0.0
            delta = turn_rewards[k] - v[p]
        elif turn[agent[i + 1]] != k:  # the last token of turn k: bootstrap from turn k + 1
            run = adv_turn[k + 1]
            delta = turn_rewards[k] + gamma * v[agent[i + 1]] - v[p]
        else:  # inside a turn
            delta = gamma * v[agent[i + 1]] - v[p]
        run = delta + gamma * lam * run
        advantages[p] = run
        targets[p] = run + v[p]
    return advantages, targets, adv_turn, turn


# ---------------------------------------------------------------------------------------------------
# Whitening (§4.6) and the batch dispatch
# ---------------------------------------------------------------------------------------------------


def whiten(advantages: torch.Tensor, mask: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
    """(A - mean) / sqrt(unbiased var + eps) over the mask-1 positions (§4.6); mask-0 positions unchanged.

    With a single mask-1 position the variance is undefined: A is only centred (it becomes 0 there).
    With none, A is returned unchanged. Any shape; mask must have A's shape.
    """
    if advantages.shape != mask.shape:
        raise ValueError(
            f"advantages {tuple(advantages.shape)} and mask {tuple(mask.shape)} must have the same shape"
        )
    keep = mask != 0
    n = int(keep.sum())
    if n == 0:
        return advantages.clone()
    selected = advantages[keep].double()
    mean = selected.mean()
    centred = advantages.double() - mean
    if n >= 2:
        var = (selected - mean).square().sum() / (n - 1)
        centred = centred / torch.sqrt(var + eps)
    return torch.where(keep, centred.to(advantages.dtype), advantages)


def gae_advantages(
    rewards: list[torch.Tensor],
    values: list[torch.Tensor],
    masks: list[torch.Tensor],
    config: GAEConfig,
    whiten_advantages: bool = True,
) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Advantages and returns of a batch of unpadded rows with ``config.estimator``, whitened over the batch.

    In every row the trajectory starts at its first mask-1 position: the positions before it (the prompt)
    get A = R = 0, and a row without mask-1 positions is all zeros. The advantages are then whitened over
    all mask-1 positions of the batch (mask-0 positions keep their values); returns are never whitened.
    """
    if not len(rewards) == len(values) == len(masks):
        raise ValueError(
            f"got {len(rewards)} reward rows, {len(values)} value rows and {len(masks)} mask rows"
        )
    all_advantages, all_returns = [], []
    for row_rewards, row_values, row_mask in zip(rewards, values, masks, strict=True):
        _check_row(row_rewards, row_values, row_mask)
        advantages = torch.zeros(len(row_values), dtype=_float_dtype(row_values), device=row_values.device)
        returns = torch.zeros_like(advantages)
        agent = (row_mask != 0).nonzero()
        if agent.numel() > 0:
            first = int(agent[0])
            row_adv, row_ret = _estimate(row_rewards[first:], row_values[first:], row_mask[first:], config)
            advantages[first:] = row_adv
            returns[first:] = row_ret
        all_advantages.append(advantages)
        all_returns.append(returns)

    if whiten_advantages and all_advantages:
        flat = whiten(torch.cat(all_advantages), torch.cat([mask != 0 for mask in masks]))
        all_advantages = list(flat.split([len(a) for a in all_advantages]))
    return all_advantages, all_returns


def _estimate(
    rewards: torch.Tensor, values: torch.Tensor, mask: torch.Tensor, config: GAEConfig
) -> tuple[torch.Tensor, torch.Tensor]:
    c = config
    if c.estimator == "gae":
        return vanilla_gae(rewards, values, mask, c.gamma, c.lam)
    if c.estimator == "gae_multiturn":
        return multiturn_gae(rewards, values, mask, c.gamma, c.lam, c.mt_gae_returns)
    if c.estimator == "gae_bilevel":
        advantages, returns, _ = bilevel_gae(rewards, values, mask, c.gamma, c.lam, c.gamma_H, c.lam_H)
        return advantages, returns
    return weighted_bilevel_gae(
        rewards, values, mask, c.gamma, c.lam, c.gamma_H, c.lam_H, c.turn_level_weight
    )


# ---------------------------------------------------------------------------------------------------
# Critic (§4.7)
# ---------------------------------------------------------------------------------------------------


def value_loss_mask(
    loss_mask: torch.Tensor, mask_obs: bool, valid: torch.Tensor | None = None
) -> torch.Tensor:
    """Positions the critic trains on (§4.7): the agent tokens, or (mask_obs False) all from the first one on.

    Works on [T] and [B, T]. ``valid`` (e.g. the attention mask) removes padding; the result has
    ``loss_mask``'s dtype.
    """
    if valid is not None and valid.shape != loss_mask.shape:
        raise ValueError(f"valid {tuple(valid.shape)} must have loss_mask's shape {tuple(loss_mask.shape)}")
    keep = loss_mask != 0
    if not mask_obs:
        keep = torch.cumsum(keep.long(), dim=-1) > 0
    if valid is not None:
        keep = keep & (valid != 0)
    return keep.to(loss_mask.dtype)


def value_loss(
    values: torch.Tensor,
    old_values: torch.Tensor,
    returns: torch.Tensor,
    mask: torch.Tensor,
    cliprange_value: float,
    denominator: float | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Clipped value loss 0.5 * sum(max((v - R)^2, (v_clip - R)^2) * mask) / denominator (§4.7), and stats.

    ``denominator`` defaults to the number of mask-1 positions (at least 1); pass a mini-batch's count so its
    micro-batches add up to the mini-batch's loss. Stats (detached, over this batch's mask): ``vf_clipfrac``,
    the fraction where the clipped term was strictly larger, and ``value_mean``.
    """
    if not values.shape == old_values.shape == returns.shape == mask.shape:
        raise ValueError(
            f"values {tuple(values.shape)}, old_values {tuple(old_values.shape)}, returns "
            f"{tuple(returns.shape)} and mask {tuple(mask.shape)} must have the same shape"
        )
    if cliprange_value < 0:
        raise ValueError(f"cliprange_value must be >= 0, got {cliprange_value}")
    if denominator is not None and not denominator > 0:
        raise ValueError(f"denominator must be > 0, got {denominator}")

    keep = mask != 0
    # Padding may hold inf/NaN: zero it before any arithmetic, so neither the loss nor its gradient sees
    # it (0 * inf is NaN, and a where() after the arithmetic still sends NaN gradients back).
    values = torch.where(keep, values, torch.zeros_like(values))
    old_values = torch.where(keep, old_values, torch.zeros_like(old_values))
    returns = torch.where(keep, returns, torch.zeros_like(returns))

    clipped = torch.clamp(values, old_values - cliprange_value, old_values + cliprange_value)
    loss_unclipped = (values - returns).square()
    loss_clipped = (clipped - returns).square()
    per_token = torch.maximum(loss_unclipped, loss_clipped) * keep

    count = keep.sum().to(per_token.dtype)
    loss = 0.5 * per_token.sum() / (denominator if denominator is not None else count.clamp(min=1))

    with torch.no_grad():
        n = count.clamp(min=1)
        stats = {
            "vf_clipfrac": (keep & (loss_clipped > loss_unclipped)).sum().to(per_token.dtype) / n,
            "value_mean": values.sum() / n,
        }
    return loss, {name: stat.detach() for name, stat in stats.items()}


def explained_variance(values: torch.Tensor, returns: torch.Tensor, mask: torch.Tensor) -> float:
    """1 - Var[R - V] / Var[R] over the mask-1 positions; 0.0 when there are none or all returns are equal."""
    if not values.shape == returns.shape == mask.shape:
        raise ValueError(
            f"values {tuple(values.shape)}, returns {tuple(returns.shape)} and mask {tuple(mask.shape)} "
            "must have the same shape"
        )
    keep = mask != 0
    r = returns[keep].double()
    # An exact test, not Var[R] == 0: the float mean of equal numbers need not equal them.
    if r.numel() == 0 or float(r.max()) == float(r.min()):
        return 0.0
    residual = r - values[keep].double()
    return float(1.0 - residual.var(correction=0) / r.var(correction=0))


# ---------------------------------------------------------------------------------------------------
# StarPO-S group filter (§4.9)
# ---------------------------------------------------------------------------------------------------


def high_variance_groups(group_ids: Sequence[str], scores: Sequence[float], ratio: float) -> list[int]:
    """Indices (in order) of the trajectories in the ceil(ratio * groups) groups of highest score std (§4.9).

    The std is the population std of the group's scores; ties go to the group that appears first.
    """
    if not 0.0 < ratio <= 1.0:
        raise ValueError(f"rollout filter ratio must lie in (0, 1], got {ratio}")
    if len(group_ids) != len(scores):
        raise ValueError(f"got {len(group_ids)} group ids but {len(scores)} scores")
    members: dict[str, list[int]] = {}  # insertion order = first appearance
    for index, group in enumerate(group_ids):
        members.setdefault(group, []).append(index)
    if not members:
        return []

    def population_std(indices: list[int]) -> float:
        mean = sum(scores[i] for i in indices) / len(indices)
        return math.sqrt(sum((scores[i] - mean) ** 2 for i in indices) / len(indices))

    stds = {group: population_std(indices) for group, indices in members.items()}
    # round() first: 0.3 * 10 is 3.0000000000000004 in floats, and must keep 3 groups, not 4.
    n_keep = max(1, math.ceil(round(ratio * len(members), 9)))
    ranked = sorted(members, key=lambda group: -stds[group])  # stable: ties keep first appearance
    kept = set(ranked[:n_keep])
    return [index for index, group in enumerate(group_ids) if group in kept]


# ---------------------------------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------------------------------


def _row(
    rewards: torch.Tensor, values: torch.Tensor, mask: torch.Tensor
) -> tuple[list[float], list[float], list[int]]:
    """One checked trajectory as Python lists."""
    _check_row(rewards, values, mask)
    return rewards.tolist(), values.tolist(), [int(m_t) for m_t in mask.tolist()]


def _check_row(rewards: torch.Tensor, values: torch.Tensor, mask: torch.Tensor) -> None:
    """One trajectory: 1-D tensors of one length and a 0/1 mask."""
    if rewards.dim() != 1 or values.dim() != 1 or mask.dim() != 1:
        raise ValueError(
            f"rewards {tuple(rewards.shape)}, values {tuple(values.shape)} and mask {tuple(mask.shape)} "
            "must be 1-D (one trajectory)"
        )
    if not len(rewards) == len(values) == len(mask):
        raise ValueError(
            f"rewards, values and mask must have one length, got {len(rewards)}, {len(values)}, {len(mask)}"
        )
    if not bool(((mask == 0) | (mask == 1)).all()):
        raise ValueError("mask must hold only 0 and 1")


def _turn_index(mask: Sequence[float]) -> list[int]:
    """Turn k of every position: a turn's agent tokens and the env tokens after them; -1 before the first turn."""
    turn, k = [], -1
    for t, m_t in enumerate(mask):
        if m_t and (t == 0 or not mask[t - 1]):
            k += 1
        turn.append(k)
    return turn


def _float_dtype(values: torch.Tensor) -> torch.dtype:
    return values.dtype if values.is_floating_point() else torch.float32


def _like(xs: list[float], values: torch.Tensor) -> torch.Tensor:
    return torch.tensor(xs, dtype=_float_dtype(values), device=values.device)
