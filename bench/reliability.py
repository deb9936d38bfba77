"""Reliability scenarios (issue 15): one function per scenario, a registry, and a CLI that prints tables.

    .venv/bin/python bench/reliability.py --scenario 7              # 1,000 malformed requests to Serve
    .venv/bin/python bench/reliability.py --scenario 7 --requests 300
    .venv/bin/python bench/reliability.py --scenario 4 --scenario 5  # learner killed mid-update / mid-checkpoint
    .venv/bin/python bench/reliability.py --scenario 1 --scenario 2 --scenario 6  # rollout layer: runner, replica, gym
    .venv/bin/python bench/reliability.py --list

A scenario function returns a `ScenarioResult`: a table of what was sent, what came back and what was
lost, free-form notes, and `ok`. Add a scenario by decorating a function with `@scenario(number, title)`;
the CLI passes `--requests`, `--seed` and `--url` to the scenarios whose signature takes them. Exit
status 1 when a scenario is not ok. Everything runs on this machine: servers listen on loopback only.

Scenarios 4 and 5 (`scenario_4_learner_killed`, `scenario_5_killed_while_checkpointing`): a small
training run (tiny-random, 2 learners, 4 iterations, a checkpoint every 2) with `USERRL_FAULT` set
(userrl/faults.py): learner rank 1 SIGKILLed in the update of the last iteration, or rank 0 SIGKILLed
between writing `iter_000004.tmp` and renaming it. Ray Train restarts the learner group, which resumes
from the newest complete checkpoint; the table says what was restarted and re-run, the notes the time
from the kill to the restarted group, leftover .tmp folders, and the final weights against an
uninterrupted run's (`details` has the same as a dict).

Scenario 7 (`scenario_7_serve_fuzz`): malformed requests to the Serve endpoint, in families (random
bytes, broken JSON, wrong JSON types, huge and negative numbers, bad tool schemas, oversized prompts and
bodies, unknown models, wrong API keys, missing fields, wrong content types, wrong routes and methods,
the /play API). Every reply must be the 4xx the family expects, in OpenAI's error format
(`{"error": {"message", "type", "param", "code"}}`); the official `openai` client must still get a
completion afterwards; and the resident memory (RSS) of the Serve processes (HTTP proxy, controller,
gateway and model replicas, found through their named Ray actors, read with psutil) must stay flat:
it is read after a warm-up fifth of the requests and after each quarter of the rest.
"""

from __future__ import annotations

import argparse
import base64
import concurrent.futures
import inspect
import json
import logging
import os
import random
import socket
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlparse

LOOPBACK = {"127.0.0.1", "localhost", "::1"}


# ---------------------------------------------------------------------------------------------- registry


@dataclass
class ScenarioResult:
    """What a scenario did: a table (one dict per row, same keys), notes, and whether it passed."""

    number: int
    title: str
    rows: list[dict[str, Any]]
    ok: bool
    notes: list[str] = field(default_factory=list)
    details: dict[str, Any] = field(default_factory=dict)


@dataclass
class Scenario:
    """A registered scenario."""

    number: int
    title: str
    run: Callable[..., ScenarioResult]


SCENARIOS: dict[int, Scenario] = {}


def scenario(number: int, title: str) -> Callable[[Callable[..., ScenarioResult]], Callable[..., ScenarioResult]]:
    """Register a scenario function under its issue number."""

    def register(function: Callable[..., ScenarioResult]) -> Callable[..., ScenarioResult]:
        if number in SCENARIOS:
            raise ValueError(f"scenario {number} is registered twice")
        SCENARIOS[number] = Scenario(number, title, function)
        return function

    return register


def format_table(rows: list[dict[str, Any]]) -> str:
    """A markdown table of rows that share their keys."""
    if not rows:
        return "(no rows)"
    keys = list(rows[0])
    lines = ["| " + " | ".join(keys) + " |", "|" + "---|" * len(keys)]
    lines += ["| " + " | ".join(str(row.get(k, "")) for k in keys) + " |" for row in rows]
    return "\n".join(lines)


def print_result(result: ScenarioResult) -> None:
    """The scenario's table and notes on stdout."""
    print(f"\n## Scenario {result.number}: {result.title} - {'ok' if result.ok else 'FAILED'}\n")
    print(format_table(result.rows))
    for note in result.notes:
        print(f"- {note}")


# ------------------------------------------------------------------------------- scenario 7: Serve fuzz

VALID_PROMPT = [{"role": "user", "content": "Say hello."}]


@dataclass
class FuzzCase:
    """One HTTP request and the statuses it may get (all 4xx)."""

    family: str
    label: str
    method: str
    path: str
    body: bytes | None
    headers: dict[str, str]
    expect: tuple[int, ...]
    chunked: bool = False


@dataclass
class FuzzReply:
    """What came back for a case (status None: no reply at all)."""

    case: FuzzCase
    status: int | None
    body: Any
    seconds: float
    error: str | None = None

    @property
    def openai_error(self) -> bool:
        """The body is `{"error": {"message": str, "type": str, "param": str|None, "code": str|None}}`."""
        return is_openai_error(self.body)

    @property
    def good(self) -> bool:
        """The expected 4xx status, in the OpenAI error format."""
        return self.status in self.case.expect and self.openai_error


def is_openai_error(body: Any) -> bool:
    """Whether a decoded body has exactly OpenAI's error shape."""
    if not isinstance(body, dict) or set(body) != {"error"} or not isinstance(body["error"], dict):
        return False
    error = body["error"]
    return (set(error) == {"message", "type", "param", "code"} and isinstance(error["message"], str)
            and bool(error["message"]) and isinstance(error["type"], str)
            and all(error[k] is None or isinstance(error[k], str) for k in ("param", "code")))


class FuzzCases:
    """Seeded generator of malformed requests, one family after another."""

    def __init__(self, model: str, api_key: str | None, max_model_len: int, max_request_bytes: int,
                 play: bool, seed: int = 0):
        self.model, self.key, self.max_model_len = model, api_key, max_model_len
        self.max_request_bytes, self.rng = max_request_bytes, random.Random(seed)
        self.families: list[Callable[[], FuzzCase]] = [
            self.random_bytes, self.broken_json, self.wrong_types, self.bad_numbers, self.bad_tools,
            self.missing_fields, self.oversized, self.unknown_model, self.content_type, self.route]
        if api_key:
            self.families.append(self.api_key)
        if play:
            self.families.append(self.play_api)

    def take(self, count: int) -> list[FuzzCase]:
        """`count` cases, the families in turn."""
        return [self.families[i % len(self.families)]() for i in range(count)]

    # ---- building blocks

    def _headers(self, content_type: str | None = "application/json") -> dict[str, str]:
        headers = {"Authorization": f"Bearer {self.key}"} if self.key else {}
        if content_type is not None:
            headers["Content-Type"] = content_type
        return headers

    def _valid(self) -> dict[str, Any]:
        return {"model": self.model, "messages": [dict(m) for m in VALID_PROMPT], "max_tokens": 4}

    def _chat(self, family: str, label: str, body: Any, expect: tuple[int, ...] = (400,), *,
              raw: bytes | None = None, content_type: str | None = "application/json") -> FuzzCase:
        data = raw if raw is not None else json.dumps(body).encode()
        return FuzzCase(family, label, "POST", "/v1/chat/completions", data, self._headers(content_type), expect)

    @staticmethod
    def _set(body: dict[str, Any], path: tuple[Any, ...], value: Any) -> dict[str, Any]:
        node = body
        for part in path[:-1]:
            node = node[part]
        node[path[-1]] = value
        return body

    # ---- families

    def random_bytes(self) -> FuzzCase:
        """Random bytes as the body, declared JSON."""
        size = self.rng.choice([1, 7, 64, 512, 4096])
        return self._chat("random bytes", f"{size} B", None, raw=self.rng.randbytes(size))

    def broken_json(self) -> FuzzCase:
        """Not JSON, or JSON Python would take but JSON does not (NaN, lone surrogates, deep nesting)."""
        valid = json.dumps(self._valid())
        label, raw = self.rng.choice([
            ("empty", b""), ("truncated", valid[: len(valid) // 2].encode()), ("trailing comma", b'{"model": "m",}'),
            ("single quotes", b"{'model': 'm'}"), ("NaN", valid.replace('"max_tokens": 4', '"temperature": NaN').encode()),
            ("Infinity", valid.replace('"max_tokens": 4', '"top_p": -Infinity').encode()),
            ("lone surrogate", valid.replace("Say hello.", "\\ud800 hi").encode()),
            ("invalid UTF-8", valid.replace("Say hello.", "\udcff").encode("utf-8", "surrogateescape")),
            ("nested 5000 deep", b"[" * 5000 + b"]" * 5000), ("nested objects", b'{"a":' * 3000 + b"1" + b"}" * 3000),
            ("NUL bytes", b"\x00" * 16), ("JSON array", b"[1, 2, 3]"), ("JSON string", b'"hello"'), ("JSON null", b"null"),
        ])
        return self._chat("broken JSON", label, None, raw=raw)

    _WRONG_TYPES: list[tuple[tuple[Any, ...], list[Any]]] = [
        (("model",), [5, 1.5, True, [], {}, None]),
        (("messages",), ["hi", {}, 5, None, [5], ["hi"], [[]]]),
        (("messages", 0, "role"), [5, None, "robot", "", ["user"]]),
        (("messages", 0, "content"), [5, True, {"text": "x"}, [5], [{"type": "image_url", "image_url": {"url": "x"}}],
                                      [{"type": "text", "text": 5}], [{"type": "text"}]]),
        (("messages", 0, "tool_calls"), [5, [{"id": 1}], [{"id": "c", "function": {"name": "f"}}]]),
        (("temperature",), ["0.5", True, [], {}]),
        (("top_p",), ["1", False, [0.5]]),
        (("max_tokens",), ["5", 5.5, True, [5]]),
        (("max_completion_tokens",), ["5", 2.5]),
        (("n",), ["1", 1.0, True]),
        (("stream",), ["true", 1, 0, "yes", [], {}]),
        (("stream_options",), [True, "x", [], {"include_usage": True}]),  # the last: without stream
        (("stop",), [5, [1], [""], ["a", "b", "c", "d", "e"], {"a": 1}]),
        (("seed",), ["1", 1.5, True]),
        (("tools",), ["x", {}, 5, [5], ["f"]]),
        (("tool_choice",), [5, [], "required", {"type": "function", "function": {"name": "f"}}]),
        (("logprobs",), ["yes", 1, [True]]),
        (("response_format",), ["json", {"type": "json_object"}]),
        (("user",), [5]), (("metadata",), [{"a": 1}, "x"]), (("logit_bias",), [{"50256": -100}, "x"]),
    ]

    def wrong_types(self) -> FuzzCase:
        """A valid request with one field of the wrong JSON type (or a value this server rejects)."""
        path, values = self.rng.choice(self._WRONG_TYPES)
        value = self.rng.choice(values)
        return self._chat("wrong JSON types", f"{'.'.join(map(str, path))}={json.dumps(value)[:30]}",
                          self._set(self._valid(), path, value))

    _NUMBERS: list[tuple[str, list[str]]] = [
        ("temperature", ["-1", "-0.0001", "2.0001", "1e308", "-1e308", "1e999", "-1e999"]),
        ("top_p", ["0", "-1", "1.0001", "1e999"]),
        ("max_tokens", ["0", "-1", "-9223372036854775808", "100000", "1e30", "18446744073709551616",
                        "99999999999999999999999999999999999999"]),
        ("max_completion_tokens", ["0", "-5", "10000000000000000000000000"]),
        ("n", ["0", "-1", "9", "1000000", "1000000000000000000000000000000"]),  # at most MAX_N = 8
        ("seed", ["9223372036854775808", "-9223372036854775809", "1" + "0" * 40, "-1" + "0" * 40]),
        ("top_logprobs", ["21", "-1", "5"]),  # any above 0: only the sampled tokens' logprobs
        ("presence_penalty", ["2.5", "-3", "1"]), ("frequency_penalty", ["1e999", "-2.0001"]),
    ]

    def bad_numbers(self) -> FuzzCase:
        """Huge, negative, out-of-range and overflowing numbers (written as raw JSON number text)."""
        name, values = self.rng.choice(self._NUMBERS)
        number = self.rng.choice(values)
        body = self._valid()
        body.pop(name, None)
        raw = json.dumps(body)[:-1] + f', "{name}": {number}}}'
        return self._chat("huge/negative numbers", f"{name}={number[:24]}", None, raw=raw.encode())

    def bad_tools(self) -> FuzzCase:
        """Tool lists that are not OpenAI function tools with JSON-Schema object parameters."""
        def fn(**function: Any) -> list[dict[str, Any]]:
            return [{"type": "function", "function": {"name": "f", **function}}]

        label, tools = self.rng.choice([
            ("type retrieval", [{"type": "retrieval"}]), ("no function", [{"type": "function"}]),
            ("no type", [{"function": {"name": "f"}}]), ("empty function", [{"type": "function", "function": {}}]),
            ("name with space", fn(name="my tool")), ("empty name", fn(name="")), ("65-char name", fn(name="x" * 65)),
            ("numeric name", fn(name=5)), ("parameters string", fn(parameters="x")), ("parameters list", fn(parameters=[])),
            ("parameters type string", fn(parameters={"type": "string"})),
            ("parameters type objekt", fn(parameters={"type": "objekt"})),
            ("properties 5", fn(parameters={"type": "object", "properties": 5})),
            ("properties list", fn(parameters={"type": "object", "properties": ["a"]})),
            ("required string", fn(parameters={"type": "object", "required": "a"})),
            ("property type nope", fn(parameters={"type": "object", "properties": {"a": {"type": "nope"}}})),
            ("description number", fn(description=5)), ("strict string", fn(strict="yes")),
            ("tools object", {"type": "function"}),
        ])
        body = self._valid()
        body["tools"] = tools
        return self._chat("bad tool schemas", label, body)

    def missing_fields(self) -> FuzzCase:
        """Requests without a required field."""
        label, body = self.rng.choice([
            ("empty object", {}), ("no model", {"messages": VALID_PROMPT}), ("no messages", {"model": self.model}),
            ("empty messages", {"model": self.model, "messages": []}),
            ("message without role", {"model": self.model, "messages": [{"content": "hi"}]}),
            ("empty message", {"model": self.model, "messages": [{}]}),
            ("tool call without id", {"model": self.model, "messages": [
                {"role": "assistant", "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": "{}"}}]}]}),
            ("tool call without arguments", {"model": self.model, "messages": [
                {"role": "assistant", "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f"}}]}]}),
            ("tool without name", {"model": self.model, "messages": VALID_PROMPT,
                                   "tools": [{"type": "function", "function": {"parameters": {}}}]}),
        ])
        return self._chat("missing fields", label, body)

    def oversized(self) -> FuzzCase:
        """Prompts longer than the context window, and bodies over the server's size limit."""
        body = self._valid()
        kind = self.rng.choice(["words", "characters", "messages", "max_tokens", "body", "chunked body"])
        if kind == "words":  # tokenized, then refused
            body["messages"][0]["content"] = "word " * (self.max_model_len + 10)
            return self._chat("oversized", f"{self.max_model_len + 10} words", body)
        if kind == "characters":  # refused before tokenizing
            body["messages"][0]["content"] = "x" * (self.max_model_len * 100)
            return self._chat("oversized", f"{self.max_model_len * 100} characters", body)
        if kind == "messages":
            body["messages"] = [{"role": "user", "content": "hi"}] * (self.max_model_len // 2)
            return self._chat("oversized", f"{len(body['messages'])} messages", body)
        if kind == "max_tokens":
            body["max_tokens"] = self.max_model_len
            return self._chat("oversized", "max_tokens = context", body)
        body["messages"][0]["content"] = "y" * (self.max_request_bytes + self.rng.randrange(1, 4096))
        case = self._chat("oversized", f"body over {self.max_request_bytes} B" + (" (chunked)" * (kind != "body")),
                          body, (413,))
        case.chunked = kind != "body"
        return case

    def unknown_model(self) -> FuzzCase:
        """A model this server does not serve."""
        name = self.rng.choice(["gpt-4o", "", self.model.upper() if self.model.upper() != self.model else self.model + "x",
                                "x" * 1000, "../../etc/passwd", "modèle-ü", f"{self.model} "])
        body = self._valid()
        body["model"] = name
        return self._chat("unknown model", repr(name[:20]), body, (404,))

    def content_type(self) -> FuzzCase:
        """A valid JSON body declared as something else."""
        declared = self.rng.choice(["text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x",
                                    "application/xml", "image/png", "text/html; charset=utf-8", ""])
        return self._chat("wrong content type", declared or "(empty)", self._valid(), (415,), content_type=declared)

    def route(self) -> FuzzCase:
        """Wrong methods on real routes, and routes that do not exist."""
        method, path, status = self.rng.choice([
            ("GET", "/v1/chat/completions", 405), ("PUT", "/v1/chat/completions", 405),
            ("DELETE", "/v1/models", 405), ("POST", "/v1/models", 405), ("POST", "/health", 405),
            ("POST", "/v1/completions", 404), ("POST", "/v1/embeddings", 404), ("GET", "/v2/models", 404),
            ("GET", "/%ff%fe", 404), ("GET", "/play/static/..%2F..%2Fetc%2Fpasswd", 404),
            ("GET", "/play/static/secret.txt", 404), ("POST", "/v1/chat/completions/extra", 404),
        ])
        return FuzzCase("routes and methods", f"{method} {path}", method, path, json.dumps(self._valid()).encode(),
                        self._headers(), (status,))

    def api_key(self) -> FuzzCase:
        """Valid requests with a missing or wrong API key."""
        key = self.key or ""
        label, auth = self.rng.choice([
            ("no header", None), ("wrong key", "Bearer sk-wrong"), ("empty bearer", "Bearer "),
            ("key minus one char", f"Bearer {key[:-1]}"), ("key plus one char", f"Bearer {key}x"),
            ("basic auth", "Basic " + base64.b64encode(f"user:{key}".encode()).decode()), ("bare key", key),
            ("key in lower-case", f"Bearer {key.lower()}" if key.lower() != key else "Bearer sk-other"),
        ])
        case = self._chat("wrong API key", label, self._valid(), (401,))
        case.headers.pop("Authorization", None)
        if auth is not None:
            case.headers["Authorization"] = auth
        if self.rng.random() < 0.25:
            case.method, case.path, case.body, case.label = "GET", "/v1/models", None, label + " (models)"
        return case

    def play_api(self) -> FuzzCase:
        """Malformed calls to the /play page's API."""
        label, path, body, status = self.rng.choice([
            ("array body", "/play/api/episodes", [], 400), ("gym number", "/play/api/episodes", {"gym": 5}, 400),
            ("unknown gym", "/play/api/episodes", {"gym": "nope"}, 400),
            ("negative seed", "/play/api/episodes", {"gym": "function", "seed": -1}, 400),
            ("huge seed", "/play/api/episodes", {"gym": "function", "seed": 2**70}, 400),
            ("string seed", "/play/api/episodes", {"gym": "function", "seed": "1"}, 400),
            ("bool seed", "/play/api/episodes", {"gym": "function", "seed": True}, 400),
            ("split number", "/play/api/episodes", {"gym": "function", "split": 5}, 400),
            ("unknown split", "/play/api/episodes", {"gym": "function", "split": "validation"}, 400),
            ("task_id list", "/play/api/episodes", {"gym": "function", "task_id": [1]}, 400),
            ("task_id number", "/play/api/episodes", {"gym": "function", "task_id": 5}, 400),
            ("unknown task", "/play/api/episodes", {"gym": "function", "task_id": "no-such-task"}, 400),
            ("unknown episode", "/play/api/episodes/0123abcd/step", {"by": "agent"}, 404),
        ])
        return FuzzCase("play API", label, "POST", path, json.dumps(body).encode(), self._headers(), (status,))


def send_case(session: Any, url: str, case: FuzzCase, timeout: float) -> FuzzReply:
    """Send one case; a reply that never came is recorded with status None."""
    import requests

    data: Any = case.body
    if case.chunked and data is not None:
        payload = data
        data = (payload[i: i + 65536] for i in range(0, len(payload), 65536))  # Transfer-Encoding: chunked
    began = time.perf_counter()
    try:
        response = session.request(case.method, url + case.path, data=data, headers=case.headers, timeout=timeout)
    except requests.RequestException as error:
        return FuzzReply(case, None, None, time.perf_counter() - began, f"{type(error).__name__}: {error}"[:200])
    try:
        body = response.json()
    except ValueError:
        body = response.text[:200]
    return FuzzReply(case, response.status_code, body, time.perf_counter() - began)


def send_cases(url: str, cases: list[FuzzCase], *, workers: int = 4, timeout: float = 30.0,
               deadline: float | None = None) -> list[FuzzReply]:
    """Send the cases over `workers` keep-alive connections; cases left when the deadline passes are not sent."""
    import requests

    local = threading.local()

    def one(case: FuzzCase) -> FuzzReply | None:
        if deadline is not None and time.monotonic() > deadline:
            return None
        if not hasattr(local, "session"):
            local.session = requests.Session()
        return send_case(local.session, url, case, timeout)

    with concurrent.futures.ThreadPoolExecutor(workers) as pool:
        return [r for r in pool.map(one, cases) if r is not None]


def serve_processes(app_name: str) -> dict[str, int]:
    """PIDs of the Serve proxy, controller and the app's replicas, by actor name (this Ray cluster only)."""
    import ray

    pids: dict[str, int] = {}
    for actor in ray.util.list_named_actors(all_namespaces=True):
        name, namespace = actor["name"], actor["namespace"]
        ours = name.startswith(f"SERVE_REPLICA::{app_name}#") or name.startswith(("SERVE_PROXY_ACTOR",
                                                                               "SERVE_CONTROLLER_ACTOR"))
        if namespace == "serve" and ours:
            handle = ray.get_actor(name, namespace=namespace)
            pid = ray.get(handle.__ray_call__.remote(lambda self: os.getpid()), timeout=30)
            label = name.split("::", 1)[-1].split("#")[1] if name.startswith("SERVE_REPLICA") else name.split("-")[0]
            pids[f"{label} ({pid})"] = pid
    return pids


def rss_mib(pids: dict[str, int]) -> dict[str, float]:
    """Resident set size of each process, MiB."""
    import psutil

    return {label: psutil.Process(pid).memory_info().rss / 2**20 for label, pid in pids.items()}


def free_port() -> int:
    """A free TCP port on the loopback interface."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_fuzz_server(model: str = "tiny-random", api_key_env: str = "USERRL_FUZZ_KEY",
                      app_name: str = "userrl-fuzz", max_model_len: int = 1024) -> tuple[str, str, str, Any]:
    """Ray (local), Serve on a free loopback port with an API key and /play; returns (url, key, model, config)."""
    import ray
    from ray import serve

    from userrl.serving.app import build_app
    from userrl.serving.config import ServeConfig

    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    logging.getLogger("ray.serve").setLevel(logging.WARNING)
    key = os.environ.setdefault(api_key_env, "sk-fuzz-" + os.urandom(8).hex())
    if not ray.is_initialized():
        # Serve logs one line per request: 1,000 of them would bury the table.
        ray.init(num_cpus=max(4, os.cpu_count() or 1), log_to_driver=False,
                 logging_config=ray.LoggingConfig(log_level="ERROR"))
    port = free_port()
    config = ServeConfig(model=model, model_name="fuzz", max_model_len=max_model_len, default_max_tokens=16,
                         num_threads=1, num_cpus_per_replica=0.5, api_key_env=api_key_env, port=port)
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    serve.run(build_app(config), name=app_name, route_prefix="/")
    return f"http://127.0.0.1:{port}", key, "fuzz", config


@scenario(7, "malformed requests to the Serve endpoint")
def scenario_7_serve_fuzz(requests: int = 1000, *, url: str | None = None, api_key: str | None = None,
                          model_name: str | None = None, app_name: str = "userrl-fuzz", max_model_len: int = 1024,
                          max_request_bytes: int = 4 * 2**20, play: bool = True, seed: int = 0, workers: int = 4,
                          time_limit_s: float = 600.0, rss_growth_limit_mib: float = 64.0) -> ScenarioResult:
    """Send `requests` malformed requests (loopback only) and check replies, recovery and memory.

    Without `url` a Serve app is started here (tiny-random, API key, /play) and shut down at the end;
    with `url` the server at that loopback address is used (its settings must match the arguments).
    """
    import openai

    started = url is None
    if started:
        url, api_key, model_name, config = start_fuzz_server(app_name=app_name, max_model_len=max_model_len)
        max_request_bytes = config.max_request_bytes
    elif urlparse(url).hostname not in LOOPBACK:
        raise ValueError(f"url must be a loopback address ({', '.join(sorted(LOOPBACK))}), not {url!r}")
    assert url is not None and model_name is not None
    try:
        cases = FuzzCases(model_name, api_key, max_model_len, max_request_bytes, play, seed).take(requests)
        deadline = time.monotonic() + time_limit_s
        pids = serve_processes(app_name)
        warm = max(1, len(cases) // 5)  # allocator pools, caches and lazy imports settle in the first fifth
        replies = send_cases(url, cases[:warm], workers=workers, deadline=deadline)
        samples = [rss_mib(pids)]  # then after each further quarter: a leak grows with the count
        began = time.perf_counter()
        rest = cases[warm:]
        for quarter in range(4):
            chunk = rest[quarter * len(rest) // 4: (quarter + 1) * len(rest) // 4]
            replies += send_cases(url, chunk, workers=workers, deadline=deadline)
            samples.append(rss_mib(pids))
        wall = time.perf_counter() - began
        client = openai.OpenAI(base_url=f"{url}/v1", api_key=api_key or "none", max_retries=0, timeout=120)
        try:
            reply = client.chat.completions.create(model=model_name, messages=VALID_PROMPT, max_tokens=4)
            recovered = bool(reply.choices) and reply.usage.completion_tokens > 0
            recovery = f"completion of {reply.usage.completion_tokens} tokens, finish {reply.choices[0].finish_reason}"
        except openai.OpenAIError as error:
            recovered, recovery = False, f"{type(error).__name__}: {error}"[:200]
    finally:
        if started:
            from ray import serve

            serve.shutdown()
    return _fuzz_result(cases, replies, warm, samples, wall, recovered, recovery, rss_growth_limit_mib)


def _fuzz_result(cases: list[FuzzCase], replies: list[FuzzReply], warm: int, samples: list[dict[str, float]],
                 wall: float, recovered: bool, recovery: str, growth_limit: float) -> ScenarioResult:
    before, after = samples[0], samples[-1]
    families = list(dict.fromkeys(c.family for c in cases))
    rows = []
    for family in families:
        sent = [r for r in replies if r.case.family == family]
        statuses: dict[int | None, int] = {}
        for r in sent:
            statuses[r.status] = statuses.get(r.status, 0) + 1
        seconds = sorted(r.seconds for r in sent) or [0.0]
        rows.append({
            "family": family, "cases": sum(c.family == family for c in cases), "sent": len(sent),
            "came back": ", ".join(f"{n}x {s}" for s, n in sorted(statuses.items(), key=lambda kv: str(kv[0]))),
            "expected 4xx + OpenAI shape": sum(r.good for r in sent),
            "wrong (5xx, other status or shape)": sum(r.status is not None and not r.good for r in sent),
            "lost (no reply)": sum(r.status is None for r in sent),
            "max s": f"{seconds[-1]:.2f}",
        })
    total = {k: sum(row[k] for row in rows) for k in ("cases", "sent", "expected 4xx + OpenAI shape",
                                                      "wrong (5xx, other status or shape)", "lost (no reply)")}
    rows.append({"family": "**all**", "cases": total["cases"], "sent": total["sent"], "came back": "",
                 **{k: total[k] for k in ("expected 4xx + OpenAI shape", "wrong (5xx, other status or shape)",
                                          "lost (no reply)")},
                 "max s": f"{max((r.seconds for r in replies), default=0.0):.2f}"})
    growth = {label: after[label] - before[label] for label in before}
    total_growth = sum(growth.values())
    measured = len(replies) - warm
    notes = [f"{measured} requests after the {warm} of the warm-up in {wall:.1f} s ({measured / max(wall, 1e-9):.0f} req/s)",
             "RSS MiB after the warm-up fifth, then after each quarter of the rest: " + "; ".join(
                 f"{label} " + " -> ".join(f"{sample[label]:.1f}" for sample in samples) for label in before)
             + f"; total growth {total_growth:+.1f} MiB (limit {growth_limit:.0f})",
             f"a valid request afterwards (official openai client): {'ok' if recovered else 'FAILED'}, {recovery}"]
    bad = [r for r in replies if not r.good][:10]
    notes += [f"not ok: [{r.case.family}] {r.case.label}: {r.status} {str(r.body)[:160]} {r.error or ''}" for r in bad]
    ok = (total["sent"] == total["cases"] and total["expected 4xx + OpenAI shape"] == total["sent"]
          and recovered and total_growth < growth_limit)
    return ScenarioResult(7, "malformed requests to the Serve endpoint", rows, ok, notes,
                          {"replies": replies, "rss": samples, "recovered": recovered})


# ------------------------------------------------------------------ scenarios 4 and 5: learner failures


def _learner_config(out: Any, *, model: str, iterations: int, every: int, seed: int, max_failures: int) -> Any:
    from userrl.trainer import TrainerConfig

    # entropy_coeff: a gradient in every iteration even when a tiny model's group rewards tie, so a run
    # that resumed from the wrong state would end with other weights.
    return (TrainerConfig()
            .experiment(name="reliability", seed=seed, output_dir=str(out))
            .environment(gyms=[{"name": "function", "difficulty": [0]}], protocol="bracket", max_turns=2,
                         max_steps=2)
            .policy(model=model, max_new_tokens=6, max_model_len=512, num_cpus_per_replica=0.5, num_threads=1)
            .env_runners(num_env_runners=1)
            .training(iterations=iterations, batch_size=2, group_size=2, lr=1e-3, entropy_coeff=0.01,
                      micro_batch_tokens=1024)
            .learners(num_learners=2, max_failures=max_failures)
            .checkpointing(every=every)
            .tracking(experiment="reliability", mlflow_uri=f"sqlite:///{out}/mlflow.db")
            .to_config())


def _learner_run(out: Any, fault: str | None, **settings: Any) -> dict[str, Any]:
    """One small training run with `USERRL_FAULT=fault`; its results, restarts and timings."""
    import logging
    from pathlib import Path

    from userrl import faults
    from userrl.trainer import Trainer

    notices: list[tuple[float, tuple[Any, ...]]] = []

    class Restarts(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if record.getMessage().startswith("learner group restarted"):
                notices.append((record.created, tuple(record.args or ())))

    handler = Restarts()
    logging.getLogger("userrl.trainer").addHandler(handler)
    seen: list[tuple[float, dict[str, Any]]] = []
    digests: dict[str, dict[str, str]] = {}  # checkpoint folder name -> file digests when it was reported

    def on_result(result: dict[str, Any]) -> None:
        seen.append((time.time(), result))
        if result.get("checkpoint"):
            digests[Path(result["checkpoint"]).name] = _folder_digest(Path(result["checkpoint"]))
    previous = os.environ.pop(faults.ENV, None)
    if fault:
        os.environ[faults.ENV] = fault
    began = time.time()
    try:
        algo = Trainer(_learner_config(out, **settings))
        try:
            results = algo.fit(on_result=on_result)
        finally:
            algo.stop()
    finally:
        logging.getLogger("userrl.trainer").removeHandler(handler)
        os.environ.pop(faults.ENV, None)
        if previous is not None:
            os.environ[faults.ENV] = previous
    run_dir = out / "reliability"
    markers = sorted((run_dir / "faults").glob("*")) if (run_dir / "faults").is_dir() else []
    return {"results": results, "seen": seen, "digests": digests, "notices": notices, "wall_s": time.time() - began,
            "run_dir": run_dir, "killed_at": markers[0].stat().st_mtime if markers else None}


def _final_weights(run: dict[str, Any], iteration: int) -> dict[str, Any]:
    from safetensors.torch import load_file

    from userrl.checkpoint import Checkpoint

    return load_file(Checkpoint.of_run(run["run_dir"], iteration).model_dir / "model.safetensors")


def _folder_digest(folder: Any) -> dict[str, str]:
    import hashlib

    return {p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def _learner_failure(number: int, title: str, fault: str, kill_iteration: int, *, model: str, iterations: int,
                     every: int, seed: int, max_failures: int, compare: bool, atol: float = 1e-5,
                     rtol: float = 1e-4) -> ScenarioResult:
    """Run with the fault and (with `compare`) without; what was lost and restarted, and the final weights."""
    import tempfile
    from pathlib import Path

    import ray
    import torch

    from userrl.checkpoint import STAGING_SUFFIX, Checkpoint, checkpoints_dir
    from userrl.cluster import init_ray

    settings = {"model": model, "iterations": iterations, "every": every, "seed": seed}
    with tempfile.TemporaryDirectory(prefix=f"userrl-scenario-{number}-") as tmp:
        owns_ray = init_ray(_learner_config(Path(tmp), max_failures=max_failures, **settings))
        try:
            runs = {"with the fault": _learner_run(Path(tmp) / "faulty", fault, max_failures=max_failures,
                                                   **settings)}
            if compare:
                runs["uninterrupted"] = _learner_run(Path(tmp) / "reference", None, max_failures=max_failures,
                                                     **settings)
            faulty = runs["with the fault"]
            leftovers = sorted(p.name for p in checkpoints_dir(faulty["run_dir"]).glob(f"*{STAGING_SUFFIX}"))
            final = _final_weights(faulty, iterations)
            gap, same = None, None
            if compare:
                reference = _final_weights(runs["uninterrupted"], iterations)
                gap = max((final[k] - reference[k]).abs().max().item() for k in reference)
                same = all(torch.allclose(final[k], reference[k], atol=atol, rtol=rtol) for k in reference)
            resumed = [args[3] for _, args in faulty["notices"]]
            previous = Checkpoint.of_run(faulty["run_dir"], resumed[0]).path if resumed else None
            # Byte for byte as it was when its iteration was reported (before the kill).
            intact = (previous is not None and previous.name in faulty["digests"]
                      and _folder_digest(previous) == faulty["digests"][previous.name])
        finally:
            if owns_ray:
                ray.shutdown()
    start = resumed[0] if resumed else None
    killed_at = faulty["killed_at"]
    before_kill = [r["iteration"] for t, r in faulty["seen"] if r["phase"] == "rl" and killed_at and t < killed_at]
    rerun = list(range(start + 1, kill_iteration + 1)) if start is not None else []
    restart_s = faulty["notices"][0][0] - killed_at if faulty["notices"] and killed_at else None
    details = {
        "fault": fault, "fired": faulty["killed_at"] is not None, "restarts": len(faulty["notices"]),
        "resumed_from_iteration": start, "rerun_iterations": rerun,
        "reported_then_rerun": [i for i in rerun if i in before_kill],
        "kill_to_restarted_group_s": restart_s, "leftover_tmp": leftovers, "previous_checkpoint_intact": intact,
        "iterations_returned": [r["iteration"] for r in faulty["results"]],
        "max_abs_weight_gap": gap, "weights_equal": same,
    }
    rows = [{"run": name, "iterations": ", ".join(str(r["iteration"]) for r in run["results"]),
             "restarts": len(run["notices"]),
             "resumed from": "" if not run["notices"] else f"iter_{run['notices'][0][1][3]:06d}",
             "wall s": f"{run['wall_s']:.1f}"} for name, run in runs.items()]
    ok = (details["fired"] and details["restarts"] == 1 and intact and not leftovers
          and details["iterations_returned"] == list(range(1, iterations + 1)) and same is not False)
    notes = [f"fault {fault}: the learner died at the marked point; Ray Train restarted the group "
             f"(learners.max_failures={max_failures}) from iter_{start:06d}" if start is not None else
             f"fault {fault}: no restart was seen",
             f"re-run iterations {rerun} (reported before the kill and shown/logged once: "
             f"{details['reported_then_rerun']})",
             f"from the kill to the restarted group's start notice: {restart_s:.1f} s" if restart_s else
             "restart time not measured",
             f"leftover .tmp folders at the end: {leftovers or 'none'}; the checkpoint resumed from is intact: {intact}"]
    if compare:
        notes.append(f"final weights vs the uninterrupted run: max |diff| {gap:.3g} "
                     f"({'equal' if same else 'DIFFERENT'} at atol {atol}, rtol {rtol})")
    return ScenarioResult(number, title, rows, bool(ok), notes, details)


@scenario(4, "a learner killed mid-update")
def scenario_4_learner_killed(seed: int = 5, *, model: str = "tiny-random", iterations: int = 4, every: int = 2,
                              kill_iteration: int | None = None, rank: int = 1, max_failures: int = 2,
                              compare: bool = True) -> ScenarioResult:
    """SIGKILL learner `rank` in the update of `kill_iteration` (default the last), after its backward passes.

    Ray Train restarts the learner group from the fit's newest complete checkpoint; the iterations after
    it are re-run, and the final weights are compared with an uninterrupted run's (`compare`).
    """
    kill = kill_iteration or iterations
    return _learner_failure(4, "a learner killed mid-update", f"update:{kill}:{rank}", kill, model=model,
                            iterations=iterations, every=every, seed=seed, max_failures=max_failures,
                            compare=compare)


@scenario(5, "the trainer killed while writing a checkpoint")
def scenario_5_killed_while_checkpointing(seed: int = 5, *, model: str = "tiny-random", iterations: int = 4,
                                          every: int = 2, kill_iteration: int | None = None, max_failures: int = 1,
                                          compare: bool = True) -> ScenarioResult:
    """SIGKILL rank 0 after it wrote `iter_<kill_iteration>.tmp` and before the rename (default: the last).

    The checkpoint before it must stay intact, the .tmp folder must be removed and never resumed from,
    and the restarted group must end with an uninterrupted run's weights.
    """
    kill = kill_iteration or iterations
    if kill % every and kill != iterations:
        raise ValueError(f"no checkpoint is written at iteration {kill} (every {every})")
    return _learner_failure(5, "the trainer killed while writing a checkpoint", f"checkpoint:{kill}", kill,
                            model=model, iterations=iterations, every=every, seed=seed,
                            max_failures=max_failures, compare=compare)


# ----------------------------------------------------------------------------------------------------- CLI


# --------------------------------------------------- scenarios 1, 2 and 6: the rollout layer (EnvRunnerGroup)


def _rollout_group(out: Any, model: str, **env_runners: Any) -> Any:
    import ray

    from userrl.env_runner_group import EnvRunnerGroup
    from userrl.models import resolve_model
    from userrl.trainer import TrainerConfig

    if not ray.is_initialized():
        ray.init(num_cpus=4, logging_config=ray.LoggingConfig(encoding="TEXT", log_level="ERROR"))
    config = (TrainerConfig()
              .experiment(name="reliability", output_dir=str(out))
              .environment(gyms=[{"name": "function", "difficulty": [0]}], protocol="bracket", max_turns=4,
                           max_steps=4)
              .policy(model=model, max_new_tokens=64, max_batch_size=4, num_threads=1)
              .env_runners(num_env_runners=2, **env_runners)
              .to_config())
    return EnvRunnerGroup(config, resolve_model(model))


def _rollout_specs(episodes: int, prefix: str) -> list[Any]:
    from userrl.coordinator import episode_specs
    from userrl.envs import load_tasks

    return episode_specs(load_tasks("function", split="train", difficulty=[0])[: episodes // 4], 4, prefix)


def _killed_rollout(group: Any, episodes: int, victim: Callable[[], int]) -> tuple[list[Any], dict[str, float], float]:
    """Play `episodes` episodes, SIGKILL the process `victim()` names once the replica has served a few
    requests; returns the trajectories, the group's counters and the wall seconds."""
    import signal

    import ray

    chunks = group.split(_rollout_specs(episodes, "rel"))
    began = time.perf_counter()
    job = group.launch(chunks, [0] * len(chunks))
    pid = victim()
    while sum(s["requests"] for s in ray.get([r.get_stats.remote() for r in group.replicas])) < 2:
        time.sleep(0.05)
    os.kill(pid, signal.SIGKILL)
    trajectories = job.gather()
    return trajectories, group.pop_counters(), time.perf_counter() - began


def _rollout_rows(label: str, planned: int, trajectories: list[Any], counters: dict[str, float],
                  seconds: float) -> dict[str, Any]:
    return {"run": label, "episodes planned": planned, "returned": len(trajectories),
            "aborted": sum(t.aborted for t in trajectories),
            "runner restarts": int(counters.get("env_runner_restarts", 0)),
            "replica restarts": int(counters.get("replica_restarts", 0)),
            "re-run episodes": int(counters.get("rerun_episodes", 0)),
            "lost": int(counters.get("lost_episodes", 0)), "seconds": f"{seconds:.1f}"}


@scenario(1, "an env runner killed mid-iteration")
def scenario_1_env_runner_killed(episodes: int = 64, *, model: str = "tiny-random") -> ScenarioResult:
    """Kill one of two env runners while a batch plays: every episode comes back, the restart and the
    re-run chunk are counted, nothing is aborted."""
    import tempfile

    import ray

    with tempfile.TemporaryDirectory() as out:
        group = _rollout_group(out, model)
        try:
            began = time.perf_counter()
            quiet = group.play(_rollout_specs(episodes, "q"), seed=0)
            quiet_s = time.perf_counter() - began
            killed, counters, killed_s = _killed_rollout(
                group, episodes, lambda: ray.get(group.runners[0].ping.remote())["pid"])
        finally:
            group.stop()
    rows = [_rollout_rows("undisturbed", episodes, quiet, group.pop_counters(), quiet_s),
            _rollout_rows("runner 0 killed", episodes, killed, counters, killed_s)]
    ok = (len(killed) == episodes and not any(t.aborted for t in killed) and counters["env_runner_restarts"] == 1
          and counters["lost_episodes"] == 0)
    return ScenarioResult(1, "an env runner killed mid-iteration", rows, ok,
                          ["the dead runner's chunk is played again, with the same uids and seeds, on the live runner"])


@scenario(2, "a policy replica killed mid-iteration")
def scenario_2_replica_killed(episodes: int = 64, *, model: str = "tiny-random") -> ScenarioResult:
    """Kill the only policy replica while a batch plays after a weight sync to version 3: Ray restarts it,
    the group gives it version 3 before it serves, in-flight requests are sent again."""
    import tempfile

    import ray
    from transformers import AutoModelForCausalLM

    from userrl.models import resolve_model

    with tempfile.TemporaryDirectory() as out:
        group = _rollout_group(out, model)
        try:
            state = AutoModelForCausalLM.from_pretrained(resolve_model(model)).state_dict()
            group.sync_weights(state, version=3)
            replica = group.replicas[0]
            killed, counters, killed_s = _killed_rollout(group, episodes, lambda: ray.get(replica.process_id.remote()))
            group.heal_replicas(force=True)
            version = ray.get(replica.get_version.remote())
            retries = sum(s["replica_retries"] for s in ray.get([r.ping.remote() for r in group.runners]))
        finally:
            group.stop()
    versions = sorted({t.policy_version for t in killed})
    rows = [_rollout_rows("replica killed", episodes, killed, counters, killed_s)]
    ok = (not any(t.aborted for t in killed) and versions == [3] and version == 3
          and counters["replica_restarts"] == 1)
    return ScenarioResult(2, "a policy replica killed mid-iteration", rows, ok,
                          [f"trajectory policy versions {versions}; replica version after the restart {version}; "
                           f"{retries} requests sent again by the runners"])


@scenario(6, "userrl evaluate with a gym that cannot be built")
def scenario_6_broken_gym(episodes_per_gym: int = 8, *, model: str = "tiny-random") -> ScenarioResult:
    """`userrl evaluate` over Function and a Turtle gym given an unknown reward preset: Function is scored,
    Turtle's episodes are aborted with the error, the exit status is 3."""
    import tempfile
    from pathlib import Path

    import yaml

    from userrl.cli import main as userrl_main

    with tempfile.TemporaryDirectory() as out:
        config = Path(out) / "eval.yaml"
        config.write_text(yaml.safe_dump({
            "experiment": {"name": "broken-gym", "output_dir": out},
            "env": {"protocol": "bracket", "max_turns": 3, "max_steps": 3,
                    "gyms": [{"name": "function", "difficulty": [0]},
                             {"name": "turtle", "kwargs": {"reward_preset": "no_such_preset"}}]},
            "policy": {"model": model, "max_new_tokens": 8, "num_threads": 1},
            "evaluation": {"max_episodes_per_gym": episodes_per_gym},
            "tracking": {"mlflow_uri": f"sqlite:///{out}/mlflow.db"}}))
        status = userrl_main(["evaluate", "--config", str(config), "--out", f"{out}/eval"])
        metrics = json.loads((Path(out) / "eval" / "metrics.json").read_text())
    rows = [{"gym": gym, "episodes": m["episodes"], "aborted": m["aborted"], "micro_avg": m["micro_avg"]}
            for gym, m in metrics["gyms"].items()]
    ok = status == 3 and metrics["gyms"]["function"]["aborted"] == 0 and \
        metrics["gyms"]["turtle"]["aborted"] == episodes_per_gym
    return ScenarioResult(6, "userrl evaluate with a gym that cannot be built", rows, ok, [f"exit status {status}"])


def main(argv: list[str] | None = None) -> int:
    """Run the chosen scenarios and print their tables."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", type=int, action="append", help="scenario number (repeatable)")
    parser.add_argument("--list", action="store_true", help="list the scenarios")
    parser.add_argument("--requests", type=int, help="requests to send (scenarios that send requests)")
    parser.add_argument("--seed", type=int, help="seed of the generated cases")
    parser.add_argument("--url", help="an already running loopback endpoint (scenarios that take one)")
    args = parser.parse_args(argv)
    if args.list or not args.scenario:
        for number, entry in sorted(SCENARIOS.items()):
            print(f"{number}: {entry.title} ({entry.run.__name__})")
        return 0 if args.list else 2
    unknown = [n for n in args.scenario if n not in SCENARIOS]
    if unknown:
        parser.error(f"no scenario {unknown}; known: {sorted(SCENARIOS)}")
    failed = 0
    for number in args.scenario:
        entry = SCENARIOS[number]
        accepted = inspect.signature(entry.run).parameters
        kwargs = {k: v for k, v in (("requests", args.requests), ("seed", args.seed), ("url", args.url))
                  if v is not None and k in accepted}
        result = entry.run(**kwargs)
        print_result(result)
        failed += not result.ok
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
