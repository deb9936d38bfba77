"""An OpenAI-compatible `POST /v1/chat/completions` server on 127.0.0.1 for tests (aiohttp in a thread)."""

from __future__ import annotations

import asyncio
import socket
import threading

from aiohttp import web


class LoopbackChatServer:
    """Serves `handle` (to override) on a free loopback port from a background event loop."""

    #: aiohttp's handler cancellation: a reply the client gave up on must not keep running.
    cancel_abandoned = False

    def __init__(self) -> None:
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._runner: web.AppRunner | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self) -> None:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(10)

    def stop(self) -> None:
        if self._runner is not None:
            asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()

    async def on_start(self) -> None:
        """Runs on the server's loop before it listens (create loop-bound objects here)."""

    async def _start(self) -> None:
        await self.on_start()
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self.handle)
        self._runner = web.AppRunner(app, access_log=None, handler_cancellation=self.cancel_abandoned,
                                     shutdown_timeout=0.5)
        await self._runner.setup()
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.bind(("127.0.0.1", 0))
        self.port = sock.getsockname()[1]
        await web.SockSite(self._runner, sock).start()

    async def handle(self, request: web.Request) -> web.StreamResponse:
        raise NotImplementedError
