"""`ray job submit` of training runs to a cluster started with `ray start --head`, and unreachable clusters.

One head node of our own serves the module (its own ports and temp dir). On it: a job that trains and
checkpoints; then reliability scenario 9 (issue 15): a second raylet with its own ports and the node label
`userrl-role=rollout` joins, a training job's env runners and policy replica prefer the labelled node
(`ray.rollout_node_labels`, a soft label preference), and the second node's raylet is killed mid-run: the
run continues on the head node and finishes, nothing is lost, and the placement and the recovery show in the
job's log.
"""

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from pathlib import Path

import pytest
from mlflow import MlflowClient
from ray.job_submission import JobStatus, JobSubmissionClient

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
TINY = ["policy.model=tiny-random", "policy.dtype=float32", "policy.max_new_tokens=6", "policy.num_threads=1",
        "policy.max_model_len=512", "env_runners.num_env_runners=1", "sft.enabled=false",
        "training.iterations=1", "training.batch_size=2", "training.group_size=2",
        "training.micro_batch_tokens=1024", "learners.num_learners=0", "learners.num_cpus_per_learner=1",
        "learners.precision=float32", "evaluation.interval=0", "checkpointing.every=1", "env.max_turns=2", "env.max_steps=2"]
ITERATIONS = 4  # of the two-node run
RUN = ["policy.model=tiny-random", "policy.dtype=float32", "policy.max_new_tokens=32", "policy.num_threads=1",
       "policy.max_model_len=512", "policy.max_batch_size=4", "env_runners.num_env_runners=2", "sft.enabled=false",
       f"training.iterations={ITERATIONS}", "training.batch_size=4", "training.group_size=4",
       "training.micro_batch_tokens=1024", "learners.num_learners=0", "learners.num_cpus_per_learner=1",
       "learners.precision=float32", "learners.gradient_checkpointing=false", "evaluation.interval=0", "checkpointing.every=1",
       "env.max_turns=3", "env.max_steps=3", "ray.rollout_node_labels={userrl-role: rollout}"]
# The head's GCS declares a silent node dead after 5 failed health checks 1 s apart (2 s timeout each), not
# Ray's 5 checks 3 s apart (10 s timeout): the two-node run waited about 25 s for the lost node to be declared dead.
FAST_NODE_DEATH = {"RAY_health_check_period_ms": "1000", "RAY_health_check_timeout_ms": "2000",
                   "RAY_health_check_failure_threshold": "5"}


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


def wait_for_dashboard(address: str, proc: subprocess.Popen, log: Path, timeout_s: float = 120) -> None:
    """Wait until the head node's dashboard answers (its `ray start` must still be running)."""
    deadline = time.time() + timeout_s
    while True:
        try:
            urllib.request.urlopen(f"{address}/api/version", timeout=2).read()
            return
        except OSError:
            assert proc.poll() is None, log.read_text()
            assert time.time() < deadline, "the dashboard did not come up"
            time.sleep(1)


def _start(args: list[str], log_path) -> subprocess.Popen:
    """A `ray start --block` node in a process group of its own."""
    log = open(log_path, "w")  # noqa: SIM115 - the process owns it until it ends
    return subprocess.Popen([str(BIN / "ray"), "start", "--block", "--disable-usage-stats", *args],
                            env={**_env(), **FAST_NODE_DEATH}, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)


@pytest.fixture(scope="module")
def ray_cluster(tmp_path_factory):
    """The module's head node (3 CPUs): its dashboard address, temp dir and GCS port."""
    logs = tmp_path_factory.mktemp("head")
    temp = tempfile.mkdtemp(prefix="rj", dir="/tmp")  # short: Ray's unix socket paths have a length limit
    gcs, dash, client, listen, grpc, metrics, agent, node, objects = _free_ports(9)
    proc = _start(["--head", "--num-cpus", "3", "--port", str(gcs), "--dashboard-host", "127.0.0.1",
                   "--dashboard-port", str(dash), "--ray-client-server-port", str(client),
                   "--dashboard-agent-listen-port", str(listen), "--dashboard-agent-grpc-port", str(grpc),
                   "--metrics-export-port", str(metrics), "--runtime-env-agent-port", str(agent),
                   "--node-manager-port", str(node), "--object-manager-port", str(objects), "--temp-dir", temp],
                  logs / "head.log")
    address = f"http://127.0.0.1:{dash}"
    try:
        wait_for_dashboard(address, proc, logs / "head.log")
        yield address, Path(temp), gcs
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


def _kill(proc: subprocess.Popen) -> None:
    """SIGKILL a node's whole process group: its raylet and workers die as in a lost machine."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=20)


def _nodes(dashboard: str) -> list[dict]:
    listed = subprocess.run([str(BIN / "ray"), "list", "nodes", "--address", dashboard, "--format", "json"],
                            env=_env(), capture_output=True, text=True, timeout=60)
    try:
        return json.loads(listed.stdout)
    except json.JSONDecodeError:  # "No resource in the cluster" while the nodes come up
        return []


@pytest.mark.slow
def test_job_submit_trains_on_the_cluster(ray_cluster, tiny_model, tmp_path):
    address, temp, _ = ray_cluster
    out = tmp_path / "out"
    job_id = f"userrl-test-{uuid.uuid4().hex[:8]}"
    submit = subprocess.run(
        [str(BIN / "ray"), "job", "submit", "--address", address, "--submission-id", job_id,
         "--working-dir", str(REPO), "--", "userrl", "train", "--config", "experiments/quickstart.yaml", *TINY,
         "experiment.name=job", f"experiment.output_dir={out}"],
        env=_env(), capture_output=True, text=True, timeout=480)
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
    meta = json.loads((out / "job" / "checkpoints" / "iter_000001" / "meta.json").read_text())
    assert meta["iteration"] == 1


@pytest.mark.slow
def test_second_node_lost_mid_run(ray_cluster, tiny_model, tmp_path):
    """Reliability scenario 9, on the module's head node (after the job above: a working_dir job must not run
    while both raylets of this one machine share the session folder, see below)."""
    dashboard, _, gcs = ray_cluster
    listen2, grpc2, metrics2, agent2, node2, objects2 = _free_ports(6)
    # One CPU: the replica (0.5) and the env runners (0.1 each) fit, a learner (1.0) does not.
    second = None
    try:
        deadline = time.time() + 120
        second = _start(["--address", f"127.0.0.1:{gcs}", "--num-cpus", "1", "--labels", "userrl-role=rollout",
                         "--dashboard-agent-listen-port", str(listen2), "--dashboard-agent-grpc-port", str(grpc2),
                         "--metrics-export-port", str(metrics2), "--runtime-env-agent-port", str(agent2),
                         "--node-manager-port", str(node2), "--object-manager-port", str(objects2)],
                        tmp_path / "second.log")
        while len([n for n in _nodes(dashboard) if n["state"] == "ALIVE"]) < 2:
            assert second.poll() is None and time.time() < deadline + 120, (tmp_path / "second.log").read_text()
            time.sleep(1)
        labelled = [n["node_id"] for n in _nodes(dashboard) if n.get("labels", {}).get("userrl-role") == "rollout"]
        assert len(labelled) == 1

        jobs = JobSubmissionClient(dashboard)
        job_id = f"userrl-two-nodes-{uuid.uuid4().hex[:8]}"
        out = tmp_path / "out"
        # No working_dir upload: both raylets of this one machine would unpack it into the same session folder,
        # and the second node's runtime-env agent replaces the folder the driver runs in (its cwd vanishes).
        # The installed package is on both nodes already.
        jobs.submit_job(
            submission_id=job_id,
            entrypoint=" ".join(["userrl", "train", "--config", str(REPO / "experiments" / "quickstart.yaml"), *[
                f"'{item}'" for item in RUN], "experiment.name=two-nodes", f"experiment.output_dir={out}"]),
            runtime_env={"env_vars": {"USERRL_LOG": "INFO", "RAY_AUTH_MODE": "disabled"}})

        # Kill the second node's raylet (and its workers) as soon as the first iteration is done.
        deadline = time.time() + 420
        while "iter   1" not in jobs.get_job_logs(job_id):
            assert jobs.get_job_status(job_id) in (JobStatus.PENDING, JobStatus.RUNNING), jobs.get_job_logs(job_id)
            assert time.time() < deadline, jobs.get_job_logs(job_id)
            time.sleep(0.5)
        _kill(second)

        while jobs.get_job_status(job_id) in (JobStatus.PENDING, JobStatus.RUNNING):
            assert time.time() < deadline + 300, jobs.get_job_logs(job_id)
            time.sleep(2)
        logs = jobs.get_job_logs(job_id)
        assert jobs.get_job_status(job_id) == JobStatus.SUCCEEDED, logs[-6000:]
        assert f"done: {ITERATIONS} iterations" in logs, logs[-6000:]

        # Placement: every env runner and the replica started on the labelled node ...
        first = json.loads(re.search(r"placement: (\{.*\})", logs).group(1).replace("'", '"'))
        assert set(first["env_runners"]) == set(first["replicas"]) == {labelled[0]}
        # ... and the recovery: restarts and re-run episodes in the progress lines, then all on the head node.
        assert re.search(r"restarts\s+[1-9]", logs), logs[-6000:]
        assert not re.search(r"aborted\s+[1-9]", logs), logs[-6000:]  # nothing lost: every episode played
        after = json.loads(re.search(r"placement after restarts: (\{.*\})", logs).group(1).replace("'", '"'))
        assert labelled[0] not in set(after["env_runners"]) | set(after["replicas"])
        meta = json.loads((out / "two-nodes" / "checkpoints" / f"iter_{ITERATIONS:06d}" / "meta.json").read_text())
        assert meta["iteration"] == ITERATIONS
    finally:
        if second is not None:
            _kill(second)


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
