"""Rank 0's side of the RL loop: draw each iteration's tasks, play them through the EnvRunnerGroup, and
measure them."""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from userrl.actors.env_runner import EpisodeSpec
from userrl.checkpoint import TASK_SOURCE_FILE, Checkpoint
from userrl.config import UserRLConfig
from userrl.env_runner_group import EnvRunnerGroup, RolloutJob
from userrl.envs import Task, load_tasks
from userrl.envs.registry import get_gym
from userrl.group_scorers import GroupScorer, group_scorer_factory
from userrl.protocols import get_protocol
from userrl.task_sources import TaskSource, registered_task_sources
from userrl.trajectory import Trajectory


class TaskMixture:
    """The configured gyms' tasks, drawn by gym weight; draws depend only on (seed, iteration). The default
    TaskSource: fixed tasks, nothing learned, nothing to checkpoint. Training (`split` None) leaves out the
    held-out gyms (weight 0); evaluation (a `split`) plays every gym."""

    def __init__(self, config: UserRLConfig, split: str | None = None):
        self.gyms, self.tasks, weights = [], [], []
        for spec in config.env.gyms:
            if split is None and spec.weight == 0:
                continue
            filters: dict[str, Any] = {"difficulty": spec.difficulty} if spec.difficulty is not None else {}
            filters.update(config.task_options(spec.name, evaluation=split is not None))
            tasks = load_tasks(spec.name, split=split or spec.split, source=spec.source,
                               data_root=config.env.data_root, **filters)
            if not tasks:
                raise ValueError(f"env.gyms: gym {spec.name!r} has no tasks for split {split or spec.split!r}")
            self.gyms.append(spec.name)
            self.tasks.append(tasks)
            weights.append(spec.weight)
        self.weights = np.asarray(weights) / sum(weights)  # evaluation never draws: held-out weights may be 0
        self.seed = config.experiment.seed

    def sample(self, count: int, iteration: int) -> list[Task]:
        """`count` tasks for one iteration (reproducible: the data position is the iteration)."""
        rng = np.random.default_rng([self.seed, iteration])
        picks = rng.choice(len(self.gyms), size=count, p=self.weights)
        return [self.tasks[g][int(rng.integers(len(self.tasks[g])))] for g in picks]

    def first(self, count: int) -> list[Task]:
        """The first `count` tasks of each gym, for evaluation."""
        return [task for tasks in self.tasks for task in tasks[:count]]

    def next_tasks(self, count: int, iteration: int) -> list[Task]:
        """TaskSource: `sample`."""
        return self.sample(count, iteration)

    def observe(self, iteration: int, specs: Sequence[EpisodeSpec], trajectories: Sequence[Trajectory]) -> dict[str, float]:
        """TaskSource: a fixed mixture learns nothing."""
        return {}

    def all_tasks(self) -> list[Task]:
        """TaskSource: every gym's tasks, gym by gym."""
        return [task for tasks in self.tasks for task in tasks]

    def state_dict(self) -> dict[str, Any]:
        """TaskSource: no state (draws depend on the seed and the iteration alone)."""
        return {}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """TaskSource: nothing to restore; a checkpoint's state of another source (e.g. a curriculum run
        resumed without it) is set aside."""


def task_source_documents(source: TaskSource) -> dict[str, Any]:
    """What a checkpoint keeps of the source: {TASK_SOURCE_FILE: its state}, or {} when it has none."""
    state = source.state_dict()
    return {TASK_SOURCE_FILE: state} if state else {}


def restore_task_source(source: TaskSource, checkpoint: Path) -> bool:
    """Load the source's state from a checkpoint folder; False when the folder has none (e.g. an SFT warm
    start, or a run without a curriculum): the source then starts fresh."""
    path = Checkpoint(checkpoint).task_source_file
    if not path.is_file():
        return False
    source.load_state_dict(json.loads(path.read_text()))
    return True


def make_task_source(config: UserRLConfig) -> TaskSource:
    """The training task source: the first registered one the config asks for (userrl/task_sources.py, e.g. a
    plug-in's curriculum), else the configured gyms' fixed mixture."""
    for factory in registered_task_sources().values():
        if (source := factory(config)) is not None:
            return source
    return TaskMixture(config)


def episode_specs(tasks: list[Task], group_size: int, prefix: str, scripted_users: bool = False) -> list[EpisodeSpec]:
    """Repeat every task `group_size` times; the copies share a fresh group id."""
    return [EpisodeSpec(task, uid=f"{prefix}-g{g}-s{s}", group_id=f"{prefix}-g{g}", scripted_users=scripted_users)
            for g, task in enumerate(tasks) for s in range(group_size)]


def rollout_metrics(trajectories: list[Trajectory], seconds: float, prefix: str = "rollout",
                    protocol: str | None = None) -> dict[str, float]:
    """Reward, success, turns, valid actions, stop reasons, tokens/s; per gym too; what the model-backed users
    and judges cost (`user_metrics`); the action protocol's own metrics (`<prefix>/<group>/...`: native_tools
    has MUA-RL's, `<prefix>/mua/...`) when `protocol` is given.

    Aborted episodes are counted (in all, per gym, with their failed role calls) and left out of every
    mean: a failure is never scored as a 0.
    """
    if not trajectories:
        return {}
    played = [t for t in trajectories if not t.aborted]
    sampled = sum(t.num_sampled for t in trajectories)
    metrics = {
        f"{prefix}/sampled_tokens": float(sampled),
        f"{prefix}/tokens_per_s": sampled / max(seconds, 1e-9),
        f"{prefix}/episodes": float(len(trajectories)),
        f"{prefix}/aborted": float(len(trajectories) - len(played)),
    }
    if played:
        returns = np.array([t.episode_return for t in played])
        turns = [len(t.turns) for t in played]
        executed = sum(turn.executed for t in played for turn in t.turns)
        metrics.update({
            f"{prefix}/reward_mean": float(returns.mean()),
            f"{prefix}/reward_std": float(returns.std()),
            f"{prefix}/success_rate": float(np.mean([t.succeeded for t in played])),
            f"{prefix}/turns_mean": float(np.mean(turns)),
            f"{prefix}/valid_action_rate": executed / max(sum(turns), 1),
        })
    for reason, count in Counter(t.stop_reason for t in trajectories).items():
        metrics[f"{prefix}/stop_{reason}"] = count / len(trajectories)
    for gym in sorted({t.env_name for t in trajectories}):
        of_gym = [t for t in trajectories if t.env_name == gym]
        gym_played = [t.episode_return for t in of_gym if not t.aborted]
        if gym_played:
            metrics[f"{prefix}/reward_mean/{gym}"] = float(np.mean(gym_played))
        metrics[f"{prefix}/aborted/{gym}"] = float(len(of_gym) - len(gym_played))
        turns = [turn for t in of_gym for turn in t.turns]
        metrics[f"{prefix}/role_calls/{gym}"] = float(sum(turn.role_calls for turn in turns))
        metrics[f"{prefix}/failed_role_calls/{gym}"] = float(sum(turn.failed_role_calls for turn in turns))
    metrics.update(user_metrics(trajectories, prefix))
    for group, values in (get_protocol(protocol).episode_metrics(trajectories) if protocol else {}).items():
        metrics.update({f"{prefix}/{group}/{name}": value for name, value in values.items()})
    return metrics


def user_metrics(trajectories: Sequence[Trajectory], prefix: str = "rollout") -> dict[str, float]:
    """The model-backed users' and judges' cost over all episodes, aborted ones included (they waited too):
    tokens generated, requests sent again after a user replica died, the reply cache's hit rate (0 without
    a cache), and `time/user_s` (`<prefix>/user_wait_s` outside training): the seconds episodes waited for
    them, summed over episodes (concurrent episodes each count their own wait). {} without model users."""
    requests = sum(t.user_requests for t in trajectories)
    if not requests:
        return {}
    wait = "time/user_s" if prefix == "rollout" else f"{prefix}/user_wait_s"
    return {f"{prefix}/user_tokens": float(sum(t.user_tokens for t in trajectories)),
            f"{prefix}/user_requests": float(requests),
            f"{prefix}/user_requests_resent": float(sum(t.user_resent for t in trajectories)),
            f"{prefix}/user_cache_hit_rate": sum(t.user_cache_hits for t in trajectories) / requests,
            wait: float(sum(t.user_wait_s for t in trajectories))}


def make_group_scorer(config: UserRLConfig) -> GroupScorer | None:
    """The group scorer the configured gyms declare (MultiTurnEnv.group_scorer, e.g. a judge of user replies),
    or None when their env steps reward the episodes."""
    names = sorted({name for spec in config.env.gyms if (name := get_gym(spec.name).group_scorer) is not None})
    if len(names) > 1:
        raise ValueError(f"env.gyms need different group scorers {names}; train them in separate runs")
    return group_scorer_factory(names[0])(config) if names else None


@dataclass
class PendingRollout:
    """An iteration's episodes handed to the env runners, not gathered yet."""

    job: RolloutJob
    specs: list[EpisodeSpec]
    iteration: int | None = None

    def cancel(self) -> None:
        """Stop the runners' work on these episodes (a run that ends early leaves nothing in flight)."""
        self.job.cancel()


class RolloutCoordinator:
    """Rank 0's rollout driver: draws each iteration's tasks and plays them through the EnvRunnerGroup."""

    def __init__(self, config: UserRLConfig, group: EnvRunnerGroup):
        self.config = config
        self.group = group
        self.train_tasks: TaskSource = make_task_source(config)
        self.group_scorer = make_group_scorer(config)
        #: Told (done, total) as evaluation episodes finish (the driver's progress bar, userrl/progress.py).
        self.eval_progress: Callable[[int, int], None] | None = None

    def launch(self, specs: list[EpisodeSpec], seed: int, temperature: float | None = None,
               iteration: int | None = None) -> PendingRollout:
        """Spread episodes over the runners and return at once; `gather` collects them."""
        chunks = self.group.split(specs)
        return PendingRollout(self.group.launch(chunks, [seed] * len(chunks), temperature), specs, iteration)

    @staticmethod
    def gather(pending: PendingRollout) -> list[Trajectory]:
        """Wait for launched episodes and return their trajectories in the order of their specs."""
        by_uid = {t.uid: t for t in pending.job.gather()}
        return [by_uid[spec.uid] for spec in pending.specs]

    def start_rollout(self, iteration: int) -> PendingRollout:
        """Launch one iteration's batch (batch_size tasks x group_size episodes) without waiting for it."""
        tc = self.config.training
        specs = episode_specs(self.train_tasks.next_tasks(tc.batch_size, iteration), tc.group_size, f"it{iteration}")
        return self.launch(specs, seed=self.config.experiment.seed, iteration=iteration)

    def finish_rollout(self, pending: PendingRollout) -> tuple[list[Trajectory], dict[str, float]]:
        """Gather a launched batch; `time/rollout_s` runs from its launch, `time/rollout_wait_s` from now.
        Restarted actors and re-run episodes since the last gather are counted as `rollout/...`."""
        waited = time.perf_counter()
        trajectories = self.gather(pending)
        done = time.perf_counter()
        # Before the metrics: group-scored trajectories get their rewards (or are aborted) here.
        scored = self.group_scorer.score(pending.specs, trajectories) if self.group_scorer else {}
        metrics = rollout_metrics(trajectories, done - pending.job.started, protocol=self.config.env.protocol)
        metrics.update(scored)
        if pending.iteration is not None:  # a training batch: the task source learns from its scores
            metrics.update(self.train_tasks.observe(pending.iteration, pending.specs, trajectories))
        metrics.update({f"rollout/{name}": count for name, count in self.group.pop_counters().items()})
        metrics["time/rollout_s"] = done - pending.job.started
        metrics["time/rollout_wait_s"] = done - waited
        return trajectories, metrics

    def evaluate(self, num_tasks: int, split: str, temperature: float) -> tuple[list[Trajectory], dict[str, float]]:
        """Greedy (by default) episodes on the first tasks of each gym's evaluation split."""
        tasks = TaskMixture(self.config, split=split).first(num_tasks)
        start = time.perf_counter()
        specs = episode_specs(tasks, 1, "eval", scripted_users=self.config.evaluation.scripted_users)
        trajectories = self.group.play(specs, seed=self.config.experiment.seed, temperature=temperature,
                                       on_progress=self.eval_progress)
        seconds = time.perf_counter() - start
        scored = self.group_scorer.score(specs, trajectories, evaluation=True) if self.group_scorer else {}
        metrics = rollout_metrics(trajectories, seconds, prefix="eval", protocol=self.config.env.protocol)
        return trajectories, {**metrics, **scored}
