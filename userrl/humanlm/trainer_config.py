"""Training a user simulator with the agents' machinery: a config builder whose defaults are HumanLM's.

`UserSimulatorConfig` is `TrainerConfig` with a `.humanlm(...)` section and the spec's settings
(docs/spec/ALGORITHMS.md §5.2 "Training settings") under whatever the caller sets; `build_trainer()` gives the same
`Trainer` (Ray Train FSDP2 learner group, policy replicas, one train loop, MLflow, checkpoints and
exact resume). What differs is data, not code: the `humanlm` gym's single-turn user-reply tasks, the
`user_reply` protocol, and the group scorer that judges a group's replies after each rollout.
"""

from __future__ import annotations

import copy
from typing import Any

from userrl.config import UserRLConfig, parse_config
from userrl.humanlm.format import THINKING_MAX_TOKENS
from userrl.trainer import TrainerConfig

#: What `userrl train-user` and UserSimulatorConfig put under a config (the config's own keys win).
TRAIN_USER_DEFAULTS: dict[str, Any] = {
    "experiment": {"name": "humanlm"},
    "env": {"gyms": [{"name": "humanlm"}], "protocol": "user_reply", "max_turns": 1, "max_steps": 1},
    # n = 4 samples at temperature 0.8; responses up to 512 tokens; validation at 0.4.
    "policy": {"temperature": 0.8, "max_new_tokens": 512},
    "training": {"group_size": 4, "lr": 1e-6, "use_kl_loss": True, "kl_loss_coef": 0.001,
                 "kl_loss_type": "low_var_kl", "entropy_coeff": 0.0, "ppo_epochs": 1},
    "evaluation": {"temperature": 0.4},
    # The warm start (off unless sft.enabled): the rows' real replies in the strict tag format.
    "sft": {"source": "rows"},
    "tracking": {"experiment": "humanlm"},
}


def train_user_defaults(data: dict[str, Any]) -> dict[str, Any]:
    """TRAIN_USER_DEFAULTS for this config: with humanlm.thinking, responses of up to THINKING_MAX_TOKENS."""
    defaults = copy.deepcopy(TRAIN_USER_DEFAULTS)
    if isinstance(data.get("humanlm"), dict) and data["humanlm"].get("thinking"):
        defaults["policy"]["max_new_tokens"] = THINKING_MAX_TOKENS
    return defaults


def merge_defaults(data: dict[str, Any], defaults: dict[str, Any] | None = None) -> dict[str, Any]:
    """data over defaults (train_user_defaults(data) when None), section by section (a key data sets wins,
    lists included)."""
    out = copy.deepcopy(defaults) if defaults is not None else train_user_defaults(data)
    for key, value in data.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge_defaults(value, out[key])
        else:
            out[key] = copy.deepcopy(value)
    return out


class UserSimulatorConfig(TrainerConfig):
    """Builder of a user-simulator (HumanLM) run: `.humanlm(mode=..., judge=...)` plus every section of
    TrainerConfig; HumanLM's settings fill what is left out."""

    def to_config(self) -> UserRLConfig:
        """The validated config: what the builder set over HumanLM's defaults (merged last, so that
        `.humanlm(thinking=True)` still raises the default response limit)."""
        return parse_config(merge_defaults(self._data))

    def humanlm(self, **values: Any) -> UserSimulatorConfig:
        """Mode (separate_system_prompt | response_only | sequential with curriculum=True), data files, judges,
        prompt budget, field weights."""
        return self._section("humanlm", values)
