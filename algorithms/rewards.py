"""Token reward vectors for token-level estimators (docs/spec/ALGORITHMS.md §1.6).

Rewards only ever sit on sampled tokens: a critic trained on agent tokens cannot see a reward placed on
a tool, user or padding token.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

REWARD_PLACEMENTS = ("turn", "outcome")


def place_token_rewards(
    loss_mask: torch.Tensor,
    turn_ids: torch.Tensor,
    turn_rewards: Sequence[Sequence[float]],
    placement: str = "turn",
    scores: Sequence[float] | None = None,
) -> torch.Tensor:
    """Float32 [B, T] rewards: turn k's reward on its last sampled token (turn), or the score on the last one (outcome)."""
    if placement not in REWARD_PLACEMENTS:
        raise ValueError(f"unknown reward placement {placement!r}; valid: {', '.join(REWARD_PLACEMENTS)}")
    if loss_mask.shape != turn_ids.shape or loss_mask.dim() != 2:
        raise ValueError(
            f"loss_mask {tuple(loss_mask.shape)} and turn_ids {tuple(turn_ids.shape)} must be equal [B, T]"
        )
    if len(turn_rewards) != loss_mask.shape[0]:
        raise ValueError(f"batch has {loss_mask.shape[0]} rows but got {len(turn_rewards)} reward lists")

    if placement == "outcome":
        if scores is None or len(scores) != loss_mask.shape[0]:
            raise ValueError("outcome placement needs one trajectory score per row "
                             "(docs/spec/ALGORITHMS.md §2.2)")
        # The last sampled token of the last turn is simply the last sampled token of the row.
        return _place(loss_mask, torch.zeros_like(turn_ids), [[s] for s in scores])
    return _place(loss_mask, turn_ids, turn_rewards)


def _place(loss_mask: torch.Tensor, keys: torch.Tensor, values: Sequence[Sequence[float]]) -> torch.Tensor:
    """Put values[b][k] on the last sampled position of row b whose key is k."""
    batch, length = loss_mask.shape
    width = max(max((len(v) for v in values), default=0), 1)
    sampled = (loss_mask != 0) & (keys >= 0) & (keys < width)
    positions = torch.arange(length, device=loss_mask.device).expand(batch, length)
    slot = keys.long().clamp(0, width - 1)

    last = torch.full((batch, width), -1, dtype=torch.long, device=loss_mask.device)
    last.scatter_reduce_(1, slot, torch.where(sampled, positions, -1), reduce="amax")

    table = torch.zeros(batch, width, dtype=torch.float32, device=loss_mask.device)
    for row, row_values in enumerate(values):
        table[row, : len(row_values)] = torch.tensor(row_values, dtype=torch.float32)
    unplaceable = (table != 0) & (last < 0)
    if unplaceable.any():
        row, k = (int(i) for i in unplaceable.nonzero()[0])
        raise ValueError(
            f"row {row}: reward {float(table[row, k])} of turn {k} has no sampled token to sit on"
        )

    rows, ks = (table != 0).nonzero(as_tuple=True)
    rewards = torch.zeros(batch, length, dtype=torch.float32, device=loss_mask.device)
    rewards[rows, last[rows, ks]] = table[rows, ks]
    return rewards
