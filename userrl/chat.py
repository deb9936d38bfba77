"""Chat rendering into exact token segments, for one tokenizer and action protocol.

Non-generated messages are tokenized as deltas of the chat template against a fixed dummy prefix
(docs/spec/ALGORITHMS.md §1.2), so the context only ever grows by appending and the policy conditions on
exactly the tokens that training later scores. What the messages say (instructions, tool schemas,
actions, feedback) is the action protocol's (userrl.protocols): ChatFormat renders what it decides.
"""

from __future__ import annotations

from typing import Any

from userrl.envs import MultiTurnEnv, Task
from userrl.protocols import ParsedTurn, get_protocol, template_renders_tools
from userrl.trajectory import ROLE_IDS

_DUMMY = [{"role": "system", "content": "x"}, {"role": "user", "content": "y"}]


class ChatFormat:
    """Renders conversations into token segments for one tokenizer and action protocol."""

    def __init__(self, tokenizer: Any, protocol: str = "tool_call"):
        self.tokenizer = tokenizer
        #: The action protocol (env.protocol's registered class; ValueError naming the known ones).
        self.protocol = get_protocol(protocol)
        #: Whether tool schemas go through the template's `tools` argument (else into the system message).
        self.template_tools = self.protocol.offers_tools and template_renders_tools(tokenizer.chat_template)
        #: Texts that end an assistant message (kept in it): the engines stop on tokens only, so TokenPolicy
        #: cuts the sampled tokens after the first of these.
        self.stop_strings: tuple[str, ...] = self.protocol.stop_strings
        self.eos_text = tokenizer.eos_token
        self.stop_token_ids = sorted({tokenizer.eos_token_id, *self._extra_stop_ids()})
        self._header_ids = self._encode(self._render(_DUMMY, True)[len(self._render(_DUMMY, False)):])

    def _extra_stop_ids(self) -> list[int]:
        ids = []
        for text in ("<|im_end|>", "<|eot_id|>", "<|end|>"):
            token = self.tokenizer.convert_tokens_to_ids(text)
            if isinstance(token, int) and token != self.tokenizer.unk_token_id and token is not None:
                ids.append(token)
        return ids

    def _render(self, messages: list[dict[str, str]], generation_prompt: bool,
                tools: list[dict[str, Any]] | None = None) -> str:
        schemas = self.protocol.tool_schemas(tools)
        kwargs: dict[str, Any] = {"tools": schemas} if self.template_tools and schemas else {}
        return self.tokenizer.apply_chat_template(
            messages, tokenize=False, add_generation_prompt=generation_prompt, **kwargs
        )

    def _encode(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def initial_messages(self, prompt: list[dict[str, str]],
                         tools: list[dict[str, Any]] | None = None) -> list[dict[str, str]]:
        """The [system, user] messages with the protocol's instructions appended to the system message.

        `tools` are the gym's function schemas (native_tools only; written out unless the template renders them).
        """
        return self.protocol.instructions(prompt, tools, tools_rendered=self.template_tools)

    def episode_opening(self, task: Task, env: MultiTurnEnv) -> tuple[list[dict[str, str]], list[dict[str, Any]]]:
        """An episode's first messages and the tool schemas to render them with ([] outside native_tools)."""
        return self.protocol.opening(task, env, tools_rendered=self.template_tools)

    def encode_prompt(self, messages: list[dict[str, str]],
                      tools: list[dict[str, Any]] | None = None) -> list[tuple[list[int], int]]:
        """Token segments (ids, role id) of the first context, ending with the assistant header."""
        segments, done = [], ""
        for i in range(1, len(messages) + 1):
            text = self._render(messages[:i], False, tools)
            segments.append((self._encode(text[len(done):]), ROLE_IDS[messages[i - 1]["role"]]))
            done = text
        segments.append((self._encode(self._render(messages, True, tools)[len(done):]), ROLE_IDS["assistant"]))
        return segments

    @property
    def header_ids(self) -> list[int]:
        """The assistant generation header appended before turn k > 0."""
        return list(self._header_ids)

    def encode_after_assistant(self, messages: list[dict[str, str]]) -> list[int]:
        """Tokens of non-assistant messages that follow a sampled assistant turn (the delta)."""
        base = [*_DUMMY, {"role": "assistant", "content": "z"}]
        before = self._render(base, False)
        cut = before.rindex(self.eos_text) + len(self.eos_text) if self.eos_text in before else len(before)
        after = self._render(base + messages, False)
        if not after.startswith(before[:cut]):
            raise ValueError("the chat template rewrites history; delta rendering is not possible")
        return self._encode(after[cut:])

    def render_action(self, choice: str, content: str) -> str:
        """Assistant text that performs one action in this protocol (used for demonstrations)."""
        return self.protocol.render_action(choice, content)

    def parse(self, text: str) -> ParsedTurn:
        """Parse the tool calls of one assistant message in this protocol."""
        return self.protocol.parse(text)

    def tool_messages(self, parsed: ParsedTurn, feedback: str) -> list[dict[str, str]]:
        """The messages that file the env's feedback to one assistant message (`feedback_messages`)."""
        return self.protocol.feedback_messages(parsed, feedback)
