"""Action protocols: one registered class per protocol (base.py: the interface and the registry).

Importing this package registers the built-in protocols (bracket, tool_call, native_tools); a plug-in's
protocols are registered by its `register()` (userrl/plugins.py), called on the first lookup of another name.
"""

from userrl.protocols import bracket, native_tools, tool_call  # noqa: F401 - registers the built-ins
from userrl.protocols.base import (
    PROTOCOL_CLASSES,
    ActionProtocol,
    ParsedTurn,
    get_protocol,
    protocol_names,
    register_protocol,
    template_renders_tools,
)

__all__ = [
    "PROTOCOL_CLASSES",
    "ActionProtocol",
    "ParsedTurn",
    "get_protocol",
    "protocol_names",
    "register_protocol",
    "template_renders_tools",
]
