"""Shared fixtures: the tiny random model, a local Ray, and the optional shared UserRL data."""

from __future__ import annotations

import os
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
