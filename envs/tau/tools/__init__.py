"""The τ-bench domain tools: per-domain registries, dispatch with upstream's error convention, gold replay."""

from __future__ import annotations

from collections.abc import Mapping
from functools import cache
from typing import Any

from userrl.envs.tau.database import EpisodeDB
from userrl.envs.tau.tools.airline import airline_tools
from userrl.envs.tau.tools.base import ERROR_PREFIX, Param, Tool
from userrl.envs.tau.tools.retail import retail_tools

__all__ = [
    "ERROR_PREFIX",
    "Param",
    "Tool",
    "catalogue_text",
    "domain_tools",
    "offered_tools",
    "replay_actions",
    "run_tool",
    "unknown_action",
]


@cache
def domain_tools(domain: str) -> Mapping[str, Tool]:
    """The tools of a domain by name, in advertised order."""
    if domain == "retail":
        tools = retail_tools()
    elif domain == "airline":
        tools = airline_tools()
    else:
        raise ValueError(f"unknown τ domain {domain!r}; known: retail, airline")
    return {tool.name: tool for tool in tools}


def offered_tools(domain: str, names: tuple[str, ...] | None = None) -> Mapping[str, Tool]:
    """The tools a task offers: the domain's, or the subset it names (the easy tier's), in advertised order."""
    tools = domain_tools(domain)
    if names is None:
        return tools
    unknown = sorted(set(names) - set(tools))
    if unknown:
        raise ValueError(f"tools {unknown} are not {domain} tools; known: {', '.join(tools)}")
    return {name: tool for name, tool in tools.items() if name in names}


def unknown_action(name: Any) -> str:
    """The observation for a tool name the domain does not have."""
    return f"Unknown action {name}"


def run_tool(db: EpisodeDB, name: str, arguments: Mapping[str, Any]) -> str:
    """Call a tool with the arguments exactly as given; any exception becomes `Error: <message>`."""
    tool = domain_tools(db.domain).get(name)
    if tool is None:
        return unknown_action(name)
    try:
        # No schema validation or coercion, as upstream: a missing or extra argument is a TypeError here.
        return tool.fn(db, **arguments)
    except Exception as exc:
        return f"{ERROR_PREFIX}{exc}"


def replay_actions(db: EpisodeDB, actions: list[Mapping[str, Any]]) -> list[str]:
    """Apply gold actions in order, skipping terminal tools; errors are part of the result, never raised."""
    tools = domain_tools(db.domain)
    observations = []
    for action in actions:
        name = action["name"]
        tool = tools.get(name)
        if tool is not None and tool.terminal:
            continue
        observations.append(run_tool(db, name, action.get("kwargs") or {}))
    return observations


@cache
def catalogue_text(domain: str, names: tuple[str, ...] | None = None) -> str:
    """The tool list shown by `search tools` (of the tools a task offers): one block per tool with its parameters."""
    lines = ["Available Tools:"]
    for tool in offered_tools(domain, names).values():
        lines.append(f"- {tool.name}: {tool.description}")
        if tool.params:
            lines.append("  Parameters:")
            lines.extend(f"    - {p.name} ({p.type}): {p.description}" for p in tool.params)
        else:
            lines.append("  Parameters: none")
    return "\n".join(lines)
