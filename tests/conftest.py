"""Shared fixtures: the tiny random model, a local Ray, and the optional shared UserRL data."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

SHARED = Path(__file__).resolve().parents[2] / "shared"


@pytest.fixture(scope="session")
def tiny_model() -> str:
    """Folder of the 2-layer random Llama with the SmolLM2 tokenizer (built once, cached)."""
    from userrl.models import resolve_model

    return resolve_model("tiny-random")


@pytest.fixture(scope="session")
def tokenizer(tiny_model):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model)


@pytest.fixture(scope="session")
def ray_local():
    """A local Ray shared by the integration tests."""
    import ray

    from userrl.cluster import job_env_vars

    if not ray.is_initialized():
        # Workers must import test modules (functions defined in tests run inside Ray Train workers).
        test_dirs = [str(p) for p in Path(__file__).parent.iterdir() if p.is_dir() and not p.name.startswith(".")]
        pythonpath = os.pathsep.join([*test_dirs, os.environ.get("PYTHONPATH", "")])
        ray.init(num_cpus=6, logging_config=ray.LoggingConfig(encoding="TEXT", log_level="WARNING"),
                 runtime_env={"env_vars": {**job_env_vars(), "PYTHONPATH": pythonpath}})
    yield ray
    ray.shutdown()


@pytest.fixture(scope="module")
def one_process_group():
    """A one-member gloo process group in this process, for a Learner built in the test's process."""
    import torch.distributed as dist

    owned = not dist.is_initialized()
    if owned:
        dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    yield
    if owned:  # a later module in this process may start a default group of its own
        dist.destroy_process_group()


def free_port() -> int:
    """A free TCP port on the loopback interface."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="session")
def serve_port(ray_local) -> int:
    """Ray Serve's HTTP proxy on a free loopback port, started once per test process: each Serve module
    deploys its apps on it (`serve.run`) and deletes them when it is done (`serve.delete`)."""
    from ray import serve

    port = free_port()
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    yield port
    serve.shutdown()
