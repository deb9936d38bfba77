"""`user_reply` (HumanLM's single-turn task, docs/spec/ALGORITHMS.md §5.2): the policy is a user simulator. There is no action
syntax: the whole message is the simulated user's reply (tag blocks, scored per group by HumanLM's judge),
the opening is the task's own messages (persona prompt + context), and decoding ends at a field's closing tag.

Registered when this module is imported, which HumanLM's plug-in (userrl/humanlm/plugin.py) does."""

from __future__ import annotations

from typing import Any

from userrl.envs import MultiTurnEnv, Task
from userrl.humanlm.format import STOP_STRINGS
from userrl.protocols.base import ActionProtocol, Messages, ParsedTurn, register_protocol


@register_protocol
class UserReplyProtocol(ActionProtocol):
    """One reply in HumanLM's tag blocks; nothing follows it."""

    name = "user_reply"
    #: Decoding ends after the closing tag of any HumanLM field (docs/spec/ALGORITHMS.md §5.2 "stop strings").
    stop_strings = STOP_STRINGS
    plays_openai = False
    user_replies = True

    def instructions(self, prompt: Messages, tools: list[dict[str, Any]] | None = None, *,
                     tools_rendered: bool = False) -> Messages:
        """The prompt as it is: the persona prompt says how to reply."""
        return [dict(m) for m in prompt]

    def opening(self, task: Task, env: MultiTurnEnv, *, tools_rendered: bool = False) -> tuple[Messages, list]:
        """The task's own messages (persona prompt + context), as they are."""
        return self.instructions(env.native_prompt()), []

    def render_action(self, choice: str, content: str) -> str:
        """The reply itself (what `parse` reads back as the one step)."""
        return content

    def parse(self, text: str) -> ParsedTurn:
        """The whole message is the reply; the group scorer parses its tags."""
        return ParsedTurn(calls=[("answer", text)], n_tool_calls=1)

    def feedback_messages(self, parsed: ParsedTurn, feedback: str) -> Messages:
        """The episode ends with its one reply: nothing follows it."""
        return []

    def check_request_tools(self, names: list[str]) -> None:
        """A user simulator calls no tools."""
        raise ValueError("this model was trained as a user simulator (protocol user_reply): it calls no tools; "
                         "leave `tools` out")
