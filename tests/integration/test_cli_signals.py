"""SIGTERM (`kill`, `ray job stop`) ends a `userrl` command that runs Ray the way Ctrl+C does: its `finally`
blocks run, one line says what stays, status 143; not Ray's crash handler's stack dump and abort (134)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import pytest

# A command that holds a local Ray the way train, sft and evaluate do, in a process of its own.
HOLD_RAY = textwrap.dedent("""
    import sys, time
    from userrl import cli

    def hold(args):
        import ray
        ray.init(num_cpus=1, include_dashboard=False)
        try:
            print("ready", flush=True)
            time.sleep(120)
        finally:
            print("finally ran", flush=True)
            ray.shutdown()
        return 0

    cli.cmd_evaluate_user = hold
    sys.exit(cli.main(["evaluate-user"]))
""")


@pytest.mark.slow
def test_sigterm_stops_a_command_cleanly_with_status_143():
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "RAY_DISABLE_FAILURE_SIGNAL_HANDLER")}
    proc = subprocess.Popen([sys.executable, "-c", HOLD_RAY], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, env={**env, "RAY_AUTH_MODE": "disabled"})
    try:
        lines = []
        for line in proc.stdout:
            lines.append(line)
            if line.strip() == "ready":
                break
        assert lines and lines[-1].strip() == "ready", "".join(lines)
        proc.send_signal(signal.SIGTERM)
        rest, _ = proc.communicate(timeout=90)
    finally:
        if proc.poll() is None:
            proc.kill()
    output = "".join(lines) + rest
    assert proc.returncode == 128 + signal.SIGTERM, output
    assert "finally ran" in rest and "stopped (SIGTERM)" in rest
    assert "SIGTERM received" not in output  # Ray's C++ crash handler did not take the signal
