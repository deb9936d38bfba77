"""Action protocols: one registered class per protocol (base.py: the interface and the registry).

Importing this package registers the built-in protocols (bracket, tool_call, native_tools); HumanLM's
user_reply registers itself from userrl/humanlm/protocol.py, imported on first use (EXTERNAL_PROTOCOLS).
"""

from userrl.protocols import bracket, native_tools, tool_call  # noqa: F401 - registers the built-ins
from userrl.protocols.base import (
    EXTERNAL_PROTOCOLS,
    PROTOCOL_CLASSES,
    ActionProtocol,
    ParsedTurn,
    get_protocol,
    protocol_names,
    register_protocol,
    template_renders_tools,
)

__all__ = [
    "EXTERNAL_PROTOCOLS",
    "PROTOCOL_CLASSES",
    "ActionProtocol",
    "ParsedTurn",
    "get_protocol",
    "protocol_names",
    "register_protocol",
    "template_renders_tools",
]
