"""Learner: one rank of the FSDP2-sharded policy (and critic); updates them with GRPO-multiturn, GAE + PPO, or SFT.

It runs inside a Ray Train worker (which set up torch.distributed: gloo on CPU, NCCL on GPU), and
also alone in a plain process with a one-member process group, as in the unit tests.
"""

from __future__ import annotations

import contextlib
import json
import random
import types
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_optimizer_state_dict,
    set_optimizer_state_dict,
)
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard, register_fsdp_forward_method
from torch.distributed.tensor import DTensor
from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForTokenClassification

from userrl.algorithms import (
    aggregate,
    explained_variance,
    gae_advantages,
    grpo_multiturn_advantages,
    kl_penalty,
    linear_token_logprobs,
    masked_token_mean,
    place_token_rewards,
    policy_loss,
    sft_loss,
    token_entropy,
    token_logprobs,
    trajectory_score,
    value_loss,
    value_loss_mask,
)
from userrl.algorithms.loss import aggregation_count
from userrl.batch import TensorBatch, collate, plan_micro_batches
from userrl.checkpoint import CRITIC_DIR as CRITIC_DIR  # re-exported (the names were defined here before)
from userrl.checkpoint import CRITIC_OPTIMIZER as CRITIC_OPTIMIZER
from userrl.checkpoint import Checkpoint, staged
from userrl.config import UserRLConfig
from userrl.trajectory import Trajectory
from userrl.weight_sync import GatheredWeights, dtype_name

_FULL = StateDictOptions(full_state_dict=True, cpu_offload=True)


def _decoder_layers(model: torch.nn.Module) -> list[torch.nn.Module]:
    for path in ("model.layers", "transformer.h", "gpt_neox.layers"):
        node: Any = model
        with contextlib.suppress(AttributeError):
            for part in path.split("."):
                node = getattr(node, part)
            return list(node)
    raise ValueError(f"cannot find the decoder layers of {type(model).__name__} to shard")


def load_sharded_model(path: str, device: torch.device, bf16: bool, trainable: bool = True,
                       value_head: bool = False) -> torch.nn.Module:
    """Load a causal LM (or, with value_head, the same trunk with a scalar head) and shard it with FSDP2."""
    if value_head:  # from a causal LM folder the trunk loads and the head `score` starts fresh
        # No dropout before the head (transformers' default is 0.1): values must not be noisy in training mode.
        config = AutoConfig.from_pretrained(path, num_labels=1)
        config.classifier_dropout = 0.0
        model = AutoModelForTokenClassification.from_pretrained(path, config=config, dtype=torch.float32).to(device)
    else:
        model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).to(device)
    model.config.use_cache = False
    policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32) if (
        bf16 and device.type == "cuda") else MixedPrecisionPolicy()
    for layer in _decoder_layers(model):
        fully_shard(layer, mp_policy=policy)
    fully_shard(model, mp_policy=policy)
    model.train(trainable)
    if not trainable:
        model.requires_grad_(False)
    return model


def _score_tokens(self: torch.nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                  scored: torch.Tensor, temperature: float, with_entropy: bool, chunk_tokens: int
                  ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Log-probabilities (and entropies) of input_ids[:, 1:] where `scored` [B, L-1] is true, from the last
    hidden state and the output embedding in chunks: the full [B, L, V] logits are never built."""
    hidden = self.base_model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
    head = self.get_output_embeddings()
    return linear_token_logprobs(hidden[:, :-1][scored], head.weight, input_ids[:, 1:][scored], temperature,
                                 with_entropy, chunk_tokens, head.bias)


def attach_token_scoring(model: torch.nn.Module) -> bool:
    """Give a sharded causal LM a `score_tokens` method that runs under FSDP2's forward hooks (so the root's
    parameters, the output embedding among them, are gathered); False where the head is not a plain linear
    layer (logit soft-capping or scaling), which keeps the full-logits path."""
    config = model.config
    if not isinstance(model.get_output_embeddings(), torch.nn.Linear) or getattr(
            config, "final_logit_softcapping", None) is not None or getattr(config, "logit_scale", 1.0) != 1.0:
        return False
    model.score_tokens = types.MethodType(_score_tokens, model)
    register_fsdp_forward_method(model, "score_tokens")
    return True


def estimator_turn_rewards(trajectory: Trajectory, format_penalty: float = 0.0) -> list[float]:
    """The turn rewards the estimator sees: with a format penalty, the turn that ended the episode without a
    well-formed action (stop reason no_tool_call) gets it added; the trajectory's own record stays as played."""
    rewards = trajectory.turn_rewards
    if format_penalty and trajectory.stop_reason == "no_tool_call" and trajectory.turns[-1:] and (
            trajectory.turns[-1].n_sampled > 0):  # a reward must sit on a sampled token (spec 1.6)
        rewards[-1] += format_penalty
    return rewards


@dataclass
class ValueTargets:
    """What the critic's update needs from the advantage pass: values before the update, returns (per trajectory,
    aligned with input_ids), and the pass's critic statistics for logging."""

    old_values: list[torch.Tensor]
    returns: list[torch.Tensor]
    stats: dict[str, float]


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
        self.model = load_sharded_model(model_path, self.device, self.bf16)
        if config.learners.gradient_checkpointing:
            self.model.gradient_checkpointing_enable()
        self.reference = load_sharded_model(model_path, self.device, self.bf16, trainable=False) if (
            config.training.use_kl_loss) else None
        # The models that can be scored from the hidden state in chunks (a plain linear head).
        self._hidden_scoring = {id(m) for m in (self.model, self.reference) if m is not None and
                                attach_token_scoring(m)}
        self.optimizer = self.make_optimizer(config.training.lr)
        tc = config.training
        # The critic of the GAE estimators: its own FSDP2 model and optimizer in the same worker group. It
        # starts from `critic_path` (a checkpoint's critic/), else critic.model, else the policy's weights.
        self.critic: torch.nn.Module | None = None
        if tc.uses_critic:
            self.critic = load_sharded_model(critic_path or config.critic.model or model_path, self.device,
                                             self.bf16, value_head=True)
            if config.learners.gradient_checkpointing:
                self.critic.gradient_checkpointing_enable()
            self.critic_optimizer = torch.optim.AdamW(self.critic.parameters(), lr=config.critic.lr,
                                                      betas=tuple(tc.betas), weight_decay=tc.weight_decay)
        # The sampler's logprobs are of softmax(logits / T); the RL loss must see the same distribution.
        # Greedy sampling (T = 0) reports plain log_softmax, so it pairs with T = 1 here.
        self.temperature = config.policy.temperature if config.policy.temperature > 0 else 1.0
        self.grpo = tc.grpo()
        # Set by the train loop: fields every checkpoint of this fit carries (the fit id a restarted group
        # looks for), and the fault-injection hook of the reliability tests (userrl/faults.py).
        self.checkpoint_meta: dict[str, Any] = {}
        self.fault: Callable[..., None] | None = None

    def make_optimizer(self, lr: float) -> torch.optim.Optimizer:
        """A fresh AdamW over this rank's shards."""
        tc = self.config.training
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=lr, betas=tuple(tc.betas),
                                           weight_decay=tc.weight_decay)
        return self.optimizer

    # ---------------------------------------------------------------- forward

    def _autocast(self):
        if self.bf16 and self.device.type == "cpu":
            return torch.autocast("cpu", dtype=torch.bfloat16)
        return contextlib.nullcontext()

    def _forward(self, model: torch.nn.Module, batch: TensorBatch, need_entropy: bool = False,
                 temperature: float = 1.0):
        """Per-token logprobs of input_ids[:, 1:] (and entropies) at `temperature`, aligned to positions 1..L-1.

        Every loss, KL and metric reads them under the loss mask, so only trained positions need a value.
        With learners.logprob_chunk_tokens > 0 (and a plain head) exactly those are scored, from the hidden
        state in chunks (`attach_token_scoring`), the others left 0; else every position from the first trained
        one on goes through the LM head: prompts are most of a short episode, and the head's vocabulary-wide
        matmul and softmax are the costliest part of it.
        """
        ids = batch.input_ids.to(self.device)
        if self.config.learners.logprob_chunk_tokens and id(model) in self._hidden_scoring:
            scored = batch.loss_mask[:, 1:].to(self.device) != 0
            with self._autocast():
                picked, picked_entropy = model.score_tokens(
                    ids, batch.attention_mask.to(self.device), scored, temperature, need_entropy,
                    self.config.learners.logprob_chunk_tokens)
            logp = torch.zeros(scored.shape, device=self.device)
            logp[scored] = picked
            entropy = None
            if need_entropy:
                entropy = torch.zeros_like(logp)
                entropy[scored] = picked_entropy
            return logp, entropy
        width = ids.shape[1]
        trained = batch.loss_mask[:, 1:].sum(0).nonzero()
        first = int(trained[0]) if len(trained) else width - 2  # first trained target index (of ids[:, 1:])
        keep = width - first  # logits of positions first .. L-1; the last one predicts nothing
        with self._autocast():
            logits = model(input_ids=ids, attention_mask=batch.attention_mask.to(self.device),
                           logits_to_keep=keep).logits
        logits = logits[:, :-1].float()
        logp = torch.zeros(ids.shape[0], width - 1, device=self.device)
        logp[:, first:] = token_logprobs(logits, ids[:, first + 1:], temperature)
        entropy = None
        if need_entropy:
            entropy = torch.zeros_like(logp)
            entropy[:, first:] = token_entropy(logits, temperature)
        return logp, entropy

    def _micro(self, trajectories: list[Trajectory], indices: list[int]) -> TensorBatch:
        if not indices:  # an empty micro-batch keeps this rank in step with the FSDP collectives
            dummy = Trajectory(uid="pad", group_id="pad", env_name="", item_key="",
                               input_ids=[self.pad_token_id] * 2, role_ids=[-1, -1], loss_mask=[0, 0],
                               turn_ids=[-1, -1], sampler_logprobs=[0.0, 0.0])
            return collate([dummy], self.pad_token_id)
        return collate([trajectories[i] for i in indices], self.pad_token_id)

    # ---------------------------------------------------------------- updates

    def compute_advantages(self, trajectories: list[Trajectory]
                           ) -> tuple[list[torch.Tensor], dict[str, float], ValueTargets | None]:
        """Advantages per trajectory (identical on every rank; collective with a critic), group statistics, and
        the critic's targets (GAE estimators; None for grpo_multiturn)."""
        tc = self.config.training
        batch = collate(trajectories, self.pad_token_id)
        rewards = [estimator_turn_rewards(t, tc.format_penalty) for t in trajectories]
        if not tc.uses_critic:
            advantages, stats = grpo_multiturn_advantages(
                rewards, [t.group_id for t in trajectories], batch.loss_mask, batch.turn_ids, self.grpo)
            return [advantages[i, : len(t.input_ids)] for i, t in enumerate(trajectories)], stats, None

        values = self.compute_values(trajectories)
        scores = [trajectory_score(r, self.grpo.trajectory_score, tc.gamma, self.grpo.mean_score_round)
                  for r in rewards]
        token_rewards = place_token_rewards(batch.loss_mask, batch.turn_ids, rewards, tc.reward_placement, scores)
        lengths = [len(t.input_ids) for t in trajectories]
        masks = [batch.loss_mask[i, :n] for i, n in enumerate(lengths)]
        advantages, returns = gae_advantages([token_rewards[i, :n] for i, n in enumerate(lengths)], values, masks,
                                             tc.gae(), tc.whiten_advantages)
        critic_mask = [value_loss_mask(m, self.config.critic.mask_obs) for m in masks]
        flat = {name: torch.cat(rows) for name, rows in
                (("values", values), ("returns", returns), ("mask", critic_mask), ("agent", masks))}
        counted = max(float(flat["mask"].sum()), 1.0)
        stats = {"explained_variance": explained_variance(flat["values"], flat["returns"], flat["mask"]),
                 "value_mean": float((flat["values"] * flat["mask"]).sum()) / counted,
                 "return_mean": float((flat["returns"] * flat["mask"]).sum()) / counted,
                 "score_mean": float(sum(scores) / max(len(scores), 1))}
        return advantages, {"score_mean": stats["score_mean"]}, ValueTargets(values, returns, stats)

    @torch.no_grad()
    def compute_values(self, trajectories: list[Trajectory]) -> list[torch.Tensor]:
        """The critic's values per trajectory (aligned with input_ids; 0 at position 0), on every rank (collective).

        Each rank evaluates its share of the micro-batch plan; the shares are then gathered on every rank.
        """
        lengths = [len(t.input_ids) for t in trajectories]
        plan = plan_micro_batches(len(trajectories), lengths, self.world_size,
                                  self.config.training.micro_batch_tokens)[self.rank]
        mine: dict[int, torch.Tensor] = {}
        for micro in plan:
            values = self._values(self._micro(trajectories, micro))
            for row, i in enumerate(micro):
                mine[i] = values[row, : lengths[i]].cpu()
        gathered: dict[int, torch.Tensor] = {}
        shares: list[Any] = [None] * self.world_size
        dist.all_gather_object(shares, mine)
        for share in shares:
            gathered.update(share)
        return [gathered[i] for i in range(len(trajectories))]

    def _values(self, batch: TensorBatch) -> torch.Tensor:
        """[B, L] float32 values: V at position t is the head's output after reading tokens < t (the state in
        which token t was sampled), so position 0 has none (0)."""
        ids = batch.input_ids.to(self.device)
        with self._autocast():
            out = self.critic(input_ids=ids, attention_mask=batch.attention_mask.to(self.device)).logits[..., 0]
        values = torch.zeros(ids.shape, dtype=torch.float32, device=self.device)
        values[:, 1:] = out[:, :-1].float()
        return values

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
                metrics = self._step([trajectories[i] for i in mini],
                                     None if sft else [advantages[i] for i in mini],
                                     None if old is None else [old[i] for i in mini])
                if value_targets is not None:
                    metrics.update(self._critic_step([trajectories[i] for i in mini],
                                                     [value_targets.old_values[i] for i in mini],
                                                     [value_targets.returns[i] for i in mini]))
                for key, value in metrics.items():
                    totals[key] = totals.get(key, 0.0) + value / (len(minis) * epochs)
        if value_targets is not None:
            totals.update({f"critic/{k}": v for k, v in value_targets.stats.items()})
        return totals

    @torch.no_grad()
    def _old_logprobs(self, trajectories: list[Trajectory], minis: list[list[int]]) -> dict[int, torch.Tensor]:
        """Log-probabilities of the policy before the update, for the PPO ratio."""
        old: dict[int, torch.Tensor] = {}
        lengths = [len(t.input_ids) for t in trajectories]
        for mini in minis:
            plan = plan_micro_batches(len(mini), [lengths[i] for i in mini], self.world_size,
                                      self.config.training.micro_batch_tokens)[self.rank]
            for micro in plan:
                logp, _ = self._forward(self.model, self._micro(trajectories, [mini[i] for i in micro]),
                                        temperature=self.temperature)
                for row, i in enumerate(micro):
                    old[mini[i]] = logp[row, : lengths[mini[i]] - 1].cpu()
        return old

    def _step(self, trajectories: list[Trajectory], advantages: list[torch.Tensor] | None,
              old: list[torch.Tensor] | None) -> dict[str, float]:
        sums = self._accumulate_gradients(trajectories, advantages, old)
        grad_norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.config.training.grad_clip)
        if isinstance(grad_norm, DTensor):
            grad_norm = grad_norm.full_tensor()
        if self.fault and advantages is not None:
            self.fault("update")
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        totals = self._all_reduce(sums)
        tokens = max(totals["trained_tokens"], 1.0)
        # The loss is already the mini-batch's (its micro-batch shares summed over ranks); the other
        # metrics are token means over the whole mini-batch.
        means = {k: v / tokens for k, v in totals.items() if k != "loss" and not k.endswith("_tokens")}
        return {"loss": totals["loss"], **means, "trained_tokens": totals["trained_tokens"],
                "processed_tokens": totals["processed_tokens"], "grad_norm": float(grad_norm)}

    def loss_and_gradients(self, trajectories: list[Trajectory], advantages: list[torch.Tensor] | None = None
                           ) -> tuple[float, dict[str, torch.Tensor]]:
        """One mini-batch's loss and the full gradient `update` would step on (on policy: ratio 1), unclipped.

        For tests and diagnostics. Collective: every rank calls it with the same trajectories and gets
        the loss and {parameter name: full CPU tensor}; no gradient is left behind, the weights do not change.
        """
        self.optimizer.zero_grad(set_to_none=True)
        sums = self._accumulate_gradients(trajectories, advantages, None)
        grads = {}
        for name, param in self.model.named_parameters():
            if param.grad is not None:
                grad = param.grad
                grads[name] = (grad.full_tensor() if isinstance(grad, DTensor) else grad).detach().cpu()
        self.optimizer.zero_grad(set_to_none=True)
        return self._all_reduce({"loss": sums["loss"]})["loss"], grads

    def _accumulate_gradients(self, trajectories: list[Trajectory], advantages: list[torch.Tensor] | None,
                              old: list[torch.Tensor] | None) -> dict[str, float]:
        """Forward and backward of this rank's micro-batches of one mini-batch; returns this rank's metric sums.

        The gradient is that of one loss over the whole mini-batch, whatever the ranks and micro-batch cuts:
        every rank holds all of it, so each micro-batch divides its sum of terms (tokens, or per-sequence
        means/sums) by the mini-batch's count of them, and the micro-batches' losses add up to the mini-batch
        loss (an empty padding micro-batch adds 0). FSDP2 then averages the gradients over ranks
        (reduce-scatter with ReduceOp.AVG), so each rank scales its share by the world size to make it a sum.
        """
        tc = self.config.training
        lengths = [len(t.input_ids) for t in trajectories]
        plan = plan_micro_batches(len(trajectories), lengths, self.world_size, tc.micro_batch_tokens)[self.rank]
        mask_all = collate(trajectories, self.pad_token_id).loss_mask[:, 1:]
        denominator = max(aggregation_count(mask_all, tc.loss_agg_mode), 1.0)
        sums = dict.fromkeys(("loss", "pg_clipfrac", "approx_kl", "importance_ratio_mean", "entropy",
                              "sampler_logprob_gap", "trained_tokens", "processed_tokens"), 0.0)
        # SFT is plain cross-entropy on demonstrations (T = 1); RL terms use the sampling temperature.
        temperature = 1.0 if advantages is None else self.temperature
        for micro in plan:
            batch = self._micro(trajectories, micro)
            mask = batch.loss_mask[:, 1:].to(self.device)
            need_entropy = advantages is not None and tc.entropy_coeff > 0
            logp, entropy = self._forward(self.model, batch, need_entropy, temperature)
            if advantages is None:
                loss = sft_loss(logp, mask, tc.loss_agg_mode, denominator)
                stats: dict[str, torch.Tensor] = {}
            else:
                adv = torch.zeros_like(logp)
                old_logp = logp.detach().clone()
                for row, i in enumerate(micro):
                    adv[row, : lengths[i] - 1] = advantages[i][1:].to(self.device)
                    if old is not None:
                        old_logp[row, : lengths[i] - 1] = old[i].to(self.device)
                loss, stats = policy_loss(logp, old_logp, adv, mask, tc.clip_ratio_low, tc.clip_ratio_high,
                                          tc.clip_ratio_c, tc.loss_agg_mode, denominator)
                with torch.no_grad():
                    stats["importance_ratio_mean"] = masked_token_mean(
                        torch.exp(torch.clamp(logp - old_logp, max=20.0)), mask)
                if self.reference is not None:
                    with torch.no_grad():
                        ref_logp, _ = self._forward(self.reference, batch, temperature=temperature)
                    loss = loss + tc.kl_loss_coef * aggregate(kl_penalty(logp, ref_logp, tc.kl_loss_type),
                                                              mask, tc.loss_agg_mode, denominator)
                if entropy is not None:
                    loss = loss - tc.entropy_coeff * aggregate(entropy, mask, tc.loss_agg_mode, denominator)
            (loss * self.world_size).backward()
            if not micro:
                continue  # an empty micro-batch only keeps the collectives in step
            n = float(mask.sum())
            sums["loss"] += float(loss.detach())
            # Token sums of the per-micro-batch token means; _step divides by the mini-batch's tokens.
            for key in ("pg_clipfrac", "approx_kl", "importance_ratio_mean"):
                sums[key] += float(stats.get(key, 0.0)) * n
            if entropy is not None:
                sums["entropy"] += float((entropy.detach() * mask).sum())
            gap = (batch.sampler_logprobs[:, 1:].to(self.device) - logp.detach()).abs() * mask
            sums["sampler_logprob_gap"] += float(gap.sum())
            sums["trained_tokens"] += n
            sums["processed_tokens"] += float(batch.attention_mask.sum())
        return sums

    def _critic_step(self, trajectories: list[Trajectory], old_values: list[torch.Tensor],
                     returns: list[torch.Tensor]) -> dict[str, float]:
        """One optimizer step of the critic on one mini-batch (every rank)."""
        sums = self._accumulate_critic_gradients(trajectories, old_values, returns)
        grad_norm = torch.nn.utils.clip_grad_norm_(self.critic.parameters(), self.config.training.grad_clip)
        if isinstance(grad_norm, DTensor):
            grad_norm = grad_norm.full_tensor()
        self.critic_optimizer.step()
        self.critic_optimizer.zero_grad(set_to_none=True)
        totals = self._all_reduce(sums)
        return {"critic/value_loss": totals["value_loss"],
                "critic/vf_clipfrac": totals["vf_clipfrac"] / max(totals["value_tokens"], 1.0),
                "critic/grad_norm": float(grad_norm)}

    def critic_loss_and_gradients(self, trajectories: list[Trajectory], value_targets: ValueTargets
                                  ) -> tuple[float, dict[str, torch.Tensor]]:
        """One mini-batch's value loss and the critic's full gradient, unclipped (for tests; collective, like
        `loss_and_gradients`): the weights do not change."""
        self.critic_optimizer.zero_grad(set_to_none=True)
        sums = self._accumulate_critic_gradients(trajectories, value_targets.old_values, value_targets.returns)
        grads = {}
        for name, param in self.critic.named_parameters():
            if param.grad is not None:
                grad = param.grad
                grads[name] = (grad.full_tensor() if isinstance(grad, DTensor) else grad).detach().cpu()
        self.critic_optimizer.zero_grad(set_to_none=True)
        return self._all_reduce({"value_loss": sums["value_loss"]})["value_loss"], grads

    def _accumulate_critic_gradients(self, trajectories: list[Trajectory], old_values: list[torch.Tensor],
                                     returns: list[torch.Tensor]) -> dict[str, float]:
        """Forward and backward of the clipped value loss (spec 4.7) on this rank's micro-batches: each divides
        its sum by the mini-batch's global count of critic positions, as the policy loss does; returns sums."""
        cc = self.config.critic
        lengths = [len(t.input_ids) for t in trajectories]
        plan = plan_micro_batches(len(trajectories), lengths, self.world_size,
                                  self.config.training.micro_batch_tokens)[self.rank]
        whole = collate(trajectories, self.pad_token_id)
        denominator = max(float(value_loss_mask(whole.loss_mask, cc.mask_obs, whole.attention_mask).sum()), 1.0)
        sums = dict.fromkeys(("value_loss", "vf_clipfrac", "value_tokens"), 0.0)
        for micro in plan:
            batch = self._micro(trajectories, micro)
            values = self._values(batch)
            old = torch.zeros_like(values)
            target = torch.zeros_like(values)
            for row, i in enumerate(micro):
                old[row, : lengths[i]] = old_values[i].to(self.device)
                target[row, : lengths[i]] = returns[i].to(self.device)
            mask = value_loss_mask(batch.loss_mask, cc.mask_obs, batch.attention_mask).to(self.device)
            loss, stats = value_loss(values, old, target, mask, cc.cliprange_value, denominator)
            (loss * self.world_size).backward()  # FSDP2 averages over ranks; the loss is already the global one
            n = float(mask.sum())
            sums["value_loss"] += float(loss.detach())
            sums["vf_clipfrac"] += float(stats["vf_clipfrac"]) * n
            sums["value_tokens"] += n
        return sums

    def _all_reduce(self, values: dict[str, float]) -> dict[str, float]:
        """Sum scalar metrics over the learner group (on the learner's device: NCCL reduces CUDA tensors only)."""
        tensor = torch.tensor(list(values.values()), dtype=torch.float64, device=self.device)
        dist.all_reduce(tensor)
        return dict(zip(values, tensor.tolist(), strict=True))

    # ---------------------------------------------------------------- state

    def full_state_dict(self) -> dict[str, torch.Tensor] | None:
        """Gather the full (unsharded) weights on rank 0; every rank must call this."""
        state = get_model_state_dict(self.model, options=_FULL)
        return state if self.rank == 0 else None

    def gathered_weights(self, dtype: torch.dtype | None = None) -> GatheredWeights:
        """The policy's full weights, one tensor at a time (collective: every rank iterates to the end).

        Each tensor is all-gathered from its FSDP2 shards when it is reached, on the learner's device (so
        NCCL can broadcast it from the GPU), and the whole model is never held at once. Tied weights are
        sent once (the engine re-ties its head). `dtype`: floating-point tensors are sent in it (the
        replicas' weight dtype: a bfloat16 replica gets half the bytes, rounded here as it would round them).
        """
        sharded = get_model_state_dict(self.model, options=StateDictOptions(full_state_dict=False))
        # A tied parameter is listed once by named_parameters (the same on every rank), twice in the state dict.
        own = {name for name, _ in self.model.named_parameters()} | {name for name, _ in self.model.named_buffers()}
        names = [name for name in sharded if name in own]

        def sent_dtype(tensor: torch.Tensor) -> torch.dtype:
            return dtype if dtype is not None and tensor.is_floating_point() else tensor.dtype

        def tensors():
            for name in names:
                tensor = sharded[name]
                full = tensor.full_tensor() if isinstance(tensor, DTensor) else tensor
                yield name, full.detach().to(sent_dtype(full))

        metadata = [(n, tuple(sharded[n].shape), dtype_name(sent_dtype(sharded[n]))) for n in names]
        return GatheredWeights(metadata, tensors(), self.device)

    def save_checkpoint(self, path: Path, meta: dict[str, Any], tokenizer: Any,
                        documents: Mapping[str, Any] | None = None) -> None:
        """Write model (HF folder), optimizer, RNG states and metadata atomically (collective); `documents`
        (file name -> JSON-able data, rank 0's) go beside them, e.g. the training task source's state."""
        model_state = get_model_state_dict(self.model, options=_FULL)
        optim_state = get_optimizer_state_dict(self.model, self.optimizer, options=_FULL)
        if self.critic is not None:
            critic_state = get_model_state_dict(self.critic, options=_FULL)
            critic_optim = get_optimizer_state_dict(self.critic, self.critic_optimizer, options=_FULL)
        if self.rank == 0:
            with staged(path) as staging:  # filled under its .tmp name, renamed into place at the end
                folder = Checkpoint(staging)
                unwrapped = AutoModelForCausalLM.from_config(self.model.config)
                unwrapped.load_state_dict(model_state, strict=False)
                unwrapped.tie_weights()
                unwrapped.save_pretrained(folder.model_dir)
                tokenizer.save_pretrained(folder.model_dir)
                torch.save(optim_state, folder.optimizer_file)
                if self.critic is not None:
                    critic = AutoModelForTokenClassification.from_config(self.critic.config)
                    critic.load_state_dict(critic_state)
                    critic.save_pretrained(folder.critic_dir)
                    torch.save(critic_optim, folder.critic_optimizer_file)
                torch.save({"torch": torch.get_rng_state(), "numpy": np.random.get_state(),
                            "python": random.getstate()}, folder.rng_file)
                for name, document in (documents or {}).items():
                    (staging / name).write_text(json.dumps(document))
                folder.meta_file.write_text(json.dumps({**meta, **self.checkpoint_meta}, indent=2))  # last: complete
                if self.fault:
                    self.fault("checkpoint", meta["iteration"])
        dist.barrier()

    def load_optimizer(self, path: Path) -> None:
        """Restore optimizer (and critic optimizer) and RNG states from a checkpoint folder (every rank reads them)."""
        checkpoint = Checkpoint(path)
        optim_state = torch.load(checkpoint.optimizer_file, weights_only=False)
        set_optimizer_state_dict(self.model, self.optimizer, optim_state_dict=optim_state, options=_FULL)
        if self.critic is not None and checkpoint.critic_optimizer_file.is_file():  # else a fresh one (e.g. SFT's)
            set_optimizer_state_dict(self.critic, self.critic_optimizer, options=_FULL,
                                     optim_state_dict=torch.load(checkpoint.critic_optimizer_file, weights_only=False))
        rng = torch.load(checkpoint.rng_file, weights_only=False)
        torch.set_rng_state(rng["torch"])
        np.random.set_state(rng["numpy"])
        random.setstate(rng["python"])
