"""`ray job submit` of a training run to a cluster started with `ray start --head`; unreachable clusters."""

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from mlflow import MlflowClient
from ray.job_submission import JobStatus, JobSubmissionClient

from userrl.allocator import jemalloc_path

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
TINY = ["policy.model=tiny-random", "policy.dtype=float32", "policy.max_new_tokens=6", "policy.num_threads=1",
        "policy.max_model_len=512", "env_runners.num_env_runners=1", "sft.enabled=false",
        "training.iterations=1", "training.batch_size=2", "training.group_size=2",
        "training.micro_batch_tokens=1024", "learners.num_learners=0", "learners.num_cpus_per_learner=1",
        "learners.precision=float32", "evaluation.interval=0", "checkpointing.every=1", "env.max_turns=2", "env.max_steps=2"]


def _free_ports(count):
    sockets = [socket.socket() for _ in range(count)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


def _env():
    # No graceful drain on SIGTERM (Ray waits up to 30 s for a node's work to move elsewhere): these
    # clusters are the tests' own and are thrown away.
    env = {**os.environ, "RAY_AUTH_MODE": "disabled", "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
           "RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S": "0"}
    env.pop("RAY_ADDRESS", None)
    return env


def dashboard_answers(address: str) -> bool:
    """Whether a head node's dashboard answers at `address`."""
    try:
        urllib.request.urlopen(f"{address}/api/version", timeout=2).read()
        return True
    except OSError:
        return False


def start_node(args: list[str], log: Path, ready: Callable[[], bool], env: dict[str, str] | None = None,
               timeout_s: float = 240, attempts: int = 3) -> subprocess.Popen:
    """`ray start --block ARGS` in a process group of its own, once `ready()`; started again when Ray gave up on
    its own start: a raylet must register within a fixed 30 s, which a loaded 2-core machine can miss."""
    for attempt in range(1, attempts + 1):
        with log.open("w") as handle:  # the process writes to its own copy of the descriptor
            proc = subprocess.Popen([str(BIN / "ray"), "start", "--block", "--disable-usage-stats", *args],
                                    env=env or _env(), stdout=handle, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.time() + timeout_s
        while proc.poll() is None and not ready():
            if time.time() > deadline:
                stop_ray_start(proc)
                raise AssertionError(f"the node did not come up in {timeout_s} s:\n{log.read_text()[-4000:]}")
            time.sleep(1)
        if proc.poll() is None:
            return proc
        stop_ray_start(proc)  # what it started of the node before it gave up
        assert "timed out during startup" in log.read_text() and attempt < attempts, log.read_text()[-4000:]
    raise AssertionError("unreachable")


def submit_when_an_agent_is_up(submit: Callable[[], Any], timeout_s: float = 120) -> Any:
    """Call `submit` again while the head answers "No available agent to submit job, please try again later"
    (its dashboard answers before the node's job agent has registered)."""
    deadline = time.time() + timeout_s
    while True:
        try:
            result = submit()
        except RuntimeError as error:
            if "No available agent" not in str(error) or time.time() > deadline:
                raise
        else:
            if not (isinstance(result, subprocess.CompletedProcess) and result.returncode != 0
                    and "No available agent" in result.stderr and time.time() < deadline):
                return result
        time.sleep(2)


@pytest.fixture
def ray_cluster(tmp_path):
    """A one-node cluster of our own (own ports and temp dir), stopped by killing its process group only."""
    temp = tempfile.mkdtemp(prefix="rj", dir="/tmp")  # short: Ray's unix socket paths have a length limit
    gcs, dash, client, listen, grpc, metrics, agent, node, objects = _free_ports(9)
    address = f"http://127.0.0.1:{dash}"
    proc = start_node(
        ["--head", "--num-cpus", "4", "--port", str(gcs), "--dashboard-host", "127.0.0.1", "--dashboard-port", str(dash),
         "--ray-client-server-port", str(client), "--dashboard-agent-listen-port", str(listen),
         "--dashboard-agent-grpc-port", str(grpc), "--metrics-export-port", str(metrics),
         "--runtime-env-agent-port", str(agent), "--node-manager-port", str(node),
         "--object-manager-port", str(objects), "--temp-dir", temp],
        tmp_path / "ray_start.log", lambda: dashboard_answers(address))
    try:
        yield address, Path(temp)
    finally:
        stop_ray_start(proc)


def stop_ray_start(proc: subprocess.Popen) -> None:
    """Stop a `ray start --block` and its cluster: SIGTERM to it alone (with no drain, it stops its processes in
    a second or two; SIGTERM to the whole group left it waiting past 20 s), then SIGKILL to whatever of the
    group is left (every process of the group is this cluster's)."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=20)
    with contextlib.suppress(ProcessLookupError):  # the group may be gone already
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=20)


@pytest.mark.slow
def test_job_submit_trains_on_the_cluster(ray_cluster, tiny_model, tmp_path):
    address, temp = ray_cluster
    out = tmp_path / "out"
    job_id = f"userrl-test-{uuid.uuid4().hex[:8]}"
    submit = submit_when_an_agent_is_up(lambda: subprocess.run(
        [str(BIN / "ray"), "job", "submit", "--address", address, "--submission-id", job_id,
         "--working-dir", str(REPO), "--", "userrl", "train", "--config", "experiments/quickstart.yaml", *TINY,
         "experiment.name=job", f"experiment.output_dir={out}"],
        env=_env(), capture_output=True, text=True, timeout=480))
    assert submit.returncode == 0, submit.stdout[-4000:] + submit.stderr[-4000:]
    assert "done: 1 iterations" in submit.stdout
    status = subprocess.run([str(BIN / "ray"), "job", "status", "--address", address, job_id],
                            env=_env(), capture_output=True, text=True, timeout=60)
    assert f"Job '{job_id}' succeeded" in status.stdout, status.stdout + status.stderr
    assert JobSubmissionClient(address).get_job_status(job_id) == JobStatus.SUCCEEDED

    # What was uploaded: the repository without its gitignored folders (.venv, runs, caches).
    packages = [p for p in (temp / "session_latest" / "runtime_resources" / "working_dir_files").iterdir()
                if p.is_dir()]
    assert packages and all((p / "userrl" / "cli.py").is_file() for p in packages)
    assert not any((p / ".venv").exists() or (p / ".git").exists() for p in packages)

    client = MlflowClient(f"sqlite:///{out / 'mlflow.db'}")
    (run,) = client.search_runs([client.get_experiment_by_name("quickstart").experiment_id])
    assert run.info.status == "FINISHED" and run.data.params["policy.model"] == "tiny-random"
    # The local learner trains in the job's `userrl train` process, which started itself again under jemalloc
    assert run.data.tags["learner_allocator"] == ("jemalloc" if jemalloc_path() else "system")
    meta = json.loads((out / "job" / "checkpoints" / "iter_000001" / "meta.json").read_text())
    assert meta["iteration"] == 1


def test_unreachable_cluster_fails_fast(tmp_path):
    """`userrl train` with an address nothing listens on: exit 2 in seconds (ray.init would retry for minutes)."""
    (port,) = _free_ports(1)
    env = {**_env(), "RAY_ADDRESS": f"127.0.0.1:{port}"}  # what `ray.address` falls back to
    args = [str(BIN / "userrl"), "train", "--config", "experiments/quickstart.yaml",
            f"experiment.output_dir={tmp_path}"]
    began = time.time()
    result = subprocess.run(args, env=env, capture_output=True, text=True, timeout=120, cwd=REPO)
    assert result.returncode == 2, result.stdout + result.stderr
    message = " ".join(result.stdout.split())
    assert f"cannot reach the Ray cluster at 127.0.0.1:{port}" in message and "ray start --head" in message
    assert time.time() - began < 60
    assert not any(tmp_path.iterdir())  # no run folder, no MLflow store


def test_address_forms_are_checked_before_connecting():
    from userrl.cluster import check_ray_address

    with pytest.raises(ValueError, match="dashboard/Jobs URL.*ray job submit"):
        check_ray_address("http://127.0.0.1:8265")
    with pytest.raises(ValueError, match="not of the form host:port"):
        check_ray_address("headnode")
    (port,) = _free_ports(1)
    with pytest.raises(ConnectionError, match=f"cannot reach the Ray cluster at ray://127.0.0.1:{port}"):
        check_ray_address(f"ray://127.0.0.1:{port}")
    check_ray_address("auto")  # left to Ray
