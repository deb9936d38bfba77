"""Persuade task data: the shipped builtin set, its generator, the solver, and the loaders (parquet rows only)."""

from __future__ import annotations

import json
import random
import re
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pytest
from gym_helpers import DATA_ROOT, global_rngs_untouched, needs_shared_file, original_row, write_parquet

from userrl.envs import Task, load_tasks, make_env, make_solver, solve_episode
from userrl.envs.persuade.generate import canonical_items, canonical_text, design_problems, item_id, main
from userrl.envs.persuade.scripted import FAIR_POINT, NOT_CONVINCED, score_argument
from userrl.envs.persuade.solver import (
    TEMPLATES,
    PersuadeSolver,
    _lower_first,
    quotes,
    template_arguments,
    unattributed,
    visible_text,
)
from userrl.envs.persuade.tasks import (
    BUILTIN_TASKS_PATH,
    PERSUADE_SYSTEM_PROMPT,
    PERSUADE_USER_TEMPLATE,
    builtin_prompt,
    load_persuade_tasks,
)
from userrl.envs.text import content_words

PERSUADE_PARQUET = DATA_ROOT / "data/persuasion_multiturn"
needs_shared_data = needs_shared_file(PERSUADE_PARQUET / "train.parquet")
WIN = 1.0 - 1e-5  # three 2-step moves pay 3 x 0.333333 (the spec rounds to 6 decimals)


def shipped() -> list[dict[str, Any]]:
    return json.loads(BUILTIN_TASKS_PATH.read_text(encoding="utf-8"))["tasks"]


# ---------------------------------------------------------------- the shipped builtin set


def test_shipped_file_is_small_and_canonical() -> None:
    assert BUILTIN_TASKS_PATH.stat().st_size < 1_000_000
    assert canonical_text() == BUILTIN_TASKS_PATH.read_text(encoding="utf-8")
    assert main(["--check"]) == 0


def test_shipped_counts_ids_and_split() -> None:
    items = shipped()
    assert len(items) >= 40
    assert len({i["id"] for i in items}) == len({i["claim"].lower() for i in items}) == len(items)
    assert all(re.fullmatch(r"[A-Z2-7]{12}", i["id"]) and i["id"] == item_id(i["claim"]) for i in items)
    n_test = sum(i["split"] == "test" for i in items)
    assert 0.15 * len(items) <= n_test <= 0.25 * len(items)
    assert all(len(i["argument"].split()) >= 60 and len(i["counterarguments"]) >= 3 for i in items)


def test_split_is_seeded_and_independent_of_file_order() -> None:
    items = shipped()
    raw = [{k: v for k, v in i.items() if k not in ("id", "split")} for i in items]
    shuffled = list(raw)
    random.Random(2).shuffle(shuffled)
    assert {i["id"]: i["split"] for i in canonical_items(shuffled)} == {i["id"]: i["split"] for i in items}


def test_every_counterargument_meets_the_whole_rubric() -> None:
    for item in shipped():
        assert design_problems(item) == []
        topic = content_words(item["claim"] + " " + item["argument"])
        assert score_argument(item["counterarguments"][0], topic, []).met == 5


def test_design_rules_catch_bad_items() -> None:
    item = dict(shipped()[0])
    repeated = dict(item, counterarguments=[item["counterarguments"][0]] * 3)
    assert any("misses ['novelty']" in p for p in design_problems(repeated))
    short = dict(item, argument="Too short.", counterarguments=item["counterarguments"][:2])
    problems = design_problems(short)
    assert any("shorter than 60 words" in p for p in problems) and any("at least 3" in p for p in problems)
    raw = [{k: v for k, v in i.items() if k not in ("id", "split")} for i in shipped()[:2]]
    with pytest.raises(ValueError, match="duplicate claim"):
        canonical_items(raw + raw[:1])


# ---------------------------------------------------------------- loaders (builtin)


def test_builtin_loader() -> None:
    train, test = load_persuade_tasks("train"), load_persuade_tasks("test")
    assert len(train) + len(test) == len(shipped()) and len(test) >= 8
    assert {t.split for t in train} == {"train"} and {t.split for t in test} == {"test"}
    assert not {t.item_key for t in train} & {t.item_key for t in test}
    task = test[0]
    assert task.gym == "persuade" and task.source == "builtin" and task.item_key == task.data["id"]
    assert task.prompt == [
        {"role": "system", "content": PERSUADE_SYSTEM_PROMPT},
        {"role": "user", "content": PERSUADE_USER_TEMPLATE.format(claim=task.data["claim"])},
    ]
    assert set(task.data) == {"id", "claim", "argument", "counterarguments"}


def test_builtin_loader_errors() -> None:
    with pytest.raises(ValueError, match="splits"):
        load_persuade_tasks("validation")
    with pytest.raises(ValueError, match="source"):
        load_persuade_tasks(source="hf")
    with pytest.raises(ValueError, match="data_root"):
        load_tasks("persuade", source="userrl")


def test_system_prompt_is_short_and_protocol_free() -> None:
    assert len(PERSUADE_SYSTEM_PROMPT.split()) < 150
    assert "answer" in PERSUADE_SYSTEM_PROMPT and "strongly disagree" in PERSUADE_SYSTEM_PROMPT
    for protocol_word in ("[answer]", "interact_with_env", "tool", "JSON", "search"):
        assert protocol_word not in PERSUADE_SYSTEM_PROMPT


# ---------------------------------------------------------------- solver


def test_solver_wins_every_builtin_task_in_three_steps() -> None:
    env = make_env("persuade")
    for task in load_persuade_tasks("test") + load_persuade_tasks("train"):
        steps = solve_episode(env, task, np.random.default_rng(0))
        # The hand-written rebuttals, with their attributions to the unseen essay given to its supporters.
        assert [s[1] for s in steps] == [unattributed(c) for c in task.data["counterarguments"][:3]], task.item_key
        assert not any(re.search(r"\byou (argue|claim|mention)\b", s[1], re.IGNORECASE) for s in steps)
        assert [s[3] for s in steps] == [0.333333] * 3 and sum(s[3] for s in steps) >= WIN


def test_template_arguments_meet_the_whole_rubric_in_any_order() -> None:
    for task in load_persuade_tasks("test"):
        claim, argument = task.data["claim"], task.data["argument"]
        topic = content_words(claim + " " + argument)
        # The scripted persuadee's replies hold nothing to quote: the templates quote the claim.
        filled = template_arguments(claim, visible_text([FAIR_POINT, NOT_CONVINCED + " I would need evidence."]))
        assert all(f'"{_lower_first(claim)}"' in text for text in filled)
        assert len(filled) == len(TEMPLATES)
        # Relevance (c1) counts words shared with the claim and the unseen essay: a claim with fewer than
        # 3 content words of its own cannot always supply them (the essay's words are not quotable).
        full = 5 if len(content_words(claim) & topic) >= 3 else 4
        for i, text in enumerate(filled):
            assert score_argument(text, topic, filled[:i] + filled[i + 1 :]).met >= full, text


def test_quotes() -> None:
    text = "Short one. " + " ".join(["Homework takes long evenings away from families"] * 5) + ". Ok!"
    (quote,) = quotes(text, "Claim")
    assert quote.endswith("...") and len(quote.split()) == 25
    assert quotes("Yes. No.", "Homework Should Go") == ["homework Should Go"]


def test_solver_without_counterarguments_uses_templates() -> None:
    data = {
        "id": "X",
        # Three content words: relevance (c1) may rest on the claim alone, the only text the agent sees.
        "claim": "Homework should be banned in primary schools",
        "argument": "Homework steals time from play. " * 3,
    }
    task = Task("persuade", "X", builtin_prompt(data["claim"]), data)
    steps = solve_episode(make_env("persuade"), task, np.random.default_rng(4))
    assert len(steps) == 3 and sum(s[3] for s in steps) >= WIN
    starts = {PersuadeSolver(task, np.random.default_rng(s)).plan[0] for s in range(20)}
    assert len(starts) > 1  # the template cycle starts at a random point
    solver = make_solver("persuade", task, np.random.default_rng(0))
    actions = [solver.next_action(None) for _ in range(len(TEMPLATES) + 1)]
    assert actions[-1] == ("finish", "") and len({c for _, c in actions[:-1]}) == len(TEMPLATES)


def test_solver_touches_no_global_rng() -> None:
    with global_rngs_untouched():
        solve_episode(make_env("persuade"), load_persuade_tasks("test")[0], np.random.default_rng(1))


# ---------------------------------------------------------------- loaders (userrl): fake parquet rows


def _row(
    i: int, item_id: str | None, claim: str | None, argument: str | None, in_kwargs: bool = True
) -> dict:
    kwargs = {"env_name": "PersuadeGym", "id": item_id, "claim": claim, "argument": argument}
    reward_model = {
        "style": "rule",
        "id": item_id,
        "claim": claim,
        "argument": argument,
        "ground_truth": claim,
    }
    return original_row(
        "interact_persuade", i, kwargs if in_kwargs else {"env_name": "P"}, reward_model=reward_model
    )


def _fake_root(tmp_path: Path, rows: list[dict]) -> Path:
    write_parquet(tmp_path / "data/persuasion_multiturn/train.parquet", rows)
    return tmp_path


def test_userrl_loader_builds_tasks_from_rows_alone(tmp_path: Path) -> None:
    root = _fake_root(
        tmp_path,
        [_row(0, "ABC", "Zoos are good", "Zoos help."), _row(1, "DEF", "Tax meat", "It works.", False)],
    )
    first, second = load_tasks("persuade", "train", source="userrl", data_root=root)
    assert first.data == {"id": "ABC", "claim": "Zoos are good", "argument": "Zoos help."}
    assert first.source == "userrl" and first.split == "train"
    assert first.prompt == [{"role": "system", "content": "sys"}, {"role": "user", "content": "go"}]
    assert second.data["argument"] == "It works."  # read from the reward_model copy
    assert not (root / "gyms").exists()  # no JSON needed


def test_userrl_loader_errors(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"train\.parquet not found.*JSON.*not used"):
        load_persuade_tasks("train", "userrl", tmp_path / "nowhere")
    root = _fake_root(tmp_path, [_row(0, "ABC", "Zoos are good", None)])
    with pytest.raises(ValueError, match=r"train\.parquet: row 0: item 'ABC': argument must be"):
        load_persuade_tasks("train", "userrl", root)
    with pytest.raises(ValueError, match="splits"):
        load_persuade_tasks("dev", "userrl", root)


# ---------------------------------------------------------------- the original data (skipped when absent)


@pytest.mark.shared_data
@needs_shared_data
@pytest.mark.parametrize(
    ("split", "rows"), [("train", 378), ("test", 42), ("alltrain", 378), ("alltest", 42)]
)
def test_every_original_parquet_row_loads_and_the_solver_wins(split: str, rows: int) -> None:
    tasks = load_tasks("persuade", split, source="userrl", data_root=DATA_ROOT)
    assert len(tasks) == rows
    if split in ("train", "test"):
        frame = pl.read_parquet(PERSUADE_PARQUET / f"{split}.parquet")
        for task, row in zip(tasks, frame.iter_rows(named=True), strict=True):
            assert task.prompt == [{"role": m["role"], "content": m["content"]} for m in row["prompt"]]
            assert task.item_key == row["reward_model"]["id"] and task.split == split
            assert row["reward_model"]["ground_truth"] == task.data["claim"]
    env = make_env("persuade")
    for task in tasks:
        steps = solve_episode(env, task, np.random.default_rng(0))
        assert len(steps) == 3 and sum(s[3] for s in steps) >= WIN, task.item_key


@pytest.mark.shared_data
@needs_shared_data
def test_original_items_are_distinct() -> None:
    tasks = [t for s in ("train", "test") for t in load_persuade_tasks(s, "userrl", DATA_ROOT)]
    assert len({t.item_key for t in tasks}) == 420 and len({t.data["claim"] for t in tasks}) == 61
