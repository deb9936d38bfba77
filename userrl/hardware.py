"""Whether this machine computes bfloat16 natively, for `policy.dtype: auto` and `learners.precision: auto`.

A CPU without bfloat16 instructions (x86 without AVX512-BF16 or AMX, e.g. AMD Zen 3) emulates bfloat16 in
software: a 1,024 x 1,024 matmul took 66x longer in bfloat16 than in float32 on such a 2-core machine
(bench/README "bfloat16 on a CPU without bfloat16 instructions"), so `auto` is float32 there. On a GPU, and
on a CPU that lists the instructions, `auto` is bfloat16 (half the memory, and faster).
"""

from __future__ import annotations

import functools
from pathlib import Path

#: /proc/cpuinfo flags of native bfloat16 arithmetic: x86's AVX512-BF16 and AMX-BF16, Arm's BF16 extension.
BF16_CPU_FLAGS = frozenset({"avx512_bf16", "amx_bf16", "bf16"})


def cpu_flags(cpuinfo: str) -> set[str]:
    """The instruction-set flags a /proc/cpuinfo text lists (x86 `flags`, Arm `Features`)."""
    flags: set[str] = set()
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):
            flags.update(value.split())
    return flags


@functools.cache
def cpu_has_bf16() -> bool:
    """Whether this CPU lists a native bfloat16 instruction set (Linux; elsewhere unknown, so False)."""
    try:
        return bool(cpu_flags(Path("/proc/cpuinfo").read_text()) & BF16_CPU_FLAGS)
    except OSError:
        return False


def resolve_bf16(requested: str, gpu: bool) -> tuple[str, str]:
    """(dtype, reason): `auto` is bfloat16 on a GPU or a CPU with bfloat16 instructions, float32 on any other
    CPU; any other value is taken as given."""
    if requested != "auto":
        return requested, "as configured"
    if gpu:
        return "bfloat16", "auto: a GPU"
    if cpu_has_bf16():
        return "bfloat16", "auto: this CPU has bfloat16 instructions"
    return "float32", "auto: this CPU has no bfloat16 instructions, so bfloat16 would be emulated, many times slower"
