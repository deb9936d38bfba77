"""HumanLM's user format, `env.local_user_format: humanlm` (registered by its plug-in): a local user simulator,
e.g. a `userrl train-user` checkpoint, asked in the format it was trained on."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from userrl.chat import ChatFormat
from userrl.engines.base import GenerationRequest
from userrl.envs.llm import RoleCall, attempt_seed
from userrl.humanlm.fields import get_field
from userrl.humanlm.format import STOP_STRINGS, field_system_prompt, parse_flexible
from userrl.users import ReplicaRoleClient


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

    asks_user_simulator: ClassVar[bool] = True

    def __init__(self, replicas: list[Any], tokenizer: Any, **kwargs: Any):
        super().__init__(replicas, tokenizer, **kwargs)
        self.chat = ChatFormat(tokenizer, "user_reply")

    def prompt_ids(self, field_name: str, persona: str, context: Sequence[Mapping[str, str]]) -> list[int]:
        """The token ids the simulator sees for one field: the user_reply task's rendering of the same
        messages (format.field_messages), generation header included."""
        messages = [{"role": "system", "content": field_system_prompt(field_name, persona)}]
        messages += [{"role": m["role"], "content": m["content"]} for m in context]
        return [i for ids, _ in self.chat.encode_prompt(messages) for i in ids]

    async def reply_text(self, field_name: str, persona: str, context: Sequence[Mapping[str, str]],
                         seed: int | None = None, call: RoleCall | None = None) -> str:
        """The simulator's raw text for one field: up to the field's token limit (at most `max_tokens`), cut
        after the first closing tag as the user_reply rollout cuts it (counted in `call` when given)."""
        # The episode loop's module, imported once a reply is asked (registering this format stays light).
        from userrl.rollout import cut_at_stop_strings

        limit = min(get_field(field_name).max_tokens, self.max_tokens)
        request = GenerationRequest(self.prompt_ids(field_name, persona, context), limit, self.temperature,
                                    seed=seed, stop_token_ids=self.chat.stop_token_ids)
        out = await self.generate(request, call if call is not None else RoleCall("user", 1, True, 0.0))
        out = cut_at_stop_strings(out, self.tokenizer, STOP_STRINGS)
        return self.tokenizer.decode(out.token_ids, skip_special_tokens=True)

    async def _field(self, field_name: str, persona: str, context: Sequence[Mapping[str, str]],
                     seed: int | None, call: RoleCall) -> str:
        text = await self.reply_text(field_name, persona, context, seed, call)
        value = parse_flexible(text, field_name).values[field_name]
        if not value:
            raise ValueError(f"empty <{field_name}> reply")
        return value

    async def complete_user(self, role: str, persona: str, context: Sequence[Mapping[str, str]],
                            fields: Sequence[str], seed: int | None = None) -> tuple[dict[str, str] | None, RoleCall]:
        """Each field of the user's next message (asked together, field k with the attempt's seed + k), e.g.
        ("stance", "response")."""
        async def once(seed: int | None, call: RoleCall) -> dict[str, str]:
            values = await asyncio.gather(*(self._field(name, persona, context, attempt_seed(seed, k + 1), call)
                                            for k, name in enumerate(fields)))
            return dict(zip(fields, values, strict=True))

        return await self._retry(role, seed, None, once)
