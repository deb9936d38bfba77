"""The Ray Serve application: an OpenAI-compatible gateway (FastAPI ingress) in front of model replicas.

Two deployments:
- `model`: `PolicyReplica` (the same class the trainer uses), one engine per replica, batching the
  requests continuously; replicas or autoscaling come from the serving config.
- `gateway`: the HTTP ingress. Parses and validates requests, checks the API key, renders prompts with
  the tokenizer, calls `model`, parses tool calls, streams SSE, and hosts the /play page and its
  episodes (one replica, since episodes live in its memory).

`build_app(config)` returns the bound application; `cli_serve` runs it; `app_builder` lets Ray's own
CLI run it: `serve run userrl.serving.app:app_builder config=serving/default.yaml`.
"""


import argparse
import asyncio
import hashlib
import hmac
import json
import logging
import os
import signal
import threading
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, TypeVar

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse
from ray import serve
from ray.serve.handle import DeploymentResponseGenerator
from rich.console import Console
from starlette.exceptions import HTTPException as StarletteHTTPException

from userrl.actors.policy_replica import PolicyReplica
from userrl.config import ConfigError
from userrl.engines.base import GenerationChunk, GenerationOutput
from userrl.engines.select import announce_choice, resolve_engine
from userrl.serving import protocol
from userrl.serving.chat_engine import ChatEngine, Prepared, Reply
from userrl.serving.config import ServeConfig, check_engine_options, load_serve_config
from userrl.serving.protocol import APIError

log = logging.getLogger(__name__)
fastapi_app = FastAPI(title="userrl", docs_url=None, redoc_url=None)


def _error(error: APIError) -> JSONResponse:
    return JSONResponse(error.body(), status_code=error.status)


# Every reply that is not a success has OpenAI's error shape, also where FastAPI/Starlette answer on their own
# (unknown path, wrong method) or where something raised that should not have.
_HTTP_CODES = {404: "not_found", 405: "method_not_allowed", 413: "request_too_large", 415: "unsupported_media_type"}


@fastapi_app.exception_handler(StarletteHTTPException)
async def _http_error(request: Request, error: StarletteHTTPException) -> JSONResponse:
    """Starlette's own 4xx (no such route, method not allowed) in the OpenAI error format."""
    detail = error.detail if isinstance(error.detail, str) else "request error"
    message = f"{request.method} {request.url.path}: {detail}"
    if error.status_code == 404:
        message += " (this server has GET /v1/models, POST /v1/chat/completions, GET /health and /play)"
    return JSONResponse(APIError(error.status_code, message, code=_HTTP_CODES.get(error.status_code)).body(),
                        status_code=error.status_code, headers=getattr(error, "headers", None))


@fastapi_app.exception_handler(RequestValidationError)
async def _validation_error(request: Request, error: RequestValidationError) -> JSONResponse:
    """A path or query parameter FastAPI could not validate."""
    first = error.errors()[0] if error.errors() else {"loc": (), "msg": "invalid request"}
    param = ".".join(str(p) for p in first["loc"][1:]) or None
    return _error(APIError(400, f"invalid parameter {param}: {first['msg']}", param=param, code="invalid_value"))


@fastapi_app.exception_handler(Exception)
async def _server_error(request: Request, error: Exception) -> JSONResponse:
    """A bug or a failed model replica: a 500 in the OpenAI format (the traceback goes to the replica's log)."""
    log.exception("%s %s failed", request.method, request.url.path)
    return _error(APIError(500, f"the server failed on this request ({type(error).__name__}); see the server log",
                           type_="server_error", code="internal_error"))


def _sse(payload: dict[str, Any] | str) -> str:
    return f"data: {payload if isinstance(payload, str) else json.dumps(payload)}\n\n"


T = TypeVar("T")


async def merge_streams(streams: list[AsyncIterator[T]]) -> AsyncIterator[T]:
    """The items of several async generators in the order they come; an error in one ends the merge (and
    is raised), and ending the merge closes every generator, so each runs its `finally`."""
    pending = {asyncio.ensure_future(anext(stream)): stream for stream in streams}
    try:
        while pending:
            done, _ = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                stream = pending.pop(task)
                try:
                    item = task.result()
                except StopAsyncIteration:
                    continue
                pending[asyncio.ensure_future(anext(stream))] = stream
                yield item
    finally:
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        for stream in streams:
            await stream.aclose()


@serve.deployment(name="gateway", num_replicas=1, max_ongoing_requests=256, ray_actor_options={"num_cpus": 0.5})
@serve.ingress(fastapi_app)
class Gateway:
    """HTTP ingress: OpenAI API, health, and the playground."""

    def __init__(self, config: dict[str, Any], model_path: str, model_handle: Any, key_digest: str | None):
        self.config = ServeConfig.model_validate(config)
        self.model_name = self.config.model_name or Path(model_path).name
        self.engine = ChatEngine(model_path, self.config.protocol, self.config.max_model_len,
                                 self.config.default_max_tokens)
        self.model = model_handle
        self.key_digest = key_digest
        self.created = int(time.time())
        self.play = None
        if self.config.play.enabled:
            from userrl.serving.play.session import PlayManager

            self.play = PlayManager(self.engine, self._generate, self.config.play, self.config.max_model_len)

    # ---- helpers

    def _check_key(self, request: Request) -> None:
        if self.key_digest is None:
            return
        header = request.headers.get("authorization", "")
        given = header[7:].strip() if header.lower().startswith("bearer ") else ""
        if not given or not hmac.compare_digest(hashlib.sha256(given.encode()).hexdigest(), self.key_digest):
            raise APIError(401, "missing or incorrect API key: send `Authorization: Bearer <key>` with the key "
                           "held in the server's configured environment variable", code="invalid_api_key")

    async def _generate(self, request):
        return await self.model.generate.remote(request)

    async def _json(self, request: Request) -> Any:
        # Declared JSON (or no declaration), bounded in size before it is read whole, strict JSON.
        declared = request.headers.get("content-type")
        media = (declared or "").split(";", 1)[0].strip().lower()
        if declared is not None and media != "application/json" and not media.endswith("+json"):
            raise APIError(415, f"the body must be JSON sent with Content-Type: application/json, not {media!r}",
                           code="unsupported_media_type")
        limit = self.config.max_request_bytes
        too_large = APIError(413, f"the request body is larger than this server's limit of {limit} bytes "
                             "(max_request_bytes in the serving config)", code="request_too_large")
        length = request.headers.get("content-length", "")
        if length.isdigit() and int(length) > limit:
            raise too_large
        chunks, size = [], 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise too_large
            chunks.append(chunk)
        return protocol.decode_json(b"".join(chunks))

    # ---- OpenAI API

    @fastapi_app.get("/health")
    async def health(self) -> Response:
        """200 when the model deployment answers, 503 otherwise."""
        try:
            version = await asyncio.wait_for(self.model.get_version.remote(), timeout=10)
        except Exception as error:  # noqa: BLE001 - any failure of the model replica means unhealthy
            return JSONResponse({"status": "unavailable", "error": type(error).__name__}, status_code=503)
        return JSONResponse({"status": "ok", "model": self.model_name, "policy_version": version})

    @fastapi_app.get("/v1/models")
    async def models(self, request: Request) -> Response:
        """The one served model."""
        try:
            self._check_key(request)
        except APIError as error:
            return _error(error)
        return JSONResponse(protocol.model_list(self.model_name, self.created))

    @fastapi_app.post("/v1/chat/completions")
    async def chat_completions(self, request: Request) -> Response:
        """Chat completion, non-streaming or SSE streaming, with OpenAI tools / tool_calls."""
        try:
            self._check_key(request)
            body = protocol.parse_request(await self._json(request))
            if body.model != self.model_name:
                raise APIError(404, f"the model {body.model!r} does not exist; this server serves "
                               f"{self.model_name!r} (GET /v1/models)", param="model", code="model_not_found")
            prepared = self.engine.prepare(body)
        except APIError as error:
            return _error(error)
        prompt_tokens = len(prepared.request.prompt_ids)
        id_ = protocol.completion_id()
        # Each choice is a request of its own to the model deployment, all sent at once: a replica decodes
        # them in one batch, and Serve counts every one against max_ongoing_requests and autoscaling.
        requests = prepared.requests()
        if body.stream:
            usage = body.stream_options is not None and body.stream_options.include_usage
            streams = [self.model.options(stream=True).generate_stream.remote(r) for r in requests]
            try:
                # The first chunks are awaited here, so that a replica failing at once is a 500 as without
                # streaming, not a stream that breaks off after its 200.
                firsts = await asyncio.gather(*(tokens.__anext__() for tokens in streams))
            except BaseException:
                for tokens in streams:
                    tokens.cancel()
                raise
            choices = [self._stream_choice(i, id_, prepared, first, tokens)
                       for i, (first, tokens) in enumerate(zip(firsts, streams, strict=True))]
            return StreamingResponse(self._stream(id_, choices, streams, prompt_tokens, usage),
                                     media_type="text/event-stream")
        calls = [asyncio.ensure_future(self._generate(r)) for r in requests]
        try:
            outputs = await asyncio.gather(*calls)
        finally:
            for call in calls:  # after one choice failed, the others' rows stop
                call.cancel()
        replies = [self.engine.reply(prepared, output) for output in outputs]
        choices = [protocol.choice(i, r.content, r.tool_calls, r.finish_reason, r.logprobs)
                   for i, r in enumerate(replies)]
        return JSONResponse(protocol.chat_completion(id_, self.model_name, choices, prompt_tokens,
                                                     sum(r.completion_tokens for r in replies)))

    async def _stream(self, id_: str, choices: list[AsyncIterator[dict[str, Any] | Reply]],
                      streams: list[DeploymentResponseGenerator], prompt_tokens: int,
                      usage: bool) -> AsyncIterator[str]:
        # OpenAI's wire format: each choice's chunks (`_stream_choice`) as they come, choices interleaved,
        # then usage (the prompt once, the choices' completion tokens summed), then [DONE].
        completion_tokens = 0
        try:
            async for item in merge_streams(choices):
                if isinstance(item, Reply):
                    completion_tokens += item.completion_tokens
                else:
                    yield _sse(item)
        except Exception as error:  # noqa: BLE001 - the 200 is sent: the failure goes in the stream
            log.exception("streamed generation failed")
            yield _sse(APIError(500, f"the model failed while streaming ({type(error).__name__}); see the "
                                "server log", type_="server_error", code="internal_error").body())
            return
        finally:
            # A client gone stops every choice's row now: without an await, which a cancelled task may not get.
            for tokens in streams:
                tokens.cancel()
        if usage:
            yield _sse(protocol.chunk(id_, self.model_name, int(time.time()), {},
                                      usage=protocol.usage(prompt_tokens, completion_tokens)))
        yield _sse("[DONE]")

    async def _stream_choice(self, index: int, id_: str, prepared: Prepared, first: GenerationChunk,
                             tokens: DeploymentResponseGenerator) -> AsyncIterator[dict[str, Any] | Reply]:
        """One choice's chunks while the replica samples its tokens (role, content deltas, tool_calls once
        the whole text is parsed, finish with the logprobs), then its Reply."""
        created = int(time.time())
        replies = self.engine.stream(prepared)
        output = None

        def chunk(delta: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
            return protocol.chunk(id_, self.model_name, created, delta, index=index, **kwargs)

        yield chunk({"role": "assistant", "content": ""})
        try:
            part: GenerationChunk | None = first
            while part is not None:
                delta = replies.push(part.token_ids)
                if delta:
                    yield chunk({"content": delta})
                output = part.output
                # A stop string: the replica may stop decoding this row, unless the logprobs are wanted
                # (they come with the replica's whole output only).
                if replies.stopped and not prepared.logprobs:
                    break
                part = await anext(tokens, None)
        finally:
            tokens.cancel()  # no-op once the replica's generator has finished; else its row stops
        if output is None:  # ended by a stop string before the replica finished
            output = GenerationOutput(replies.token_ids, [], "stop")
        rest, reply = replies.finish(output)
        if rest:
            yield chunk({"content": rest})
        if reply.tool_calls:
            yield chunk({"tool_calls": [{"index": i, **call} for i, call in enumerate(reply.tool_calls)]})
        yield chunk({}, finish_reason=reply.finish_reason, logprobs=reply.logprobs)
        yield reply

    # ---- playground

    @fastapi_app.get("/play")
    async def play_page(self) -> Response:
        """The playground page."""
        from userrl.serving.play.session import static_file

        if self.play is None:
            return _error(APIError(404, "play is disabled in the serving config", code="not_found"))
        return static_file("index.html")

    @fastapi_app.get("/play/static/{name}")
    async def play_static(self, name: str) -> Response:
        """The page's script and style sheet."""
        from userrl.serving.play.session import static_file

        return static_file(name)

    @fastapi_app.get("/play/api/gyms")
    async def play_gyms(self, request: Request) -> Response:
        """Gyms, splits and the served model."""
        return await self._play_call(request, lambda _: self.play.gyms(self.model_name), body=False, auth=False)

    @fastapi_app.post("/play/api/episodes")
    async def play_start(self, request: Request) -> Response:
        """Start an episode: {gym, split?, task_id?, seed?}."""
        return await self._play_call(request, self.play.start)

    @fastapi_app.post("/play/api/episodes/{episode_id}/step")
    async def play_step(self, episode_id: str, request: Request) -> Response:
        """Advance an episode by one turn: the model's ({"by": "agent"}) or a typed one ({"choice", "content"})."""
        return await self._play_call(request, lambda body: self.play.step(episode_id, body))

    async def _play_call(self, request: Request, handler, body: bool = True, auth: bool = True) -> Response:
        if self.play is None:
            return _error(APIError(404, "play is disabled in the serving config", code="not_found"))
        try:
            if auth:
                self._check_key(request)
            payload = await self._json(request) if body else None
            result = handler(payload)
            if asyncio.iscoroutine(result):
                result = await result
        except APIError as error:
            return _error(error)
        return JSONResponse(result)


def model_deployment(config: ServeConfig, model_path: str, pad_token_id: int, engine: str | None = None):
    """The `model` deployment bound with the engine (default: the config's), replicas/autoscaling and resources."""
    options: dict[str, Any] = {"name": "model", "max_ongoing_requests": config.max_ongoing_requests,
                               "ray_actor_options": {"num_cpus": config.num_cpus_per_replica,
                                                     "num_gpus": config.num_gpus_per_replica}}
    if config.autoscaling is not None:
        options["autoscaling_config"] = config.autoscaling.model_dump()
    else:
        options["num_replicas"] = config.num_replicas
    deployment = serve.deployment(PolicyReplica).options(**options)
    return deployment.bind(model_path, engine=engine or config.engine, dtype=config.dtype,
                           max_batch_size=config.max_batch_size, num_threads=config.num_threads,
                           pad_token_id=pad_token_id, max_model_len=config.max_model_len,
                           engine_options=config.engine_options or None)


def api_key_digest(config: ServeConfig) -> str | None:
    """SHA-256 of the API key read from the configured variable (the key itself never leaves this process)."""
    if config.api_key_env is None:
        return None
    key = os.environ.get(config.api_key_env, "")
    if not key:
        raise ConfigError(f"api_key_env: the environment variable {config.api_key_env} is not set or empty; "
                          "export it, or remove api_key_env to serve without a key")
    return hashlib.sha256(key.encode()).hexdigest()


def build_app(config: ServeConfig):
    """The bound Serve application (gateway -> model) for a serving config."""
    from userrl.checkpoint import model_folder
    from userrl.models import resolve_model
    from userrl.tokenizer import load_tokenizer

    model_path = resolve_model(model_folder(config.model))  # a checkpoint folder serves its model/
    engine, reason = resolve_engine(config.engine, model_path, "engine", gpu=config.num_gpus_per_replica > 0)
    try:
        check_engine_options(engine, config.engine_options)
    except ValueError as error:
        raise ConfigError(f"engine={config.engine} runs {engine} here ({reason}): {error}") from None
    announce_choice(engine, reason)
    pad = load_tokenizer(model_path).pad_token_id or 0
    model = model_deployment(config, model_path, pad, engine)
    return Gateway.bind(config.model_dump(mode="json"), model_path, model, api_key_digest(config))


def app_builder(args: dict[str, str]):
    """Entry point for `serve run userrl.serving.app:app_builder config=FILE [model=DIR]`."""
    return build_app(load_serve_config(args.get("config"), model=args.get("model")))


def start(config: ServeConfig, *, blocking: bool = False) -> str:
    """Start Serve's HTTP proxy on the config's host/port and deploy the app; returns the base URL."""
    serve.start(http_options={"host": config.host, "port": config.port})
    serve.run(build_app(config), name="userrl", route_prefix="/", blocking=blocking)
    return f"http://{config.host}:{config.port}"


def cli_serve(args: argparse.Namespace, console: Console) -> int:
    """`userrl serve --model DIR | --config FILE [--host H --port P]`: serve until Ctrl-C."""
    import ray

    config = load_serve_config(args.config, getattr(args, "overrides", None), model=args.model, host=args.host,
                               port=args.port)
    if not ray.is_initialized():
        ray.init(address=os.environ.get("RAY_ADDRESS"), logging_config=ray.LoggingConfig(log_level="WARNING"))
    url = start(config)
    console.print(f"[green]serving[/] {config.model} at {url}/v1 (OpenAI API), {url}/play (playground), "
                  f"{url}/health;" + (" API key required;" if config.api_key_env else "") + " Ctrl-C stops")
    # SIGTERM (and SIGINT, also where a shell started us in the background with it ignored) stop cleanly.
    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    try:
        stop.wait()
        console.print("stopping")
    finally:
        serve.shutdown()
    return 0
