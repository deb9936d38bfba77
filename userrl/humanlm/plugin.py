"""HumanLM's plug-in entry point (pyproject: `[project.entry-points."userrl.plugins"] humanlm`).

`register()` adds HumanLM to userrl's registries: the `humanlm` gym and the `user_reply` protocol (their
modules register them when imported).
"""

from __future__ import annotations

import importlib

from userrl.commands.registry import register_command


def register() -> None:
    """Register HumanLM's gym, protocol, group scorer, task source, SFT source, user format, config section
    and commands."""
    for module in ("userrl.humanlm.env", "userrl.humanlm.protocol"):
        importlib.import_module(module)  # each registers itself at import
    from userrl.humanlm.commands import COMMANDS

    for command in COMMANDS:
        register_command(command)
