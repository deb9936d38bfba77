"""Reliability scenario 9 (issue 15): two Ray nodes on one machine (`ray start --head` and a second raylet
with its own ports and the node label `userrl-role=rollout`), a `ray job submit` training run whose env
runners and policy replica prefer the labelled node (`ray.rollout_node_labels`, a soft label preference),
and the second node's raylet killed mid-run: the run continues on the head node and finishes, nothing is
lost, and the placement and the recovery show in the job's log.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import tempfile
import time
import uuid

import pytest
from ray.job_submission import JobStatus, JobSubmissionClient
from test_ray_job import (
    BIN,
    REPO,
    _env,
    _free_ports,
    dashboard_answers,
    start_node,
    stop_ray_start,
    submit_when_an_agent_is_up,
)

ITERATIONS = 4
RUN = ["policy.model=tiny-random", "policy.dtype=float32", "policy.max_new_tokens=32", "policy.num_threads=1",
       "policy.max_model_len=512", "policy.max_batch_size=4", "env_runners.num_env_runners=2", "sft.enabled=false",
       f"training.iterations={ITERATIONS}", "training.batch_size=4", "training.group_size=4",
       "training.micro_batch_tokens=1024", "learners.num_learners=0", "learners.num_cpus_per_learner=1",
       "learners.precision=float32", "learners.gradient_checkpointing=false", "evaluation.interval=0", "checkpointing.every=1",
       "env.max_turns=3", "env.max_steps=3", "ray.rollout_node_labels={userrl-role: rollout}"]


# The head's GCS declares a silent node dead after 5 failed health checks 1 s apart (2 s timeout each), not
# Ray's 5 checks 3 s apart (10 s timeout): the run waited about 25 s for the lost node to be declared dead.
FAST_NODE_DEATH = {"RAY_health_check_period_ms": "1000", "RAY_health_check_timeout_ms": "2000",
                   "RAY_health_check_failure_threshold": "5"}


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
def test_second_node_lost_mid_run(tiny_model, tmp_path):
    temp = tempfile.mkdtemp(prefix="rn", dir="/tmp")  # short: Ray's unix socket paths have a length limit
    (gcs, dash, client, listen, grpc, metrics, agent, node, objects,
     listen2, grpc2, metrics2, agent2, node2, objects2) = _free_ports(15)
    dashboard = f"http://127.0.0.1:{dash}"
    env = {**_env(), **FAST_NODE_DEATH}
    head = start_node(["--head", "--num-cpus", "3", "--port", str(gcs), "--dashboard-host", "127.0.0.1",
                       "--dashboard-port", str(dash), "--ray-client-server-port", str(client),
                       "--dashboard-agent-listen-port", str(listen), "--dashboard-agent-grpc-port", str(grpc),
                       "--metrics-export-port", str(metrics), "--runtime-env-agent-port", str(agent),
                       "--node-manager-port", str(node), "--object-manager-port", str(objects), "--temp-dir", temp],
                      tmp_path / "head.log", lambda: dashboard_answers(dashboard), env)
    # One CPU: the replica (0.5) and the env runners (0.1 each) fit, a learner (1.0) does not.
    second = None
    try:
        second = start_node(["--address", f"127.0.0.1:{gcs}", "--num-cpus", "1", "--labels", "userrl-role=rollout",
                             "--dashboard-agent-listen-port", str(listen2), "--dashboard-agent-grpc-port", str(grpc2),
                             "--metrics-export-port", str(metrics2), "--runtime-env-agent-port", str(agent2),
                             "--node-manager-port", str(node2), "--object-manager-port", str(objects2)],
                            tmp_path / "second.log",
                            lambda: len([n for n in _nodes(dashboard) if n["state"] == "ALIVE"]) >= 2, env)
        labelled = [n["node_id"] for n in _nodes(dashboard)  # alive: a start given up on may have left a dead one
                    if n["state"] == "ALIVE" and n.get("labels", {}).get("userrl-role") == "rollout"]
        assert len(labelled) == 1

        jobs = JobSubmissionClient(dashboard)
        job_id = f"userrl-two-nodes-{uuid.uuid4().hex[:8]}"
        out = tmp_path / "out"
        # No working_dir upload: both raylets of this one machine would unpack it into the same session folder,
        # and the second node's runtime-env agent replaces the folder the driver runs in (its cwd vanishes).
        # The installed package is on both nodes already.
        submit_when_an_agent_is_up(lambda: jobs.submit_job(
            submission_id=job_id,
            entrypoint=" ".join(["userrl", "train", "--config", str(REPO / "experiments" / "quickstart.yaml"), *[
                f"'{item}'" for item in RUN], "experiment.name=two-nodes", f"experiment.output_dir={out}"]),
            runtime_env={"env_vars": {"USERRL_LOG": "INFO", "RAY_AUTH_MODE": "disabled"}}))

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
        stop_ray_start(head)
