"""learners.allocator: the environment that starts a process under Ray's jemalloc, what a process runs under, and
the `userrl` command starting itself again under it for a local learner."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from userrl.allocator import JEMALLOC_CONF, RESTARTED, allocator_env, jemalloc_path, resolve_allocator
from userrl.config import ConfigError, parse_config

needs_jemalloc = pytest.mark.skipif(jemalloc_path() is None, reason="this Ray wheel ships no libjemalloc.so")


def _allocator_of_a_child(env: dict[str, str]) -> str:
    """What a new Python process started with `env` runs under, as it reports itself."""
    code = "from userrl.allocator import running_allocator; print(running_allocator())"
    done = subprocess.run([sys.executable, "-c", code], env={**os.environ, **env}, capture_output=True, text=True,
                          check=True, timeout=60)
    return done.stdout.strip()


def test_linux_ray_wheels_ship_jemalloc():
    if sys.platform.startswith("linux"):
        assert jemalloc_path() is not None and jemalloc_path().endswith("ray/core/libjemalloc.so")
        assert resolve_allocator("auto") == "jemalloc"
    assert resolve_allocator("system") == "system"


@needs_jemalloc
def test_a_process_started_with_the_environment_runs_under_jemalloc():
    env = allocator_env("jemalloc")
    assert env["LD_PRELOAD"].split()[0] == jemalloc_path()
    assert env["MALLOC_CONF"] == JEMALLOC_CONF  # freed pages kept for reuse (returning them cost 11-19 %)
    assert _allocator_of_a_child(env) == "jemalloc"
    assert _allocator_of_a_child(allocator_env("system")) == "system"
    assert allocator_env("system") == {}


@needs_jemalloc
def test_a_preload_and_a_malloc_conf_of_the_users_are_kept(monkeypatch):
    monkeypatch.setenv("LD_PRELOAD", "/opt/mine.so")
    monkeypatch.setenv("MALLOC_CONF", "narenas:2")
    env = allocator_env("auto")
    assert env == {"LD_PRELOAD": f"{jemalloc_path()} /opt/mine.so", "MALLOC_CONF": "narenas:2"}


def test_the_config_names_the_field_of_an_unknown_allocator():
    assert parse_config({}).learners.allocator == "auto"
    with pytest.raises(ConfigError, match="learners.allocator"):
        parse_config({"learners": {"allocator": "tcmalloc"}})


@needs_jemalloc
def test_a_command_restarts_itself_under_jemalloc_and_its_children_start_as_before(tmp_path):
    """`restart_under` replaces the process (same pid, same arguments) with one under jemalloc; there,
    `forget_restart` gives the processes it starts the environment it had (no LD_PRELOAD)."""
    script = tmp_path / "command.py"
    script.write_text(textwrap.dedent("""
        import os, subprocess, sys
        from userrl.allocator import forget_restart, restart_under, running_allocator
        print("start", os.getpid(), running_allocator(), sys.argv[1:], flush=True)
        if not forget_restart():
            restart_under("auto")
        child = subprocess.run([sys.executable, "-c",
                                "from userrl.allocator import running_allocator; print(running_allocator())"],
                               capture_output=True, text=True, check=True).stdout.strip()
        print("after", os.getpid(), running_allocator(), sys.argv[1:], child, os.environ.get("LD_PRELOAD"), flush=True)
    """))
    env = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", RESTARTED)}
    lines = subprocess.run([sys.executable, str(script), "train", "x=1"], env=env, capture_output=True, text=True,
                           check=True, timeout=120).stdout.splitlines()
    assert len(lines) == 3, lines  # started twice, finished once
    first, again, after = (line.split(" ", 3) for line in lines)
    assert first[0] == again[0] == "start" and first[1] == again[1] == after[1]  # the same process
    assert (first[2], again[2]) == ("system", "jemalloc")
    assert after[2:] == ["jemalloc", "['train', 'x=1'] system None"]


@needs_jemalloc
def test_userrl_train_with_a_local_learner_restarts_under_jemalloc_and_says_its_choices_once():
    """`userrl train` with learners.num_learners=0 reads its config, starts again under jemalloc (the choices
    printed while reading it are not printed again), then fails on the missing model before Ray starts."""
    code = ("import sys; from userrl.allocator import running_allocator; print('under', running_allocator()); "
            "from userrl.cli import main; sys.exit(main())")
    done = subprocess.run([sys.executable, "-c", code, "train", "learners.num_learners=0", "policy.dtype=auto",
                           "policy.model=/nonexistent/model"],
                          env={k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", RESTARTED)},
                          capture_output=True, text=True, timeout=120)
    lines = done.stdout.splitlines()
    assert done.returncode == 2 and "policy.model='/nonexistent/model'" in done.stdout + done.stderr
    assert [line for line in lines if line.startswith("under ")] == ["under system", "under jemalloc"]
    assert sum(line.startswith("policy.dtype: ") for line in lines) == 1


@pytest.mark.parametrize("allocator", ["system", "jemalloc"])
def test_freed_memory_goes_back_to_the_system_between_iterations(allocator):
    """What the train loop does after each iteration: memory freed under either allocator leaves the process
    (jemalloc keeps freed pages for reuse until then)."""
    if allocator == "jemalloc" and jemalloc_path() is None:
        pytest.skip("this Ray wheel ships no libjemalloc.so")
    code = textwrap.dedent("""
        import psutil
        from userrl.allocator import release_freed_memory, running_allocator
        rss = lambda: psutil.Process().memory_info().rss >> 20
        blocks = [bytearray(1 << 20) for _ in range(400)]  # 1 MiB each: from the heap, not one mapping each
        held = rss()
        del blocks
        freed = rss()
        release_freed_memory()
        print(running_allocator(), held, freed, rss())
    """)
    env = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", RESTARTED)}
    done = subprocess.run([sys.executable, "-c", code], env={**env, **allocator_env(allocator)},
                          capture_output=True, text=True, check=True, timeout=60)
    name, held, freed, released = done.stdout.split()
    assert name == allocator
    assert int(held) - int(released) > 300  # MiB: most of the 400 MiB left
    if allocator == "jemalloc":
        assert int(freed) > int(held) - 100  # kept until released
