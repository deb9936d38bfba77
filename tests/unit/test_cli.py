"""Bad input at the command line: a clear message and a non-zero exit, before anything starts."""

import subprocess
import sys

import pytest

from userrl import cli
from userrl.cli import main


def test_config_typo_names_the_closest_key(capsys):
    assert main(["train", "--config", "experiments/quickstart.yaml", "training.lrr=1e-6"]) == 2
    assert "did you mean 'training.lr'" in capsys.readouterr().out


def test_unknown_gym_lists_the_known_ones(capsys):
    assert main(["train", "env.gyms=[{name: fuction}]"]) == 2
    out = capsys.readouterr().out
    assert "fuction" in out and "function" in out


def test_missing_config_file(capsys):
    assert main(["train", "--config", "does/not/exist.yaml"]) == 2
    assert "does not exist" in capsys.readouterr().out


@pytest.mark.parametrize("args", [["--help"], ["train", "--help"]])
def test_help(args):
    result = subprocess.run([sys.executable, "-m", "userrl.cli", *args], capture_output=True, text=True)
    assert result.returncode == 0 and "usage" in result.stdout


def test_play_function_gym_through_the_terminal():
    """A person's lines reach the env; the solver's answer ends the episode with return 1."""
    from userrl.envs import load_tasks

    task = load_tasks("function", split="test")[0]
    answer = task.data["expected_result"]
    lines = "[action] 1 2 3 4\n[search] test\n[answer] " + str(answer) + "\n"
    result = subprocess.run([sys.executable, "-m", "userrl.cli", "play", "function", "--index", "0"],
                            input=lines, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "Test case:" in result.stdout and "Correct!" in result.stdout
    assert "episode return: 1" in result.stdout


def test_play_unknown_gym(capsys):
    assert main(["play", "fuction"]) == 2
    out = " ".join(capsys.readouterr().out.split())  # the console wraps long lines at 80 columns
    assert "did you mean 'function'" in out


def test_play_unknown_task_id(capsys):
    assert main(["play", "function", "--task", "func-nope"]) == 2
    assert "no task 'func-nope' in gym 'function'" in capsys.readouterr().out


def test_userrl_sft_writes_its_checkpoint_even_when_the_config_says_every_0() -> None:
    # experiments/estimators.yaml keeps no RL checkpoints (checkpointing.every: 0); `userrl sft` on it once
    # printed a checkpoint path it had not written.
    from userrl.cli import sft_config

    config = sft_config("experiments/estimators.yaml", ["sft.episodes=8"])
    assert config.checkpointing.every == 1
    assert config.sft.enabled and config.training.iterations == 0 and config.sft.episodes == 8
    assert sft_config("experiments/quickstart.yaml", ["checkpointing.every=3"]).checkpointing.every == 3
    # A benchmark passes its RL overrides to the warm start too: they must not make `userrl sft` train RL.
    config = sft_config("experiments/quickstart.yaml", ["training.iterations=4", "sft.enabled=false"])
    assert config.training.iterations == 0 and config.sft.enabled


def test_ctrl_c_ends_a_command_with_a_message_and_status_130(monkeypatch, capsys):
    def interrupted(args):
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "cmd_evaluate", interrupted)
    assert cli.main(["evaluate"]) == 130
    assert "interrupted" in capsys.readouterr().out


def test_version(capsys):
    from importlib.metadata import version

    with pytest.raises(SystemExit) as stop:
        main(["--version"])
    assert stop.value.code == 0 and capsys.readouterr().out == f"userrl {version('userrl')}\n"


def test_config_show_prints_the_resolved_config_as_yaml(capsys):
    import yaml

    from userrl.config import load_config, parse_config

    args = ["--config", "experiments/quickstart.yaml", "policy.engine=hf", "training.lr=2e-6"]
    assert main(["config", "show", *args]) == 0
    shown = yaml.safe_load(capsys.readouterr().out)
    assert shown["policy"]["engine"] == "hf" and shown["training"]["lr"] == 2e-6
    assert shown["env"]["local_user_engine"] == "auto"  # defaults are shown too
    assert parse_config(shown) == load_config("experiments/quickstart.yaml", args[2:])  # reads back the same
    assert main(["config", "show", "policy.engin=hf"]) == 2
    assert "did you mean 'policy.engine'" in capsys.readouterr().out
