"""OpenAI messages + tools -> prompt token ids (the training rendering), and generated tokens -> reply.

The prompt is rendered by the model's chat template with the userrl preamble of its protocol (the same one
`userrl export` writes, userrl.chat_template), so a conversation gives exactly the tokens the policy saw in
training: `tool_call` with `tools=[TOOL_SCHEMA]`; `native_tools` with the gym's tool schemas, tool results
(role tool) and the user's replies. A `bracket` model gets the bracket instructions instead, and its
`[choice] content` lines come back as `interact_with_env` tool calls. A `native_tools` reply is plain text
(content) or one tool call: the first well-formed `<tool_call>` block, as training executes it.
"""

from __future__ import annotations

import json
import logging
import uuid
from dataclasses import dataclass, field, replace
from typing import Any

from userrl.chat import ChatFormat
from userrl.chat_template import tool_chat_template
from userrl.commands.export import USERRL_META
from userrl.engines.base import GenerationOutput, GenerationRequest
from userrl.protocols import protocol_names
from userrl.protocols.tool_blocks import strict_json
from userrl.rollout import request_seed
from userrl.serving.protocol import APIError, ChatCompletionRequest, ToolCall, logprob_entry

log = logging.getLogger(__name__)


def model_protocol(model_path: str, configured: str | None) -> str:
    """The action protocol: configured, else the one recorded by `userrl export`, else the one a checkpoint's
    model/ was trained with (its meta.json), else tool_call.

    Raises ValueError for a protocol userrl does not know.
    """
    from pathlib import Path

    from userrl.checkpoint import checkpoint_of_model

    meta = Path(model_path) / USERRL_META
    if configured:
        protocol, where = configured, "the serving config"
    elif meta.is_file():
        protocol, where = json.loads(meta.read_text()).get("protocol", "tool_call"), str(meta)
    elif (checkpoint := checkpoint_of_model(model_path)) is not None:
        protocol, where = checkpoint.protocol, str(checkpoint.meta_file)
    else:
        protocol, where = "tool_call", "the default"
    if protocol not in protocol_names():
        raise ValueError(f"protocol {protocol!r} (from {where}) is not one of {', '.join(protocol_names())}")
    return protocol


def max_token_bytes(tokenizer: Any) -> int | None:
    """UTF-8 bytes of the longest token's text, when every prompt byte is some token's (no normalizer).

    Then a prompt of more than `max_model_len * max_token_bytes` characters cannot fit and is refused
    without being tokenized (an oversized prompt would otherwise hold the gateway for seconds). None for
    tokenizers whose normalizer may drop or merge characters: those are always tokenized.
    """
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None or backend.normalizer is not None:
        return None
    # A token that ends inside a UTF-8 character decodes to U+FFFD (3 bytes): never an underestimate.
    return max(len(tokenizer.convert_tokens_to_string([token]).encode("utf-8"))
               for token in tokenizer.get_vocab()) or None


def choice_seed(seed: int | None, index: int) -> int | None:
    """The seed choice `index` of a request samples with: the request's for choice 0, then seeds
    derived from (seed, index) as the rollout derives its per-turn seeds, so that the choices differ and a
    request sent again replays them all."""
    if seed is None or index == 0:
        return seed
    return request_seed(seed, "choice", index)


def token_texts(tokenizer: Any, token_ids: list[int]) -> list[str]:
    """The text each token adds to the decoded reply (special tokens skipped, as in the reply): they join
    to the reply's text. A token that ends inside a multi-byte character adds "", and the one completing
    it the whole character (as vLLM's server reports them); OpenAI's per-token `bytes` need the text.

    Each token is decoded after the previous one's group only, not after the whole reply (linear time),
    which sees what depends on a neighbour: a leading-space marker, spaces cleaned up before punctuation.
    """
    def decode(ids: list[int]) -> str:
        return tokenizer.decode(ids, skip_special_tokens=True)

    texts: list[str] = []
    start = done = 0  # the previous group of tokens that gave text, [start, done)
    for k in range(len(token_ids)):
        before, after = decode(token_ids[start:done]), decode(token_ids[start:k + 1])
        if after.endswith("\ufffd") or not after.startswith(before):  # a character still incomplete: wait
            texts.append("")
            continue
        texts.append(after[len(before):])
        start, done = done, k + 1
    if done < len(token_ids):  # text never completed (a real U+FFFD, an incomplete character at the end)
        before = decode(token_ids[start:done])
        texts[-1] = decode(token_ids[start:])[len(before):]
    return texts


@dataclass
class Prepared:
    """A validated request turned into engine input: `request` is choice 0's, `requests()` every choice's."""

    request: GenerationRequest
    tool_names: list[str] = field(default_factory=list)
    stop: list[str] = field(default_factory=list)
    n: int = 1
    logprobs: bool = False

    def requests(self) -> list[GenerationRequest]:
        """One engine request per choice, each with its own seed (`choice_seed`)."""
        return [replace(self.request, seed=choice_seed(self.request.seed, i)) for i in range(self.n)]


@dataclass
class Reply:
    """The assistant message built from generated tokens."""

    text: str
    content: str | None
    tool_calls: list[dict[str, Any]]
    finish_reason: str
    completion_tokens: int
    #: OpenAI's `logprobs.content` entries of the tokens of `text`, when the request asked for them.
    logprobs: list[dict[str, Any]] | None = None


class ChatEngine:
    """Tokenizer-side work of the endpoint: rendering, limits, decoding and tool-call parsing."""

    def __init__(self, model_path: str, protocol: str | None = None, max_model_len: int = 2048,
                 default_max_tokens: int = 256):
        from userrl.tokenizer import load_tokenizer

        name = model_protocol(model_path, protocol)
        self.tokenizer = load_tokenizer(model_path)
        self.tokenizer.chat_template = tool_chat_template(self.tokenizer.chat_template, name)
        self.chat = ChatFormat(self.tokenizer, name)
        #: The action protocol the model was trained with: it renders the prompt and parses the reply.
        self.protocol = self.chat.protocol
        self.max_model_len, self.default_max_tokens = max_model_len, default_max_tokens
        self.max_token_bytes = max_token_bytes(self.tokenizer)

    # ---- request -> prompt ids

    def _messages(self, request: ChatCompletionRequest) -> list[dict[str, Any]]:
        messages = []
        for i, m in enumerate(request.messages):
            try:
                text = m.text()
            except ValueError as error:
                raise APIError(400, f"messages[{i}].content: {error}", param=f"messages.{i}.content") from None
            role = "system" if m.role == "developer" else m.role
            calls = self._calls_text(i, m.tool_calls) if m.role == "assistant" and m.tool_calls else None
            if calls is not None:  # the protocol writes incoming calls as text itself
                messages.append({"role": role, "content": "\n".join([text] * bool(text) + [calls])})
            elif m.role == "assistant" and m.tool_calls:
                messages.append({"role": role, "content": text, "tool_calls": _calls_with_objects(i, m.tool_calls)})
            else:
                messages.append({"role": role, "content": text})
        return messages

    def _calls_text(self, index: int, calls: list[ToolCall]) -> str | None:
        try:
            return self.protocol.calls_as_text([c.function.arguments for c in calls])
        except ValueError as error:
            raise APIError(400, f"messages[{index}].tool_calls: {error}", param=f"messages.{index}.tool_calls") from None

    def prompt_ids(self, request: ChatCompletionRequest) -> tuple[list[int], list[str]]:
        """Token ids of the rendered prompt (ending with the assistant header) and the tool names in play."""
        tools = [t.model_dump(exclude_none=True) for t in request.tools or []]
        use_tools = bool(tools) and request.tool_choice != "none"
        names = [t["function"]["name"] for t in tools] if use_tools else []
        if use_tools:
            try:
                self.protocol.check_request_tools(names)
            except ValueError as error:
                raise APIError(400, str(error), param="tools") from None
        messages, tools = self.protocol.template_inputs(self._messages(request), tools if use_tools else [])
        kwargs = {"tools": tools} if tools else {}
        try:
            text = self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True, **kwargs)
        except Exception as error:  # noqa: BLE001 - jinja errors come from what the request sent
            raise APIError(400, f"the messages cannot be rendered by this model's chat template: {error}",
                           param="messages") from None
        if self.max_token_bytes and len(text) > self.max_model_len * self.max_token_bytes:
            raise APIError(400, f"this model's maximum context length is {self.max_model_len} tokens; the prompt "
                           f"({len(text)} characters) has more. Shorten the messages.", param="messages",
                           code="context_length_exceeded")
        return list(self.tokenizer.encode(text, add_special_tokens=False)), names

    def prepare(self, request: ChatCompletionRequest) -> Prepared:
        """Render and check the prompt against the context window; raises APIError (400) when it does not fit."""
        ids, names = self.prompt_ids(request)
        max_tokens = request.max_completion_tokens or request.max_tokens
        room = self.max_model_len - len(ids)
        if room < 1 or (max_tokens is not None and max_tokens > room):
            asked = f" + max_tokens {max_tokens}" if max_tokens else ""
            raise APIError(400, f"this model's maximum context length is {self.max_model_len} tokens; the prompt "
                           f"has {len(ids)} tokens{asked}. Shorten the messages or lower max_tokens.",
                           param="messages", code="context_length_exceeded")
        generation = GenerationRequest(
            prompt_ids=ids, max_new_tokens=min(max_tokens or self.default_max_tokens, room),
            temperature=1.0 if request.temperature is None else request.temperature,
            top_p=1.0 if request.top_p is None else request.top_p, seed=request.seed,
            stop_token_ids=self.chat.stop_token_ids,
        )
        return Prepared(generation, names, list(request.stop or []), request.n or 1, bool(request.logprobs))

    # ---- generated ids -> reply

    def reply(self, prepared: Prepared, output: GenerationOutput) -> Reply:
        """Decode, apply stop strings, and turn tool-call blocks into OpenAI `tool_calls`."""
        text = self.tokenizer.decode(output.token_ids, skip_special_tokens=True)
        finish = output.finish_reason
        cuts = [text.index(s) for s in prepared.stop if s in text]
        if cuts:
            text, finish = text[: min(cuts)], "stop"
        content, calls = (text, []) if not prepared.tool_names else self.parse_tool_calls(text, prepared.tool_names)
        if calls:
            finish = "tool_calls"
        logprobs = self.logprob_content(output, len(text) if cuts else None) if prepared.logprobs else None
        return Reply(text, content, calls, finish, len(output.token_ids), logprobs)

    def logprob_content(self, output: GenerationOutput, cut: int | None = None) -> list[dict[str, Any]]:
        """OpenAI `logprobs.content` of a reply: an entry per sampled token, whose texts join to the reply's
        text; a stop string at character `cut` keeps the tokens before it, the last one's text cut there."""
        entries, at = [], 0
        for text, logprob in zip(token_texts(self.tokenizer, output.token_ids), output.logprobs, strict=True):
            if cut is not None:
                if at >= cut:
                    break
                text = text[: cut - at]
            entries.append(logprob_entry(text, logprob))
            at += len(text)
        return entries

    def parse_tool_calls(self, text: str, tool_names: list[str]) -> tuple[str | None, list[dict[str, Any]]]:
        """(remaining content or None, OpenAI tool_calls) of one assistant message in this model's protocol."""
        rest, calls = self.protocol.completion_calls(text, tool_names)
        tool_calls = [{"id": f"call_{uuid.uuid4().hex[:24]}", "type": "function",
                       "function": {"name": name, "arguments": json.dumps(args, ensure_ascii=False)}}
                      for name, args in calls]
        content = rest.strip() if calls else text
        return (content or None) if calls else content, tool_calls

    def stream(self, prepared: Prepared) -> ReplyStream:
        """A ReplyStream: content deltas of this request's reply while its tokens arrive."""
        return ReplyStream(self, prepared)

    def call_markers(self) -> list[str]:
        """Texts that may begin a tool call in this model's protocol (content stops streaming there)."""
        return list(self.protocol.call_markers)


def _calls_with_objects(index: int, calls: list[ToolCall]) -> list[dict[str, Any]]:
    """An assistant message's tool_calls with their arguments as JSON objects (as vLLM passes them to the
    template, which writes them as training did); a 400 for arguments that are not a JSON object."""
    out = []
    for k, call in enumerate(calls):
        raw = call.function.arguments
        arguments = strict_json(raw) if raw.strip() else {}
        if not isinstance(arguments, dict):
            raise APIError(400, f"messages[{index}].tool_calls[{k}].function.arguments must be a JSON object "
                           f"encoded as a string (got {raw[:80]!r})",
                           param=f"messages.{index}.tool_calls.{k}.function.arguments")
        out.append({"id": call.id, "type": "function", "function": {"name": call.function.name,
                                                                     "arguments": arguments}})
    return out


def _held_suffix(text: str, patterns: list[str]) -> int:
    """Length of the longest end of `text` that is a proper beginning of one of `patterns`."""
    held = 0
    for pattern in patterns:
        for k in range(min(len(pattern) - 1, len(text)), held, -1):
            if text.endswith(pattern[:k]):
                held = k
                break
    return held


class ReplyStream:
    """Content deltas of one reply while its tokens arrive, each final: they concatenate exactly to the
    content `ChatEngine.reply` gives for all the tokens (the non-streamed reply).

    So text a later token could still change is held back until it cannot: an incomplete UTF-8
    character; a possible beginning of a stop string; trailing whitespace where the tokenizer cleans up
    spaces (" ." may become "." once the "." comes); and, when tools are in play, everything from a
    possible tool-call marker on (the calls are parsed from the whole text at the end), trailing
    whitespace, and a reply that begins with whitespace (content is stripped when it has calls, and
    only then). A stop string found ends the stream (`stopped`): the rest need not be generated.
    """

    def __init__(self, engine: ChatEngine, prepared: Prepared):
        self.engine, self.prepared = engine, prepared
        self.token_ids: list[int] = []
        self.sent = ""
        self.stopped = False
        self._markers = engine.call_markers() if prepared.tool_names else []
        self._hold_space = bool(self._markers) or bool(getattr(engine.tokenizer, "clean_up_tokenization_spaces",
                                                               False))

    def push(self, token_ids: list[int]) -> str:
        """Take newly sampled tokens; the content that is now final and not yet sent ('' if none)."""
        self.token_ids.extend(token_ids)
        if self.stopped:
            return ""
        text = self.engine.tokenizer.decode(self.token_ids, skip_special_tokens=True)
        cuts = [text.index(s) for s in self.prepared.stop if s in text]
        if cuts:
            text, self.stopped = text[: min(cuts)], True
        end = len(text.rstrip("\ufffd"))  # U+FFFD at the end: a character whose bytes are still coming
        if not self.stopped:
            end -= _held_suffix(text[:end], self.prepared.stop)
        if self._markers:
            if text[:1].isspace():
                return ""
            found = [i for i in (text.find(m) for m in self._markers) if i >= 0]
            end = min([end, *found])
            end -= _held_suffix(text[:end], self._markers)
        final = text[:end].rstrip() if self._hold_space else text[:end]
        if len(final) <= len(self.sent) or not final.startswith(self.sent):
            return ""
        delta, self.sent = final[len(self.sent):], final
        return delta

    def finish(self, output: GenerationOutput) -> tuple[str, Reply]:
        """The reply of all the tokens and its content not yet sent."""
        reply = self.engine.reply(self.prepared, output)
        content = reply.content or ""
        if not content.startswith(self.sent):
            # Cannot happen for tokenizers whose decoding of a prefix is a prefix of the decoding; logged
            # rather than raised, since the client already has the deltas.
            log.warning("streamed content %r is not a prefix of the reply's content %r", self.sent, content)
            return "", reply
        return content[len(self.sent):], reply
