"""The `userrl` subcommands that plug-ins add: one registered Command each; the CLI asks this registry.

Light on purpose (argparse and the plug-in loader only): building the parser must not import a command's
work, so a Command's `run` imports what it needs when it runs.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from userrl.plugins import load_plugins


@dataclass(frozen=True)
class Command:
    """One subcommand: its name and help line, its arguments, and what it runs (status code back)."""

    name: str
    help: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    #: run(args, console) -> exit status; the CLI turns ConfigError / ValueError into status 2.
    run: Callable[[argparse.Namespace, Any], int]


#: Registry name -> command (plug-ins' subcommands; the built-ins are userrl/cli.py's own).
COMMANDS: dict[str, Command] = {}


def register_command(command: Command) -> Command:
    """Add a subcommand (re-registering a name replaces it)."""
    COMMANDS[command.name] = command
    return command


def registered_commands() -> list[Command]:
    """Every plug-in's subcommands, in the order they were registered (the order `userrl --help` lists)."""
    load_plugins()
    return list(COMMANDS.values())


def add_config_arguments(parser: argparse.ArgumentParser) -> None:
    """`--config FILE` and dotted overrides: the arguments of every command that reads a run config."""
    parser.add_argument("--config", help="YAML config file")
    parser.add_argument("overrides", nargs="*", help="dotted overrides, e.g. training.lr=1e-6")
