"""What the choice protocols (bracket and tool_call) share: they act through the gyms' choices (action,
answer, search, finish), offered as the one `interact_with_env` tool, on the task's own prompt."""

from __future__ import annotations

import json
from typing import Any

from userrl.envs import MultiTurnEnv, Task
from userrl.protocols.base import ActionProtocol, Messages, ParsedTurn

TOOL_NAME = "interact_with_env"
TOOL_SCHEMA: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": TOOL_NAME,
        "description": "Take one step in the current environment. Follow the system prompt for which choices are "
        "allowed and what the content must contain.",
        "parameters": {
            "type": "object",
            "properties": {
                "choice": {
                    "type": "string",
                    "enum": ["action", "answer", "search"],
                    "description": "The kind of step to take. Use only the choices the system prompt allows.",
                },
                "content": {
                    "type": "string",
                    "description": "The text of the step: the message, question, answer or search query, in the "
                    "format the system prompt defines.",
                },
            },
            "required": ["choice", "content"],
        },
    },
}
IGNORED_CALL_NOTICE = "Only one interact_with_env call is executed per turn; this call was ignored."


class ChoiceProtocol(ActionProtocol):
    """A protocol whose steps are the gyms' (choice, content) pairs, on the task's prompt."""

    ignored_call_notice = IGNORED_CALL_NOTICE

    def opening(self, task: Task, env: MultiTurnEnv, *, tools_rendered: bool = False) -> tuple[Messages, list]:
        """The task's [system, user] prompt with the instructions; no gym tools."""
        return self.instructions(task.prompt, tools_rendered=tools_rendered), []

    def chat_api_feedback(self, parsed: ParsedTurn, feedback: str) -> Messages:
        """An endpoint's text reply has no tool_call_id to answer: the feedback is one user message."""
        return [{"role": "user", "content": feedback}]

    def read_tool_call(self, name: str, arguments: str) -> tuple[str, str] | None:
        """The (choice, content) of an `interact_with_env` call with a JSON object of arguments, else None."""
        if name != TOOL_NAME:
            return None
        try:
            parsed = json.loads(arguments or "{}")
        except json.JSONDecodeError:
            return None
        if not isinstance(parsed, dict):
            return None
        return str(parsed.get("choice", "")), str(parsed.get("content", ""))
