"""The inference-engine interface every policy replica wraps."""

from __future__ import annotations

import concurrent.futures
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import ClassVar, Literal


@dataclass
class GenerationRequest:
    """Continue `prompt_ids` by at most `max_new_tokens` sampled tokens."""

    prompt_ids: list[int]
    max_new_tokens: int
    temperature: float = 1.0
    top_p: float = 1.0
    seed: int | None = None
    stop_token_ids: list[int] = field(default_factory=list)
    #: Requests that share a key (an episode's turns) may reuse each other's KV cache for a common prefix.
    cache_key: str | None = None


@dataclass
class GenerationOutput:
    """Sampled token ids (end-of-turn token included when produced) and their sampler logprobs."""

    token_ids: list[int]
    logprobs: list[float]
    finish_reason: Literal["stop", "length"]
    policy_version: int = 0
    #: Where the request's time went: `time.monotonic()` stamps (one clock for every process of a machine)
    #: set along the way (replica_in/out, engine put/first/done), read by the env runner's breakdown.
    timing: dict[str, float] | None = None


@dataclass
class GenerationChunk:
    """Part of a streamed generation: tokens sampled since the previous chunk; the last chunk has `output`."""

    token_ids: list[int]
    output: GenerationOutput | None = None


class Engine:
    """What a PolicyReplica needs from an engine; optional abilities are declared, with no-op defaults.

    Every engine schedules its requests itself (`submit` one at a time; continuous batching: a request
    joins the running batch). `incremental`: the engine reports each token as it is sampled (`submit`'s
    `on_token`); otherwise tokens leave with the whole output.
    """

    #: The engine calls `on_token` for every token as it is sampled, so that the replica can stream tokens
    #: out while the request is still decoding; otherwise tokens leave with the whole output.
    incremental: ClassVar[bool] = False

    def submit(self, request: GenerationRequest,
               on_token: Callable[[int], bool | None] | None = None) -> concurrent.futures.Future:
        """Start one request now; its future resolves to a GenerationOutput. `on_token` (incremental
        engines) gets each sampled token id as it arrives, on the engine's own thread."""
        raise NotImplementedError

    def generate(self, requests: list[GenerationRequest]) -> list[GenerationOutput]:
        """Generate for a batch of requests: all submitted at once, then waited for."""
        futures = [self.submit(request) for request in requests]
        return [future.result() for future in futures]

    def load_state_dict(self, state_dict: dict) -> None:
        """Replace the weights in place."""
        raise NotImplementedError

    def end_session(self, key: str) -> None:
        """The episode behind `key` is over: drop whatever was kept for its next turn."""

    def reset_prefix_cache(self) -> bool:
        """Forget the KV kept for prefix reuse (benchmarks start runs alike); False when there is none."""
        return False

    def sleep(self) -> bool:
        """Free device memory for a colocated learner; False when the engine cannot."""
        return False

    def wake_up(self) -> bool:
        """Take the device memory back after `sleep`; False when the engine cannot sleep."""
        return False

    def close(self) -> None:
        """Stop processes of the engine's own."""

    def counters(self) -> dict[str, float]:
        """Engine counters to merge into the replica's."""
        return {}

    # Weight sync through a process group with learner rank 0 (userrl/weight_sync.py); an engine that
    # cannot join (size 0) gets its weights through `load_state_dict` (the object store) instead.

    def weight_group_size(self, backend: str) -> int:
        """Members this engine adds to a weight-sync group on `backend` (gloo/nccl); 0 = it cannot join."""
        return 0

    def join_weight_group(self, host: str, port: int, name: str, rank_offset: int, world_size: int,
                          backend: str, timeout_s: float) -> list[int]:
        """Join learner rank 0's weight-sync group (blocks until every member has); returns the group ranks."""
        raise NotImplementedError(f"{type(self).__name__} cannot join a weight-sync group")

    def leave_weight_group(self) -> None:
        """Forget the weight-sync group."""

    def receive_weights(self, metadata: list, bucket_bytes: int) -> dict[str, float]:
        """Load the weights learner rank 0 now broadcasts in the group, in place; returns seconds per phase."""
        raise NotImplementedError(f"{type(self).__name__} cannot join a weight-sync group")
