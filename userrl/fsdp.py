"""FSDP2 models of the learner: loading and sharding, chunked token scoring, and the collective gathers of
full weights and gradients.

Every gather here is collective: each rank of the learner group must call it.
"""

from __future__ import annotations

import contextlib
import types
from collections.abc import Iterator
from typing import Any

import torch
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard, register_fsdp_forward_method
from torch.distributed.tensor import DTensor
from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForTokenClassification

from userrl.algorithms import linear_token_logprobs
from userrl.weight_sync import GatheredWeights, dtype_name

# Full (unsharded) state on CPU, as checkpoints and the rank-0 gather want it.
FULL = StateDictOptions(full_state_dict=True, cpu_offload=True)


def _decoder_layers(model: torch.nn.Module) -> list[torch.nn.Module]:
    for path in ("model.layers", "transformer.h", "gpt_neox.layers"):
        node: Any = model
        with contextlib.suppress(AttributeError):
            for part in path.split("."):
                node = getattr(node, part)
            return list(node)
    raise ValueError(f"cannot find the decoder layers of {type(model).__name__} to shard")


def load_sharded_model(path: str, device: torch.device, bf16: bool, trainable: bool = True,
                       value_head: bool = False, seed: int = 0) -> torch.nn.Module:
    """Load a causal LM (or, with value_head, the same trunk with a scalar head) and shard it with FSDP2."""
    if value_head:  # from a causal LM folder the trunk loads and the head `score` starts fresh
        # No dropout before the head (transformers' default is 0.1): values must not be noisy in training mode.
        config = AutoConfig.from_pretrained(path, num_labels=1)
        config.classifier_dropout = 0.0
        # A fresh head is drawn from `seed`, not from whatever the process's RNG holds: two runs of one config
        # start from the same critic (a checkpoint's critic/ has its head, and the draw is then overwritten).
        with torch.random.fork_rng():
            torch.manual_seed(seed)
            model = AutoModelForTokenClassification.from_pretrained(path, config=config, dtype=torch.float32)
        model = model.to(device)
    else:
        model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).to(device)
    model.config.use_cache = False
    policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32) if (
        bf16 and device.type == "cuda") else MixedPrecisionPolicy()
    for layer in _decoder_layers(model):
        fully_shard(layer, mp_policy=policy)
    fully_shard(model, mp_policy=policy)
    model.train(trainable)
    if not trainable:
        model.requires_grad_(False)
    return model


def _score_tokens(self: torch.nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                  scored: torch.Tensor, temperature: float, with_entropy: bool, chunk_tokens: int
                  ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Log-probabilities (and entropies) of input_ids[:, 1:] where `scored` [B, L-1] is true, from the last
    hidden state and the output embedding in chunks: the full [B, L, V] logits are never built."""
    hidden = self.base_model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
    head = self.get_output_embeddings()
    return linear_token_logprobs(hidden[:, :-1][scored], head.weight, input_ids[:, 1:][scored], temperature,
                                 with_entropy, chunk_tokens, head.bias)


def attach_token_scoring(model: torch.nn.Module) -> bool:
    """Give a sharded causal LM a `score_tokens` method that runs under FSDP2's forward hooks (so the root's
    parameters, the output embedding among them, are gathered); False where the head is not a plain linear
    layer (logit soft-capping or scaling), which keeps the full-logits path."""
    config = model.config
    if not isinstance(model.get_output_embeddings(), torch.nn.Linear) or getattr(
            config, "final_logit_softcapping", None) is not None or getattr(config, "logit_scale", 1.0) != 1.0:
        return False
    model.score_tokens = types.MethodType(_score_tokens, model)
    register_fsdp_forward_method(model, "score_tokens")
    return True


def _full(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.full_tensor() if isinstance(tensor, DTensor) else tensor


def full_state_dict(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The full (unsharded) weights on CPU (collective)."""
    return get_model_state_dict(model, options=FULL)


def full_gradients(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """{parameter name: full CPU gradient} of the parameters that have one (collective)."""
    return {name: _full(param.grad).detach().cpu() for name, param in model.named_parameters()
            if param.grad is not None}


def full_norm(norm: torch.Tensor) -> torch.Tensor:
    """A gradient norm as a plain tensor (clip_grad_norm_ over DTensor shards returns a DTensor; collective)."""
    return _full(norm)


def gathered_weights(model: torch.nn.Module, device: torch.device, dtype: torch.dtype | None = None
                     ) -> GatheredWeights:
    """The model's full weights, one tensor at a time (collective: every rank iterates to the end).

    Each tensor is all-gathered from its FSDP2 shards when it is reached, on `device` (so NCCL can
    broadcast it from the GPU), and the whole model is never held at once. Tied weights are sent once
    (the engine re-ties its head). `dtype`: floating-point tensors are sent in it (the replicas' weight
    dtype: a bfloat16 replica gets half the bytes, rounded here as it would round them).
    """
    sharded = get_model_state_dict(model, options=StateDictOptions(full_state_dict=False))
    # A tied parameter is listed once by named_parameters (the same on every rank), twice in the state dict.
    own = {name for name, _ in model.named_parameters()} | {name for name, _ in model.named_buffers()}
    names = [name for name in sharded if name in own]

    def sent_dtype(tensor: torch.Tensor) -> torch.dtype:
        return dtype if dtype is not None and tensor.is_floating_point() else tensor.dtype

    def tensors() -> Iterator[tuple[str, torch.Tensor]]:
        for name in names:
            full = _full(sharded[name])
            yield name, full.detach().to(sent_dtype(full))

    metadata = [(n, tuple(sharded[n].shape), dtype_name(sent_dtype(sharded[n]))) for n in names]
    return GatheredWeights(metadata, tensors(), device)
