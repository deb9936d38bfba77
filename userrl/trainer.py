"""The Algorithm, RLlib-style: a config builder, `build_trainer()`, `fit()`, `evaluate()`, resume.

Shapes copied from RLlib (config builder, runner group, learner group); classes are our own because
RLlib's learners are DDP-only and its env runners assume numeric spaces (see docs/ARCHITECTURE.md).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import queue as queue_lib
import threading
import uuid
from collections.abc import Callable
from typing import Any

import ray
from ray.train import FailureConfig, RunConfig, ScalingConfig
from ray.train.torch import TorchTrainer
from ray.util.queue import Queue
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from userrl import faults
from userrl.allocator import allocator_env
from userrl.checkpoint import Checkpoint
from userrl.config import UserRLConfig, apply_overrides, parse_config
from userrl.env_runner_group import EnvRunnerGroup, episode_group
from userrl.models import check_critic_model, resolve_model
from userrl.tracking import MLflowTracker
from userrl.train_loop import local_learner, train_loop_per_worker

log = logging.getLogger(__name__)


class TrainerConfig:
    """Builder for a GRPO-multiturn run, in RLlib's `AlgorithmConfig` manner."""

    def __init__(self, base: UserRLConfig | dict[str, Any] | None = None):
        if isinstance(base, UserRLConfig):
            base = base.model_dump(mode="json")
        self._data: dict[str, Any] = dict(base or {})

    def _section(self, name: str, values: dict[str, Any]) -> TrainerConfig:
        self._data.setdefault(name, {}).update(values)
        return self

    def experiment(self, **values: Any) -> TrainerConfig:
        """Name, seed, output folder."""
        return self._section("experiment", values)

    def environment(self, **values: Any) -> TrainerConfig:
        """Gyms (mixture), protocol, turn and step limits."""
        return self._section("env", values)

    def env_runners(self, **values: Any) -> TrainerConfig:
        """Number and resources of env-runner actors."""
        return self._section("env_runners", values)

    def policy(self, **values: Any) -> TrainerConfig:
        """Model, engine, replicas, sampling."""
        return self._section("policy", values)

    def training(self, **values: Any) -> TrainerConfig:
        """Iterations, batch and group size, optimizer, credit assignment, clipping, KL."""
        return self._section("training", values)

    def sft(self, **values: Any) -> TrainerConfig:
        """Supervised warm start before RL."""
        return self._section("sft", values)

    def learners(self, **values: Any) -> TrainerConfig:
        """Learner group size, resources, precision."""
        return self._section("learners", values)

    def evaluation(self, **values: Any) -> TrainerConfig:
        """Evaluation interval, task count, split, temperature."""
        return self._section("evaluation", values)

    def checkpointing(self, **values: Any) -> TrainerConfig:
        """Checkpoint frequency and resume path."""
        return self._section("checkpointing", values)

    def tracking(self, **values: Any) -> TrainerConfig:
        """MLflow store and experiment."""
        return self._section("tracking", values)

    def overrides(self, items: list[str]) -> TrainerConfig:
        """Dotted `section.key=value` overrides."""
        apply_overrides(self._data, items)
        return self

    def to_config(self) -> UserRLConfig:
        """Validate into a UserRLConfig (ConfigError names any bad key)."""
        return parse_config(self._data)

    def build_trainer(self) -> Trainer:
        """Validate and build the Algorithm."""
        return Trainer(self.to_config())


def _result_key(result: dict[str, Any]) -> tuple[Any, ...]:
    """What a result is of (phase and position): a re-run after a learner restart has the same key."""
    if result["phase"] == "sft":
        return "sft", result["sft/epoch"], result["sft/step"]
    return result["phase"], result.get("iteration", 0)


def progress_event(message: dict[str, Any], iterations: int) -> dict[str, Any] | None:
    """A learners' message as a progress event {"of": "sft" | "rl" | "eval", "done", "total"}, or None."""
    phase = message["phase"]
    if phase == "progress":
        return {key: message[key] for key in ("of", "done", "total")}
    if phase == "sft":
        return {"of": "sft", "done": message["sft/step"], "total": message["sft/steps"]}
    if phase in ("start", "rl"):  # a (re)start goes on from its checkpoint's iteration
        return {"of": "rl", "done": message["iteration"], "total": iterations}
    return None


def learner_resources(config: UserRLConfig) -> dict[str, float]:
    """Ray resources of one learner (Ray Train reserves a whole GPU per worker unless told otherwise)."""
    lc = config.learners
    return {"CPU": lc.num_cpus_per_learner, **({"GPU": lc.num_gpus_per_learner} if lc.use_gpu else {})}


class Trainer:
    """Runs GRPO-multiturn: env runners and policy replicas as actors, learners as a TorchTrainer group."""

    def __init__(self, config: UserRLConfig):
        self.config = config = config.with_absolute_paths()
        self.results: list[dict[str, Any]] = []
        resume = config.checkpointing.resume_from
        self.model_path = (str(Checkpoint.open(resume, "checkpointing.resume_from").model_dir) if resume
                           else resolve_model(config.policy.model))
        self.critic_path = (check_critic_model(config.critic.model, self.model_path)
                            if config.training.uses_critic and config.critic.model else None)
        # Ray and the env runners stay up across fit/evaluate calls, until `stop`.
        self._running = contextlib.ExitStack()
        self.env_runner_group: EnvRunnerGroup = self._running.enter_context(episode_group(config, self.model_path))

    def fit(self, on_result: Callable[[dict[str, Any]], None] | None = None,
            tracker: MLflowTracker | None = None,
            on_progress: Callable[[dict[str, Any]], None] | None = None) -> list[dict[str, Any]]:
        """Train for `training.iterations`; returns one result per iteration (SFT steps are passed to
        `on_result` only). `tracker` defaults to a new MLflow run of this config. `on_progress` gets each
        `progress_event` (re-runs after a learner restart included), for bars (userrl/progress.py)."""
        config = self.config
        tracker = tracker or MLflowTracker(config)
        lc = config.learners
        local = lc.num_learners == 0
        # Ray Train's workers report through a Ray queue with no CPU (it must fit a Tune trial's bundles), on
        # this process's node: a queue placed on a node that dies would end the run although learners and env
        # runners survive. The local learner, a thread of this process, through a plain one.
        results_queue: Any = queue_lib.Queue() if local else Queue(actor_options={
            "num_cpus": 0,
            "scheduling_strategy": NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=False)})
        # The validated config itself: the learners neither parse it again nor load the plug-ins for it.
        loop_config = {"config": config, "model_path": self.model_path, "critic_path": self.critic_path,
                       "env_runner_group": self.env_runner_group, "results": results_queue,
                       # Marks this fit's checkpoints: a restarted learner group resumes only from those.
                       "fit_id": uuid.uuid4().hex, "fault": os.environ.get(faults.ENV)}
        if local:
            fit = functools.partial(local_learner, loop_config, max(1, int(lc.num_cpus_per_learner)))
        else:
            fit = TorchTrainer(
                train_loop_per_worker, train_loop_config=loop_config,
                scaling_config=ScalingConfig(num_workers=lc.num_learners, use_gpu=lc.use_gpu,
                                             resources_per_worker=learner_resources(config)),
                run_config=RunConfig(name=config.experiment.name,
                                     storage_path=str((config.run_dir / "ray_train").resolve()),
                                     failure_config=FailureConfig(max_failures=lc.max_failures),
                                     worker_runtime_env={"env_vars": allocator_env(lc.allocator)}),
            ).fit
        failure: list[BaseException] = []

        def run() -> None:
            try:
                fit()
            except BaseException as error:  # noqa: BLE001 - re-raised in the calling thread
                failure.append(error)

        thread = threading.Thread(target=run, name="userrl-trainer", daemon=True)
        thread.start()
        step, starts, first = 0, 0, len(self.results)
        delivered: set[tuple[Any, ...]] = set()  # results the progress lines and MLflow have had
        try:
            while thread.is_alive() or not results_queue.empty():
                try:
                    result = results_queue.get(timeout=1.0)
                except queue_lib.Empty:
                    continue
                if on_progress and (event := progress_event(result, config.training.iterations)):
                    on_progress(event)
                if result["phase"] == "progress":  # for on_progress only: neither a result nor a metric
                    continue
                if result["phase"] == "start":  # the learner group (re)started; a second start is a restart
                    starts += 1
                    if starts == 1:  # what learners.allocator resolved to where they run
                        tracker.client.set_tag(tracker.run_id, "learner_allocator", result["allocator"])
                    if starts > 1:
                        self._restarted(result, starts - 1, tracker, first)
                    continue
                if result["phase"] == "rl":
                    self.results.append(result)
                key = _result_key(result)
                if key in delivered:  # re-run after a restart: shown and logged the first time only
                    continue
                delivered.add(key)
                step += 1
                tracker.log_result(result, result.get("iteration", 0) if result["phase"] != "sft" else step)
                if on_result:
                    on_result(result)
            thread.join()
            if failure:
                raise RuntimeError(f"training failed: {failure[0]}") from failure[0]
        except BaseException:
            tracker.finish("FAILED")
            raise
        tracker.finish("FINISHED")
        self.mlflow_run_id, self.mlflow_uri = tracker.run_id, tracker.uri
        return self.results

    def _restarted(self, notice: dict[str, Any], restarts: int, tracker: MLflowTracker, first: int) -> None:
        """Ray Train restarted the learner group: say so, and drop the results of iterations it re-runs."""
        start = notice["iteration"]
        log.warning("learner group restarted after a failure (%d of learners.max_failures=%d): going on from %s "
                    "at iteration %d; iterations after it are re-run, and their progress lines and MLflow "
                    "metrics are not repeated", restarts, self.config.learners.max_failures,
                    notice["checkpoint"] or "the start", start)
        self.results[first:] = [r for r in self.results[first:] if r["iteration"] <= start]
        tracker.log_result({"learner/restarts": restarts}, start)
        tracker.client.set_tag(tracker.run_id, "learner_restarts", str(restarts))

    def evaluate(self, num_tasks: int | None = None, split: str | None = None,
                 temperature: float | None = None) -> dict[str, float]:
        """Play the evaluation split with the replicas' current weights; returns eval/* metrics."""
        from userrl.coordinator import RolloutCoordinator

        ev = self.config.evaluation
        coordinator = RolloutCoordinator(self.config, self.env_runner_group)
        _, metrics = coordinator.evaluate(num_tasks or ev.num_tasks, split or ev.split,
                                          ev.temperature if temperature is None else temperature)
        return metrics

    def stop(self) -> None:
        """Release actors (and the local Ray this Algorithm started)."""
        self._running.close()
