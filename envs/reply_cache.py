"""An optional cache of a user model's replies (env.user_cache), shared by the episodes of one process.

A key names everything a reply depends on: the user model and its version, the whole request (the role's
prompt or conversation, the sampling settings) and its seed. With the seed fixed, the reply is a function of
the key, so a hit returns exactly what asking the model again would have sampled; requests without a seed
are never cached. Identical requests in flight at once are asked once (the episodes of a GRPO group often
send the same first message at the same moment).
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Hashable
from typing import Any, TypeVar

T = TypeVar("T")

#: Entries kept: enough for every user turn of a few iterations of a runner's episodes, a few MB of text.
DEFAULT_SIZE = 4096


class ReplyCache:
    """A least-recently-used map from request keys to replies (or to the reply still being asked)."""

    def __init__(self, size: int = DEFAULT_SIZE):
        self.size = size
        self._entries: OrderedDict[Hashable, asyncio.Future[Any]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    async def get(self, key: Hashable, ask: Callable[[], Awaitable[T]]) -> tuple[T, bool]:
        """The reply for `key` and whether it came from the cache; `ask()` produces it on a miss. A failed
        ask is not kept (its waiters see the error; the next request asks again)."""
        entry = self._entries.get(key)
        # Futures belong to the loop that made them: a request from another loop (a sync step's) asks anew.
        if entry is not None and entry.get_loop() is asyncio.get_running_loop():
            self._entries.move_to_end(key)
            return await asyncio.shield(entry), True
        future = asyncio.ensure_future(ask())
        self._entries[key] = future
        self._entries.move_to_end(key)
        while len(self._entries) > self.size:
            self._entries.popitem(last=False)
        try:
            # Shielded: a cancelled episode must not cancel the reply that other episodes wait for.
            return await asyncio.shield(future), False
        except BaseException:
            if self._entries.get(key) is future:
                del self._entries[key]
            raise
