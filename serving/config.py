"""Serving configuration: one YAML file (see serving/default.yaml) validated by pydantic."""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from userrl.config import ConfigError, Dtype, apply_overrides, read_yaml_mapping
from userrl.engines.select import EngineName
from userrl.engines.settings import HFSettings, VLLMSettings


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid")


class AutoscalingSettings(_Section):
    """Ray Serve autoscaling of the model deployment (replaces `num_replicas` when set)."""

    min_replicas: int = Field(1, ge=0)
    max_replicas: int = Field(2, ge=1)
    target_ongoing_requests: float = Field(8.0, gt=0)


class PlaySettings(_Section):
    """The /play page: episodes on real gyms with the scripted simulated users."""

    enabled: bool = True
    max_turns: int = Field(8, ge=1, description="agent turns per episode before it is cut")
    max_new_tokens: int = Field(64, ge=1, description="tokens per agent turn")
    max_episodes: int = Field(64, ge=1, description="episodes kept in memory (oldest dropped first)")


class ServeConfig(_Section):
    """Everything `userrl serve` needs; every field has a default."""

    model: str = Field("smollm2-135m", description="model folder (exported, a checkpoint or its model/) or a model name")
    model_name: str | None = Field(None, description="id in /v1/models and requests (default: the folder name)")
    engine: EngineName = Field("auto", description="inference engine: auto (vllm where vLLM imports and supports "
                               "the model, else hf; userrl/engines/select.py), hf or vllm")
    dtype: Dtype = Field("float32", description="weights of the engine (as policy.dtype)")
    engine_options: dict[str, Any] = Field(default_factory=dict, description="engine settings (as policy.hf or "
                                           "policy.vllm)")
    protocol: Literal["tool_call", "bracket", "native_tools", "user_reply"] | None = Field(
        None, description="action protocol the model was trained with (default: userrl.json of the folder, else tool_call)")
    max_model_len: int = Field(2048, ge=16, description="prompt + completion tokens")
    default_max_tokens: int = Field(256, ge=1, description="completion tokens when a request gives no max_tokens")
    max_batch_size: int = Field(16, ge=1, description="requests decoded together by one replica")
    num_threads: int | None = Field(None, ge=1, description="torch threads per replica (default: all cores)")
    num_replicas: int = Field(1, ge=1, description="model replicas (ignored when autoscaling is set)")
    autoscaling: AutoscalingSettings | None = None
    num_cpus_per_replica: float = Field(1.0, ge=0)
    num_gpus_per_replica: float = Field(0.0, ge=0, description="GPUs per model replica (vllm on a GPU: 1)")
    max_ongoing_requests: int = Field(64, ge=1, description="requests one model replica accepts at once")
    max_request_bytes: int = Field(4 * 2**20, ge=1024, description="largest request body accepted; larger ones "
                                   "get a 413 before they are read whole")
    api_key_env: str | None = Field(None, description="name of the environment variable holding the API key; "
                                    "when set, requests need `Authorization: Bearer <key>`")
    host: str = "127.0.0.1"
    port: int = Field(8000, ge=0, le=65535)
    play: PlaySettings = PlaySettings()

    @model_validator(mode="after")
    def _check(self) -> ServeConfig:
        if self.default_max_tokens >= self.max_model_len:
            raise ValueError(f"default_max_tokens ({self.default_max_tokens}) must be below max_model_len "
                             f"({self.max_model_len})")
        if self.engine != "auto":  # auto: checked once resolved (build_app)
            check_engine_options(self.engine, self.engine_options)
        return self


#: The settings class of each engine's `engine_options`: the policy's (`policy.hf`, `policy.vllm`).
ENGINE_SETTINGS: dict[str, type[BaseModel]] = {"hf": HFSettings, "vllm": VLLMSettings}


def check_engine_options(engine: str, options: dict[str, Any]) -> None:
    """Check `engine_options` with the engine's settings class (hf's closed, vLLM's other keys pass through);
    ValueError naming the bad ones."""
    settings = ENGINE_SETTINGS[engine]
    try:
        settings.model_validate(options)
    except ValidationError as error:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in error.errors())
        raise ValueError(f"engine_options for the {engine} engine ({', '.join(settings.model_fields)}): "
                         f"{problems}") from None


def _explain(error: ValidationError) -> str:
    lines = []
    for item in error.errors():
        loc = ".".join(str(part) for part in item["loc"])
        if item["type"] == "extra_forbidden":
            fields = list(ServeConfig.model_fields) + [f"play.{k}" for k in PlaySettings.model_fields] + [
                f"autoscaling.{k}" for k in AutoscalingSettings.model_fields]
            close = difflib.get_close_matches(loc, fields, n=1, cutoff=0.5)
            lines.append(f"{loc}: unknown key" + (f"; did you mean '{close[0]}'?" if close else ""))
        else:
            lines.append(f"{loc or 'config'}: {item['msg']} (got {item.get('input')!r})")
    return "invalid serving config:\n  " + "\n  ".join(lines)


def load_serve_config(path: str | Path | None = None, overrides: list[str] | None = None,
                      **values: Any) -> ServeConfig:
    """Read a serving YAML (optional), apply dotted overrides and keyword values (None ones are skipped)."""
    data = read_yaml_mapping(path, "serving config", " (see serving/default.yaml)") if path is not None else {}
    data = apply_overrides(data, list(overrides or []))
    data.update({k: v for k, v in values.items() if v is not None})
    try:
        return ServeConfig.model_validate(data)
    except ValidationError as error:
        raise ConfigError(_explain(error)) from None
