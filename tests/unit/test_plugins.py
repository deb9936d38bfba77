"""Plug-ins (userrl/plugins.py): found through the `userrl.plugins` entry points, registered once, and every
registry they extend names the known entries when asked for an unknown one. HumanLM is one: no module outside
userrl/humanlm/ imports or names it."""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys
from pathlib import Path

import pytest

from userrl import plugins
from userrl.cli import build_parser
from userrl.commands.registry import COMMANDS, Command, register_command
from userrl.config import CONFIG_SECTIONS, ConfigError, ConfigSection, load_config, register_config_section
from userrl.group_scorers import group_scorer_factory
from userrl.sft import get_sft_source
from userrl.users import user_client_class

ROOT = Path(__file__).resolve().parents[2]


def test_humanlm_is_an_installed_plugin_and_loading_is_idempotent(monkeypatch):
    points = importlib.metadata.entry_points(group=plugins.ENTRY_POINT_GROUP)
    assert {e.name: e.value for e in points}["humanlm"] == "userrl.humanlm.plugin:register"
    calls = []

    class Point:
        name = "fake"

        def load(self):
            return lambda: calls.append(1)

    monkeypatch.setattr(plugins, "_loaded", False)
    monkeypatch.setattr(plugins.importlib.metadata, "entry_points", lambda group: [Point()])
    plugins.load_plugins()
    plugins.load_plugins()
    assert calls == [1]


def test_no_core_module_imports_or_names_humanlm():
    core = [p for folder in ("userrl", "envs", "serving", "algorithms") for p in (ROOT / folder).rglob("*.py")
            if "humanlm" not in p.relative_to(ROOT).parts]
    assert core
    assert [str(p.relative_to(ROOT)) for p in core if "humanlm" in p.read_text().lower()] == []


def test_the_core_imports_no_plugin_until_a_registry_is_asked():
    code = ("import sys, userrl.cli, userrl.config, userrl.chat, userrl.protocols, userrl.sft, userrl.users\n"
            "assert not [m for m in sys.modules if m.startswith('userrl.humanlm')]\n"
            "from userrl.config import load_config\n"
            "assert load_config(None, []).humanlm.mode and 'userrl.humanlm.plugin' in sys.modules\n"
            "assert 'torch' not in sys.modules and 'ray' not in sys.modules  # registering stays light\n")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_the_plugins_commands_are_subcommands_and_a_registered_one_runs(monkeypatch, capsys):
    monkeypatch.setitem(COMMANDS, "hello", Command(
        "hello", "say hello", lambda p: p.add_argument("--name", default="world"),
        lambda args, console: console.print(f"hello {args.name}") or 7))
    parser = build_parser()
    assert parser.parse_args(["evaluate-user", "--max-rows", "2"]).max_rows == 2
    assert parser.parse_args(["train-user", "--resume", "ckpt"]).resume == "ckpt"
    from userrl.cli import main

    assert main(["hello", "--name", "plug-in"]) == 7
    assert "hello plug-in" in capsys.readouterr().out
    assert register_command(COMMANDS["hello"]) is COMMANDS["hello"]


class _Greeting(ConfigSection):
    text: str = "hi"
    times: int = 1

    def check(self, config):
        if self.times > config.env.max_turns:
            raise ValueError(f"greeting.times={self.times} exceeds env.max_turns={config.env.max_turns}")


def test_a_plugin_section_is_typed_defaulted_checked_and_its_keys_suggested(monkeypatch):
    monkeypatch.setitem(CONFIG_SECTIONS, "greeting", _Greeting)
    assert load_config(None, []).greeting == _Greeting()
    assert load_config(None, ["greeting.times=3"]).model_dump()["greeting"] == {"text": "hi", "times": 3}
    with pytest.raises(ConfigError, match=r"greeting\.tims: unknown key; did you mean 'greeting\.times'"):
        load_config(None, ["greeting.tims=3"])
    with pytest.raises(ConfigError, match=r"greeting\.times: Input should be a valid integer"):
        load_config(None, ["greeting.times=many"])
    with pytest.raises(ConfigError, match=r"greeting\.times=20 exceeds env\.max_turns=16"):
        load_config(None, ["greeting.times=20"])
    with pytest.raises(ConfigError, match=r"greetng: unknown key; did you mean 'greeting'"):
        load_config(None, ["greetng.times=3"])
    with pytest.raises(ValueError, match="'policy' is built in"):
        register_config_section("policy", _Greeting)


def test_config_copies_keep_the_plugin_sections():
    config = load_config(None, ["humanlm.data_files={train: rows.jsonl}"])
    copy = config.with_absolute_paths()
    assert copy.humanlm.data_files["train"] == str(Path("rows.jsonl").resolve())
    assert config.humanlm.data_files["train"] == "rows.jsonl"


@pytest.mark.parametrize(("lookup", "message"), [
    (get_sft_source, r"unknown SFT source 'nope'; known: file, rows, solver"),
    (user_client_class, r"unknown env.local_user_format 'nope'; known: humanlm, plain"),
    (group_scorer_factory, r"unknown group scorer 'nope'; known: humanlm"),
])
def test_each_registry_names_its_known_entries(lookup, message):
    with pytest.raises(ValueError, match=message):
        lookup("nope")


def test_config_refuses_unregistered_sft_sources_and_user_formats():
    with pytest.raises(ConfigError, match=r"sft\.source.*unknown SFT source 'rowz'"):
        load_config(None, ["sft.source=rowz"])
    with pytest.raises(ConfigError, match=r"env\.local_user_format.*known: humanlm, plain"):
        load_config(None, ["env.local_user_format=humanlmm"])
