"""The RL loop, run SPMD inside Ray Train's worker group (`train_loop_per_worker`).

Rank 0 drives the rollout through the env-runner and replica actors and shares the batch with every
rank; every rank updates its FSDP2 shard; rank 0 pushes the new weights to the replicas. With
`training.async_rollout`, rank 0 launches the next iteration's rollout before this iteration's update,
so generation overlaps the update and trajectories are at most one policy version behind.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil
import ray
import ray.train
import torch
import torch.distributed as dist

from userrl.algorithms import groups_with_signal, high_variance_groups
from userrl.allocator import release_freed_memory, running_allocator
from userrl.chat import ChatFormat
from userrl.checkpoint import (
    BestCheckpoint,
    Checkpoint,
    checkpoints_dir,
    latest_complete,
    prune_checkpoints,
    remove_staging,
)
from userrl.config import UserRLConfig
from userrl.coordinator import PendingRollout, RolloutCoordinator, restore_task_source, task_source_documents
from userrl.envs import Task
from userrl.estimators import AdvantageEstimator, ValueTargets, make_estimator
from userrl.faults import FaultInjector
from userrl.learner import Learner
from userrl.sft import DemoRequest, get_sft_source
from userrl.tokenizer import load_tokenizer
from userrl.trajectory import Trajectory


def _release_memory() -> float:
    """Return freed heap to the OS and report this process's resident memory (GB).

    Episodes differ in length, so activations and logits differ in shape every step; an allocator keeps the
    freed blocks (jemalloc, as the learners run it, all of them) and the resident size stays up while the
    learner waits for the next rollout unless they are given back.
    """
    gc.collect()
    release_freed_memory()
    return psutil.Process().memory_info().rss / 2**30


def _share(obj: Any) -> Any:
    """Broadcast a picklable object from rank 0 to every rank."""
    box = [obj]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def _share_all(value: Any) -> list[Any]:
    """Every rank's value, on every rank."""
    values = [None] * dist.get_world_size()
    dist.all_gather_object(values, value)
    return values


def checkpoint_path(config: UserRLConfig, iteration: int) -> Path:
    """Folder of the checkpoint written after `iteration` iterations."""
    return Checkpoint.of_run(config.run_dir, iteration).path.resolve()


def restart_checkpoint(config: UserRLConfig, fit_id: str) -> Path | None:
    """The newest complete checkpoint this fit wrote (None on its first start); collective.

    Rank 0 looks and tells the others. A `<name>.tmp` folder is one a killed rank 0 was writing: it is
    removed (nothing else writes here while the group starts) and never resumed from. Checkpoints of
    other fits in the same run folder (an earlier run, or the one `resume_from` names) carry another
    fit id and are left to `checkpointing.resume_from`.
    """
    found = None
    if dist.get_rank() == 0 and fit_id:
        folder = checkpoints_dir(config.run_dir)
        remove_staging(folder)
        newest = latest_complete(folder, fit_id)
        found = str(newest.path.resolve()) if newest else None
    found = _share(found)
    return Path(found) if found else None


class _Reporter:
    """Sends results to the driver (a Ray queue; a plain queue for the local learner) and to Ray Train (a
    barrier: every rank calls it)."""

    def __init__(self, queue: Any, rank: int, ray_train: bool = True):
        self.queue, self.rank, self.ray_train = queue, rank, ray_train

    def __call__(self, result: dict[str, Any]) -> None:
        if self.rank == 0 and self.queue is not None:
            self.queue.put(result)
        if self.ray_train:
            ray.train.report({k: v for k, v in result.items() if isinstance(v, int | float)})

    def eval_progress(self, done: int, total: int) -> None:
        """Evaluation episodes finished so far (rank 0's, for the driver's bar; no Ray Train report)."""
        if self.rank == 0 and self.queue is not None:
            self.queue.put({"phase": "progress", "of": "eval", "done": done, "total": total})


def sft_phase(config: UserRLConfig, learner: Learner, tasks: list[Task] | None, chat: ChatFormat,
               report: Callable[[dict[str, Any]], None]) -> None:
    """Cross-entropy on demonstrations (assistant tokens only), then a fresh optimizer for RL.

    Rank 0 builds the demonstrations with the configured SFT source (userrl/sft.py's registry), from the
    training tasks (`tasks`, None on the other ranks) or sft.path."""
    sft = config.sft
    demos: list[Trajectory] | None = None
    if learner.rank == 0:
        request = DemoRequest(episodes=sft.episodes, seed=config.experiment.seed, max_turns=config.env.max_turns,
                              max_len=config.policy.max_model_len, path=sft.path)
        demos = get_sft_source(sft.source)(request, tasks, chat)
    demos = _share(demos)
    learner.make_optimizer(sft.lr)
    step, steps = 0, sft.epochs * len(range(0, len(demos), sft.batch_size))  # steps: for the driver's bar
    for epoch in range(sft.epochs):
        for start in range(0, len(demos), sft.batch_size):
            begin = time.perf_counter()
            metrics = learner.update(demos[start:start + sft.batch_size])
            step += 1
            # Given back after every step, as after every RL iteration: kept across an SFT-only run's steps,
            # the freed blocks grew a local learner by 0.25 GB a step, to 22.7 GB after 29 (bench/README).
            rss = max(_share_all(_release_memory()))
            report({"phase": "sft", "sft/epoch": epoch, "sft/step": step, "sft/steps": steps,
                    "sft/loss": metrics["loss"], "sft/tokens": metrics["trained_tokens"],
                    "time/sft_step_s": time.perf_counter() - begin, "memory/learner_rss_gb": rss})
    learner.make_optimizer(config.training.lr)


def sync_weights(learner: Learner, coordinator: RolloutCoordinator | None, version: int) -> None:
    """Push the learner's weights to the replicas as `version` (collective: every rank takes part in the
    gather, rank 0 sends; through the weight-sync group or the object store, see EnvRunnerGroup)."""
    weights = learner.gathered_weights(getattr(torch, learner.config.policy.dtype))
    if learner.rank == 0:
        coordinator.group.sync_weights(weights, version)
    else:
        for _ in weights.tensors:  # this rank's part of each tensor's all-gather
            pass


def policy_lag(trajectories: list[Trajectory], version: int) -> float:
    """Learner version minus the oldest version that generated a turn of the batch (0 when on-policy)."""
    played = [t.policy_version for t in trajectories if t.turns]
    return float(version - min(played)) if played else 0.0


def _quiet_train_reports() -> None:
    """Ray Train logs every report at INFO from a logger named by its file; our progress lines suffice."""
    with contextlib.suppress(ImportError):
        from ray.train.v2._internal.execution import context

        logging.getLogger(context.__file__).setLevel(logging.WARNING)


def local_learner(loop_config: dict[str, Any], num_threads: int) -> None:
    """The learner as the only rank, in this process (`learners.num_learners: 0`, RLlib's local learner): the
    same loop in a one-member process group, without Ray Train's controller and worker processes. A failure
    of the learner ends the fit (there is no group to restart)."""
    config: UserRLConfig = loop_config["config"]
    threads = torch.get_num_threads()
    torch.set_num_threads(num_threads)
    dist.init_process_group("nccl" if config.learners.use_gpu else "gloo", store=dist.HashStore(), rank=0,
                            world_size=1)
    try:
        train_loop_per_worker({**loop_config, "local": True})
    finally:
        dist.destroy_process_group()
        torch.set_num_threads(threads)


def train_loop_per_worker(loop_config: dict[str, Any]) -> None:
    """Entry point of every learner rank."""
    _quiet_train_reports()
    config: UserRLConfig = loop_config["config"]
    fit_id = loop_config.get("fit_id", "")
    # A learner group that Ray Train restarted after a failure goes on from this fit's newest complete
    # checkpoint (one rank's data would otherwise be lost); the replicas get its weights before any rollout.
    restart = restart_checkpoint(config, fit_id)
    resume_from = restart or config.checkpointing.resume_from
    resume = Checkpoint(resume_from) if resume_from else None
    model_path = str(resume.model_dir) if restart else loop_config["model_path"]  # resume_from's: the driver's
    tokenizer = load_tokenizer(model_path)
    # The critic goes on from the checkpoint's own (a checkpoint without one, e.g. an SFT warm start, gives a
    # fresh critic); otherwise it starts from the driver-resolved critic.model or the policy (Learner decides).
    critic_path = str(resume.critic_dir) if resume and resume.critic_dir.is_dir() else loop_config.get("critic_path")
    learner = Learner(model_path, config, tokenizer.pad_token_id, critic_path)
    # Advantages are the loop's step, as in verl's trainer: the estimator, built once from `training`, asks the
    # learner only for the critic's values (collective), so every rank computes the same advantages.
    estimator = make_estimator(config, tokenizer.pad_token_id)
    learner.checkpoint_meta = {"fit_id": fit_id}
    rank0 = learner.rank == 0
    report = _Reporter(loop_config.get("results"), learner.rank, ray_train=not loop_config.get("local", False))
    coordinator = RolloutCoordinator(config, loop_config["env_runner_group"]) if rank0 else None
    if rank0:
        coordinator.eval_progress = report.eval_progress
    chat = ChatFormat(tokenizer, config.env.protocol)

    start, version, sync_needed = 0, 0, False
    if resume:
        start, version, sync_needed = resume.iteration, resume.policy_version, True
        if rank0:  # a task source that learns (e.g. a curriculum) goes on from its checkpointed state
            restore_task_source(coordinator.train_tasks, resume.path)
    learner.fault = FaultInjector(loop_config.get("fault"), learner.rank, learner.world_size,
                                  config.run_dir / "faults", fit_id, start)
    report = learner.fault.observing(report)
    if rank0 and loop_config.get("results") is not None:  # the driver counts starts: a second one is a restart
        loop_config["results"].put({"phase": "start", "iteration": start, "allocator": running_allocator(),
                                    "checkpoint": str(resume.path) if resume else None})
    if resume:
        learner.load_optimizer(resume.path)
    elif config.sft.enabled:
        tasks = coordinator.train_tasks.all_tasks() if rank0 else None
        sft_phase(config, learner, tasks, chat, report)
        version, sync_needed = 1, True
        if config.checkpointing.every:  # the warm-started model is a checkpoint of its own (`userrl sft` ends here)
            _save_checkpoint(config, learner, coordinator, tokenizer, 0, version)
    if sync_needed:
        sync_weights(learner, coordinator, version)

    ev = config.evaluation
    cc = config.checkpointing
    best = BestCheckpoint(checkpoints_dir(config.run_dir), cc.keep_best, cc.best_mode) if cc.keep_best else None
    if ev.interval and start == 0:  # the starting point (after any warm start), for the learning curve
        metrics = coordinator.evaluate(ev.num_tasks, ev.split, ev.temperature)[1] if rank0 else None
        if rank0 and best is not None and best.improves(metrics):  # the start: its checkpoint, or its model
            warm = Checkpoint.of_run(config.run_dir, 0)
            best.record(metrics[best.metric], 0, warm.path if warm.is_complete else model_path)
        report({"phase": "eval", "iteration": 0, **_share(metrics)})

    tc = config.training
    # Replicas on the same GPUs as the learners give their memory back during the update (sync mode only:
    # in async mode they are generating the next batch then; the config refuses the combination).
    sleeping = (rank0 and not tc.async_rollout and coordinator.group.engine == "vllm"  # policy.engine resolved
                and config.policy.vllm_settings().sleep_mode)
    pending: PendingRollout | None = None
    if rank0 and tc.async_rollout and start < tc.iterations:
        pending = coordinator.start_rollout(start)
    try:
        for iteration in range(start, tc.iterations):
            began = time.perf_counter()
            trajectories, result = None, None
            if rank0:
                trajectories, result = coordinator.finish_rollout(pending or coordinator.start_rollout(iteration))
                pending = None
                if tc.async_rollout and iteration + 1 < tc.iterations:
                    pending = coordinator.start_rollout(iteration + 1)  # runs on this version, then the next
            trajectories, result = _share((trajectories, result))
            result["rollout/policy_lag_max"] = policy_lag(trajectories, version)
            _update_and_report(config, learner, estimator, coordinator, tokenizer, report, iteration, version,
                               trajectories, result, began, sleeping, best)
            version += 1
    finally:
        if pending is not None:  # only after an error: the last iteration launches nothing
            pending.cancel()


def _save_checkpoint(config: UserRLConfig, learner: Learner, coordinator: RolloutCoordinator | None,
                     tokenizer: Any, iteration: int, version: int) -> Path:
    """Write the checkpoint after `iteration` iterations (collective); returns its folder."""
    # The task source's state (the curriculum's map) after this iteration's observe: exact on resume.
    documents = task_source_documents(coordinator.train_tasks) if learner.rank == 0 else None
    path = checkpoint_path(config, iteration)
    learner.save_checkpoint(path, {"iteration": iteration, "policy_version": version,
                                   "config": config.model_dump(mode="json")}, tokenizer, documents)
    return path


def _update_and_report(config: UserRLConfig, learner: Learner, estimator: AdvantageEstimator,
                       coordinator: RolloutCoordinator | None, tokenizer: Any, report: _Reporter, iteration: int, version: int,
                       trajectories: list[Trajectory], result: dict[str, Any], began: float,
                       sleeping: bool, best: BestCheckpoint | None) -> None:
    """Update on one batch, sync weights, checkpoint, evaluate and report (`version`: before the update)."""
    ev = config.evaluation
    rank0 = learner.rank == 0
    aborted = [t for t in trajectories if t.aborted]
    if config.training.drop_aborted:
        trajectories = [t for t in trajectories if not t.aborted]
    result["rollout/aborted"] = float(len(aborted))
    if config.training.rollout_filter_ratio < 1 and trajectories:  # StarPO-S: the groups that vary most
        kept = high_variance_groups([t.group_id for t in trajectories], [t.episode_return for t in trajectories],
                                    config.training.rollout_filter_ratio)
        result["rollout/filtered_episodes"] = float(len(trajectories) - len(kept))
        trajectories = [trajectories[i] for i in kept]

    if sleeping and rank0:
        result["time/replica_sleep_s"] = coordinator.group.sleep_replicas()
    result["time/advantages_s"] = 0.0
    if trajectories:  # every rank sees the same batch, so every rank takes the same branches
        tick = time.perf_counter()
        advantages, group_stats, value_targets = estimator.estimate(trajectories, learner.compute_values)
        result["time/advantages_s"] = time.perf_counter() - tick
        result.update({f"groups/{k}": v for k, v in group_stats.items()})
        if config.training.filter_groups:  # DAPO: the groups without signal would only cost update time
            kept = groups_with_signal([t.group_id for t in trajectories], advantages)
            result["rollout/filtered_episodes"] = (result.get("rollout/filtered_episodes", 0.0)
                                                   + len(trajectories) - len(kept))
            trajectories, advantages = [trajectories[i] for i in kept], [advantages[i] for i in kept]
            if value_targets is not None:
                value_targets = ValueTargets([value_targets.old_values[i] for i in kept],
                                             [value_targets.returns[i] for i in kept], value_targets.stats)
    if trajectories:
        tick = time.perf_counter()
        metrics = learner.update(trajectories, advantages, value_targets)
        result.update({k if k.startswith("critic/") else f"learner/{k}": v for k, v in metrics.items()})
        result["time/update_s"] = time.perf_counter() - tick
    else:
        result.update({"time/update_s": 0.0, "learner/processed_tokens": 0.0})
    # Every token goes through forward and backward, so throughput counts them all (not just the trained ones).
    result["learner/tokens_per_s"] = result["learner/processed_tokens"] / max(result["time/update_s"], 1e-9)

    if sleeping and rank0:
        result["time/replica_sleep_s"] += coordinator.group.wake_replicas()
    tick = time.perf_counter()
    version += 1
    sync_weights(learner, coordinator, version)
    result["time/weight_sync_s"] = time.perf_counter() - tick
    if rank0:  # the sync's phases (gather, broadcast, load, object store: EnvRunnerGroup.last_sync)
        group = coordinator.group
        result.update({f"time/weight_sync/{phase}": seconds for phase, seconds in group.last_sync.items()})
        result["weight_sync/group_replicas"] = float(sum(path == "group" for path in group.sync_paths.values()))

    done = iteration + 1
    cc = config.checkpointing
    path = None
    if cc.every and (done % cc.every == 0 or done == config.training.iterations):
        path = _save_checkpoint(config, learner, coordinator, tokenizer, done, version)
        result["checkpoint"] = str(path)
        if rank0:  # save_checkpoint ends with a barrier: `path` is complete before anything goes
            prune_checkpoints(path, cc.keep, best.path if best else None)

    if ev.interval and done % ev.interval == 0:
        if rank0:
            result.update(coordinator.evaluate(ev.num_tasks, ev.split, ev.temperature)[1])
        # Every rank takes part in a checkpoint the schedule did not write (after the evaluation, so the
        # scheduled ones hold the same RNG state as without keep_best).
        if best is not None and _share(rank0 and best.improves(result)):
            if path is None:
                path = _save_checkpoint(config, learner, coordinator, tokenizer, done, version)
                result["checkpoint"] = str(path)
            if rank0:
                best.record(result[best.metric], done, path)
                prune_checkpoints(path, cc.keep, path)

    result["memory/learner_rss_gb"] = max(_share_all(_release_memory()))
    result.update({"phase": "rl", "iteration": done, "policy_version": version,
                   "time/iteration_s": time.perf_counter() - began})
    if rank0:
        result["samples"] = trajectories[: config.tracking.sample_trajectories]
    report(result)
