"""The learner's collective checkpoint save and restore of its FSDP2 models and optimizers.

The folder's layout and file names are `userrl/checkpoint.py`'s; this module fills them from the sharded
state (every rank gathers, rank 0 writes) and reads the optimizer and RNG states back on every rank.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import torch
import torch.distributed as dist
from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict, set_optimizer_state_dict
from transformers import AutoModelForCausalLM, AutoModelForTokenClassification

from userrl.checkpoint import Checkpoint, staged
from userrl.fsdp import FULL, full_state_dict


class Trained(NamedTuple):
    """A sharded model and the optimizer over its shards."""

    model: torch.nn.Module
    optimizer: torch.optim.Optimizer


def _unsharded(kind: type, config: Any, state: dict[str, torch.Tensor], strict: bool = True) -> torch.nn.Module:
    # Built on the meta device and given the gathered tensors: a random initialisation first would cost
    # 1.3 s per checkpoint at 135M parameters, for values that are all overwritten.
    with torch.device("meta"):
        model = kind.from_config(config)
    model.load_state_dict(state, strict=strict, assign=True)
    return model


def save_checkpoint(path: Path, policy: Trained, critic: Trained | None, meta: dict[str, Any], tokenizer: Any,
                    documents: Mapping[str, Any] | None = None,
                    fault: Callable[..., None] | None = None) -> None:
    """Write the policy (HF folder), optimizers, critic, RNG states, `documents` (file name -> JSON-able data,
    rank 0's) and meta.json last, atomically (collective); `fault` is the reliability tests' hook."""
    model_state = full_state_dict(policy.model)
    optim_state = get_optimizer_state_dict(policy.model, policy.optimizer, options=FULL)
    if critic is not None:
        critic_state = full_state_dict(critic.model)
        critic_optim = get_optimizer_state_dict(critic.model, critic.optimizer, options=FULL)
    if dist.get_rank() == 0:
        with staged(path) as staging:  # filled under its .tmp name, renamed into place at the end
            folder = Checkpoint(staging)
            # Tied weights are one tensor in the state dict: load it non-strictly and tie again.
            unwrapped = _unsharded(AutoModelForCausalLM, policy.model.config, model_state, strict=False)
            unwrapped.tie_weights()
            unwrapped.save_pretrained(folder.model_dir)
            tokenizer.save_pretrained(folder.model_dir)
            torch.save(optim_state, folder.optimizer_file)
            if critic is not None:
                _unsharded(AutoModelForTokenClassification, critic.model.config, critic_state).save_pretrained(
                    folder.critic_dir)
                torch.save(critic_optim, folder.critic_optimizer_file)
            torch.save({"torch": torch.get_rng_state(), "numpy": np.random.get_state(),
                        "python": random.getstate()}, folder.rng_file)
            for name, document in (documents or {}).items():
                (staging / name).write_text(json.dumps(document))
            folder.meta_file.write_text(json.dumps(meta, indent=2))  # last: the folder is complete
            if fault:
                fault("checkpoint", meta["iteration"])
    dist.barrier()


def restore_optimizers(path: Path, policy: Trained, critic: Trained | None) -> None:
    """Restore the optimizers (the critic's where the checkpoint has one) and the RNG states (every rank)."""
    checkpoint = Checkpoint(path)
    set_optimizer_state_dict(policy.model, policy.optimizer, options=FULL,
                             optim_state_dict=torch.load(checkpoint.optimizer_file, weights_only=False))
    if critic is not None and checkpoint.critic_optimizer_file.is_file():  # else a fresh one (e.g. SFT's)
        set_optimizer_state_dict(critic.model, critic.optimizer, options=FULL,
                                 optim_state_dict=torch.load(checkpoint.critic_optimizer_file, weights_only=False))
    rng = torch.load(checkpoint.rng_file, weights_only=False)
    torch.set_rng_state(rng["torch"])
    np.random.set_state(rng["numpy"])
    random.setstate(rng["python"])
