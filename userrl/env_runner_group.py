"""EnvRunnerGroup (RLlib's name and role): the env runners and the policy/user replicas they play against.

Built from the config; `launch`/`play` hand chunks of episodes to the least-loaded runner, `sync_weights`
sends new weights to every replica. It survives faults: runners and replicas run with Ray's `max_restarts`
(`env_runners.restart_failed_env_runners`); a chunk whose runner died is played again, with the same seeds,
on the least-loaded live runner, at most `env_runners.max_episode_retries` times, and then counted as
aborted; a restarted policy replica gets the current weights and version before it serves (runners send
its requests again once it is back, so episodes go on). User replicas (env.backend=local) restart the same
way and serve their model folder at once; the runners' user clients send their requests again, with the same
seeds. Restarts and re-runs are counted (`pop_counters`), and nothing is lost silently.
"""

from __future__ import annotations

import contextlib
import logging
import time
import uuid
from collections import Counter, deque
from collections.abc import Callable, Iterator
from typing import Any, Literal

import ray

from userrl.actors.env_runner import REPLICA_LOST, EnvRunner, EpisodeSpec
from userrl.actors.policy_replica import AWAITING_WEIGHTS, PolicyReplica
from userrl.cluster import init_ray
from userrl.config import UserRLConfig
from userrl.engines.select import announce_choice, resolve_engine
from userrl.replica_handle import REPLICA_WAIT_S
from userrl.rollout import RolloutLimits, abort_trajectory, new_trajectory
from userrl.tokenizer import load_tokenizer
from userrl.trajectory import Trajectory
from userrl.users import resolve_user_model
from userrl.weight_sync import (
    DEFAULT_BUCKET_BYTES,
    GROUP_TIMEOUT_S,
    GatheredWeights,
    GroupSender,
    backend_for,
)

log = logging.getLogger(__name__)

#: How often a waiting rollout checks the replicas for restarts (seconds).
HEALTH_CHECK_S = 1.0
_ACTOR_DOWN = (ray.exceptions.RayActorError, ray.exceptions.ActorUnavailableError)


def env_kwargs(config: UserRLConfig) -> dict[str, dict[str, Any]]:
    """Constructor arguments of each configured gym (the protocol's, e.g. native_tools' native rules; kwargs win)."""
    from userrl.envs.registry import get_gym
    from userrl.protocols import get_protocol

    ec = config.env
    protocol = get_protocol(ec.protocol)
    return {spec.name: {"max_steps": ec.max_steps, "step_timeout_s": ec.step_timeout_s, "backend": ec.backend,
                        "reward_preset": ec.reward_preset, **protocol.env_kwargs(get_gym(spec.name)), **spec.kwargs} for spec in ec.gyms}


def _answers(calls: dict[int, Any], timeout: float) -> dict[int, Any]:
    """What each call (by actor index) returned within `timeout`: its value, or the actor error it raised;
    calls still running are left out."""
    ready = set(ray.wait(list(calls.values()), num_returns=len(calls), timeout=timeout)[0])
    answers: dict[int, Any] = {}
    for index, ref in calls.items():
        if ref in ready:
            try:
                answers[index] = ray.get(ref)
            except _ACTOR_DOWN as error:
                answers[index] = error
    return answers


def node_preference(labels: dict[str, str]) -> dict[str, Any]:
    """Actor options that prefer nodes with these labels (soft: any node when none is alive)."""
    if not labels:
        return {}
    from ray.util.scheduling_strategies import In, NodeLabelSchedulingStrategy

    return {"scheduling_strategy": NodeLabelSchedulingStrategy(hard={}, soft={k: In(v) for k, v in labels.items()})}


class EnvRunnerGroup:
    """Env runners and replicas as Ray actors, with one least-loaded dispatch and fault tolerance."""

    def __init__(self, config: UserRLConfig, model_path: str):
        self.config = config
        er, pc, ec = config.env_runners, config.policy, config.env
        self.restart = er.restart_failed_env_runners
        self.max_retries = er.max_episode_retries
        restarts = -1 if self.restart else 0
        placement = node_preference(config.ray.rollout_node_labels)

        # Actors are named, and the env runners (restartable) get the names: actor handles among a restartable
        # actor's constructor arguments make Ray log an error line at every start (ray-project/ray#53727).
        prefix = f"userrl-{uuid.uuid4().hex[:12]}"

        def start_replicas(path: str, engine: str, count: int, gpus: float, training: bool,
                           options: dict[str, Any], role: str) -> list[Any]:
            pad = load_tokenizer(path).pad_token_id
            actor = ray.remote(PolicyReplica)
            return [actor.options(name=name, num_cpus=pc.num_cpus_per_replica, num_gpus=gpus, max_concurrency=4096,
                                  max_restarts=restarts, **placement).remote(
                path, engine, pc.dtype, pc.max_batch_size, pc.num_threads, pad, max_model_len=pc.max_model_len,
                engine_options=options, wait_for_weights_after_restart=training) for name in names(role, count)]

        def names(role: str, count: int) -> list[str]:  # what the env runners look the replicas up by
            return [f"{prefix}-{role}-{i}" for i in range(count)]

        def engine_options(engine: str, user: bool = False) -> dict[str, Any]:
            if engine != "vllm":
                return pc.hf.model_dump()
            # User replicas are never put to sleep nor sent weights.
            return {k: v for k, v in pc.vllm.items() if not (user and k in ("sleep_mode", "weight_sync"))}

        #: The engines the replicas run (`auto` resolved on this machine, for the replicas' device).
        self.engine, reason = resolve_engine(pc.engine, model_path, "policy.engine", gpu=pc.num_gpus_per_replica > 0)
        announce_choice(self.engine, reason)
        self.replicas = start_replicas(model_path, self.engine, pc.num_replicas, pc.num_gpus_per_replica, True,
                                       engine_options(self.engine), "policy")
        self.user_replicas: list[Any] = []
        self.user_engine: str | None = None
        user_path = None
        if ec.backend == "local":
            user_path = resolve_user_model(ec.local_user_model, ec.local_user_format)
            self.user_engine, reason = resolve_engine(ec.local_user_engine, user_path, "env.local_user_engine",
                                                      gpu=False)
            announce_choice(self.user_engine, reason, "user engine")
            self.user_replicas = start_replicas(user_path, self.user_engine, ec.local_user_replicas, 0, False,
                                                engine_options(self.user_engine, user=True), "user")
        runner = ray.remote(EnvRunner).options(num_cpus=er.num_cpus_per_env_runner, max_concurrency=64,
                                               max_restarts=restarts, max_task_retries=0, **placement)
        self.runners = [runner.remote(model_path, ec.protocol, RolloutLimits.from_config(config), names("policy", len(self.replicas)),
                                      env_kwargs(config), user_backend=ec.backend, llm=ec.llm,
                                      user_replicas=names("user", len(self.user_replicas)),
                                      user_tokenizer_path=user_path, user_format=ec.local_user_format,
                                      user_model=ec.local_user_model, user_cache=ec.user_cache)
                        for _ in range(er.num_env_runners)]
        self.version = 0  # of the weights the replicas serve; set by sync_weights
        # The last weights sent, for replicas that restart: an object ref, or (after a sync through the
        # group) the tensors themselves, put into the object store only when a replica needs them.
        self._weights: Any = None
        self._sender: GroupSender | None = None  # the weight-sync group, formed at the first sync
        self._members: dict[int, int] = {}  # replica index -> its workers' first rank in the group
        self._group_refused = pc.vllm_settings().weight_sync != "group"  # or: could not be formed
        self._group_worked = False  # some sync went through a group
        self.bucket_bytes = DEFAULT_BUCKET_BYTES
        #: How each replica got the last weights ("group" or "object_store"), and that sync's seconds per phase.
        self.sync_paths: dict[int, str] = {}
        self.last_sync: dict[str, float] = {}
        self._load = [0] * len(self.runners)
        self._down: set[int] = set()
        self._checked = self._runners_checked = 0.0
        self.counters: Counter[str] = Counter()
        ray.get([r.get_version.remote() for r in self.replicas])  # fail fast if a replica cannot start
        # A user replica's process id: a new one means Ray restarted it (it needs nothing, but it is counted).
        self._user_pids = ray.get([r.process_id.remote() for r in self.user_replicas])
        if log.isEnabledFor(logging.INFO):
            log.info("placement: %s", self.placement())

    def placement(self) -> dict[str, list[str]]:
        """The node id (hex) of every env runner and policy replica now."""
        return {"env_runners": ray.get([r.node_id.remote() for r in self.runners], timeout=60),
                "replicas": ray.get([r.node_id.remote() for r in self.replicas], timeout=60)}

    # ------------------------------------------------------------------------------------------ playing

    def launch(self, chunks: list[list[EpisodeSpec]], seeds: list[int], temperature: float | None = None,
               max_in_flight: int | None = None) -> RolloutJob:
        """Hand chunks of episodes to the runners (as many at once as `max_in_flight`, default all)."""
        return RolloutJob(self, chunks, seeds, temperature, max_in_flight or len(chunks))

    def split(self, specs: list[EpisodeSpec]) -> list[list[EpisodeSpec]]:
        """One chunk per runner (episodes dealt round-robin), for a batch played all at once."""
        return [share for i in range(len(self.runners)) if (share := specs[i::len(self.runners)])]

    def play(self, specs: list[EpisodeSpec], seed: int, temperature: float | None = None,
             on_progress: Callable[[int, int], None] | None = None) -> list[Trajectory]:
        """Play episodes on the runners and return their trajectories in the order of `specs`.

        `on_progress(done, total)` is called at the start and as each runner's share finishes."""
        chunks = self.split(specs)
        by_uid: dict[str, Trajectory] = {}
        if on_progress:
            on_progress(0, len(specs))
        for _, trajectories in self.launch(chunks, [seed] * len(chunks), temperature):
            by_uid.update((t.uid, t) for t in trajectories)
            if on_progress:
                on_progress(len(by_uid), len(specs))
        return [by_uid[spec.uid] for spec in specs]

    # ------------------------------------------------------------------------------------------ dispatch
    # The group alone keeps each runner's load and which runners are down; a RolloutJob plays its chunks
    # through `start_chunk`, `finish_chunk`, `live_runners` and `check_runners`.

    @property
    def live_runners(self) -> list[int]:
        """Indices of the runners not known to be down (a down one is back once `check_runners` hears it)."""
        return [i for i in range(len(self.runners)) if i not in self._down]

    def start_chunk(self, specs: list[EpisodeSpec], seed: int,
                    temperature: float | None = None) -> tuple[ray.ObjectRef, int] | None:
        """Play a chunk on the least-loaded live runner: (the ref of its trajectories, the runner's index);
        None while every runner is down (being restarted). Hand the ref to `finish_chunk` once it is ready."""
        live = self.live_runners
        if not live:
            return None
        runner = min(live, key=self._load.__getitem__)
        self._load[runner] += 1
        return self.runners[runner].run.remote(specs, seed, temperature), runner

    def finish_chunk(self, ref: ray.ObjectRef, runner: int) -> list[Trajectory] | None:
        """The trajectories of a chunk `start_chunk` began (`ref` ready); None when its runner died: it is
        marked down and its restart counted (RuntimeError when restarts are off)."""
        self._load[runner] -= 1
        try:
            trajectories = ray.get(ref)
        except _ACTOR_DOWN as error:
            self._runner_failed(runner, error)
            return None
        self._down.discard(runner)  # it answered: back from a restart, if it was down
        return trajectories

    def check_runners(self) -> None:
        """Take back the runners that were down and answer again (Ray restarted them, maybe on another node)."""
        now = time.monotonic()
        if not self._down or now - self._runners_checked < HEALTH_CHECK_S:
            return
        self._runners_checked = now
        answers = _answers({i: self.runners[i].ping.remote() for i in self._down}, timeout=0.5)
        # A runner that still raises is restarting (a lost node is noticed after some seconds).
        self._down -= {i for i, answer in answers.items() if not isinstance(answer, BaseException)}

    def _runner_failed(self, index: int, error: BaseException) -> None:
        if not self.restart:
            raise RuntimeError(f"env runner {index} died ({error}); set env_runners.restart_failed_env_runners="
                               "true to restart it and re-run its episodes") from error
        if index not in self._down:  # every chunk it held fails together: one restart
            self._down.add(index)
            self.counters["env_runner_restarts"] += 1
            log.warning("env runner %d died (%s): Ray restarts it; its episodes are played again", index,
                        type(error).__name__)

    def heal_replicas(self, force: bool = False) -> None:
        """Give the current weights to replicas that Ray restarted (they serve nothing until then); count the
        user replicas Ray restarted."""
        now = time.monotonic()
        if not force and now - self._checked < HEALTH_CHECK_S:
            return
        self._checked = now
        self._count_user_restarts()
        answers = _answers({i: replica.get_version.remote() for i, replica in enumerate(self.replicas)}, timeout=0.5)
        for index, answer in answers.items():
            if isinstance(answer, BaseException):  # restarting: it answers at a later check
                if not self.restart:
                    raise RuntimeError(f"policy replica {index} died ({answer}); set "
                                       "env_runners.restart_failed_env_runners=true to restart it") from answer
            elif answer == AWAITING_WEIGHTS:
                self._restore(self.replicas[index])
                self.counters["replica_restarts"] += 1
                log.warning("policy replica %d was restarted; it now has weights version %d", index, self.version)

    def _count_user_restarts(self) -> None:
        answers = _answers({i: replica.process_id.remote() for i, replica in enumerate(self.user_replicas)}, 0.5)
        for index, answer in answers.items():
            if isinstance(answer, BaseException):  # restarting: it answers at a later check
                if not self.restart:
                    raise RuntimeError(f"user replica {index} died ({answer}); set "
                                       "env_runners.restart_failed_env_runners=true to restart it") from answer
            elif answer != self._user_pids[index]:
                self._user_pids[index] = answer
                self.counters["user_replica_restarts"] += 1
                log.warning("user replica %d was restarted; its pending requests are sent again", index)

    def _restore(self, replica: Any) -> None:
        if self._weights is None:  # never synced: the model folder it loaded holds the current weights
            ray.get(replica.set_version.remote(self.version))
        else:
            if isinstance(self._weights, dict):  # views of the sender's buckets: fresh tensors for the store
                self._weights = ray.put({name: tensor.clone() for name, tensor in self._weights.items()})
            ray.get(replica.load_weights.remote(self._weights, self.version))
        self._close_group()  # the restarted replica is a new process: the group is formed anew with it

    # ------------------------------------------------------------------------------------------ weights

    def sync_weights(self, weights: dict | GatheredWeights, version: int,
                     through: Literal["auto", "object_store"] = "auto") -> float:
        """Send new weights to every replica; returns seconds (per phase: `last_sync`).

        Replicas whose engine joined the weight-sync group (vllm, `policy.vllm.weight_sync=group`) get a
        broadcast from this process; the others (hf engine, a group that could not be formed or lost a
        member) get them through the object store, as every replica does with `through="object_store"`
        (benchmarks compare the two). `weights`: a full state dict, or a learner's `gathered_weights()`
        (then every learner rank iterates it meanwhile).
        """
        start = time.perf_counter()
        if isinstance(weights, dict):
            weights = GatheredWeights.from_state_dict(weights)
        self.version = version
        members = self._group_members(weights.device) if through == "auto" else {}
        group_ok = False
        if not members:  # the object store only: the tensors as gathered, no buckets
            tick = time.perf_counter()
            state = {name: tensor.detach().to("cpu") for name, tensor in weights.tensors}
            self.last_sync = {"gather_s": time.perf_counter() - tick}
            self.sync_paths = dict.fromkeys(range(len(self.replicas)), "object_store")
            tick = time.perf_counter()
            self._weights = ray.put(state)
            del state
            self._load_through_object_store(list(range(len(self.replicas))), version)
            self.last_sync["object_store_s"] = time.perf_counter() - tick
            self.last_sync["total_s"] = time.perf_counter() - start
            return self.last_sync["total_s"]
        receiving = {i: self.replicas[i].receive_weights.remote(weights.metadata, self.bucket_bytes, version)
                     for i in members}
        sent = self._sender.send(weights, self.bucket_bytes)
        error = sent.error
        engine: list[dict[str, float]] = []
        if error is None:
            try:
                engine = ray.get(list(receiving.values()), timeout=GROUP_TIMEOUT_S)
                group_ok = True
            except (ray.exceptions.RayError, RuntimeError) as failure:
                error = failure
        if error is not None:
            # A group that never carried a sync (NCCL between two processes on one GPU, say) would fail the
            # same way every time: give it up for the run. One that worked lost a member: form it anew.
            self._group_refused = not self._group_worked
            log.warning("weight sync through the group failed (%s); this sync goes through the object store, %s",
                        error, "and every later one" if self._group_refused else "the group is formed anew at the next")
            self._close_group()
        self._group_worked = self._group_worked or group_ok
        self.last_sync = {**sent.timings, **{key: max(e[key] for e in engine) for key in engine[0]}} if (
            engine) else dict(sent.timings)
        fallback = [i for i in range(len(self.replicas)) if not (group_ok and i in members)]
        self.sync_paths = {i: "object_store" if i in fallback else "group" for i in range(len(self.replicas))}
        if fallback:
            tick = time.perf_counter()
            # Fresh tensors, not views of the buckets: the object store would copy each view's whole bucket.
            self._weights = ray.put({name: tensor.clone() for name, tensor in sent.tensors.items()})
            self._load_through_object_store(fallback, version)
            self.last_sync["object_store_s"] = time.perf_counter() - tick
        else:
            self._weights = sent.tensors
        self.last_sync["total_s"] = time.perf_counter() - start
        return self.last_sync["total_s"]

    def _load_through_object_store(self, indices: list[int], version: int) -> None:
        pending = list(indices)
        deadline, restarted = time.monotonic() + REPLICA_WAIT_S, set()
        while pending:
            refs = [self.replicas[i].load_weights.remote(self._weights, version) for i in pending]
            failed = []
            for index, ref in zip(pending, refs, strict=True):
                try:
                    ray.get(ref)
                except _ACTOR_DOWN as error:  # died during the sync: Ray restarts it (on another node if need be)
                    if not self.restart or time.monotonic() > deadline:
                        raise RuntimeError(f"policy replica {index} unreachable during the weight sync ({error})") from error
                    restarted.add(index)
                    failed.append(index)
            if failed:
                time.sleep(1.0)
            pending = failed
        if restarted:
            self._close_group()
        self.counters["replica_restarts"] += len(restarted)

    def _group_members(self, device: Any) -> dict[int, int]:
        """The replicas in the weight-sync group (forming it at the first sync); empty when none can join."""
        if self._sender is not None or self._group_refused:
            return self._members
        backend = backend_for(device)
        sizes = ray.get([replica.weight_group_size.remote(backend) for replica in self.replicas], timeout=120)
        members, world_size = {}, 1  # rank 0 is this process
        for index, size in enumerate(sizes):
            if size:
                members[index], world_size = world_size, world_size + size
        for index in range(len(self.replicas)):
            log.info("weight sync: policy replica %d %s", index,
                     f"joins the {backend} group" if index in members else
                     "uses the object store (its engine cannot join a group: hf, or policy.vllm.weight_sync)")
        if not members:
            self._group_refused = True
            return {}
        sender = GroupSender(ray.util.get_node_ip_address(), backend, device)
        joins = [self.replicas[i].join_weight_group.remote(sender.host, sender.port, sender.name, offset, world_size,
                                                           backend, GROUP_TIMEOUT_S) for i, offset in members.items()]
        try:
            sender.connect(world_size)
            ray.get(joins, timeout=GROUP_TIMEOUT_S)
        except (ray.exceptions.RayError, RuntimeError) as error:
            log.warning("weight sync: the %s group could not be formed (%s); every replica uses the object store",
                        backend, error)
            self._group_refused = True
            for index in members:
                self.replicas[index].leave_weight_group.remote()
            return {}
        self._sender, self._members = sender, members
        return members

    def _close_group(self) -> None:
        """Give up the weight-sync group (a member was lost); the next sync forms a new one."""
        if self._sender is None:
            return
        for index in self._members:
            self.replicas[index].leave_weight_group.remote()  # fire and forget: a dead one has nothing to leave
        self._sender.close()
        self._sender, self._members = None, {}

    def sleep_replicas(self) -> float:
        """Free the replicas' device memory for the update (vllm sleep mode; a no-op elsewhere); returns seconds."""
        start = time.perf_counter()
        ray.get([replica.sleep.remote() for replica in self.replicas])
        return time.perf_counter() - start

    def wake_replicas(self) -> float:
        """Take the replicas' device memory back before the weight sync; returns seconds."""
        start = time.perf_counter()
        ray.get([replica.wake_up.remote() for replica in self.replicas])
        return time.perf_counter() - start

    def pop_counters(self) -> dict[str, float]:
        """Restarts and re-run or lost episodes since the last call (keys without a prefix)."""
        self._count_user_restarts()  # a user replica back since the last health check
        names = ("env_runner_restarts", "replica_restarts", "user_replica_restarts", "rerun_episodes",
                 "lost_episodes")
        counts = {name: float(self.counters[name]) for name in names}
        self.counters.clear()
        if counts["env_runner_restarts"] or counts["replica_restarts"] or counts["user_replica_restarts"]:
            try:
                log.warning("placement after restarts: %s", self.placement())
            except ray.exceptions.RayError as error:  # a restart still under way: the next check logs it
                log.warning("placement after restarts not known yet: %s", error)
        return counts

    def stop(self) -> None:
        """Stop the engines' own processes, then the actors."""
        try:  # engines with processes of their own (vllm) stop them before their actor goes
            ray.get([r.shutdown.remote() for r in [*self.replicas, *self.user_replicas]], timeout=60)
        except Exception:  # noqa: BLE001 - a dead replica has nothing left to stop
            log.warning("a policy replica did not shut down cleanly", exc_info=True)
        for actor in [*self.runners, *self.replicas, *self.user_replicas]:
            ray.kill(actor, no_restart=True)


@contextlib.contextmanager
def episode_group(config: UserRLConfig, model_path: str) -> Iterator[EnvRunnerGroup]:
    """An EnvRunnerGroup playing `model_path` on the configured Ray (a local one started if none is up); the
    group, and a Ray started here, stop when the block ends (also when building the group fails)."""
    owns_ray = init_ray(config)
    try:
        group = EnvRunnerGroup(config, model_path)
        try:
            yield group
        finally:
            group.stop()
    finally:
        if owns_ray:  # a Ray this process connected to (a cluster, a test's) is someone else's to stop
            ray.shutdown()


class RolloutJob:
    """Chunks of episodes on the runners; yields each chunk's trajectories, in spec order, as it completes.

    A chunk whose runner died is played again on a live runner; episodes that lost their replica for good
    are played again too; past `max_episode_retries` they come back aborted, with the reason.
    """

    def __init__(self, group: EnvRunnerGroup, chunks: list[list[EpisodeSpec]], seeds: list[int],
                 temperature: float | None, max_in_flight: int):
        self.group, self.chunks, self.seeds, self.temperature = group, chunks, seeds, temperature
        self.max_in_flight = max(1, max_in_flight)
        self.started = time.perf_counter()
        self.waiting: deque[tuple[int, list[EpisodeSpec]]] = deque(enumerate(chunks))
        self.in_flight: dict[Any, tuple[int, int, list[EpisodeSpec]]] = {}
        self.attempts = [0] * len(chunks)
        self.played: list[dict[str, Trajectory]] = [{} for _ in chunks]
        self.all_down_since = time.monotonic()
        self._submit()

    def _submit(self) -> None:
        while self.waiting and len(self.in_flight) < self.max_in_flight:
            index, specs = self.waiting[0]
            started = self.group.start_chunk(specs, self.seeds[index], self.temperature)
            if started is None:  # every runner is being restarted: the chunks wait for one to come back
                if time.monotonic() - self.all_down_since > REPLICA_WAIT_S:
                    raise RuntimeError(f"no env runner came back within {REPLICA_WAIT_S:.0f} s")
                return
            self.waiting.popleft()
            ref, runner = started
            self.in_flight[ref] = (index, runner, specs)

    def _again(self, index: int, specs: list[EpisodeSpec], reason: str) -> None:
        """Play these episodes of chunk `index` again, or give them up as aborted."""
        self.attempts[index] += 1
        if self.attempts[index] <= self.group.max_retries:
            self.group.counters["rerun_episodes"] += len(specs)
            self.waiting.append((index, specs))
            return
        self.group.counters["lost_episodes"] += len(specs)
        for spec in specs:
            traj = new_trajectory(spec.task, spec.uid, spec.group_id)
            self.played[index][spec.uid] = abort_trajectory(traj, f"{reason} (played {self.attempts[index]} times)")

    def __iter__(self) -> Iterator[tuple[int, list[Trajectory]]]:
        group = self.group
        while self.waiting or self.in_flight:
            self._submit()
            if self.in_flight:
                ready, _ = ray.wait(list(self.in_flight), num_returns=1, timeout=HEALTH_CHECK_S)
            else:  # chunks wait for a runner to come back
                ready = []
                time.sleep(HEALTH_CHECK_S)
            group.heal_replicas()
            group.check_runners()
            if group.live_runners:
                self.all_down_since = time.monotonic()
            if not ready:
                continue
            index, runner, specs = self.in_flight.pop(ready[0])
            trajectories = group.finish_chunk(ready[0], runner)
            if trajectories is None:  # its runner died: the whole chunk is played again
                self._again(index, specs, "env_runner_lost")
            else:
                lost = [spec for spec, traj in zip(specs, trajectories, strict=True) if traj.error == REPLICA_LOST]
                for traj in trajectories:
                    if traj.error != REPLICA_LOST:
                        self.played[index][traj.uid] = traj
                if lost:
                    self._again(index, lost, REPLICA_LOST)
            if len(self.played[index]) == len(self.chunks[index]):
                yield index, [self.played[index][spec.uid] for spec in self.chunks[index]]

    def gather(self) -> list[Trajectory]:
        """Wait for every chunk; all trajectories in the order of the chunks' specs."""
        by_chunk = dict(iter(self))
        return [traj for index in range(len(self.chunks)) for traj in by_chunk[index]]

    def cancel(self) -> None:
        """Stop the runners' work on these episodes (a run that ends early leaves nothing in flight)."""
        self.waiting.clear()
        for ref in self.in_flight:
            ray.cancel(ref)
