"""The learners' memory allocator: jemalloc, which every Ray wheel for Linux ships, instead of glibc's malloc.

A learner's update allocates and frees per-layer tensors of 5-25 MB over and over. glibc serves them from a heap
that grows wherever a freed hole does not fit the next request and shrinks only from its top, so about a third
of a rank's peak resident set was freed memory it kept (bench/README "glibc's allocator in the learner ranks").
jemalloc's size classes reuse those holes. Its freed pages are kept for reuse during an update, not returned to
the system (`dirty_decay_ms:-1`: returning them made each update 11-19 % slower for a lower peak, the same
section), and given back between iterations (`release_freed_memory`).

An allocator is chosen when a process starts (`LD_PRELOAD`), so it reaches the learners through their
environment: Ray Train's workers through the run's `worker_runtime_env`, a local learner
(`learners.num_learners: 0`, in the `userrl` command's own process) by that command starting itself again.
"""

from __future__ import annotations

import ctypes
import functools
import importlib.util
import os
import sys
from pathlib import Path

#: Freed pages stay with the process for the next allocation (jemalloc's defaults return them within 10 s); the
#: train loop returns them between iterations (`release_freed_memory`), when the learner waits for a rollout.
JEMALLOC_CONF = "dirty_decay_ms:-1,muzzy_decay_ms:-1"
#: jemalloc's MALLCTL_ARENAS_ALL: `arena.<it>.purge` purges every arena.
_ALL_ARENAS = 4096
#: Set in the environment of a `userrl` command that started itself again under jemalloc, to the LD_PRELOAD
#: it had before: the processes it starts (Ray, the replicas, vLLM) start with that again.
RESTARTED = "USERRL_ALLOCATOR_RESTARTED"


def jemalloc_path() -> str | None:
    """Ray's bundled libjemalloc.so, or None where this Ray wheel has none (macOS, Windows)."""
    spec = importlib.util.find_spec("ray")
    if spec is None or spec.origin is None or not sys.platform.startswith("linux"):
        return None
    path = Path(spec.origin).parent / "core" / "libjemalloc.so"
    return str(path) if path.is_file() else None


def resolve_allocator(name: str) -> str:
    """`learners.allocator` as it will run: auto = jemalloc where Ray ships it, the system's malloc elsewhere."""
    if name == "system":
        return "system"
    if jemalloc_path() is None:
        if name == "jemalloc":
            raise ValueError("learners.allocator: jemalloc is not in this Ray installation (ray/core/libjemalloc.so, "
                             "Linux wheels only); use learners.allocator=auto or system")
        return "system"
    return "jemalloc"


def allocator_env(name: str) -> dict[str, str]:
    """Environment variables that make a new process allocate with `learners.allocator` ({} for the system's)."""
    if resolve_allocator(name) == "system":
        return {}
    preload = " ".join(p for p in (jemalloc_path(), os.environ.get("LD_PRELOAD", "")) if p)
    return {"LD_PRELOAD": preload, "MALLOC_CONF": os.environ.get("MALLOC_CONF", JEMALLOC_CONF)}  # a user's wins


@functools.cache  # fixed when the process starts; the train loop asks after every iteration
def running_allocator() -> str:
    """The allocator this process runs with: jemalloc when its library is mapped, else the system's."""
    try:
        maps = Path("/proc/self/maps").read_text()
    except OSError:
        return "system"
    return "jemalloc" if "libjemalloc" in maps else "system"


def restart_under(name: str) -> None:
    """Start this command again under `learners.allocator` when it runs under another (never returns then).

    Only a process that is the command itself may do this (not a test or a library calling `main`)."""
    env = allocator_env(name)
    if not env or running_allocator() == "jemalloc":
        return
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, sys.orig_argv, {**os.environ, **env, RESTARTED: os.environ.get("LD_PRELOAD", "")})


def forget_restart() -> bool:
    """True in a command that `restart_under` started again (which must not restart once more, even where the
    preload failed); it gives the processes it starts the environment it was started with."""
    if RESTARTED not in os.environ:
        return False
    before = os.environ.pop(RESTARTED)  # MALLOC_CONF stays: only jemalloc reads it
    if before:
        os.environ["LD_PRELOAD"] = before
    else:
        os.environ.pop("LD_PRELOAD", None)
    return True


def release_freed_memory() -> None:
    """Give the memory this process freed back to the system: jemalloc's purge of every arena, or glibc's
    `malloc_trim` (Linux; elsewhere nothing)."""
    if not sys.platform.startswith("linux"):
        return
    try:
        if running_allocator() == "jemalloc":
            ctypes.CDLL(None).mallctl(f"arena.{_ALL_ARENAS}.purge".encode(), None, None, None, ctypes.c_size_t(0))
        else:
            ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # a libc without malloc_trim, a jemalloc built with a symbol prefix
        pass
