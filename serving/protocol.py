"""OpenAI chat-completions wire format: request models (validated) and response builders."""

from __future__ import annotations

import json
import re
import time
import uuid
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

#: OpenAI's `seed` is a signed 64-bit integer; torch's generators take no wider value.
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
#: Most choices one request may ask for: each is a row of a replica's batch, so one request cannot fill it.
MAX_N = 8
#: The lowest log-probability sent (vLLM's server clamps them so too): JSON has no -inf.
MIN_LOGPROB = -9999.0


class APIError(Exception):
    """A request error in the OpenAI error format (`{"error": {message, type, param, code}}`)."""

    def __init__(self, status: int, message: str, *, param: str | None = None, code: str | None = None,
                 type_: str = "invalid_request_error"):
        super().__init__(message)
        self.status, self.message, self.param, self.code, self.type = status, message, param, code, type_

    def body(self) -> dict[str, Any]:
        """The JSON body of the error response."""
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}


class _Lenient(BaseModel):
    # Fields the OpenAI API defines but we do not use (user, metadata, ...) are accepted and ignored.
    # Strict types: OpenAI rejects "0.5" for a number and 1 for a boolean, and so do we (lax pydantic would
    # read "yes" as stream=true).
    model_config = ConfigDict(extra="ignore", strict=True)


class FunctionSpec(_Lenient):
    """A tool's function: name, description and JSON-schema parameters."""

    name: str = Field(pattern=r"^[a-zA-Z0-9_-]{1,64}$")
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None

    @field_validator("parameters")
    @classmethod
    def _json_schema(cls, parameters: dict[str, Any] | None) -> dict[str, Any] | None:
        # The chat template walks `properties`: a schema that is not one would fail there, as a 500.
        if parameters is None:
            return None
        from jsonschema import Draft202012Validator
        from jsonschema.exceptions import SchemaError

        try:
            Draft202012Validator.check_schema(parameters)
        except SchemaError as error:
            raise ValueError(f"not a valid JSON Schema: {error.message}") from None
        if parameters.get("type", "object") != "object":
            raise ValueError("must be a JSON Schema of type 'object' (the arguments are a JSON object)")
        return parameters


class ToolSpec(_Lenient):
    """One entry of `tools`."""

    type: Literal["function"]
    function: FunctionSpec


class ToolCallFunction(_Lenient):
    name: str
    arguments: str


class ToolCall(_Lenient):
    id: str
    type: Literal["function"] = "function"
    function: ToolCallFunction


class ContentPart(_Lenient):
    """One part of a message's content list; only text parts can be rendered for a text model."""

    type: str
    text: str | None = None

    @model_validator(mode="after")
    def _text_only(self) -> ContentPart:
        if self.type != "text":
            raise ValueError(f"content parts of type {self.type!r} are not supported; only 'text'")
        if self.text is None:
            raise ValueError("a text content part needs a 'text' string")
        return self


class Message(_Lenient):
    """One chat message; content may be a string or a list of text parts."""

    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[ContentPart] | None = None
    tool_calls: list[ToolCall] | None = None
    tool_call_id: str | None = None
    name: str | None = None

    def text(self) -> str:
        """The content as plain text (text parts joined)."""
        if self.content is None:
            return ""
        if isinstance(self.content, str):
            return self.content
        return "".join(part.text or "" for part in self.content)


class StreamOptions(_Lenient):
    include_usage: bool = False


class ChatCompletionRequest(_Lenient):
    """POST /v1/chat/completions body."""

    model: str
    messages: list[Message] = Field(min_length=1)
    temperature: float | None = Field(None, ge=0, le=2)
    top_p: float | None = Field(None, gt=0, le=1)
    max_tokens: int | None = Field(None, gt=0)
    max_completion_tokens: int | None = Field(None, gt=0)
    n: int | None = Field(None, ge=1)
    stream: bool | None = False
    stream_options: StreamOptions | None = None
    stop: str | list[str] | None = None
    seed: int | None = Field(None, ge=INT64_MIN, le=INT64_MAX)
    tools: list[ToolSpec] | None = None
    tool_choice: str | dict[str, Any] | None = None
    logprobs: bool | None = None
    # Defined by OpenAI and not implemented here: accepted at their no-op values only, so a client that asks
    # for alternatives' log-probs, a JSON reply or penalties learns it does not get them instead of silently
    # not getting them.
    top_logprobs: int | None = Field(None, ge=0, le=20)
    presence_penalty: float | None = Field(None, ge=-2, le=2)
    frequency_penalty: float | None = Field(None, ge=-2, le=2)
    logit_bias: dict[str, float] | None = None
    response_format: dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None
    user: str | None = None
    metadata: dict[str, str] | None = None

    @field_validator("n")
    @classmethod
    def _few_choices(cls, n: int | None) -> int | None:
        if n is not None and n > MAX_N:
            raise ValueError(f"n is at most {MAX_N} on this server; send several requests for more samples")
        return n

    @field_validator("stop")
    @classmethod
    def _stops(cls, stop: str | list[str] | None) -> list[str] | None:
        stops = [stop] if isinstance(stop, str) else stop
        if stops is not None and (len(stops) > 4 or any(not s for s in stops)):
            raise ValueError("stop takes at most 4 non-empty strings")
        return stops

    @field_validator("tool_choice")
    @classmethod
    def _tool_choice(cls, choice: str | dict[str, Any] | None) -> str | dict[str, Any] | None:
        if choice not in (None, "none", "auto"):
            raise ValueError("only tool_choice 'auto' (the default) and 'none' are supported")
        return choice

    @field_validator("top_logprobs", "presence_penalty", "frequency_penalty")
    @classmethod
    def _not_implemented(cls, value: Any, info: ValidationInfo) -> Any:
        if value:
            raise ValueError(f"{info.field_name} is not supported by this server; leave it out (or 0/false)")
        return value

    @field_validator("logit_bias")
    @classmethod
    def _no_bias(cls, bias: dict[str, float] | None) -> dict[str, float] | None:
        if bias:
            raise ValueError("logit_bias is not supported by this server; leave it out")
        return bias

    @field_validator("response_format")
    @classmethod
    def _text_format(cls, fmt: dict[str, Any] | None) -> dict[str, Any] | None:
        if fmt is not None and fmt.get("type") != "text":
            raise ValueError("only response_format {'type': 'text'} is supported")
        return fmt

    @field_validator("stream_options")
    @classmethod
    def _stream_options_need_stream(cls, options: StreamOptions | None, info: ValidationInfo) -> StreamOptions | None:
        if options is not None and not info.data.get("stream"):
            raise ValueError("stream_options is only allowed when stream is true")
        return options


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def decode_json(raw: bytes) -> Any:
    """The JSON value of a request body; a 400 `invalid_json` for anything that is not strict JSON.

    Python's parser also takes NaN/Infinity (not JSON), and raises RecursionError on deep nesting and
    leaves lone UTF-16 surrogates in strings (the tokenizer then fails): all three are the client's error.
    """
    try:
        value = json.loads(raw, parse_constant=_reject_constant)
        json.dumps(value, ensure_ascii=False).encode("utf-8")  # raises on a lone surrogate
    except (ValueError, UnicodeError) as error:  # JSONDecodeError is a ValueError
        raise APIError(400, f"the request body is not valid JSON ({error})", code="invalid_json") from None
    except RecursionError:
        raise APIError(400, "the request body is not valid JSON (nested too deeply)", code="invalid_json") from None
    return value


# pydantic names the union member it tried inside an error location ("str", "list[ContentPart]"):
# those are not parameters the client sent.
_FIELD = re.compile(r"^[a-z_][a-z0-9_]*$")
_TYPE_TAGS = {"str", "int", "float", "bool", "dict", "list", "none", "bytes"}


def _param(loc: tuple[Any, ...]) -> str | None:
    parts = [str(p) for p in loc if isinstance(p, int) or (_FIELD.match(str(p)) and p not in _TYPE_TAGS)]
    return ".".join(parts) or None


def parse_request(payload: Any) -> ChatCompletionRequest:
    """Validate a decoded JSON body; the first problem becomes a 400 naming the parameter."""
    if not isinstance(payload, dict):
        raise APIError(400, "the request body must be a JSON object")
    try:
        return ChatCompletionRequest.model_validate(payload)
    except ValidationError as error:
        errors = error.errors()
        # The first problem, as deep as it goes: a union reports one error per member it tried
        # (content: "not a string", content.0.type: "not a string"), and the deepest says the most.
        top = _param(errors[0]["loc"]) or ""

        def under_top(e: Any) -> bool:
            param = _param(e["loc"]) or ""
            return not top or param == top or param.startswith(top + ".")

        first = max(filter(under_top, errors), key=lambda e: len(_param(e["loc"]) or ""))
        param = _param(first["loc"])
        messages = dict.fromkeys(e["msg"].removeprefix("Value error, ") for e in errors if _param(e["loc"]) == param)
        where = f"invalid parameter {param}: " if param else "invalid request: "
        raise APIError(400, where + " or ".join(messages), param=param,
                       code="invalid_value" if first["type"] != "missing" else "missing_required_parameter") from None
    except RecursionError:
        raise APIError(400, "the request is nested too deeply", code="invalid_value") from None


def completion_id() -> str:
    """A fresh `chatcmpl-...` id."""
    return f"chatcmpl-{uuid.uuid4().hex[:24]}"


def logprob_entry(token: str, logprob: float) -> dict[str, Any]:
    """One entry of a choice's `logprobs.content`: a sampled token's text, bytes and log-probability."""
    return {"token": token, "logprob": max(logprob, MIN_LOGPROB), "bytes": list(token.encode("utf-8")),
            "top_logprobs": []}


def _logprobs(entries: list[dict[str, Any]] | None) -> dict[str, Any] | None:
    return None if entries is None else {"content": entries}


def choice(index: int, content: str | None, tool_calls: list[dict[str, Any]] | None, finish_reason: str,
           logprobs: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """One entry of a `chat.completion`'s choices (`logprobs`: the `logprob_entry`s when they were asked for)."""
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if tool_calls:
        message["tool_calls"] = tool_calls
    return {"index": index, "message": message, "finish_reason": finish_reason,
            "logprobs": _logprobs(logprobs)}


def usage(prompt_tokens: int, completion_tokens: int) -> dict[str, int]:
    """The `usage` object: the prompt counted once, the completion tokens of all choices summed."""
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens}


def chat_completion(id_: str, model: str, choices: list[dict[str, Any]], prompt_tokens: int,
                    completion_tokens: int) -> dict[str, Any]:
    """A non-streaming `chat.completion` object."""
    return {"id": id_, "object": "chat.completion", "created": int(time.time()), "model": model,
            "choices": choices, "usage": usage(prompt_tokens, completion_tokens)}


def chunk(id_: str, model: str, created: int, delta: dict[str, Any], finish_reason: str | None = None,
          usage: dict[str, int] | None = None, *, index: int = 0,
          logprobs: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """One `chat.completion.chunk` of choice `index` (an empty choices list when it only carries usage)."""
    body: dict[str, Any] = {"id": id_, "object": "chat.completion.chunk", "created": created, "model": model,
                            "choices": [] if usage else [{"index": index, "delta": delta, "finish_reason": finish_reason,
                                                          "logprobs": _logprobs(logprobs)}]}
    if usage:
        body["usage"] = usage
    return body


def model_list(model: str, created: int) -> dict[str, Any]:
    """GET /v1/models body."""
    return {"object": "list", "data": [{"id": model, "object": "model", "created": created, "owned_by": "userrl"}]}
