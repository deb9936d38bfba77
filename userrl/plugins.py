"""Plug-ins: packages that extend userrl through its registries, found through Python entry points.

A plug-in declares `[project.entry-points."userrl.plugins"] name = "package.module:register"`; `register()`
adds its gyms, protocols, config sections, commands, ... to the registries. Each registry calls
`load_plugins()` on its first lookup of a name it does not know, so the CLI and every Ray worker see the
plug-ins without importing any of them by name. Standard library only: every registry may import it.
"""

from __future__ import annotations

import importlib.metadata
from collections.abc import Mapping
from typing import TypeVar

T = TypeVar("T")

#: The entry-point group plug-ins register under.
ENTRY_POINT_GROUP = "userrl.plugins"

_loaded = False


def load_plugins() -> None:
    """Call every installed plug-in's `register()`, once per process (later calls do nothing)."""
    global _loaded
    if _loaded:
        return
    _loaded = True  # set first: a plug-in's register() looks names up in the registries, which call back here
    for entry_point in sorted(importlib.metadata.entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name):
        entry_point.load()()


def plugin_names() -> tuple[str, ...]:
    """The installed plug-ins' names, sorted."""
    return tuple(sorted(e.name for e in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)))


def registered(registry: Mapping[str, T], name: str, what: str) -> T:
    """`registry[name]`, loading the plug-ins first when the name is not built in; a ValueError naming `what`
    and the known names when no plug-in registers it either."""
    if name not in registry:
        load_plugins()
    if name not in registry:
        raise ValueError(f"unknown {what} {name!r}; known: {', '.join(sorted(registry))}")
    return registry[name]
