"""`policy.dtype: auto` and `learners.precision: auto`: bfloat16 where the hardware computes it natively."""

from __future__ import annotations

import pytest

from userrl import hardware
from userrl.config import load_config
from userrl.engines import select

ZEN3 = "processor\t: 0\nflags\t\t: fpu sse2 avx avx2 fma\n"
SAPPHIRE_RAPIDS = "processor\t: 0\nflags\t\t: fpu avx2 avx512f avx512_bf16 amx_bf16 amx_tile\n"
GRAVITON3 = "processor\t: 0\nFeatures\t: fp asimd sve bf16 i8mm\n"


@pytest.mark.parametrize(("cpuinfo", "native"), [(ZEN3, False), (SAPPHIRE_RAPIDS, True), (GRAVITON3, True)])
def test_the_cpu_flags_tell_whether_bfloat16_is_native(cpuinfo, native):
    assert bool(hardware.cpu_flags(cpuinfo) & hardware.BF16_CPU_FLAGS) is native


@pytest.mark.parametrize("native", [False, True])
def test_auto_is_bfloat16_on_a_gpu_or_a_bf16_cpu_and_float32_elsewhere(monkeypatch, native, capsys):
    monkeypatch.setattr(hardware, "cpu_has_bf16", lambda: native)
    monkeypatch.setattr(select, "_announced", set())  # printed once per process: afresh for this test
    expected = "bfloat16" if native else "float32"
    config = load_config(None, ["policy.dtype=auto", "learners.precision=auto"])
    assert (config.policy.dtype, config.learners.precision) == (expected, expected)
    gpu = load_config(None, ["policy.dtype=auto", "policy.num_gpus_per_replica=1", "learners.precision=auto",
                             "learners.use_gpu=true"])
    assert (gpu.policy.dtype, gpu.learners.precision) == ("bfloat16", "bfloat16")
    # What was asked by name stays, and a resolved config read back (Ray Train's workers) is the same.
    assert load_config(None, ["policy.dtype=bfloat16"]).policy.dtype == "bfloat16"
    assert load_config(None, [f"policy.dtype={config.policy.dtype}"]).policy.dtype == expected
    if not native:
        assert "learners.precision: float32 (auto: this CPU has no bfloat16 instructions" in capsys.readouterr().out
