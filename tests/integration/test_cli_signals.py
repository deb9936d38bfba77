"""SIGTERM (`kill`, `ray job stop`) ends a `userrl` command that runs Ray Train the way Ctrl+C does: its `finally`
blocks run, one line says what stays, status 143; not Ray's crash handler's stack dump and abort (134), and not
the bare status 1 that Ray Train's driver turned Ray's own handler into."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import pytest

# A command that connects the way train, sft and evaluate do (`init_ray`) and waits in a Ray Train fit whose one
# worker has said it is running, in a process of its own.
HOLD_RAY_TRAIN = textwrap.dedent("""
    import sys, time
    from userrl import cli

    def train_loop(config):
        print("worker running", flush=True)
        time.sleep(120)

    def hold(args):
        import ray
        from ray.train import ScalingConfig
        from ray.train.torch import TorchTrainer
        from userrl.cluster import init_ray
        from userrl.config import UserRLConfig

        config = UserRLConfig()
        config.ray.num_cpus = 2
        init_ray(config)
        try:
            TorchTrainer(train_loop, scaling_config=ScalingConfig(num_workers=1)).fit()
        finally:
            print("finally ran", flush=True)
            ray.shutdown()
        return 0

    cli.cmd_evaluate = hold
    sys.exit(cli.main(["evaluate"]))
""")


@pytest.mark.slow
def test_sigterm_during_ray_train_stops_the_command_cleanly_with_status_143():
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "RAY_DISABLE_FAILURE_SIGNAL_HANDLER")}
    proc = subprocess.Popen([sys.executable, "-c", HOLD_RAY_TRAIN], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env={**env, "RAY_AUTH_MODE": "disabled"})
    try:
        lines = []
        for line in proc.stdout:
            lines.append(line)
            if "worker running" in line:  # Ray forwards the worker's print to the driver's output
                break
        assert lines and "worker running" in lines[-1], "".join(lines)
        proc.send_signal(signal.SIGTERM)
        rest, _ = proc.communicate(timeout=90)
    finally:
        if proc.poll() is None:
            proc.kill()
    output = "".join(lines) + rest
    assert proc.returncode == 128 + signal.SIGTERM, output
    assert "finally ran" in rest and "stopped (SIGTERM)" in rest, output
    assert "SIGTERM received" not in output  # Ray's C++ crash handler did not take the signal
