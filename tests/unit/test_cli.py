"""Bad input at the command line: a clear message and a non-zero exit, before anything starts."""

import subprocess
import sys

import pytest

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
