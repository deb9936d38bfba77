"""What a τ tool is: a plain Python function over an EpisodeDB, plus its advertised schema."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

#: Every failed check of a tool returns a string with this prefix (docs/spec/TAU_TOOLS.md §0).
ERROR_PREFIX = "Error: "


@dataclass(frozen=True)
class Param:
    """One advertised argument of a tool (every τ-bench tool argument is required)."""

    name: str
    type: str
    description: str


@dataclass(frozen=True)
class Tool:
    """A domain tool: `fn(db, **arguments) -> str`, its description, and whether it can change the database."""

    name: str
    fn: Callable[..., str]
    description: str
    params: tuple[Param, ...] = ()
    writes: bool = False
    terminal: bool = False

    def schema(self) -> dict[str, Any]:
        """The OpenAI-style function schema of this tool."""
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": {
                    "type": "object",
                    "properties": {
                        p.name: {"type": p.type, "description": p.description} for p in self.params
                    },
                    "required": [p.name for p in self.params],
                },
            },
        }


def dumps(value: Any) -> str:
    """A tool's JSON observation: Python json.dumps with default settings (docs/spec/TAU_TOOLS.md §0)."""
    return json.dumps(value)
