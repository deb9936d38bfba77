"""HumanLM's config section, `humanlm:` (registered by its plug-in): the settings of training a user simulator,
and the checks it makes across sections."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from userrl.config import ConfigSection, UserRLConfig
from userrl.protocols import get_protocol


class HumanLMConfig(ConfigSection):
    """Training a user simulator (docs/spec/ALGORITHMS.md §5.2, `userrl train-user`); read only with the humanlm gym."""

    mode: Literal["separate_system_prompt", "response_only", "sequential"] = Field(
        "separate_system_prompt", description="separate_system_prompt: one field per rollout, the rows expanded "
        "7x (item i = row i mod N, field i // N, each field with its own system prompt); response_only: the "
        "response field alone; sequential: each step trains one level of the hierarchy, its field's prompt "
        "carrying the earlier levels' generated blocks, as the hierarchy map draws them (needs "
        "humanlm.curriculum=true). Evaluation uses the response field with no prefix (the spec's validation): "
        "during training always, in `evaluate-user` in response_only and sequential mode.")
    curriculum: bool = Field(
        False, description="The hierarchy-map curriculum of docs/spec/ALGORITHMS.md §5.2 (sequential mode only): a sample at level h "
        "whose field scores >= 0.9 proposes a level h+1 prompt (its prefix plus that block); pools refresh every "
        "3 steps; each step draws a level uniformly among those holding training.batch_size prompts. The map is "
        "saved in every model checkpoint (task_source.json) and restored on resume.")
    data_files: dict[str, str] = Field(
        default_factory=dict, description="HumanLM-format parquet (or JSONL) per split, e.g. {train: a.parquet, "
        "test: b.parquet}; empty = the rows recorded from our gyms' scripted users (humanlm.gyms).")
    gyms: list[Literal["persuade", "intention"]] = Field(
        default_factory=lambda: ["persuade", "intention"], description="Gyms whose recorded rows to use "
        "(data_files empty).")
    prompt_budget: int | None = Field(
        None, ge=1, description="Rows whose longest field prompt exceeds this many tokens (estimated, 4 chars "
        "each) are dropped and counted (persona_over_budget / prompt_over_budget); null = no limit.")
    judge: Literal["scripted", "openai"] = Field(
        "scripted", description="Training judge: scripted (deterministic key-point coverage minus penalty, "
        "offline) or openai (any OpenAI-compatible model at judge_llm, temperature 1.0 unless set).")
    judge_llm: dict[str, Any] = Field(default_factory=dict, description="OpenAI-compatible client settings of the "
                                      "training judge (base_url, model, temperature, max_tokens, attempts, ...).")
    validation_judge: Literal["scripted", "openai"] | None = Field(
        None, description="Judge of evaluation (during training and `userrl evaluate-user`); null = the "
        "training judge's backend, at temperature 0.")
    validation_judge_llm: dict[str, Any] = Field(
        default_factory=dict, description="Client settings of an openai validation judge; empty = judge_llm.")
    num_repeats: int = Field(1, ge=1, description="Judge calls averaged per (group, field) (spec num_repeats).")
    field_weights: dict[str, float] = Field(
        default_factory=dict, description="Weight per field in a sample's score (default 1.0 each).")
    thinking: bool = Field(False, description="A thinking model: strict parsing allows a leading `...</think>`, "
                           "and every field's token limit is 1024 (spec: 512, 1024 with thinking); policy."
                           "max_new_tokens defaults to 1024 in train-user.")

    @field_validator("judge_llm", "validation_judge_llm")
    @classmethod
    def _llm(cls, value: dict[str, Any]) -> dict[str, Any]:
        if value:  # checked now by the client's own typed settings, not at the first judge call
            from userrl.envs.openai_client import LLMConfig

            LLMConfig.from_spec(value)
        return value

    @field_validator("field_weights")
    @classmethod
    def _fields(cls, value: dict[str, float]) -> dict[str, float]:
        from userrl.humanlm.fields import FIELD_NAMES

        unknown = sorted(set(value) - set(FIELD_NAMES))
        if unknown:
            raise ValueError(f"unknown field(s) {unknown}; fields: {', '.join(FIELD_NAMES)}")
        return value

    @model_validator(mode="after")
    def _curriculum_is_sequential(self) -> HumanLMConfig:
        if self.curriculum and self.mode != "sequential":
            raise ValueError(f"humanlm.curriculum=true needs humanlm.mode=sequential (the hierarchy map draws each "
                             f"step's level and prefix only in that mode), not humanlm.mode={self.mode}")
        if self.mode == "sequential" and not self.curriculum:
            raise ValueError("humanlm.mode=sequential trains the level the hierarchy map draws each step: set "
                             "humanlm.curriculum=true (or use humanlm.mode=separate_system_prompt / response_only)")
        return self

    @model_validator(mode="after")
    def _openai_needs_llm(self) -> HumanLMConfig:
        if self.judge == "openai" and not self.judge_llm.get("model"):
            raise ValueError("humanlm.judge=openai needs humanlm.judge_llm with at least model and base_url "
                             "(e.g. humanlm.judge_llm.model=gpt-5-mini humanlm.judge_llm.base_url=http://...)")
        if (self.validation_judge == "openai" and not (self.validation_judge_llm or self.judge_llm).get("model")):
            raise ValueError("humanlm.validation_judge=openai needs humanlm.validation_judge_llm (or judge_llm) "
                             "with at least model and base_url")
        return self

    def check(self, config: UserRLConfig) -> None:
        """The curriculum draws every task itself; a user-reply task is warm started from its rows, only it."""
        if self.curriculum and [g.name for g in config.env.gyms] != ["humanlm"]:
            raise ValueError(
                f"humanlm.curriculum=true draws every training task from the hierarchy map: env.gyms must be the "
                f"humanlm gym alone, not {[g.name for g in config.env.gyms]}")
        sft = config.sft
        if sft.enabled and get_protocol(config.env.protocol).user_replies != (sft.source == "rows"):
            raise ValueError(
                f"sft.source={sft.source} with env.protocol={config.env.protocol}: a user-reply task is warm "
                "started from its rows (sft.source=rows, what `userrl train-user` sets) and only it is; set "
                "sft.source=rows with env.protocol=user_reply, else solver or file")

    def absolute_paths(self, absolute: Callable[[str | None], str | None]) -> None:
        """The data files, resolved against this process's folder."""
        self.data_files = {split: absolute(path) for split, path in self.data_files.items()}

    def task_options(self, evaluation: bool) -> dict[str, Any]:
        """The humanlm gym's task-loader arguments: this mode in training, the response field in evaluation."""
        return {"mode": "response_only" if evaluation else self.mode, "data_files": self.data_files or None,
                "gyms": tuple(self.gyms), "prompt_budget": self.prompt_budget, "thinking": self.thinking}
