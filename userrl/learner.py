"""Learner: one rank of the FSDP2-sharded policy (and critic); updates them with GRPO-multiturn, GAE + PPO, or SFT.

It orchestrates the pieces, RLlib-style: one micro-batch loop (`_step`) drives any `MicroBatchLoss`
(`userrl/losses.py`: PPO policy, SFT, clipped value) for the policy and the critic alike, `userrl/fsdp.py`
loads, shards and gathers the models, and `userrl/sharded_checkpoint.py` saves and restores them. The
advantages come from the train loop's estimator (`userrl/estimators.py`), which asks `compute_values` for the
critic's values. It runs inside a Ray Train worker (which set up torch.distributed: gloo on CPU, NCCL on GPU),
and also alone in a plain process with a one-member process group, as in the unit tests.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from userrl.batch import TensorBatch, collate, plan_micro_batches
from userrl.config import UserRLConfig
from userrl.estimators import ValueTargets
from userrl.forward import ForwardPass
from userrl.fsdp import full_gradients, full_norm, full_state_dict, gathered_weights, load_sharded_model
from userrl.losses import ClippedValueLoss, MicroBatchLoss, PPOPolicyLoss, SFTLoss
from userrl.sharded_checkpoint import Trained, restore_optimizers, save_checkpoint
from userrl.trajectory import Trajectory
from userrl.weight_sync import GatheredWeights


class Learner:
    """One rank of the learner group."""

    def __init__(self, model_path: str, config: UserRLConfig, pad_token_id: int, critic_path: str | None = None):
        if not dist.is_initialized():
            raise RuntimeError("Learner needs torch.distributed; run it in a Ray Train worker or init a group")
        self.config = config
        self.rank, self.world_size = dist.get_rank(), dist.get_world_size()
        self.device = torch.device("cuda", torch.cuda.current_device()) if config.learners.use_gpu else torch.device("cpu")
        self.bf16 = config.learners.precision == "bfloat16"
        self.pad_token_id = pad_token_id
        self.forward = ForwardPass(config, self.device, self.bf16)
        self.model = self._load(model_path)
        self.reference = load_sharded_model(model_path, self.device, self.bf16, trainable=False) if (
            config.training.use_kl_loss) else None
        for model in (self.model, self.reference):
            if model is not None:
                self.forward.enable_hidden_scoring(model)
        self.optimizer = self.make_optimizer(config.training.lr)
        # The critic of the GAE estimators: its own FSDP2 model and optimizer in the same worker group. It
        # starts from `critic_path` (a checkpoint's critic/), else critic.model, else the policy's weights.
        self.critic: torch.nn.Module | None = None
        self.critic_optimizer: torch.optim.Optimizer | None = None
        if config.training.uses_critic:
            self.critic = self._load(critic_path or config.critic.model or model_path, value_head=True)
            self.critic_optimizer = self._adamw(self.critic, config.critic.lr)
        # The sampler's logprobs are of softmax(logits / T); the RL loss must see the same distribution.
        # Greedy sampling (T = 0) reports plain log_softmax, so it pairs with T = 1 here.
        self.temperature = config.policy.temperature if config.policy.temperature > 0 else 1.0
        # Set by the train loop: fields every checkpoint of this fit carries (the fit id a restarted group
        # looks for), and the fault-injection hook of the reliability tests (userrl/faults.py).
        self.checkpoint_meta: dict[str, Any] = {}
        self.fault: Callable[..., None] | None = None

    def _load(self, path: str, value_head: bool = False) -> torch.nn.Module:
        model = load_sharded_model(path, self.device, self.bf16, value_head=value_head, seed=self.config.experiment.seed)
        if self.config.learners.gradient_checkpointing:
            model.gradient_checkpointing_enable()
        return model

    def _adamw(self, model: torch.nn.Module, lr: float) -> torch.optim.Optimizer:
        tc = self.config.training
        return torch.optim.AdamW(model.parameters(), lr=lr, betas=tuple(tc.betas), weight_decay=tc.weight_decay)

    def make_optimizer(self, lr: float) -> torch.optim.Optimizer:
        """A fresh AdamW over this rank's shards of the policy."""
        self.optimizer = self._adamw(self.model, lr)
        return self.optimizer

    # ---------------------------------------------------------------- micro-batches

    def _plan(self, trajectories: Sequence[Trajectory]) -> list[list[int]]:
        """This rank's micro-batches (indices into `trajectories`) of the group's plan by token budget."""
        lengths = [len(t.input_ids) for t in trajectories]
        return plan_micro_batches(len(trajectories), lengths, self.world_size,
                                  self.config.training.micro_batch_tokens)[self.rank]

    def _micro(self, trajectories: Sequence[Trajectory], indices: list[int]) -> TensorBatch:
        if not indices:  # an empty micro-batch keeps this rank in step with the FSDP collectives
            dummy = Trajectory(uid="pad", group_id="pad", env_name="", item_key="",
                               input_ids=[self.pad_token_id] * 2, role_ids=[-1, -1], loss_mask=[0, 0],
                               turn_ids=[-1, -1], sampler_logprobs=[0.0, 0.0])
            return collate([dummy], self.pad_token_id)
        return collate([trajectories[i] for i in indices], self.pad_token_id)

    # ---------------------------------------------------------------- values

    @torch.no_grad()
    def compute_values(self, trajectories: list[Trajectory]) -> list[torch.Tensor]:
        """The critic's values per trajectory (aligned with input_ids; 0 at position 0), on every rank (collective).

        Each rank evaluates its share of the micro-batch plan; the shares are then gathered on every rank.
        """
        mine: dict[int, torch.Tensor] = {}
        for micro in self._plan(trajectories):
            values = self.forward.values(self.critic, self._micro(trajectories, micro))
            for row, i in enumerate(micro):
                mine[i] = values[row, : len(trajectories[i].input_ids)].cpu()
        gathered: dict[int, torch.Tensor] = {}
        shares: list[Any] = [None] * self.world_size
        dist.all_gather_object(shares, mine)
        for share in shares:
            gathered.update(share)
        return [gathered[i] for i in range(len(trajectories))]

    # ---------------------------------------------------------------- updates

    def update(self, trajectories: list[Trajectory], advantages: list[torch.Tensor] | None = None,
               value_targets: ValueTargets | None = None) -> dict[str, float]:
        """One RL update (advantages given; with a critic, `value_targets` too) or one SFT pass (advantages None).

        Keys of the critic's metrics start with `critic/`; the rest are the policy's.
        """
        if advantages is not None and (self.critic is None) != (value_targets is None):
            raise ValueError("value_targets must be given exactly when the learner has a critic (GAE estimators)")
        tc = self.config.training
        sft = advantages is None
        size = len(trajectories) if sft or tc.mini_batch_size is None else tc.mini_batch_size
        minis = [list(range(i, min(i + size, len(trajectories)))) for i in range(0, len(trajectories), size)]
        epochs = 1 if sft else tc.ppo_epochs
        on_policy = len(minis) == 1 and epochs == 1
        if sft:
            old = None
        elif tc.async_rollout:
            # Up to one version behind: the behaviour policy is the sampler, not these pre-update weights.
            old = {i: torch.tensor(t.sampler_logprobs[1:], dtype=torch.float32) for i, t in enumerate(trajectories)}
        else:
            old = None if on_policy else self._old_logprobs(trajectories, minis)
        totals: dict[str, float] = {}
        for _ in range(epochs):
            for mini in minis:
                batch = [trajectories[i] for i in mini]
                actor = self._actor_loss(None if sft else [advantages[i] for i in mini],
                                         None if old is None else [old[i] for i in mini])
                metrics = self._step(actor, self.optimizer, batch, fault_point=None if sft else "update")
                if value_targets is not None:
                    critic = self._critic_loss([value_targets.old_values[i] for i in mini],
                                               [value_targets.returns[i] for i in mini])
                    metrics.update(self._step(critic, self.critic_optimizer, batch))
                for key, value in metrics.items():
                    totals[key] = totals.get(key, 0.0) + value / (len(minis) * epochs)
        if value_targets is not None:
            totals.update({f"critic/{k}": v for k, v in value_targets.stats.items()})
        return totals

    @torch.no_grad()
    def _old_logprobs(self, trajectories: list[Trajectory], minis: list[list[int]]) -> dict[int, torch.Tensor]:
        """Log-probabilities of the policy before the update, for the PPO ratio."""
        old: dict[int, torch.Tensor] = {}
        for mini in minis:
            picked = [trajectories[i] for i in mini]
            for micro in self._plan(picked):
                logp, _ = self.forward.logprobs(self.model, self._micro(picked, micro), temperature=self.temperature)
                for row, i in enumerate(micro):
                    old[mini[i]] = logp[row, : len(picked[i].input_ids) - 1].cpu()
        return old

    def _actor_loss(self, advantages: list[torch.Tensor] | None, old: list[torch.Tensor] | None) -> MicroBatchLoss:
        """The policy's loss of one mini-batch: PPO with advantages, SFT's cross-entropy without."""
        if advantages is None:
            return SFTLoss(self.model, self.forward, self.config)
        return PPOPolicyLoss(self.model, self.forward, self.config, self.temperature, advantages, old, self.reference)

    def _critic_loss(self, old_values: list[torch.Tensor], returns: list[torch.Tensor]) -> MicroBatchLoss:
        """The critic's clipped value loss of one mini-batch."""
        return ClippedValueLoss(self.critic, self.forward, self.config, old_values, returns)

    def _step(self, loss: MicroBatchLoss, optimizer: torch.optim.Optimizer, trajectories: list[Trajectory],
              fault_point: str | None = None) -> dict[str, float]:
        """One optimizer step of `loss.module` on one mini-batch (every rank): its metrics over the group."""
        sums = self._accumulate(loss, trajectories)
        grad_norm = full_norm(torch.nn.utils.clip_grad_norm_(loss.module.parameters(),
                                                             self.config.training.grad_clip))
        if self.fault and fault_point:
            self.fault(fault_point)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss.metrics(self._all_reduce(sums), float(grad_norm))

    def _accumulate(self, loss: MicroBatchLoss, trajectories: list[Trajectory]) -> dict[str, float]:
        """Forward and backward of this rank's micro-batches of one mini-batch; returns this rank's metric sums.

        The gradient is that of one loss over the whole mini-batch, whatever the ranks and micro-batch cuts:
        every rank holds all of it, so each micro-batch divides its sum of terms (tokens, or per-sequence
        means/sums) by the mini-batch's count of them, and the micro-batches' losses add up to the mini-batch
        loss (an empty padding micro-batch adds 0). FSDP2 then averages the gradients over ranks
        (reduce-scatter with ReduceOp.AVG), so each rank scales its share by the world size to make it a sum.
        """
        denominator = loss.denominator(collate(trajectories, self.pad_token_id))
        sums = dict.fromkeys(("loss", *loss.sum_keys), 0.0)  # the same keys on every rank, for the all-reduce
        for micro in self._plan(trajectories):
            share, micro_sums = loss(self._micro(trajectories, micro), micro, denominator)
            (share * self.world_size).backward()
            if not micro:
                continue  # an empty micro-batch only keeps the collectives in step
            sums["loss"] += float(share.detach())
            for key, value in micro_sums.items():
                sums[key] += value
        return sums

    def _loss_and_gradients(self, loss: MicroBatchLoss, optimizer: torch.optim.Optimizer,
                            trajectories: list[Trajectory]) -> tuple[float, dict[str, torch.Tensor]]:
        """The mini-batch loss and the full gradient `_step` would step on, unclipped; nothing is left behind."""
        optimizer.zero_grad(set_to_none=True)
        sums = self._accumulate(loss, trajectories)
        grads = full_gradients(loss.module)
        optimizer.zero_grad(set_to_none=True)
        return self._all_reduce({"loss": sums["loss"]})["loss"], grads

    def loss_and_gradients(self, trajectories: list[Trajectory], advantages: list[torch.Tensor] | None = None
                           ) -> tuple[float, dict[str, torch.Tensor]]:
        """One mini-batch's loss and the full gradient `update` would step on (on policy: ratio 1), unclipped.

        For tests and diagnostics. Collective: every rank calls it with the same trajectories and gets
        the loss and {parameter name: full CPU tensor}; no gradient is left behind, the weights do not change.
        """
        return self._loss_and_gradients(self._actor_loss(advantages, None), self.optimizer, trajectories)

    def critic_loss_and_gradients(self, trajectories: list[Trajectory], value_targets: ValueTargets
                                  ) -> tuple[float, dict[str, torch.Tensor]]:
        """One mini-batch's value loss and the critic's full gradient, unclipped (for tests; collective, like
        `loss_and_gradients`): the weights do not change."""
        loss = self._critic_loss(value_targets.old_values, value_targets.returns)
        return self._loss_and_gradients(loss, self.critic_optimizer, trajectories)

    def _all_reduce(self, values: dict[str, float]) -> dict[str, float]:
        """Sum scalar metrics over the learner group (on the learner's device: NCCL reduces CUDA tensors only)."""
        tensor = torch.tensor(list(values.values()), dtype=torch.float64, device=self.device)
        dist.all_reduce(tensor)
        return dict(zip(values, tensor.tolist(), strict=True))

    # ---------------------------------------------------------------- state

    def full_state_dict(self) -> dict[str, torch.Tensor] | None:
        """Gather the full (unsharded) weights on rank 0; every rank must call this."""
        state = full_state_dict(self.model)
        return state if self.rank == 0 else None

    def gathered_weights(self, dtype: torch.dtype | None = None) -> GatheredWeights:
        """The policy's full weights, one tensor at a time (collective; see `fsdp.gathered_weights`)."""
        return gathered_weights(self.model, self.device, dtype)

    def _trained(self) -> tuple[Trained, Trained | None]:
        critic = None if self.critic is None else Trained(self.critic, self.critic_optimizer)
        return Trained(self.model, self.optimizer), critic

    def save_checkpoint(self, path: Path, meta: dict[str, Any], tokenizer: Any,
                        documents: Mapping[str, Any] | None = None) -> None:
        """Write model (HF folder), optimizer, RNG states and metadata atomically (collective); `documents`
        (file name -> JSON-able data, rank 0's) go beside them, e.g. the training task source's state."""
        policy, critic = self._trained()
        save_checkpoint(path, policy, critic, {**meta, **self.checkpoint_meta}, tokenizer, documents, self.fault)

    def load_optimizer(self, path: Path) -> None:
        """Restore optimizer (and critic optimizer) and RNG states from a checkpoint folder (every rank reads them)."""
        restore_optimizers(path, *self._trained())
