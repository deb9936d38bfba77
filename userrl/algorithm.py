"""The Algorithm, RLlib-style: a config builder, `build_algo()`, `fit()`, `evaluate()`, resume.

Shapes copied from RLlib (config builder, runner group, learner group); classes are our own because
RLlib's learners are DDP-only and its env runners assume numeric spaces (see docs/ARCHITECTURE.md).
"""

from __future__ import annotations

import logging
import math
import os
import queue as queue_lib
import socket
import threading
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import ray
from ray.train import FailureConfig, RunConfig, ScalingConfig
from ray.train.torch import TorchTrainer
from ray.util.queue import Queue

from userrl import faults
from userrl.actors.env_runner import EnvRunner
from userrl.actors.policy_replica import PolicyReplica
from userrl.config import UserRLConfig, apply_overrides, parse_config
from userrl.models import resolve_model
from userrl.rollout import RolloutLimits
from userrl.tracking import MLflowTracker
from userrl.train_loop import train_loop_per_worker

log = logging.getLogger(__name__)
# Ray Train logs every report at INFO; our own progress lines say the same more briefly.
_QUIET = ray.LoggingConfig(encoding="TEXT", log_level="WARNING")


class GRPOMultiTurnConfig:
    """Builder for a GRPO-multiturn run, in RLlib's `AlgorithmConfig` manner."""

    def __init__(self, base: UserRLConfig | dict[str, Any] | None = None):
        if isinstance(base, UserRLConfig):
            base = base.model_dump(mode="json")
        self._data: dict[str, Any] = dict(base or {})

    def _section(self, name: str, values: dict[str, Any]) -> GRPOMultiTurnConfig:
        self._data.setdefault(name, {}).update(values)
        return self

    def experiment(self, **values: Any) -> GRPOMultiTurnConfig:
        """Name, seed, output folder."""
        return self._section("experiment", values)

    def environment(self, **values: Any) -> GRPOMultiTurnConfig:
        """Gyms (mixture), protocol, turn and step limits."""
        return self._section("env", values)

    def env_runners(self, **values: Any) -> GRPOMultiTurnConfig:
        """Number and resources of env-runner actors."""
        return self._section("env_runners", values)

    def policy(self, **values: Any) -> GRPOMultiTurnConfig:
        """Model, engine, replicas, sampling."""
        return self._section("policy", values)

    def training(self, **values: Any) -> GRPOMultiTurnConfig:
        """Iterations, batch and group size, optimizer, credit assignment, clipping, KL."""
        return self._section("training", values)

    def sft(self, **values: Any) -> GRPOMultiTurnConfig:
        """Supervised warm start before RL."""
        return self._section("sft", values)

    def learners(self, **values: Any) -> GRPOMultiTurnConfig:
        """Learner group size, resources, precision."""
        return self._section("learners", values)

    def evaluation(self, **values: Any) -> GRPOMultiTurnConfig:
        """Evaluation interval, task count, split, temperature."""
        return self._section("evaluation", values)

    def checkpointing(self, **values: Any) -> GRPOMultiTurnConfig:
        """Checkpoint frequency and resume path."""
        return self._section("checkpointing", values)

    def tracking(self, **values: Any) -> GRPOMultiTurnConfig:
        """MLflow store and experiment."""
        return self._section("tracking", values)

    def overrides(self, items: list[str]) -> GRPOMultiTurnConfig:
        """Dotted `section.key=value` overrides."""
        apply_overrides(self._data, items)
        return self

    def to_config(self) -> UserRLConfig:
        """Validate into a UserRLConfig (ConfigError names any bad key)."""
        return parse_config(self._data)

    def build_algo(self) -> GRPOMultiTurn:
        """Validate and build the Algorithm."""
        return GRPOMultiTurn(self.to_config())


def check_ray_address(address: str, timeout_s: float = 5.0) -> None:
    """Fail fast (ConnectionError) when a Ray cluster address cannot be reached.

    `ray.init(address=...)` keeps retrying an unreachable GCS for minutes; one TCP connect says the same
    in seconds. "auto" and "local" are left to Ray, which fails at once when there is nothing to find.
    """
    if address in ("auto", "local"):
        return
    hint = ("start a cluster with `ray start --head` (or fix ray.address / $RAY_ADDRESS); "
            "unset both to train on a local Ray")
    if address.startswith(("http://", "https://")):
        raise ValueError(f"Ray address {address!r} is a dashboard/Jobs URL; ray.address needs the cluster's "
                         f"GCS address (host:6379) -- submit jobs to the URL with `ray job submit` instead")
    host, _, port = address.removeprefix("ray://").rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"Ray address {address!r} is not of the form host:port (or ray://host:port); {hint}")
    try:
        socket.create_connection((host, int(port)), timeout=timeout_s).close()
    except OSError as error:
        raise ConnectionError(f"cannot reach the Ray cluster at {address} ({error}); {hint}") from None


def _ray_cpus(config: UserRLConfig) -> int:
    needed = (config.learners.num_learners * config.learners.num_cpus_per_learner
              + config.policy.num_replicas * config.policy.num_cpus_per_replica
              + config.env_runners.num_env_runners * config.env_runners.num_cpus_per_env_runner + 1)
    return max(os.cpu_count() or 1, math.ceil(needed))


def _result_key(result: dict[str, Any]) -> tuple[Any, ...]:
    """What a result is of (phase and position): a re-run after a learner restart has the same key."""
    if result["phase"] == "sft":
        return "sft", result["sft/epoch"], result["sft/step"]
    return result["phase"], result.get("iteration", 0)


def learner_resources(config: UserRLConfig) -> dict[str, float]:
    """Ray resources of one learner (Ray Train reserves a whole GPU per worker unless told otherwise)."""
    lc = config.learners
    return {"CPU": lc.num_cpus_per_learner, **({"GPU": lc.num_gpus_per_learner} if lc.use_gpu else {})}


class GRPOMultiTurn:
    """Runs GRPO-multiturn: env runners and policy replicas as actors, learners as a TorchTrainer group."""

    def __init__(self, config: UserRLConfig):
        self.config = config = config.with_absolute_paths()
        self.results: list[dict[str, Any]] = []
        self._owns_ray = False
        self._setup_ray()
        resume = config.checkpointing.resume_from
        if resume and not (Path(resume) / "meta.json").is_file():
            raise FileNotFoundError(f"checkpointing.resume_from={resume} is not a userrl checkpoint folder "
                                    "(no meta.json); pass a folder written by a training run")
        self.model_path = str(Path(resume).resolve() / "model") if resume else resolve_model(config.policy.model)
        self.replicas, self.runners = self._start_actors()

    def _setup_ray(self) -> None:
        os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")  # no weight-loading bars from every actor
        if ray.is_initialized():
            return
        runtime_env = {"env_vars": {"HF_HUB_DISABLE_PROGRESS_BARS": "1", "TOKENIZERS_PARALLELISM": "false"}}
        address = self.config.ray.address or os.environ.get("RAY_ADDRESS")
        if address:
            check_ray_address(address)
            ray.init(address=address, logging_config=_QUIET, runtime_env=runtime_env)
        else:
            ray.init(num_cpus=self.config.ray.num_cpus or _ray_cpus(self.config), logging_config=_QUIET,
                     runtime_env=runtime_env)
            self._owns_ray = True

    def _start_actors(self) -> tuple[list[Any], list[Any]]:
        from transformers import AutoTokenizer

        pc, ec = self.config.policy, self.config.env
        replica_cls = ray.remote(PolicyReplica)

        def start_replicas(path: str, engine: str, count: int, gpus: float = 0) -> list[Any]:
            pad = AutoTokenizer.from_pretrained(path).pad_token_id
            return [replica_cls.options(num_cpus=pc.num_cpus_per_replica, num_gpus=gpus, max_concurrency=4096).remote(
                path, engine, pc.dtype, pc.max_batch_size, pc.num_threads, pad, max_model_len=pc.max_model_len,
                engine_options=pc.vllm) for _ in range(count)]

        replicas = start_replicas(self.model_path, pc.engine, pc.num_replicas, pc.num_gpus_per_replica)
        limits = RolloutLimits(max_turns=ec.max_turns, max_new_tokens=pc.max_new_tokens,
                               max_model_len=pc.max_model_len, max_response_len=pc.max_response_len,
                               temperature=pc.temperature, top_p=pc.top_p,
                               show_reward_in_feedback=ec.show_reward_in_feedback)
        env_kwargs = {spec.name: {"max_steps": ec.max_steps, "step_timeout_s": ec.step_timeout_s,
                                  "backend": ec.backend, **spec.kwargs} for spec in ec.gyms}
        user_replicas, user_path = [], None
        if ec.backend == "local":
            user_path = resolve_model(ec.local_user_model)
            user_replicas = start_replicas(user_path, "hf", ec.local_user_replicas)
        runner_cls = ray.remote(EnvRunner)
        runners = [runner_cls.options(num_cpus=self.config.env_runners.num_cpus_per_env_runner,
                                      max_concurrency=64).remote(
            self.model_path, ec.protocol, limits, replicas, env_kwargs, user_backend=ec.backend, llm=ec.llm,
            user_replicas=user_replicas, user_tokenizer_path=user_path)
            for _ in range(self.config.env_runners.num_env_runners)]
        self.user_replicas = user_replicas
        ray.get([r.get_version.remote() for r in replicas])  # fail fast if a replica cannot start
        return replicas, runners

    def fit(self, on_result: Callable[[dict[str, Any]], None] | None = None,
            tracker: MLflowTracker | None = None) -> list[dict[str, Any]]:
        """Train for `training.iterations`; returns one result per iteration (SFT steps are passed to
        `on_result` only). `tracker` defaults to a new MLflow run of this config."""
        config = self.config
        tracker = tracker or MLflowTracker(config)
        results_queue = Queue(actor_options={"num_cpus": 0})  # must fit a Tune trial's bundles
        lc = config.learners
        trainer = TorchTrainer(
            train_loop_per_worker,
            train_loop_config={"config": config.model_dump(mode="json"), "model_path": self.model_path,
                               "runners": self.runners, "replicas": self.replicas, "results": results_queue,
                               # Marks this fit's checkpoints: a restarted learner group resumes only from those.
                               "fit_id": uuid.uuid4().hex, "fault": os.environ.get(faults.ENV)},
            scaling_config=ScalingConfig(num_workers=lc.num_learners, use_gpu=lc.use_gpu,
                                         resources_per_worker=learner_resources(config)),
            run_config=RunConfig(name=config.experiment.name,
                                 storage_path=str((config.run_dir / "ray_train").resolve()),
                                 failure_config=FailureConfig(max_failures=lc.max_failures)),
        )
        failure: list[BaseException] = []

        def run() -> None:
            try:
                trainer.fit()
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
                if result["phase"] == "start":  # the learner group (re)started; a second start is a restart
                    starts += 1
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
        coordinator = RolloutCoordinator(self.config, self.runners, self.replicas)
        _, metrics = coordinator.evaluate(num_tasks or ev.num_tasks, split or ev.split,
                                          ev.temperature if temperature is None else temperature)
        return metrics

    def stop(self) -> None:
        """Release actors (and the local Ray this Algorithm started)."""
        try:  # engines with processes of their own (vllm) stop them before their actor goes
            ray.get([r.shutdown.remote() for r in [*self.replicas, *self.user_replicas]], timeout=60)
        except Exception:  # noqa: BLE001 - a dead replica has nothing left to stop
            log.warning("a policy replica did not shut down cleanly", exc_info=True)
        for actor in [*self.runners, *self.replicas, *self.user_replicas]:
            ray.kill(actor)
        if self._owns_ray:
            ray.shutdown()
