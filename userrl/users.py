"""The `local` user backend: simulated users and judges served by PolicyReplica actors in the cluster, asked
with the gyms' own prompts (ReplicaRoleClient) or, for a user simulator, in HumanLM's format (HumanLMUserClient)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from userrl.actors.policy_replica import ReplicaHandle
from userrl.engines.base import GenerationRequest
from userrl.envs.json_extract import extract_json_object, strip_think
from userrl.envs.llm import RoleCall

T = TypeVar("T")


def resolve_user_model(name: str, user_format: str = "plain") -> str:
    """The folder of env.local_user_model: a model name or folder (userrl.models.resolve_model), or a
    `userrl train-user` checkpoint folder (its model/). A checkpoint trained on user replies asked with the
    gyms' plain prompts is refused (its meta.json, or an exported folder's userrl.json, says it was trained on
    user replies): it was taught HumanLM's format, which env.local_user_format names."""
    import contextlib
    import json
    from pathlib import Path

    from userrl.checkpoint import checkpoint_of_model, model_folder
    from userrl.models import resolve_model
    from userrl.protocols import get_protocol

    folder = Path(model_folder(name)).expanduser()
    if user_format != "humanlm":
        trained_as = None  # the protocol it was trained with; an unknown one is no user simulator's
        with contextlib.suppress(OSError, ValueError, KeyError, TypeError, AttributeError):
            if (folder / "userrl.json").is_file():  # a `userrl export` folder
                trained_as = get_protocol(json.loads((folder / "userrl.json").read_text())["protocol"])
            elif checkpoint := checkpoint_of_model(folder):  # a checkpoint's model/
                trained_as = get_protocol(checkpoint.protocol)
        if trained_as is not None and trained_as.user_replies:
            raise ValueError(f"env.local_user_model={name} is a user simulator trained with `userrl train-user` "
                             "(HumanLM's format); set env.local_user_format=humanlm")
    return resolve_model(str(folder) if folder.is_dir() else name)


class ReplicaRoleClient:
    """A RoleClient (envs/llm.py) whose completions come from a replica actor, rendered with its chat template."""

    def __init__(self, replicas: list[Any], tokenizer: Any, *, max_tokens: int = 512, temperature: float = 0.0,
                 attempts: int = 3, timeout_s: float = 120.0):
        self.replicas, self.tokenizer = [ReplicaHandle(r) for r in replicas], tokenizer
        self._next = 0
        self.max_tokens, self.temperature = max_tokens, temperature
        self.attempts, self.timeout_s = attempts, timeout_s

    async def _complete(self, system: str, user: str, max_tokens: int | None, temperature: float | None) -> str:
        ids = self.tokenizer.apply_chat_template(
            [{"role": "system", "content": system}, {"role": "user", "content": user}],
            tokenize=True, add_generation_prompt=True, return_dict=True)["input_ids"]
        request = GenerationRequest(list(ids), max_tokens or self.max_tokens,
                                    self.temperature if temperature is None else temperature,
                                    stop_token_ids=[self.tokenizer.eos_token_id])
        replica = self.replicas[self._next % len(self.replicas)]
        self._next += 1
        out = await asyncio.wait_for(replica.generate(request), self.timeout_s)
        return strip_think(self.tokenizer.decode(out.token_ids, skip_special_tokens=True)).strip()

    async def _retry(self, role: str, attempt_once: Callable[[], Any]) -> tuple[Any, RoleCall]:
        start = time.perf_counter()
        for attempt in range(1, self.attempts + 1):
            try:
                value = await attempt_once()
            except Exception:  # noqa: BLE001 - bad output, a timeout or a replica failure: a failed attempt
                continue
            return value, RoleCall(role, attempt, True, time.perf_counter() - start)
        return None, RoleCall(role, self.attempts, False, time.perf_counter() - start)

    async def complete_text(self, role: str, system: str, user: str, *, max_tokens: int | None = None,
                            temperature: float | None = None) -> tuple[str | None, RoleCall]:
        """Free text; an empty reply counts as a failed attempt."""
        async def once() -> str:
            text = await self._complete(system, user, max_tokens, temperature)
            if not text:
                raise ValueError("empty reply")
            return text

        return await self._retry(role, once)

    async def complete_json(self, role: str, system: str, user: str, validate: Callable[[dict[str, Any]], T], *,
                            max_tokens: int | None = None, temperature: float | None = None) -> tuple[T | None, RoleCall]:
        """A JSON object extracted per GYMS.md 0.6 and passed through `validate`."""
        async def once() -> T:
            return validate(extract_json_object(await self._complete(system, user, max_tokens, temperature)))

        return await self._retry(role, once)


class HumanLMUserClient(ReplicaRoleClient):
    """A local user simulator asked in HumanLM's format (env.local_user_format=humanlm), e.g. a
    `userrl train-user` checkpoint.

    `complete_user` renders, per field, the field's persona-bearing system prompt and the conversation
    exactly as the user_reply task renders a row (ChatFormat "user_reply"), decodes up to the field's
    token limit, cuts the text after the first closing tag (the task's stop strings) and reads the field
    with the flexible parse (its `<field>` block, else the text with tags removed). An empty field is a failed
    attempt; the attempts are retried as for the plain roles, and a call that still fails returns None (the
    gym's fallback, then env.role_failure). Roles a gym still asks with its own prompt (e.g. Intention's
    judge) go through the inherited plain `complete_json` / `complete_text`.
    """

    def __init__(self, replicas: list[Any], tokenizer: Any, **kwargs: Any):
        from userrl.chat import ChatFormat

        super().__init__(replicas, tokenizer, **kwargs)
        self.chat = ChatFormat(tokenizer, "user_reply")

    def prompt_ids(self, field_name: str, persona: str, context: Sequence[Mapping[str, str]]) -> list[int]:
        """The token ids the simulator sees for one field: the user_reply task's rendering of the same
        messages (userrl/humanlm/format.field_messages), generation header included."""
        from userrl.humanlm.format import field_system_prompt

        messages = [{"role": "system", "content": field_system_prompt(field_name, persona)}]
        messages += [{"role": m["role"], "content": m["content"]} for m in context]
        return [i for ids, _ in self.chat.encode_prompt(messages) for i in ids]

    async def reply_text(self, field_name: str, persona: str, context: Sequence[Mapping[str, str]],
                         seed: int | None = None) -> str:
        """The simulator's raw text for one field: up to the field's token limit (at most `max_tokens`), cut
        after the first closing tag as the user_reply rollout cuts it."""
        from userrl.humanlm.fields import get_field
        from userrl.humanlm.format import STOP_STRINGS
        from userrl.rollout import cut_at_stop_strings

        limit = min(get_field(field_name).max_tokens, self.max_tokens)
        request = GenerationRequest(self.prompt_ids(field_name, persona, context), limit, self.temperature,
                                    seed=seed, stop_token_ids=self.chat.stop_token_ids)
        replica = self.replicas[self._next % len(self.replicas)]
        self._next += 1
        out = await asyncio.wait_for(replica.generate(request), self.timeout_s)
        out = cut_at_stop_strings(out, self.tokenizer, STOP_STRINGS)
        return self.tokenizer.decode(out.token_ids, skip_special_tokens=True)

    async def _field(self, field_name: str, persona: str, context: Sequence[Mapping[str, str]]) -> str:
        from userrl.humanlm.format import parse_flexible

        text = await self.reply_text(field_name, persona, context)
        value = parse_flexible(text, field_name).values[field_name]
        if not value:
            raise ValueError(f"empty <{field_name}> reply")
        return value

    async def complete_user(self, role: str, persona: str, context: Sequence[Mapping[str, str]],
                            fields: Sequence[str]) -> tuple[dict[str, str] | None, RoleCall]:
        """Each field of the user's next message (asked together), e.g. ("stance", "response")."""
        async def once() -> dict[str, str]:
            values = await asyncio.gather(*(self._field(name, persona, context) for name in fields))
            return dict(zip(fields, values, strict=True))

        return await self._retry(role, once)
