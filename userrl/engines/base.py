"""The inference-engine interface every policy replica wraps."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, Protocol


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


class Engine(Protocol):
    """What a PolicyReplica needs from an engine."""

    def generate(self, requests: list[GenerationRequest]) -> list[GenerationOutput]:
        """Generate for a batch of requests."""
        ...

    def load_state_dict(self, state_dict: dict) -> None:
        """Replace the weights in place."""
        ...
