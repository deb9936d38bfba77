"""One HumanLM data row (docs/spec/ALGORITHMS.md §5.2 "Data row"): prompt, the real reply, and extra_info with the latent states."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from userrl.humanlm.fields import FIELD_NAMES, LATENT_FIELDS

#: The name the target user goes by in every prompt (docs/spec/ALGORITHMS.md §5.2: "the target user is renamed HUMAN").
HUMAN = "HUMAN"
CHAT_ROLES = ("system", "user", "assistant")


@dataclass(frozen=True)
class Row:
    """A row: the persona-bearing system prompt + context messages, the real reply, and what we know of it."""

    #: [system, *context]: the system message carries the persona; context roles are user/assistant.
    prompt: tuple[Mapping[str, str], ...]
    #: reward_model.ground_truth: the reply the target user really wrote next.
    ground_truth: str
    persona: str
    target_id: str
    data_source: str
    #: The top field of the hierarchy this row trains (extra_info.hierarchy_name).
    hierarchy_name: str = FIELD_NAMES[0]
    #: Ground-truth latent states for the fields that have one (our gyms know them; real data has none).
    latent_states: Mapping[str, str] = field(default_factory=dict)
    #: Everything else of extra_info (gym, task id, split, turn, raw_prompt, ...), kept as given.
    extra: Mapping[str, Any] = field(default_factory=dict)

    @property
    def context(self) -> tuple[Mapping[str, str], ...]:
        """The context messages (the prompt without its system message)."""
        return self.prompt[1:]

    def to_record(self) -> dict[str, Any]:
        """The row as a HumanLM (verl) record: data_source, prompt, reward_model, extra_info."""
        extra = {
            **self.extra,
            "persona": self.persona,
            "target_id": self.target_id,
            "data_source": self.data_source,
            "hierarchy_name": self.hierarchy_name,
        }
        if self.latent_states:
            extra["latent_states"] = dict(self.latent_states)
        return {
            "data_source": self.data_source,
            "prompt": [dict(m) for m in self.prompt],
            "reward_model": {"style": "model", "ground_truth": self.ground_truth},
            "extra_info": extra,
        }

    @classmethod
    def from_record(cls, record: Mapping[str, Any], where: str = "row") -> Row:
        """Read a HumanLM record; ValueError naming `where` and the missing or malformed key."""
        if not isinstance(record, Mapping):
            raise ValueError(f"{where}: expected a mapping, got {type(record).__name__}")
        prompt = _messages(record.get("prompt"), where)
        reward_model = record.get("reward_model")
        if not isinstance(reward_model, Mapping) or "ground_truth" not in reward_model:
            raise ValueError(f"{where}: missing reward_model.ground_truth (the real reply)")
        truth = reward_model["ground_truth"]
        if not isinstance(truth, str) or not truth.strip():
            # Without the real reply there is nothing to judge against: the row is unusable, not a 0.
            raise ValueError(
                f"{where}: reward_model.ground_truth must be a non-empty string, got {truth!r:.60}"
            )
        extra = record.get("extra_info")
        if extra is None:
            extra = {}
        if not isinstance(extra, Mapping):
            raise ValueError(f"{where}: extra_info must be a mapping, got {type(extra).__name__}")
        extra = dict(extra)
        persona = extra.pop("persona", None)
        if persona is None:
            persona = ""
        if not isinstance(persona, str):
            raise ValueError(f"{where}: extra_info.persona must be a string, got {type(persona).__name__}")
        source = extra.pop("data_source", None) or record.get("data_source") or "unknown"
        hierarchy = extra.pop("hierarchy_name", None) or FIELD_NAMES[0]
        if hierarchy not in FIELD_NAMES:
            raise ValueError(f"{where}: extra_info.hierarchy_name {hierarchy!r} is not one of {FIELD_NAMES}")
        states = extra.pop("latent_states", None) or {}
        if not isinstance(states, Mapping):
            raise ValueError(f"{where}: extra_info.latent_states must be a mapping of field to text")
        # Parquet structs hold every field of the union schema; a null there is "no ground truth".
        states = {k: v for k, v in states.items() if v is not None}
        bad = sorted(k for k, v in states.items() if k not in LATENT_FIELDS or not isinstance(v, str))
        if bad:
            raise ValueError(
                f"{where}: latent_states {bad} must be latent fields {LATENT_FIELDS} with text values"
            )
        target = extra.pop("target_id", None)
        return cls(
            prompt=prompt,
            ground_truth=truth.strip(),
            persona=persona,
            target_id=str(target) if target is not None else where,
            data_source=str(source),
            hierarchy_name=str(hierarchy),
            latent_states={k: v for k, v in states.items() if v.strip()},
            extra=extra,
        )


def _messages(raw: Any, where: str) -> tuple[dict[str, str], ...]:
    """The prompt messages: a non-empty list of {role, content}, the first one the system message."""
    if isinstance(raw, str | bytes) or not isinstance(raw, Sequence) or not raw:
        raise ValueError(f"{where}: prompt must be a non-empty list of {{role, content}} messages")
    out = []
    for i, message in enumerate(raw):
        role = message.get("role") if isinstance(message, Mapping) else None
        content = message.get("content") if isinstance(message, Mapping) else None
        if role not in CHAT_ROLES or not isinstance(content, str):
            raise ValueError(f"{where}: prompt message {i} needs a role in {CHAT_ROLES} and string content")
        out.append({"role": role, "content": content})
    if out[0]["role"] != "system":
        # HumanLM's prompts always open with the persona-bearing system message; an empty one stands in.
        out.insert(0, {"role": "system", "content": ""})
    if len(out) < 2:
        raise ValueError(f"{where}: prompt has no context message after the system message")
    return tuple(out)


def render_context(messages: Sequence[Mapping[str, str]]) -> str:
    """The context as plain text for the judge: one `role: text` block per message."""
    # Roles, not speaker names: thread data already names each speaker inside its user messages.
    return "\n\n".join(f"{m['role']}: {m['content']}" for m in messages)
