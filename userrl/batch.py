"""From trajectories to padded tensors, and the plan of micro-batches across learner ranks."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from userrl.trajectory import PAD_ROLE, Trajectory


@dataclass
class TensorBatch:
    """Right-padded [B, L] tensors of a list of trajectories."""

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    loss_mask: torch.Tensor
    turn_ids: torch.Tensor
    role_ids: torch.Tensor
    sampler_logprobs: torch.Tensor


def collate(trajectories: list[Trajectory], pad_token_id: int, length: int | None = None) -> TensorBatch:
    """Pad trajectories on the right into tensors (padding: role -1, mask 0, attention 0)."""
    width = max([len(t.input_ids) for t in trajectories] + [length or 1])
    size = (len(trajectories), width)
    batch = TensorBatch(
        input_ids=torch.full(size, pad_token_id, dtype=torch.long),
        attention_mask=torch.zeros(size, dtype=torch.long),
        loss_mask=torch.zeros(size, dtype=torch.float32),
        turn_ids=torch.full(size, -1, dtype=torch.long),
        role_ids=torch.full(size, PAD_ROLE, dtype=torch.long),
        sampler_logprobs=torch.zeros(size, dtype=torch.float32),
    )
    for row, traj in enumerate(trajectories):
        n = len(traj.input_ids)
        batch.input_ids[row, :n] = torch.tensor(traj.input_ids)
        batch.attention_mask[row, :n] = 1
        batch.loss_mask[row, :n] = torch.tensor(traj.loss_mask, dtype=torch.float32)
        batch.turn_ids[row, :n] = torch.tensor(traj.turn_ids)
        batch.role_ids[row, :n] = torch.tensor(traj.role_ids)
        batch.sampler_logprobs[row, :n] = torch.tensor(traj.sampler_logprobs)
    return batch


def split_for_ranks(indices: list[int], lengths: list[int], world_size: int) -> list[list[int]]:
    """Shares of a mini-batch, one per rank, each longest first, with near-equal token counts: sequences
    from the longest down, each to the rank holding the fewest tokens so far. FSDP's collectives make every
    rank wait for the slowest, and a micro-batch is padded to its longest sequence, so both balance and
    similar lengths together save time."""
    shares: list[list[int]] = [[] for _ in range(world_size)]
    tokens = [0] * world_size
    for index in sorted(indices, key=lambda i: -lengths[i]):  # stable: equal lengths keep their order
        rank = min(range(world_size), key=lambda r: (tokens[r], len(shares[r])))
        shares[rank].append(index)
        tokens[rank] += lengths[index]
    return shares


def micro_batches(indices: list[int], lengths: list[int], token_budget: int) -> list[list[int]]:
    """Group indices in order so that (count x longest length) stays within the token budget."""
    groups: list[list[int]] = []
    current: list[int] = []
    longest = 0
    for index in indices:
        new_longest = max(longest, lengths[index])
        if current and new_longest * (len(current) + 1) > token_budget:
            groups.append(current)
            current, new_longest = [], lengths[index]
        current.append(index)
        longest = new_longest
    if current:
        groups.append(current)
    return groups


def plan_micro_batches(num_items: int, lengths: list[int], world_size: int, token_budget: int) -> list[list[list[int]]]:
    """Per rank, the micro-batches of one mini-batch, longest sequences first; every rank gets the same count
    (empty ones pad).

    FSDP runs collectives in every forward and backward, so all ranks must run the same number of
    micro-batches; a rank with less data runs empty micro-batches that contribute zero loss.
    """
    shares = split_for_ranks(list(range(num_items)), lengths, world_size)
    plans = [micro_batches(share, lengths, token_budget) for share in shares]
    steps = max(len(plan) for plan in plans)
    return [plan + [[] for _ in range(steps - len(plan))] for plan in plans]
