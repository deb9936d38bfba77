"""The user-reply task's prompts and parsing (docs/spec/ALGORITHMS.md §5.2 "Output format"): modes, the 7x expansion, the
per-field system prompts, stop strings, the prompt budget, strict parsing (training) and flexible parsing
(evaluation)."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from userrl.humanlm.fields import FIELD_NAMES, FIELDS, RESPONSE, get_field
from userrl.humanlm.row import HUMAN, Row

#: `separate_system_prompt` (the main mode): one field per rollout, dataset expanded 7x.
#: `response_only`: the response field only, no expansion (validation always uses it).
#: `sequential`: the curriculum's mode: one field per rollout at the level the hierarchy map chose, with
#: the earlier levels' generated blocks appended to the prompt (curriculum.py).
MODES: tuple[str, ...] = ("separate_system_prompt", "response_only", "sequential")
#: Stop at the closing tag of any field (docs/spec/ALGORITHMS.md §5.2); the closing tag must stay in the text the parser sees.
STOP_STRINGS: tuple[str, ...] = tuple(f.close_tag for f in FIELDS)
#: A thinking model's token limit for any field (docs/spec/ALGORITHMS.md §5.2: "512 tokens (1024 with thinking)"): its reasoning
#: comes first, so a latent field's own 48 would end every reply inside `<think>` and parse as nothing.
THINKING_MAX_TOKENS = 1024

PRINCIPLES = (
    "- Write as this person would: their knowledge, opinions, vocabulary and tone, not an assistant's.\n"
    "- Stay consistent with what this person has said and believes; do not become more agreeable than they are.\n"
    "- Never mention that you are an AI, a model or a simulation.\n"
    "- Be as brief or as long as this person would be."
)
FIELD_PROMPT = (
    "You are a real human named {human}.\n\n"
    "About you:\n{persona}\n\n"
    "How you behave:\n{principles}\n\n"
    "Task: given the conversation so far, state {what} of your next message.\n"
    "{field}: {description}.\n\n"
    "Output format: exactly one block, <{field}>...</{field}>, and nothing outside the tag."
)


def check_mode(mode: str) -> str:
    """mode itself; ValueError listing the modes unless it is one."""
    if mode not in MODES:
        raise ValueError(f"unknown HumanLM mode {mode!r}; use one of {list(MODES)}")
    return mode


def expanded_size(n_rows: int, mode: str) -> int:
    """How many items a mode makes of n rows: 7n for separate_system_prompt, else n."""
    return n_rows * len(FIELDS) if check_mode(mode) == "separate_system_prompt" else n_rows


def expand_index(index: int, n_rows: int) -> tuple[int, str]:
    """The 7x expansion: item i is example i mod N with field floor(i / N)."""
    if not 0 <= index < n_rows * len(FIELDS):
        raise IndexError(f"index {index} is outside the expanded dataset of {n_rows * len(FIELDS)} items")
    return index % n_rows, FIELD_NAMES[index // n_rows]


def field_system_prompt(field_name: str, persona: str) -> str:
    """The system prompt of one field: who you are, the persona, principles, a one-tag output spec."""
    f = get_field(field_name)
    what = "the exact text" if f.name == RESPONSE else f"the {f.name}"
    return FIELD_PROMPT.format(
        human=HUMAN,
        persona=persona.strip() or "(no persona given)",
        principles=PRINCIPLES,
        what=what,
        field=f.name,
        description=f.description,
    )


def tag_block(field_name: str, value: str) -> str:
    """`<field>value</field>`."""
    f = get_field(field_name)
    return f"{f.open_tag}{value}{f.close_tag}"


def demonstration_target(row: Row, field_name: str) -> str | None:
    """The supervised target of (row, field) in the strict format: the field's one tag block holding the
    row's real reply (response) or its ground-truth latent state; None when the row has no ground truth for
    that field (real data has no latent states; our gyms' rows have some, data.py lists which)."""
    name = get_field(field_name).name
    value = row.ground_truth if name == RESPONSE else row.latent_states.get(name)
    return tag_block(name, value.strip()) if value and value.strip() else None


def field_messages(
    row: Row, field_name: str, prefix_blocks: Sequence[tuple[str, str]] = ()
) -> list[dict[str, str]]:
    """The prompt of (row, field): the row's system prompt replaced by the field's, then its context.

    prefix_blocks (sequential mode) are (field, value) tag blocks appended to the last context message.
    """
    messages = [{"role": "system", "content": field_system_prompt(field_name, row.persona)}]
    messages += [dict(m) for m in row.context]
    if prefix_blocks:
        blocks = "\n".join(tag_block(name, value) for name, value in prefix_blocks)
        messages[-1]["content"] = f"{messages[-1]['content']}\n\n{blocks}"
    return messages


def approx_tokens(text: str) -> int:
    """A tokenizer-free token estimate: one per 4 characters, rounded up (pass a real counter when you have one)."""
    return -(-len(text) // 4)


@dataclass(frozen=True)
class TaskItem:
    """One rollout's input: which row and field, the messages to render, how to stop and how long."""

    row_index: int
    row: Row
    field: str
    messages: list[dict[str, str]]
    stop: tuple[str, ...] = STOP_STRINGS
    max_tokens: int = 512
    #: The sequential mode's (field, value) blocks of the earlier levels, appended to the prompt.
    prefix_blocks: tuple[tuple[str, str], ...] = ()

    @property
    def key(self) -> str:
        """A stable id of (row, field), e.g. for the hierarchy map."""
        return f"{self.row.target_id}:{self.field}"


@dataclass
class UserReplyTask:
    """The user-reply task over rows in one mode: indexable items (7x in the main mode), overlong rows dropped.

    A row whose longest field prompt exceeds prompt_budget tokens is filtered out, never truncated (verl's
    filter_overlong_prompts); `skipped` counts why ("persona_over_budget" when the persona alone, with no
    context, already exceeds it; "prompt_over_budget" otherwise). In sequential mode a field's prompt is
    counted with the longest prefix the curriculum can give it: every earlier field's block at its token limit.
    With `thinking`, every field's token limit is THINKING_MAX_TOKENS.
    """

    rows: Sequence[Row]
    mode: str = "separate_system_prompt"
    prompt_budget: int | None = None
    thinking: bool = False
    count_tokens: Callable[[str], int] = approx_tokens
    kept: list[int] = field(init=False)
    skipped: Counter[str] = field(init=False)

    def __post_init__(self) -> None:
        check_mode(self.mode)
        self.skipped = Counter()
        self.kept = []
        for i, row in enumerate(self.rows):
            reason = self._over_budget(row)
            if reason is None:
                self.kept.append(i)
            else:
                self.skipped[reason] += 1
        if self.rows and not self.kept:
            raise ValueError(
                f"every one of the {len(self.rows)} rows exceeds prompt_budget={self.prompt_budget} tokens "
                f"({dict(self.skipped)}); raise the budget or shorten the personas"
            )

    def _fields(self) -> tuple[str, ...]:
        return FIELD_NAMES if self.mode != "response_only" else (RESPONSE,)

    def _over_budget(self, row: Row) -> str | None:
        if self.prompt_budget is None:
            return None
        longest = max(self._longest_prompt(row, name) for name in self._fields())
        if longest <= self.prompt_budget:
            return None
        persona_only = max(
            self.count_tokens(field_system_prompt(name, row.persona)) for name in self._fields()
        )
        return "persona_over_budget" if persona_only > self.prompt_budget else "prompt_over_budget"

    def _tokens(self, messages: Iterable[Mapping[str, str]]) -> int:
        return sum(self.count_tokens(m["content"]) for m in messages)

    def _longest_prompt(self, row: Row, name: str) -> int:
        if self.mode != "sequential":
            return self._tokens(field_messages(row, name))
        # The tags as written plus each earlier field's value at its limit (a value never exceeds its cap).
        earlier = FIELD_NAMES[: FIELD_NAMES.index(name)]
        tags_only = field_messages(row, name, [(before, "") for before in earlier])
        return self._tokens(tags_only) + sum(self.max_tokens(before) for before in earlier)

    def max_tokens(self, name: str) -> int:
        """The token limit of a field's rollout: its own (48 or 512), or THINKING_MAX_TOKENS with thinking."""
        return THINKING_MAX_TOKENS if self.thinking else get_field(name).max_tokens

    def __len__(self) -> int:
        return expanded_size(len(self.kept), self.mode)

    def item(
        self, index: int, field_name: str | None = None, prefix_blocks: Sequence[tuple[str, str]] = ()
    ) -> TaskItem:
        """Item `index`: in separate_system_prompt mode the expansion picks the field; otherwise field_name
        (default response) does, with prefix_blocks for the sequential mode."""
        if self.mode == "separate_system_prompt":
            if field_name is not None:
                raise ValueError("separate_system_prompt mode picks the field from the index; pass none")
            example, name = expand_index(index, len(self.kept))
        else:
            if not 0 <= index < len(self.kept):
                raise IndexError(f"index {index} is outside the dataset of {len(self.kept)} rows")
            example, name = index, field_name or RESPONSE
            if self.mode == "response_only" and name != RESPONSE:
                raise ValueError(f"response_only mode has only the response field, not {name!r}")
        row_index = self.kept[example]
        row = self.rows[row_index]
        if prefix_blocks and self.mode != "sequential":
            raise ValueError(f"prefix blocks are the sequential mode's; {self.mode} mode has none")
        blocks = tuple((str(a), str(b)) for a, b in prefix_blocks)
        messages = field_messages(row, name, blocks)
        return TaskItem(row_index, row, name, messages, STOP_STRINGS, self.max_tokens(name), blocks)

    def __getitem__(self, index: int) -> TaskItem:
        return self.item(index)


# ---------------------------------------------------------------- parsing


@dataclass(frozen=True)
class Parsed:
    """A parse: the value per expected field ({} when strict parsing failed), and why it failed."""

    values: dict[str, str]
    expected: tuple[str, ...]
    error: str | None = None

    @property
    def valid(self) -> bool:
        """Whether every expected field was parsed."""
        return self.error is None

    def valid_fields(self) -> dict[str, bool]:
        """Per expected field, whether it was parsed (strict parsing is all or nothing)."""
        return {name: name in self.values for name in self.expected}


_ANY_TAG = re.compile(r"</?(?:" + "|".join(FIELD_NAMES) + r")>")
_THINK_END = "</think>"


def truncate_at_stop(text: str, stops: Sequence[str] = STOP_STRINGS) -> tuple[str, bool]:
    """The text cut just after the first stop string (kept), and whether one was found; for engines
    without stop-string support, and a reminder that the parser needs the closing tag."""
    ends = [(i + len(s)) for s in stops if (i := text.find(s)) >= 0]
    return (text[: min(ends)], True) if ends else (text, False)


def _expected(fields: str | Sequence[str]) -> tuple[str, ...]:
    names = (fields,) if isinstance(fields, str) else tuple(fields)
    for name in names:
        get_field(name)
    return names


def parse_strict(text: str, fields: str | Sequence[str], thinking: bool = False) -> Parsed:
    """Training parse: after trimming, exactly the expected tag blocks, in order, each once, only whitespace
    between; with thinking, a leading `...</think>` is allowed. Any violation: an empty parse."""
    expected = _expected(fields)
    rest = text.strip()
    if thinking and _THINK_END in rest:
        rest = rest.split(_THINK_END, 1)[1].lstrip()
    values: dict[str, str] = {}
    for name in expected:
        f = get_field(name)
        if not rest.startswith(f.open_tag):
            return Parsed({}, expected, f"expected {f.open_tag} at {rest[:30]!r}")
        end = rest.find(f.close_tag, len(f.open_tag))
        if end < 0:
            return Parsed({}, expected, f"{f.open_tag} is never closed")
        value = rest[len(f.open_tag) : end]
        if _ANY_TAG.search(value):
            # A nested or repeated field tag means the blocks are not "each once, in order".
            return Parsed({}, expected, f"{f.open_tag} holds another field tag")
        values[name] = value.strip()
        rest = rest[end + len(f.close_tag) :].lstrip()
    if rest:
        return Parsed({}, expected, f"text after the last block: {rest[:30]!r}")
    return Parsed(values, expected)


def parse_flexible(text: str, fields: str | Sequence[str]) -> Parsed:
    """Evaluation parse: any `<tag>...</tag>` pair is accepted (the first one); a missing field falls back to
    the text after the last `</think>` (the whole text without one), with field tags removed."""
    expected = _expected(fields)
    fallback = _ANY_TAG.sub("", text.rsplit(_THINK_END, 1)[-1]).strip()
    values: dict[str, str] = {}
    for name in expected:
        f = get_field(name)
        match = re.search(re.escape(f.open_tag) + r"(.*?)" + re.escape(f.close_tag), text, re.DOTALL)
        values[name] = match.group(1).strip() if match else fallback
    return Parsed(values, expected)


def valid_rates(parses: Iterable[Parsed]) -> dict[str, float]:
    """Per field, the share of parses that expected it and parsed it (docs/spec/ALGORITHMS.md §5.2: log the valid rate per field)."""
    seen: Counter[str] = Counter()
    ok: Counter[str] = Counter()
    for parsed in parses:
        for name, good in parsed.valid_fields().items():
            seen[name] += 1
            ok[name] += good
    return {name: ok[name] / seen[name] for name in FIELD_NAMES if seen[name]}
