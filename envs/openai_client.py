"""The `openai` backend of the gym roles: a RoleClient over any OpenAI-compatible chat-completions server.

docs/spec/GYMS.md §0.6: one system + one user message per call, a per-attempt timeout, bounded retries with a
pause, extraction/validation failures count as failed attempts, and after the last attempt the value is
None (the gym applies the role's fallback). Model and network failures never raise.

Requests are plain HTTP (aiohttp), not the `openai` SDK: an EnvRunner sends dozens of role calls at once
from one event loop, and the SDK's per-call CPU (request transforms, pydantic response models, an
httpcore pool that scans every connection per request) held the loop for 5-35 ms a call on a loaded
2-core machine, so the 64th request of a step left hundreds of ms after the first (bench/env_stepping.py).

HTTP sessions and concurrency semaphores are shared by every OpenAIRoleClient of the process, per event
loop and endpoint: asyncio primitives and pooled connections belong to the loop that made them, and the
envs may drive steps from short-lived loops (`run_sync`).
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import os
import threading
import time
import urllib.request
from collections.abc import AsyncGenerator, Callable, Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any, TypeVar
from urllib.parse import urlsplit

import aiohttp

from userrl.envs.json_extract import JSONExtractionError, extract_json_object, strip_think
from userrl.envs.llm import RoleCall, RoleClient, RoleInput, UserModel, attempt_seed, role_messages
from userrl.envs.reply_cache import ReplyCache

__all__ = ["DEFAULT_BASE_URL", "LLMConfig", "OpenAIRoleClient", "make_role_client"]

T = TypeVar("T")

logger = logging.getLogger(__name__)

DEFAULT_BASE_URL = "https://api.openai.com/v1"
# OpenAI-compatible servers without auth (vLLM, SGLang, ...) accept any key; the SDK insists on one.
_KEYLESS_PLACEHOLDER = "EMPTY"
# A request the server rejects as malformed or unauthorised fails the same way on every retry.
_PERMANENT_STATUS = frozenset({400, 401, 403, 404, 422})
_ERROR_CHARS = 300
_JSON_HEADERS = {"Content-Type": "application/json"}


@dataclass(frozen=True, repr=False)
class LLMConfig:
    """Client settings for the model roles (docs/spec/GYMS.md §0.6), with optional per-role overrides in `roles`."""

    #: None: env var OPENAI_BASE_URL, else DEFAULT_BASE_URL (resolved when the client is built).
    base_url: str | None = None
    #: None: env var OPENAI_API_KEY, read when the client is built, never at import.
    api_key: str | None = None
    model: str = "gpt-4o"
    temperature: float = 0.0
    max_tokens: int = 2048
    #: Per attempt, covering the whole HTTP exchange (waiting for a concurrency slot is not counted).
    timeout_s: float = 10.0
    attempts: int = 3
    #: Pause before retry k (k = 1, 2, ...) is retry_pause_s * retry_backoff ** (k - 1); 1.0 = constant.
    retry_pause_s: float = 2.0
    retry_backoff: float = 1.0
    #: Passed through to the request body, e.g. {"chat_template_kwargs": {"enable_thinking": False}}.
    extra_body: Mapping[str, Any] = field(default_factory=dict)
    #: Requests in flight per endpoint and event loop, shared by all clients with the same endpoint and limit.
    max_concurrency: int = 64
    #: Per-role overrides of the fields above, e.g. {"judge": {"max_tokens": 512}}.
    roles: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.base_url is not None and (not isinstance(self.base_url, str) or not self.base_url.strip()):
            raise ValueError(f"base_url must be a non-empty string or None, got {self.base_url!r}")
        if self.api_key is not None and not isinstance(self.api_key, str):
            raise ValueError("api_key must be a string or None")
        if not isinstance(self.model, str) or not self.model.strip():
            raise ValueError(f"model must be a non-empty string, got {self.model!r}")
        _check_number("temperature", self.temperature, minimum=0.0)
        _check_int("max_tokens", self.max_tokens, minimum=1)
        _check_number("timeout_s", self.timeout_s, minimum=0.0, strict=True)
        _check_int("attempts", self.attempts, minimum=1)
        _check_number("retry_pause_s", self.retry_pause_s, minimum=0.0)
        _check_number("retry_backoff", self.retry_backoff, minimum=1.0)
        if not isinstance(self.extra_body, Mapping):
            raise ValueError(f"extra_body must be a mapping, got {type(self.extra_body).__name__}")
        _check_int("max_concurrency", self.max_concurrency, minimum=1)
        if not isinstance(self.roles, Mapping):
            raise ValueError(
                f"roles must be a mapping of role name to overrides, got {type(self.roles).__name__}"
            )
        for role in self.roles:
            self.for_role(role)  # validates the override's keys and values now, not at the first call

    @classmethod
    def from_spec(cls, spec: Mapping[str, Any]) -> LLMConfig:
        """Build from a plain mapping (e.g. a YAML `llm:` section); unknown keys raise ValueError."""
        unknown = sorted(set(spec) - _FIELD_NAMES)
        if unknown:
            raise ValueError(f"unknown LLM config keys {unknown}; allowed: {sorted(_FIELD_NAMES)}")
        return cls(**spec)

    def for_role(self, role: str) -> LLMConfig:
        """This config with the role's overrides applied (itself, minus `roles`, when there are none)."""
        overrides = self.roles.get(role)
        if overrides is None:
            return replace(self, roles={}) if self.roles else self
        if not isinstance(overrides, Mapping):
            raise ValueError(f"overrides of role {role!r} must be a mapping, got {type(overrides).__name__}")
        unknown = sorted(set(overrides) - (_FIELD_NAMES - {"roles"}))
        if unknown:
            raise ValueError(f"unknown LLM config keys {unknown} in the overrides of role {role!r}")
        return replace(self, **overrides, roles={})

    def pause_before_retry(self, retry: int) -> float:
        """Seconds to wait before retry number `retry` (1 = the second attempt)."""
        return self.retry_pause_s * self.retry_backoff ** (retry - 1)

    def __repr__(self) -> str:
        # Hand-written so that neither api_key nor a role override's api_key ever reaches a log line.
        parts = []
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name == "api_key":
                value = _redacted(value)
            elif f.name == "roles":
                value = {
                    role: {k: (_redacted(v) if k == "api_key" else v) for k, v in over.items()}
                    for role, over in value.items()
                }
            parts.append(f"{f.name}={value!r}")
        return f"LLMConfig({', '.join(parts)})"


_FIELD_NAMES = frozenset(f.name for f in fields(LLMConfig))


def _redacted(key: Any) -> str | None:
    return None if key is None else "***"


def _check_number(name: str, value: Any, *, minimum: float, strict: bool = False) -> None:
    ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    if not ok or value < minimum or (strict and value == minimum):
        relation = ">" if strict else ">="
        raise ValueError(f"{name} must be a finite number {relation} {minimum}, got {value!r}")


def _check_int(name: str, value: Any, *, minimum: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")


class _LoopState:
    """The HTTP sessions (connection pools) and semaphores owned by one event loop."""

    def __init__(self) -> None:
        #: One pooled session per (base_url, api_key): every episode of a runner reuses its connections.
        self.clients: dict[tuple[str, str], aiohttp.ClientSession] = {}
        self.semaphores: dict[tuple[str, int], asyncio.Semaphore] = {}
        #: The environment's proxy per base_url (None: direct), looked up once, not per request.
        self.proxies: dict[str, str | None] = {}
        self.closer: AsyncGenerator[None, None] | None = None

    def session(self, base_url: str, api_key: str) -> tuple[aiohttp.ClientSession, str | None]:
        """The loop's session for this endpoint and key, made on first use, and the proxy to send through."""
        session = self.clients.get((base_url, api_key))
        if session is None or session.closed:
            session = aiohttp.ClientSession(
                headers={"Authorization": f"Bearer {api_key}"},
                # No pool limit of its own: the endpoint's semaphore bounds requests in flight, and two
                # configs of one endpoint may use different max_concurrency values.
                connector=aiohttp.TCPConnector(limit=0),
                # The attempt timeout is asyncio.timeout around the whole exchange (see _request).
                timeout=aiohttp.ClientTimeout(total=None),
            )
            self.clients[(base_url, api_key)] = session
        if base_url not in self.proxies:
            # Not trust_env: aiohttp would then read ~/.netrc in a worker thread on every request. The
            # proxy (HTTP(S)_PROXY / NO_PROXY, which the SDK's httpx honoured) is resolved once instead.
            self.proxies[base_url] = _env_proxy(base_url)
        return session, self.proxies[base_url]

    async def close_clients(self) -> None:
        """Close every HTTP session of this loop."""
        clients, self.clients = list(self.clients.values()), {}
        for client in clients:
            try:
                await client.close()
            except Exception:  # closing is best effort; a broken connection must not fail loop shutdown
                logger.debug("closing an HTTP session failed", exc_info=True)


async def _close_at_loop_shutdown(state: _LoopState) -> AsyncGenerator[None, None]:
    """Suspends until the loop shuts down, then closes the loop's clients.

    asyncio.run (and so run_sync, which gives each sync step its own loop) finalises every live async
    generator before closing the loop; without this, each short-lived loop would leak its pooled sockets.
    """
    try:
        yield
    finally:
        await state.close_clients()


# Keyed by the loop object (not a weak reference: uvloop's loops do not support those); entries of closed
# loops are dropped whenever a new loop registers. The lock matters because run_sync uses worker threads.
_LOOP_STATES: dict[asyncio.AbstractEventLoop, _LoopState] = {}
_LOOP_STATES_LOCK = threading.Lock()


async def _loop_state() -> _LoopState:
    """This event loop's shared clients and semaphores."""
    loop = asyncio.get_running_loop()
    with _LOOP_STATES_LOCK:
        state = _LOOP_STATES.get(loop)
        if state is None:
            for stale in [other for other in _LOOP_STATES if other.is_closed()]:
                del _LOOP_STATES[stale]
            state = _LOOP_STATES[loop] = _LoopState()
    if state.closer is None:
        # The first step registers the generator with this loop's shutdown_asyncgens; the state keeps it
        # alive so that it is finalised at loop shutdown, not garbage-collected earlier.
        state.closer = _close_at_loop_shutdown(state)
        await anext(state.closer)
    return state


class _EmptyReplyError(Exception):
    """The server answered without any message text."""


class _MalformedReplyError(Exception):
    """The server answered 2xx with a body that is not a chat completion."""


class _StatusError(Exception):
    """The server answered with a non-2xx status."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"HTTP {status}: {message}")
        self.status = status


def _describe_request_error(exc: Exception) -> tuple[str, bool]:
    """A short error code for RoleCall.error, and whether retrying is pointless."""
    if isinstance(exc, TimeoutError):
        return "timeout", False
    if isinstance(exc, _StatusError):
        return f"http_{exc.status}", exc.status in _PERMANENT_STATUS
    if isinstance(exc, aiohttp.ClientConnectionError):
        return "connection_error", False
    if isinstance(exc, _EmptyReplyError):
        return "empty_reply", False
    if isinstance(exc, _MalformedReplyError):
        return "malformed_reply", False
    return f"request_failed:{type(exc).__name__}", False


def _env_proxy(url: str) -> str | None:
    """The proxy the environment sets for url's scheme, None when there is none or NO_PROXY exempts it."""
    parts = urlsplit(url)
    if not parts.hostname or urllib.request.proxy_bypass(parts.hostname):
        return None
    return urllib.request.getproxies().get(parts.scheme)


def _error_message(body: bytes) -> str:
    """The `error.message` of an OpenAI-style error body, else the body's start."""
    text = body.decode("utf-8", "replace")
    try:
        error = json.loads(text).get("error")
    except (ValueError, AttributeError):
        return text[:_ERROR_CHARS]
    message = error.get("message") if isinstance(error, dict) else error
    return str(message) if message else text[:_ERROR_CHARS]


def _reply_text(body: bytes) -> tuple[str, int]:
    """The first choice's message text of a chat-completion body, and its completion tokens (0 when the
    server does not report `usage`)."""
    try:
        data = json.loads(body)
        choices = data.get("choices") or []
        message = choices[0].get("message") if choices else None
        content = message.get("content") if isinstance(message, dict) else None
    except (ValueError, AttributeError, TypeError, IndexError) as exc:
        raise _MalformedReplyError(f"not a chat completion: {body[:80]!r}") from exc
    if not isinstance(content, str) or not content.strip():
        raise _EmptyReplyError("the reply has no message text")
    usage = data.get("usage")
    tokens = usage.get("completion_tokens") if isinstance(usage, dict) else None
    return content, tokens if isinstance(tokens, int) and not isinstance(tokens, bool) else 0


class OpenAIRoleClient:
    """RoleClient over an OpenAI-compatible chat-completions endpoint (POST {base_url}/chat/completions)."""

    def __init__(self, config: LLMConfig | None = None, cache: ReplyCache | None = None) -> None:
        self.config = config if config is not None else LLMConfig()
        #: Replies by (model, request body with its seed); None: every request goes to the server.
        self.cache = cache
        # Read the environment now, when the client is built, never at import (docs/spec/GYMS.md §0.6, §0.11).
        env_key = os.environ.get("OPENAI_API_KEY") or None
        env_url = os.environ.get("OPENAI_BASE_URL") or None
        self._default = self._resolve(replace(self.config, roles={}), env_key, env_url)
        self._per_role = {
            role: self._resolve(self.config.for_role(role), env_key, env_url) for role in self.config.roles
        }

    @staticmethod
    def _resolve(config: LLMConfig, env_key: str | None, env_url: str | None) -> LLMConfig:
        """The config with base_url and api_key made concrete."""
        base_url = (config.base_url or env_url or DEFAULT_BASE_URL).rstrip("/")
        api_key = config.api_key or env_key
        if not api_key and urlsplit(base_url).hostname == urlsplit(DEFAULT_BASE_URL).hostname:
            logger.warning("OPENAI_API_KEY is not set: calls to %s will be rejected", base_url)
        return replace(config, base_url=base_url, api_key=api_key or _KEYLESS_PLACEHOLDER)

    def settings(self, role: str) -> LLMConfig:
        """The resolved settings a call for this role uses (its repr hides the API key)."""
        return self._per_role.get(role, self._default)

    @property
    def user_model(self) -> UserModel:
        """The model the roles are asked by default (a server's model is fixed: version 0)."""
        return UserModel(self._default.model)

    def __repr__(self) -> str:
        cfg = self._default
        return (
            f"OpenAIRoleClient(model={cfg.model!r}, base_url={cfg.base_url!r}, api_key='***', "
            f"roles={sorted(self._per_role)})"
        )

    async def complete_json(self, role: str, system: str, user: RoleInput, validate: Callable[[dict[str, Any]], T], *,
                            max_tokens: int | None = None, temperature: float | None = None,
                            seed: int | None = None) -> tuple[T | None, RoleCall]:
        """RoleClient.complete_json over the endpoint; each attempt's seed is sent as the request's `seed`."""

        def parse(reply: str) -> T:
            return validate(extract_json_object(reply))

        return await self._call(role, system, user, parse, max_tokens, temperature, seed)

    async def complete_text(self, role: str, system: str, user: RoleInput, *, max_tokens: int | None = None,
                            temperature: float | None = None, seed: int | None = None) -> tuple[str | None, RoleCall]:
        """RoleClient.complete_text over the endpoint, think blocks dropped; an empty reply is a failed attempt."""

        def parse(reply: str) -> str:
            # A thinking model's reasoning must not leak into what the agent reads as the user's words.
            text = strip_think(reply).strip()
            if not text:
                raise ValueError("the reply is empty once think blocks are dropped")
            return text

        return await self._call(role, system, user, parse, max_tokens, temperature, seed)

    async def aclose(self) -> None:
        """Close the running loop's HTTP sessions of this client's endpoints (rebuilt on next use)."""
        state = await _loop_state()
        endpoints = {
            (cfg.base_url or "", cfg.api_key or "") for cfg in (self._default, *self._per_role.values())
        }
        for endpoint in endpoints:
            client = state.clients.pop(endpoint, None)
            if client is not None:
                await client.close()

    async def _call(
        self,
        role: str,
        system: str,
        user: RoleInput,
        parse: Callable[[str], T],
        max_tokens: int | None,
        temperature: float | None,
        seed: int | None,
    ) -> tuple[T | None, RoleCall]:
        """The retry loop shared by complete_json and complete_text."""
        cfg = self.settings(role)
        started = time.perf_counter()
        error, detail = "not_attempted", ""
        call = RoleCall(role=role, attempts=0, ok=False, latency_s=0.0)
        for attempt in range(1, cfg.attempts + 1):
            call.attempts = attempt
            permanent = False
            try:
                reply = await self._request(cfg, system, user, max_tokens, temperature,
                                            attempt_seed(seed, attempt), call)
            except Exception as exc:  # any model or network failure is a failed attempt, never a crash
                error, permanent = _describe_request_error(exc)
                detail = self._scrub(cfg, str(exc))
            else:
                try:
                    value = parse(reply)
                except JSONExtractionError as exc:
                    error, detail = "extraction_failed", self._scrub(cfg, str(exc))
                except (ValueError, LookupError, TypeError) as exc:
                    # The validator's documented ways to reject; anything else is a bug and propagates.
                    error, detail = "validation_failed", self._scrub(cfg, f"{type(exc).__name__}: {exc}")
                else:
                    call.ok, call.latency_s = True, time.perf_counter() - started
                    return value, call
            logger.debug("role %r attempt %d/%d failed: %s (%s)", role, attempt, cfg.attempts, error, detail)
            if permanent:
                break
            if attempt < cfg.attempts:
                await asyncio.sleep(cfg.pause_before_retry(attempt))
        call.latency_s, call.error = time.perf_counter() - started, error
        logger.warning(
            "role %r failed after %d attempt(s) in %.2fs against %s: %s (%s)",
            role,
            call.attempts,
            call.latency_s,
            cfg.base_url,
            error,
            detail,
        )
        return None, call

    async def _request(
        self,
        cfg: LLMConfig,
        system: str,
        user: RoleInput,
        max_tokens: int | None,
        temperature: float | None,
        seed: int | None,
        call: RoleCall,
    ) -> str:
        """One chat completion (from the cache when it has the request); the reply text. Counted in `call`."""
        payload = {
            "model": cfg.model,
            "messages": role_messages(system, user),
            "temperature": cfg.temperature if temperature is None else temperature,
            "max_tokens": cfg.max_tokens if max_tokens is None else max_tokens,
            **({} if seed is None else {"seed": seed}),
            **cfg.extra_body,  # last, as the SDK merged it: a server-specific key may replace a standard one
        }
        body = json.dumps(payload).encode()
        call.requests += 1
        if self.cache is None or seed is None:
            text, tokens = await self._post(cfg, body)
        else:  # the body names the model and the whole request, seed included
            (text, tokens), hit = await self.cache.get((cfg.base_url, body), lambda: self._post(cfg, body))
            call.cache_hits += hit
            tokens = 0 if hit else tokens
        call.tokens += tokens
        return text

    async def _post(self, cfg: LLMConfig, body: bytes) -> tuple[str, int]:
        """POST one chat completion under the endpoint's semaphore and the attempt timeout: (text, tokens)."""
        base_url, api_key = cfg.base_url or "", cfg.api_key or ""
        state = await _loop_state()
        session, proxy = state.session(base_url, api_key)
        slot_key = (base_url, cfg.max_concurrency)
        semaphore = state.semaphores.get(slot_key)
        if semaphore is None:
            semaphore = state.semaphores[slot_key] = asyncio.Semaphore(cfg.max_concurrency)
        async with semaphore:
            # asyncio.timeout bounds the whole exchange (connect, send, wait, read), so neither a dead
            # endpoint nor a server that trickles bytes can hold an attempt open past timeout_s.
            async with asyncio.timeout(cfg.timeout_s):
                async with session.post(
                    f"{base_url}/chat/completions", data=body, headers=_JSON_HEADERS, proxy=proxy
                ) as response:
                    raw = await response.read()
                    status = response.status
        if not 200 <= status < 300:
            raise _StatusError(status, _error_message(raw))
        return _reply_text(raw)

    @staticmethod
    def _scrub(cfg: LLMConfig, text: str) -> str:
        """Error text fit for a log line: the API key removed, length capped."""
        if cfg.api_key and cfg.api_key != _KEYLESS_PLACEHOLDER:
            text = text.replace(cfg.api_key, "***")
        return text if len(text) <= _ERROR_CHARS else text[: _ERROR_CHARS - 3] + "..."


def make_role_client(spec: Mapping[str, Any] | LLMConfig | RoleClient | None = None) -> RoleClient:
    """A RoleClient from a gym's `llm` keyword: None (defaults), a config mapping, an LLMConfig, or a client."""
    if spec is None:
        return OpenAIRoleClient(LLMConfig())
    if isinstance(spec, LLMConfig):
        return OpenAIRoleClient(spec)
    if isinstance(spec, Mapping):
        return OpenAIRoleClient(LLMConfig.from_spec(spec))
    if isinstance(spec, RoleClient):
        return spec  # an already-built client (e.g. a test double) is used as is
    raise TypeError(f"llm must be None, a mapping, an LLMConfig or a RoleClient, got {type(spec).__name__}")
