"""vLLM's per-tensor load warnings that userrl causes on purpose are dropped; every other warning passes."""

from __future__ import annotations

import logging

import pytest

from userrl.engines.vllm import quiet_expected_load_warnings

UTILS = "vllm.model_executor.models.utils"
LAYERWISE = "vllm.model_executor.model_loader.reload.layerwise"


@pytest.mark.parametrize(("logger", "message", "args", "shown"), [
    (UTILS, "Attempted to load weight %s with dtype %s into parameter with dtype %s",
     ("layers.0.mlp.weight", "torch.float32", "torch.bfloat16"), False),
    (UTILS, "Attempted to load weight %s with dtype %s into parameter with dtype %s",  # not a narrowing we ask for
     ("layers.0.mlp.weight", "torch.bfloat16", "torch.float16"), True),
    (LAYERWISE, "%s: Failed to load weights", ("ParallelLMHead",), False),
    (LAYERWISE, "%s: Failed to load weights", ("RotaryEmbedding",), False),
    (LAYERWISE, "%s: Failed to load weights", ("QKVParallelLinear",), True),  # a real failure stays loud
    (UTILS, "something else", (), True),
])
def test_only_the_expected_load_warnings_are_dropped(logger, message, args, shown):
    quiet_expected_load_warnings()
    quiet_expected_load_warnings()  # idempotent: one filter per logger
    log = logging.getLogger(logger)
    assert len(log.filters) == 1
    seen: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: seen.append(record.getMessage())  # vLLM's config stops propagation to root
    log.addHandler(handler)
    try:
        log.warning(message, *args)
    finally:
        log.removeHandler(handler)
    assert (seen == [message % args]) == shown
