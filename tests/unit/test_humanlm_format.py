"""HumanLM task format (docs/spec/ALGORITHMS.md §5.2).

The field table, the 7x expansion, prompts, budget, strict/flexible parsing.
"""

from __future__ import annotations

import pytest

from userrl.humanlm.fields import FIELD_NAMES, FIELDS, get_field
from userrl.humanlm.format import (
    STOP_STRINGS,
    THINKING_MAX_TOKENS,
    UserReplyTask,
    expand_index,
    expanded_size,
    field_messages,
    field_system_prompt,
    parse_flexible,
    parse_strict,
    truncate_at_stop,
    valid_rates,
)
from userrl.humanlm.row import Row


def make_row(
    i: int = 0, persona: str = "A retired teacher who loves gardening.", context_words: int = 5
) -> Row:
    return Row(
        prompt=(
            {"role": "system", "content": persona},
            {"role": "user", "content": "word " * context_words},
            {"role": "assistant", "content": f"question {i}?"},
        ),
        ground_truth=f"real reply {i}",
        persona=persona,
        target_id=f"t{i}",
        data_source="test",
        latent_states={"stance": "Agree toward the claim"},
    )


def test_field_table_matches_the_spec() -> None:
    assert FIELD_NAMES == ("stance", "emotion", "belief", "value", "goal", "communication", "response")
    for f in FIELDS[:-1]:
        assert (f.threshold, f.max_tokens) == (0.9, 48)
        assert "at most 15 words" in f.description
    assert (FIELDS[-1].threshold, FIELDS[-1].max_tokens) == (None, 512)
    assert tuple(f"</{n}>" for n in FIELD_NAMES) == STOP_STRINGS
    with pytest.raises(ValueError, match="unknown HumanLM field 'mood'"):
        get_field("mood")


def test_seven_fold_expansion_index_mapping() -> None:
    n = 5
    assert expanded_size(n, "separate_system_prompt") == 35
    assert expanded_size(n, "response_only") == 5
    # index i -> example i mod N, field floor(i / N)
    assert expand_index(0, n) == (0, "stance")
    assert expand_index(4, n) == (4, "stance")
    assert expand_index(5, n) == (0, "emotion")
    assert expand_index(17, n) == (2, "value")
    assert expand_index(34, n) == (4, "response")
    for i in range(35):
        assert expand_index(i, n) == (i % n, FIELD_NAMES[i // n])
    with pytest.raises(IndexError):
        expand_index(35, n)


def test_task_items_replace_the_system_prompt_per_field() -> None:
    rows = [make_row(i) for i in range(3)]
    task = UserReplyTask(rows)
    assert len(task) == 21
    item = task[4]  # example 4 mod 3 = 1, field floor(4 / 3) = 1: emotion
    assert (item.row_index, item.field, item.max_tokens) == (1, "emotion", 48)
    system = item.messages[0]["content"]
    assert "You are a real human named HUMAN" in system and "retired teacher" in system
    assert "<emotion>...</emotion>" in system and "nothing outside the tag" in system
    assert item.messages[1:] == [dict(m) for m in rows[1].context]
    assert task[20].field == "response" and task[20].max_tokens == 512
    only = UserReplyTask(rows, mode="response_only")
    assert len(only) == 3 and only[2].field == "response"
    with pytest.raises(ValueError, match="unknown HumanLM mode"):
        UserReplyTask(rows, mode="all_at_once")


def test_sequential_mode_appends_earlier_blocks() -> None:
    task = UserReplyTask([make_row()], mode="sequential")
    item = task.item(0, "emotion", prefix_blocks=[("stance", "Agree toward X")])
    assert item.messages[-1]["content"].endswith("<stance>Agree toward X</stance>")
    assert "<emotion>" in item.messages[0]["content"]


def test_thinking_gives_every_field_the_1024_token_limit() -> None:
    task = UserReplyTask([make_row()], thinking=True)
    # docs/spec/ALGORITHMS.md §5.2: "Response limit 512 tokens (1024 with thinking)"
    assert THINKING_MAX_TOKENS == 1024
    assert [task[i].max_tokens for i in range(7)] == [1024] * 7
    assert [UserReplyTask([make_row()])[i].max_tokens for i in range(7)] == [48] * 6 + [512]


def test_sequential_budget_counts_the_longest_prefix_the_curriculum_can_add() -> None:
    def row(i: int, words: int) -> Row:
        return Row(prompt=({"role": "system", "content": "p"}, {"role": "user", "content": "zqx " * words}),
                   ground_truth="r", persona="p", target_id=f"t{i}", data_source="test")

    def count(text: str) -> int:  # counts only the context's words: tags, personas and prompts cost 0
        return text.count("zqx")

    rows = [row(0, 10), row(1, 13)]
    # The response field's prompt can carry all six latent blocks, each value at its 48-token limit:
    # 10 + 6 * 48 = 298 fits a budget of 300, 13 + 288 = 301 does not.
    task = UserReplyTask(rows, mode="sequential", prompt_budget=300, count_tokens=count)
    assert task.kept == [0] and task.skipped == {"prompt_over_budget": 1}
    # Without prefixes (the main mode) both fit; with thinking each value may reach 1024 tokens.
    assert UserReplyTask(rows, prompt_budget=300, count_tokens=count).kept == [0, 1]
    thinking = UserReplyTask(rows, mode="sequential", prompt_budget=10 + 6 * 1024, count_tokens=count,
                             thinking=True)
    assert thinking.kept == [0]


def test_overlong_prompts_are_filtered_and_counted() -> None:
    rows = [make_row(0), make_row(1, context_words=2000), make_row(2, persona="p " * 5000)]
    task = UserReplyTask(rows, prompt_budget=1000)
    assert task.kept == [0]
    assert task.skipped == {"prompt_over_budget": 1, "persona_over_budget": 1}
    assert len(task) == 7
    with pytest.raises(ValueError, match="every one of the 2 rows exceeds prompt_budget=1000"):
        UserReplyTask(rows[1:], prompt_budget=1000)
    assert field_system_prompt("response", "").count("(no persona given)") == 1
    assert field_messages(rows[0], "goal")[0]["role"] == "system"


# ---------------------------------------------------------------- strict parsing


@pytest.mark.parametrize(
    "text, value",
    [
        ("<response>Hi there</response>", "Hi there"),
        ("  \n<response>Hi there</response>\n ", "Hi there"),
        ("<response>\nline one\nline two\n</response>", "line one\nline two"),
    ],
)
def test_strict_accepts_exact_blocks(text: str, value: str) -> None:
    parsed = parse_strict(text, "response")
    assert parsed.valid and parsed.values == {"response": value}
    assert parsed.valid_fields() == {"response": True}


@pytest.mark.parametrize(
    "text",
    [
        "Sure! <response>Hi</response>",  # text before
        "<response>Hi</response> thanks",  # text after
        "<response>Hi",  # never closed
        "<response>Hi</response><response>again</response>",  # twice
        "<stance>Agree</stance>",  # wrong field
        "<response>I <goal>x</goal> said</response>",  # nested field tag
        "",
        "<think>hmm</think><response>Hi</response>",  # think block outside thinking mode
    ],
)
def test_strict_rejects_every_violation(text: str) -> None:
    parsed = parse_strict(text, "response")
    assert not parsed.valid and parsed.values == {}
    assert parsed.valid_fields() == {"response": False}


def test_strict_multi_field_order_and_thinking() -> None:
    good = "<stance>Agree</stance>\n\n<response>Yes</response>"
    assert parse_strict(good, ["stance", "response"]).values == {"stance": "Agree", "response": "Yes"}
    assert not parse_strict("<response>Yes</response><stance>Agree</stance>", ["stance", "response"]).valid
    assert not parse_strict(
        "<stance>Agree</stance> and <response>Yes</response>", ["stance", "response"]
    ).valid
    thinking = "let me think...</think>\n<response>Yes</response>"
    assert parse_strict(thinking, "response", thinking=True).values == {"response": "Yes"}
    assert not parse_strict(thinking, "response").valid
    # An empty block parses (it then scores 0 as an empty generation).
    assert parse_strict("<response> </response>", "response").values == {"response": ""}


def test_flexible_accepts_any_pair_and_falls_back_after_think() -> None:
    assert parse_flexible("Sure! <response>Hi</response> bye", "response").values == {"response": "Hi"}
    assert parse_flexible("<think>plan</think>Just text", "response").values == {"response": "Just text"}
    assert parse_flexible("No tags at all", "response").values == {"response": "No tags at all"}
    # An unclosed tag is not a pair: the fallback keeps the text, field tags removed.
    assert parse_flexible("<response>cut off", "response").values == {"response": "cut off"}
    both = parse_flexible("<response>R</response><stance>S</stance>", ["stance", "response"])
    assert both.values == {"stance": "S", "response": "R"} and both.valid


def test_truncate_at_stop_keeps_the_closing_tag() -> None:
    assert truncate_at_stop("<goal>win</goal><response>x</response>") == ("<goal>win</goal>", True)
    assert truncate_at_stop("<goal>win") == ("<goal>win", False)


def test_valid_rates_per_field() -> None:
    parses = [
        parse_strict("<goal>a</goal>", "goal"),
        parse_strict("oops", "goal"),
        parse_strict("<goal>b</goal>", "goal"),
        parse_strict("<stance>c</stance>", "stance"),
    ]
    assert valid_rates(parses) == {"stance": 1.0, "goal": pytest.approx(2 / 3)}
