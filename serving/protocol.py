"""OpenAI chat-completions wire format: request models (validated) and response builders."""

from __future__ import annotations

import time
import uuid
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator


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
    model_config = ConfigDict(extra="ignore")


class FunctionSpec(_Lenient):
    """A tool's function: name, description and JSON-schema parameters."""

    name: str = Field(pattern=r"^[a-zA-Z0-9_-]{1,64}$")
    description: str | None = None
    parameters: dict[str, Any] | None = None


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


class Message(_Lenient):
    """One chat message; content may be a string or a list of text parts."""

    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[dict[str, Any]] | None = None
    tool_calls: list[ToolCall] | None = None
    tool_call_id: str | None = None
    name: str | None = None

    def text(self) -> str:
        """The content as plain text (text parts joined)."""
        if self.content is None:
            return ""
        if isinstance(self.content, str):
            return self.content
        parts = []
        for part in self.content:
            if part.get("type") != "text":
                raise ValueError(f"content part of type {part.get('type')!r} is not supported; only 'text'")
            parts.append(str(part.get("text", "")))
        return "".join(parts)


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
    stream: bool = False
    stream_options: StreamOptions | None = None
    stop: str | list[str] | None = None
    seed: int | None = None
    tools: list[ToolSpec] | None = None
    tool_choice: str | dict[str, Any] | None = None

    @field_validator("n")
    @classmethod
    def _one_choice(cls, n: int | None) -> int | None:
        if n is not None and n != 1:
            raise ValueError("only n=1 is supported; send several requests for several samples")
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


def parse_request(payload: Any) -> ChatCompletionRequest:
    """Validate a decoded JSON body; the first problem becomes a 400 naming the parameter."""
    if not isinstance(payload, dict):
        raise APIError(400, "the request body must be a JSON object")
    try:
        return ChatCompletionRequest.model_validate(payload)
    except ValidationError as error:
        first = error.errors()[0]
        param = ".".join(str(p) for p in first["loc"]) or None
        message = first["msg"].removeprefix("Value error, ")
        raise APIError(400, f"invalid parameter {param}: {message}", param=param,
                       code="invalid_value" if first["type"] != "missing" else "missing_required_parameter") from None


def completion_id() -> str:
    """A fresh `chatcmpl-...` id."""
    return f"chatcmpl-{uuid.uuid4().hex[:24]}"


def chat_completion(id_: str, model: str, content: str | None, tool_calls: list[dict[str, Any]] | None,
                    finish_reason: str, prompt_tokens: int, completion_tokens: int) -> dict[str, Any]:
    """A non-streaming `chat.completion` object."""
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if tool_calls:
        message["tool_calls"] = tool_calls
    return {
        "id": id_, "object": "chat.completion", "created": int(time.time()), "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish_reason, "logprobs": None}],
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                  "total_tokens": prompt_tokens + completion_tokens},
    }


def chunk(id_: str, model: str, created: int, delta: dict[str, Any], finish_reason: str | None = None,
          usage: dict[str, int] | None = None) -> dict[str, Any]:
    """One `chat.completion.chunk` (an empty choices list when it only carries usage)."""
    body: dict[str, Any] = {"id": id_, "object": "chat.completion.chunk", "created": created, "model": model,
                            "choices": [] if usage else [{"index": 0, "delta": delta, "finish_reason": finish_reason,
                                                          "logprobs": None}]}
    if usage:
        body["usage"] = usage
    return body


def model_list(model: str, created: int) -> dict[str, Any]:
    """GET /v1/models body."""
    return {"object": "list", "data": [{"id": model, "object": "model", "created": created, "owned_by": "userrl"}]}
