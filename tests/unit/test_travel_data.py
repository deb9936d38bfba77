"""Travel task data: the shipped generated scenarios, the generator, the loaders, the solver, and the
original parquet rows (whose scenario JSON files are absent from the shared data)."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from gym_helpers import DATA_ROOT, global_rngs_untouched, needs_shared_file, write_json, write_parquet

import userrl.envs.travel  # noqa: F401  (registers "travel")
from userrl.envs import load_tasks, make_env, solve_episode
from userrl.envs.travel import env as tenv
from userrl.envs.travel.generate import (
    CORRECT_RANGE,
    COUNTS,
    GENERATOR_SEED,
    MIN_CHEAPER_WRONG,
    NOISE_RANGE,
    WRONG_RANGE,
    generate_scenario,
    make_splits,
    render_scenarios,
)
from userrl.envs.travel.reading import cheapest, read_options, read_reply
from userrl.envs.travel.roles import argument_texts, scripted_search_judge
from userrl.envs.travel.schema import ASPECT_LETTERS, parse_scenario, parse_scenario_id, subset_of_id
from userrl.envs.travel.solver import QUESTION_TEMPLATES, search_request
from userrl.envs.travel.tasks import (
    BUDGET_SENTENCE,
    BUILTIN_SPLITS_PATH,
    DATA_DIR,
    SUBSETS,
    TRAVEL_SYSTEM_PROMPT,
    TravelDataUnavailable,
    load_travel_tasks,
    read_scenario_file,
    read_travel_rows,
)

TRAVEL22 = DATA_ROOT / "data/travel22_multiturn_onechoice/train.parquet"
needs_shared_data = needs_shared_file(TRAVEL22)


def shipped(subset: str) -> dict[str, dict[str, Any]]:
    return json.loads((DATA_DIR / f"travel_{subset}.json").read_text(encoding="utf-8"))


def all_shipped() -> dict[str, dict[str, Any]]:
    return {sid: sc for s in SUBSETS for sid, sc in shipped(s).items()}


def splits() -> dict[str, Any]:
    return json.loads(BUILTIN_SPLITS_PATH.read_text(encoding="utf-8"))


# ---------------------------------------------------------------- the shipped builtin set


def test_shipped_files_counts_and_ids() -> None:
    total = 0
    for subset in SUBSETS:
        path = DATA_DIR / f"travel_{subset}.json"
        assert path.stat().st_size < 1_000_000, path
        scenarios = shipped(subset)
        assert len(scenarios) == COUNTS[subset]
        assert all(subset_of_id(sid) == subset and "-b" in sid for sid in scenarios)
        total += len(scenarios)
    assert total >= 200 and len(all_shipped()) == total


def test_shipped_split_is_a_deterministic_partition() -> None:
    doc, every = splits(), all_shipped()
    train, test = set(doc["train"]), set(doc["test"])
    assert not train & test and train | test == set(every)
    assert len(doc["train"]) + len(doc["test"]) == len(every)
    for subset in SUBSETS:
        n_test = sum(subset_of_id(i) == subset for i in test)
        assert n_test == round(COUNTS[subset] * 0.2)
    assert make_splits(GENERATOR_SEED, {s: shipped(s) for s in SUBSETS}) == doc


def test_shipped_scenarios_regenerate_identically() -> None:
    # Every scenario has its own seed (seed, sub-set, index), so a sample proves the whole file.
    for subset in SUBSETS:
        scenarios = shipped(subset)
        ids = list(scenarios)
        for index in (0, len(ids) - 1):
            assert generate_scenario(GENERATOR_SEED, subset, index) == (ids[index], scenarios[ids[index]])
        text = (DATA_DIR / f"travel_{subset}.json").read_text(encoding="utf-8")
        assert render_scenarios(scenarios) == text


def _effective_cost(aspect: str, option: dict[str, Any], prefs: list[list[str]]) -> float:
    """The price the cheapest rule compares; a hotel's capacity preference restricts its rooms."""
    if aspect == "hotel":
        need = 0
        for pref in prefs:
            match = re.fullmatch(r"One room must sleep at least (\d+) people\.", pref[2])
            need = int(match.group(1)) if match else need
        return min((c for r, c in option["cost"].items() if option["room"][r] >= need), default=float("inf"))
    return float(option["expectation"] if aspect == "restaurant" else option["cost"])


def test_shipped_scenarios_follow_the_schema() -> None:
    for sid, raw in all_shipped().items():
        sc = parse_scenario(sid, raw)
        parts = dict(parse_scenario_id(sid))
        assert set(parts) == set(sc.dimensions) and not {"hotel", "apartment"} <= set(parts)
        if len(parts) == 4:
            assert {"flight", "rental_car", "restaurant"} < set(parts)
        assert raw["wanted_num"] == len(sc.dimensions) and raw["scenario"]
        for aspect in sc.dimensions:
            block, data = raw[aspect], sc.aspects[aspect]
            assert len(block["preferences"]) == parts[aspect]
            assert all(len(p) == 4 and all(isinstance(x, str) and x for x in p) for p in block["preferences"])
            assert all(p[0] == aspect for p in block["preferences"])
            counts = {cls: len(items) for cls, items in block["options"].items()}
            assert CORRECT_RANGE[0] <= counts["correct"] <= CORRECT_RANGE[1]
            assert WRONG_RANGE[0] <= counts["wrong"] <= WRONG_RANGE[1]
            assert NOISE_RANGE[0] <= counts["noise"] <= NOISE_RANGE[1]
            for cls, items in block["options"].items():
                assert all(
                    o["type"] == cls and o["reason"] and o["id"][0] == ASPECT_LETTERS[aspect] for o in items
                )
            assert sorted(data.correct_ids) == sorted(o["id"] for o in block["options"]["correct"])
            cost = {
                o["id"]: _effective_cost(aspect, o, block["preferences"])
                for items in block["options"].values()
                for o in items
            }
            best = cost[data.best_id]
            assert all(cost[i] > best for i in data.correct_ids if i != data.best_id), (sid, aspect)
            assert sum(cost[o["id"]] < best for o in block["options"]["wrong"]) >= MIN_CHEAPER_WRONG
            # Every argument value is in the traveller's message, and the solver's search is accepted.
            for text in argument_texts(data.arguments):
                assert text in sc.initial_description, (sid, text)
            judgement = scripted_search_judge(search_request(aspect, data.arguments), sc)
            assert (judgement.label, judgement.aspect) == ("True", aspect)


# ---------------------------------------------------------------- loaders (builtin)


def test_builtin_loader() -> None:
    train, test = load_travel_tasks("train"), load_travel_tasks("test")
    assert len(train) + len(test) == len(all_shipped()) and len(test) >= 40
    assert {t.split for t in train} == {"train"} and {t.split for t in test} == {"test"}
    task = test[0]
    assert task.gym == "travel" and task.source == "builtin"
    raw = task.data["scenario"]
    assert task.prompt == [
        {"role": "system", "content": TRAVEL_SYSTEM_PROMPT},
        {"role": "user", "content": raw["initial_description"] + "\n" + BUDGET_SENTENCE},
    ]
    assert task.data["id"] == task.item_key and task.data["subset"] == subset_of_id(task.item_key)
    assert task.data["best_ids"] == [raw[d]["best_id"] for d in raw["dimensions"]]


def test_builtin_loader_filters_errors_and_cache() -> None:
    assert {t.data["subset"] for t in load_tasks("travel", "test", subset=["22", "2222"])} == {"22", "2222"}
    assert len(load_travel_tasks("train", subset="444")) == COUNTS["444"] - 5
    with pytest.raises(ValueError, match="sub-sets"):
        load_travel_tasks(subset="55")
    with pytest.raises(ValueError, match="splits"):
        load_travel_tasks("validation")
    with pytest.raises(ValueError, match="source"):
        load_travel_tasks(source="hf")
    with pytest.raises(ValueError, match="data_root"):
        load_travel_tasks(source="userrl")
    path = DATA_DIR / "travel_22.json"
    assert read_scenario_file(path) is read_scenario_file(str(path))  # read once per process


def test_system_prompt_is_short_and_protocol_free() -> None:
    assert len(TRAVEL_SYSTEM_PROMPT.split()) < 150
    for word in ("search", "action", "answer", "cheapest", "H11"):
        assert word in TRAVEL_SYSTEM_PROMPT
    for protocol_word in ("[action]", "[answer]", "interact_with_env", "tool", "JSON"):
        assert protocol_word not in TRAVEL_SYSTEM_PROMPT


# ---------------------------------------------------------------- solver


@pytest.mark.parametrize(("preset", "search", "ask"), [("train", 0.0, 0.8), ("eval", 0.2, 0.6)])
def test_solver_picks_every_best_option_on_every_builtin_test_task(
    preset: str, search: float, ask: float
) -> None:
    env = make_env("travel", reward_preset=preset)
    for task in load_travel_tasks("test"):
        steps = solve_episode(env, task, np.random.default_rng(0))
        n_aspects = len(task.data["scenario"]["dimensions"])
        kinds = Counter(s[0] for s in steps)
        assert kinds["search"] == kinds["answer"] == n_aspects and len(steps) <= 16, task.item_key
        assert all(s[3] == 1.0 and "is the best option" in s[2] for s in steps if s[0] == "answer")
        assert all(s[3] == ask for s in steps if s[0] == "action"), task.item_key
        expected = n_aspects * (1.0 + search) + ask * kinds["action"]
        assert sum(s[3] for s in steps) == pytest.approx(expected) and expected > 0
        assert env.done and env._last_obs["episode_complete"]


def test_solver_asks_as_many_questions_as_the_steps_allow() -> None:
    env = make_env("travel")
    for subset, questions in (("22", 4), ("444", 10), ("2222", 8)):
        task = load_travel_tasks("test", subset=subset)[0]
        steps = solve_episode(env, task, np.random.default_rng(1))
        assert sum(s[0] == "action" for s in steps) == questions
    # With too few steps for every deciding question, fewer replies decide: still grounded, maybe not best.
    task = load_travel_tasks("test", subset="22")[0]
    steps = solve_episode(make_env("travel", max_steps=5), task, np.random.default_rng(0))
    assert [s[0] for s in steps] == ["search", "action", "answer", "search", "answer"]
    aspect, shown = read_options(steps[0][2])  # type: ignore[misc]
    said = read_reply(aspect, steps[1][2])
    assert said is not None and steps[2][1] == cheapest(aspect, shown, [said])


def test_solver_recommends_what_the_replies_imply() -> None:
    # Every builtin test task: the recommendation is the cheapest shown option meeting the replies.
    env = make_env("travel")
    for task in load_travel_tasks("test"):
        steps = solve_episode(env, task, np.random.default_rng(2))
        shown: dict[str, Any] = {}
        said: dict[str, list[Any]] = {}
        for choice, content, feedback, _ in steps:
            if choice == "search" and (options := read_options(feedback)) is not None:
                shown[options[0]] = options[1]
                current = options[0]
            elif choice == "action":
                said.setdefault(current, []).append(read_reply(current, feedback))
            elif choice == "answer":
                assert content == cheapest(current, shown[current], said.get(current, [])), task.item_key


def test_solver_is_deterministic_and_repeats_failed_searches() -> None:
    task = load_travel_tasks("test", subset="333")[0]
    plans = [solve_episode(make_env("travel"), task, np.random.default_rng(5)) for _ in range(2)]
    assert plans[0] == plans[1]
    questions = [content for choice, content, _, _ in plans[0] if choice == "action"]
    templates = [
        re.escape(t).replace(r"\{aspect\}", ".+").replace(r"\{subcategory\}", ".+")
        for t in QUESTION_TEMPLATES
    ]
    assert all(any(re.fullmatch(t, q) for t in templates) for q in questions)
    env = make_env("travel", search_failure_interval=2)
    steps = solve_episode(env, task, np.random.default_rng(5))
    failed = [i for i, s in enumerate(steps) if s[2] == tenv.SEARCH_BACKEND_ISSUE]
    assert failed and all(steps[i + 1][:2] == steps[i][:2] for i in failed)
    assert sum(s[3] for s in steps) > 0


def test_solver_touches_no_global_rng() -> None:
    with global_rngs_untouched():
        solve_episode(make_env("travel"), load_travel_tasks("test")[3], np.random.default_rng(1))


# ---------------------------------------------------------------- loaders (userrl): fake folders


def _row(scenario_id: str, best: list[str], index: int, user: str = "plan my trip") -> dict[str, Any]:
    return {
        "data_source": "interact_travelgym",
        "prompt": [{"content": "sys", "role": "system"}, {"content": user, "role": "user"}],
        "ability": "interaction",
        "reward_model": {
            "env_name": "TravelGym",
            "ground_truth": str(best),
            "id": scenario_id,
            "style": "rule",
        },
        "extra_info": {
            "split": "train",
            "index": index,
            "need_tools_kwargs": True,
            "tools_kwargs": {
                "interact_with_env": {"create_kwargs": {"env_name": "TravelGym", "id": scenario_id}}
            },
        },
    }


def _fake_root(tmp_path: Path, rows: list[dict[str, Any]], scenarios: dict[str, Any] | None) -> Path:
    write_parquet(tmp_path / "data/travel22_multiturn_onechoice/train.parquet", rows)
    if scenarios is not None:
        write_json(tmp_path / "gyms/TravelGym/travelgym/data/travelgym_data_22.json", scenarios)
    return tmp_path


def _sample22(n: int = 2) -> dict[str, dict[str, Any]]:
    return dict(list(shipped("22").items())[:n])


def _best(raw: dict[str, Any]) -> list[str]:
    return [raw[d]["best_id"] for d in raw["dimensions"]]


def test_userrl_loader_without_scenario_files(tmp_path: Path) -> None:
    sample = _sample22()
    root = _fake_root(tmp_path, [_row(i, _best(r), k) for k, (i, r) in enumerate(sample.items())], None)
    with pytest.raises(TravelDataUnavailable, match=r"travelgym_data_\*\.json\) are not available") as info:
        load_tasks("travel", "train", source="userrl", data_root=root, subset="22")
    assert "travelgym_data_22.json not found" in str(info.value) and "source='builtin'" in str(info.value)
    assert isinstance(info.value, FileNotFoundError)
    rows = read_travel_rows("train", root, subset="22")
    assert [(r.scenario_id, list(r.best_ids), r.subset) for r in rows] == [
        (i, _best(r), "22") for i, r in sample.items()
    ]


def test_userrl_loader_with_scenario_files(tmp_path: Path) -> None:
    sample = _sample22()
    # The traveller's message holds the search arguments, as in the original rows.
    rows = [_row(i, _best(r), k, user=f"trip {k}: {r['initial_description']}") for k, (i, r) in enumerate(sample.items())]
    root = _fake_root(tmp_path, rows, sample)
    tasks = load_travel_tasks("train", "userrl", root, subset="22")
    assert [t.item_key for t in tasks] == list(sample) and {t.source for t in tasks} == {"userrl"}
    user = f"trip 1: {sample[tasks[1].item_key]['initial_description']}"
    assert tasks[1].prompt == [{"role": "system", "content": "sys"}, {"role": "user", "content": user}]
    env = make_env("travel")
    for task in tasks:  # the same env code runs the original schema
        assert task.data["scenario"] == sample[task.item_key]
        assert sum(s[3] for s in solve_episode(env, task, np.random.default_rng(0))) > 0


@pytest.mark.parametrize(
    ("broken", "error", "message"),
    [
        ("ground_truth", ValueError, r"row 0 .*differs from the best ids"),
        ("missing_id", ValueError, r"row 1 .*not in .*travelgym_data_22\.json"),
        ("bad_id", ValueError, r"train\.parquet: row 0: .*is not 'aspect:count-index'"),
        ("other_subset", ValueError, r"train\.parquet: row 0: .*not of sub-set 22"),
        ("letters", ValueError, r"row 0: ground-truth ids .* one option per aspect"),
    ],
)
def test_userrl_loader_errors(tmp_path: Path, broken: str, error: type, message: str) -> None:
    sample = _sample22()
    (id0, raw0), (id1, raw1) = sample.items()
    rows = [_row(id0, _best(raw0), 0), _row(id1, _best(raw1), 1)]
    if broken == "ground_truth":
        rows[0] = _row(id0, _best(raw0)[::-1], 0)
    elif broken == "missing_id":
        sample.pop(id1)
    elif broken == "bad_id":
        rows[0] = _row("hotel-2-1", ["H1"], 0)
    elif broken == "other_subset":
        rows[0] = _row("flight:3-1|hotel:3-1", ["F1", "H1"], 0)
    else:
        rows[0] = _row(id0, ["X1", "H2"], 0)
    root = _fake_root(tmp_path, rows, sample)
    with pytest.raises(error, match=message):
        load_travel_tasks("train", "userrl", root, subset="22")


def test_userrl_loader_missing_parquet_and_bad_split(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"travel22_multiturn_onechoice/test\.parquet not found"):
        read_travel_rows("test", tmp_path, subset="22")
    with pytest.raises(ValueError, match="splits"):
        read_travel_rows("legacy", tmp_path)


# ---------------------------------------------------------------- the original data (skipped when absent)

#: docs/spec/GYMS.md §7: rows per sub-set in train, test, alltrain and alltest.
ORIGINAL_ROWS = {
    "22": (570, 101, 199, 50),
    "33": (489, 87, 171, 43),
    "44": (379, 67, 132, 33),
    "233": (341, 61, 119, 30),
    "333": (300, 53, 105, 26),
    "334": (266, 47, 93, 23),
    "444": (210, 38, 73, 19),
    "2222": (96, 17, 33, 8),
}


@pytest.mark.shared_data
@needs_shared_data
@pytest.mark.parametrize(("split", "column"), [("train", 0), ("test", 1), ("alltrain", 2), ("alltest", 3)])
def test_every_original_row_loads_and_userrl_tasks_fail_clearly(split: str, column: int) -> None:
    rows = read_travel_rows(split, DATA_ROOT)
    assert Counter(r.subset for r in rows) == {s: counts[column] for s, counts in ORIGINAL_ROWS.items()}
    for row in rows:
        assert len(row.best_ids) == len(row.subset) and row.split in ("train", "test")
        assert row.prompt[1]["content"].strip().endswith(BUDGET_SENTENCE)
        assert "TravelGym" in row.prompt[0]["content"]
    if split in ("train", "test"):
        assert len({r.scenario_id for r in rows}) == len(rows)
    with pytest.raises(TravelDataUnavailable, match=r"\(travelgym_data_\*\.json\) are not available"):
        load_travel_tasks(split, "userrl", DATA_ROOT)


@pytest.mark.shared_data
@needs_shared_data
def test_the_original_scenario_files_are_indeed_absent() -> None:
    assert not list((DATA_ROOT / "gyms").glob("TravelGym/travelgym/data/travelgym_data_*.json"))
