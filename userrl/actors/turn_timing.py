"""Where an episode's time goes between the env runner and the engine, summed over its turns.

Every generate request carries `time.monotonic()` stamps back in `GenerationOutput.timing` (the replica's
arrival and departure, the engine's chunk put, first token and done; one clock for every process of a
machine); the env runner adds its own send and receive. `TurnTimings` turns them into seconds per phase:

    opening        episode start (env built, prompt rendered) -> first request sent
    request_hop    runner sends -> replica's `generate` runs (Ray: pickle, transfer, the actor's loop)
    to_engine      replica -> the engine's loop puts the chunk into vLLM (thread hop, session bookkeeping)
    engine_open    an episode's first turn: prompt put -> first sampled token (the opening prompts of all
                   episodes queue for the prefill budget together)
    engine_first   a later turn: chunk put -> first sampled token (the rest of the step that was running
                   when it came, then the step that prefills it)
    engine_decode  first token -> turn finished (the remaining decode steps)
    from_engine    turn finished on the engine's loop -> replica's `generate` returns (thread hop)
    reply_hop      replica returns -> runner has the output (Ray)
    client         runner has turn k -> sends turn k+1 (decode, parse, env step, encode, its event loop)
    closing        last output -> episode over (its last parse and env step, env closed)

A phase whose stamps an engine does not set (hf: no put/first/done) is counted in `replica` instead.
"""

from __future__ import annotations

import time

PHASES = ("opening", "request_hop", "to_engine", "engine_open", "engine_first", "engine_decode", "replica",
          "from_engine", "reply_hop", "client", "closing")


class TurnTimings:
    """Sums of seconds per phase over the episodes an env runner played, and the counts to average them."""

    def __init__(self) -> None:
        self.seconds = dict.fromkeys(PHASES, 0.0)
        self.turns = 0
        self.episodes = 0
        self._started: dict[str, float] = {}  # episode key -> start, until its first request
        self._last: dict[str, float] = {}  # episode key -> when its last output arrived
        self._opening: set[str] = set()  # episodes whose first request is out

    def episode_started(self, key: str) -> None:
        """An episode begins (before its env is built)."""
        self._started[key] = time.monotonic()

    def sending(self, key: str | None) -> float:
        """A request of episode `key` leaves now: the time since its previous output (or its start) is the client's."""
        now = time.monotonic()
        if key is not None:
            if (last := self._last.pop(key, None)) is not None:
                self.seconds["client"] += now - last
            elif (start := self._started.pop(key, None)) is not None:
                self.seconds["opening"] += now - start
                self._opening.add(key)
        return now

    def received(self, key: str | None, sent: float, timing: dict[str, float] | None) -> None:
        """The output of a request sent at `sent` arrived now, with the stamps set on its way."""
        now = time.monotonic()
        self.turns += 1
        opening = key in self._opening
        if key is not None:
            self._last[key] = now
            self._opening.discard(key)
        stamps = timing or {}
        if "replica_in" not in stamps or "replica_out" not in stamps:  # no stamps: one lump, called a hop
            self.seconds["request_hop"] += now - sent
            return
        inside, out = stamps["replica_in"], stamps["replica_out"]
        self.seconds["request_hop"] += inside - sent
        self.seconds["reply_hop"] += now - out
        if not {"put", "done"} <= stamps.keys():
            self.seconds["replica"] += out - inside
            return
        first = stamps.get("first", stamps["done"])
        self.seconds["to_engine"] += stamps["put"] - inside
        self.seconds["engine_open" if opening else "engine_first"] += first - stamps["put"]
        self.seconds["engine_decode"] += stamps["done"] - first
        self.seconds["from_engine"] += out - stamps["done"]

    def episode_ended(self, key: str) -> None:
        """The episode is over: the time since its last output is its closing step."""
        now = time.monotonic()
        self._started.pop(key, None)
        self._opening.discard(key)
        if (last := self._last.pop(key, None)) is not None:
            self.seconds["closing"] += now - last
        self.episodes += 1

    def snapshot(self, reset: bool = False) -> dict[str, float]:
        """Seconds per phase (summed over turns and episodes), turns and episodes; `reset` starts afresh."""
        result = {**self.seconds, "turns": float(self.turns), "episodes": float(self.episodes)}
        if reset:
            self.seconds = dict.fromkeys(PHASES, 0.0)
            self.turns = self.episodes = 0
        return result
