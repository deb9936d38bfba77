"""The vllm engine's step counter: what it counts (a fake engine core), and that the vLLM installed still
pulls its outputs through the method it wraps (fails on a vLLM release nobody has checked)."""

from __future__ import annotations

import asyncio
import inspect
import time
from types import SimpleNamespace

import pytest

from userrl.engines.vllm import STEP_COUNTER_VLLM, count_engine_steps


def _engine(batches: list[list[str]], age_s: float) -> SimpleNamespace:
    pending = iter(batches)

    async def get_output_async():
        return SimpleNamespace(outputs=next(pending), timestamp=time.monotonic() - age_s)

    return SimpleNamespace(engine_core=SimpleNamespace(get_output_async=get_output_async))


def test_counts_steps_with_outputs_their_rows_and_transfer_time():
    engine = _engine([["a", "b", "c"], [], ["d"]], age_s=0.25)
    stats = {"steps": 0, "step_rows": 0, "step_output_s": 0.0}
    assert count_engine_steps(engine, stats, "0.32.0")

    async def pull():
        return [await engine.engine_core.get_output_async() for _ in range(3)]

    outputs = asyncio.run(pull())
    assert [o.outputs for o in outputs] == [["a", "b", "c"], [], ["d"]]  # handed on unchanged
    assert stats["steps"] == 2 and stats["step_rows"] == 4  # the empty step is no batch
    assert 0.5 <= stats["step_output_s"] < 1.5


def test_an_unchecked_release_is_left_alone():
    engine = _engine([["a"]], age_s=0.0)
    original = engine.engine_core.get_output_async
    stats = {"steps": 0, "step_rows": 0, "step_output_s": 0.0}
    assert not count_engine_steps(engine, stats, "0.99.1")
    assert engine.engine_core.get_output_async is original


def test_the_installed_vllm_pulls_outputs_through_the_wrapped_method():
    vllm = pytest.importorskip("vllm")
    from vllm.v1.engine.async_llm import AsyncLLM
    from vllm.v1.engine.core_client import AsyncMPClient

    # A newer release: check the three facts below against its source, then add it to STEP_COUNTER_VLLM.
    assert ".".join(vllm.__version__.split(".")[:2]) in STEP_COUNTER_VLLM, vllm.__version__
    assert inspect.iscoroutinefunction(AsyncMPClient.get_output_async)
    assert "engine_core.get_output_async()" in inspect.getsource(AsyncLLM._run_output_handler)
