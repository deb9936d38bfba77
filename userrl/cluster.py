"""Connecting to Ray: a cluster's address checked fast, or a local Ray sized for the config."""

from __future__ import annotations

import math
import os
import signal
import socket
import threading

import ray

from userrl.config import UserRLConfig


def job_env_vars() -> dict[str, str]:
    """Environment of every actor and task of a userrl job (set through the job's `runtime_env`).

    Ray Train's controller polls its workers every RAY_TRAIN_HEALTH_CHECK_INTERVAL_S (Ray's default 2 s), and a
    fit's start and end wait for a few polls: 0.5 s takes about 6 s off every fit (bench/README "Ray Train's
    poll interval"), for one status call per worker per 0.5 s. A value in the driver's environment wins.

    Ray Train's preemption watcher is off: it only hands a node-drain notice to the train function, which
    userrl's does not read (a preempted learner is a failure like any other, `learners.max_failures`), and
    its actor, restartable with the workers' handles as constructor arguments, makes Ray log an error line
    at every fit (ray-project/ray#53727).
    """
    return {"HF_HUB_DISABLE_PROGRESS_BARS": "1", "TOKENIZERS_PARALLELISM": "false",
            "RAY_TRAIN_HEALTH_CHECK_INTERVAL_S": os.environ.get("RAY_TRAIN_HEALTH_CHECK_INTERVAL_S", "0.5"),
            "RAY_TRAIN_ENABLE_PREEMPTION_WATCHER": os.environ.get("RAY_TRAIN_ENABLE_PREEMPTION_WATCHER", "0")}


def logging_config() -> ray.LoggingConfig:
    """Ray's logging for the driver (it sets the root logger): WARNING unless $USERRL_LOG says otherwise.

    Ray Train logs every report at INFO; our own progress lines say the same more briefly.
    """
    return ray.LoggingConfig(encoding="TEXT", log_level=os.environ.get("USERRL_LOG", "WARNING").upper())


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


def run_cpus(config: UserRLConfig, driver: float, learners: bool = True) -> float:
    """Ray CPUs one run reserves: its driver's share, the policy and local user replicas, the env runners and
    (`learners`) the learner group; the one count behind a local Ray's size and a sweep trial's bundles. A
    local learner (`learners.num_learners: 0`) runs in the driver, so it is counted with it either way."""
    users = config.env.local_user_replicas if config.env.backend == "local" else 0
    total = (driver + (config.policy.num_replicas + users) * config.policy.num_cpus_per_replica
             + config.env_runners.num_env_runners * config.env_runners.num_cpus_per_env_runner)
    lc = config.learners
    if lc.num_learners == 0:
        return total + lc.num_cpus_per_learner
    return total + (lc.num_learners * lc.num_cpus_per_learner if learners else 0.0)


def ray_cpus(config: UserRLConfig) -> int:
    """Logical CPUs of a local Ray: enough for every actor's fraction (and one for the driver), at least the
    machine's cores."""
    return max(os.cpu_count() or 1, math.ceil(run_cpus(config, driver=1.0)))


def init_ray(config: UserRLConfig) -> bool:
    """Connect to `ray.address` / $RAY_ADDRESS, or start a local Ray; True when this call started one."""
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")  # no weight-loading bars from every actor
    if ray.is_initialized():
        return False
    runtime_env = {"env_vars": job_env_vars()}
    address = config.ray.address or os.environ.get("RAY_ADDRESS")
    if address:
        check_ray_address(address)
        ray.init(address=address, logging_config=logging_config(), runtime_env=runtime_env)
        stop_like_ctrl_c_on_sigterm()
        return False
    ray.init(num_cpus=config.ray.num_cpus or ray_cpus(config), logging_config=logging_config(), runtime_env=runtime_env)
    stop_like_ctrl_c_on_sigterm()
    return True


_sigterm_received = threading.Event()


def _interrupt_on_sigterm(signum: int, frame: object) -> None:
    _sigterm_received.set()
    raise KeyboardInterrupt


def stop_like_ctrl_c_on_sigterm() -> None:
    """Make SIGTERM (`kill`, `ray job stop`) unwind the driver like Ctrl+C, through every `finally` block.

    Replaces the handler `ray.init` set: Ray's calls `sys.exit(15)`, and while Ray Train runs, what reaches the
    caller is a bare `SystemExit(1)`. `KeyboardInterrupt` is the one exception every layer lets through (Ray
    Train re-raises a new one, so the signal is remembered here, for `sigterm_received`). Only the main
    thread may set handlers: elsewhere (a Tune trial, a test thread) Ray's stays.
    """
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _interrupt_on_sigterm)


def sigterm_received() -> bool:
    """Whether a KeyboardInterrupt in this driver came from SIGTERM rather than Ctrl+C."""
    return _sigterm_received.is_set()
