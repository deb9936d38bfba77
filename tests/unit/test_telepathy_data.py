"""Telepathy task data: the shipped facts and entities, the generator, the loaders and the solver."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pytest
from gym_helpers import (
    DATA_ROOT,
    global_rngs_untouched,
    needs_shared_file,
    original_row,
    write_json,
    write_parquet,
)

import userrl.envs.telepathy  # noqa: F401  (registers the gym until discovery imports every gym)
from userrl.envs import Task, load_tasks, make_env, make_solver, solve_episode
from userrl.envs.solving import UngroundedTask
from userrl.envs.telepathy import facts, roles
from userrl.envs.telepathy.generate import FACTS_PATH, GENERATOR_SEED, generate_entities, main, render
from userrl.envs.telepathy.solver import (
    CONFIRM_TEMPLATES,
    QUESTION_TEMPLATES,
    TelepathySolver,
    attribute_questions,
    description_questions,
)
from userrl.envs.telepathy.tasks import (
    BUILTIN_ENTITIES_PATH,
    TELEPATHY_SYSTEM_PROMPT,
    USERRL_PARQUET,
    builtin_prompt,
    load_telepathy_tasks,
)

ENTITIES_JSON = DATA_ROOT / "gyms/TelepathyGym/telepathygym/data/all_entities_refined.json"
needs_shared_data = needs_shared_file(ENTITIES_JSON)


def shipped() -> list[dict[str, Any]]:
    return json.loads(BUILTIN_ENTITIES_PATH.read_text(encoding="utf-8"))["entities"]


def all_tasks() -> list[Task]:
    return load_telepathy_tasks("train") + load_telepathy_tasks("test")


# ---------------------------------------------------------------- the shipped builtin set


def test_shipped_file_is_small_and_regenerates_identically() -> None:
    assert BUILTIN_ENTITIES_PATH.stat().st_size < 1_000_000 and FACTS_PATH.stat().st_size < 1_000_000
    assert render(generate_entities(), GENERATOR_SEED) == BUILTIN_ENTITIES_PATH.read_text(encoding="utf-8")
    assert main(["--check"]) == 0


def test_generator_writes_and_checks(tmp_path: Path) -> None:
    out = tmp_path / "entities.json"
    assert main(["--output", str(out)]) == 0 and main(["--output", str(out), "--check"]) == 0
    assert main(["--output", str(out), "--seed", "1", "--check"]) == 1  # another seed, another split


def test_shipped_counts_ids_titles_and_categories() -> None:
    entities = shipped()
    assert len(entities) >= 100
    assert len({e["id"] for e in entities}) == len(entities)
    assert len({e["title"].casefold() for e in entities}) == len(entities)
    categories = Counter(e["category"] for e in entities)
    assert set(categories) <= set(facts.CATEGORY_NOUNS) and len(categories) >= 20
    assert sum(n for c, n in categories.items() if "person" in roles.hypernyms(c)) >= 20


def test_split_is_a_quarter_of_every_category() -> None:
    entities = shipped()
    for category, n in Counter(e["category"] for e in entities).items():
        n_test = sum(e["split"] == "test" for e in entities if e["category"] == category)
        assert n_test == round(n * 0.25), category
    assert sum(e["split"] == "test" for e in entities) == 41


def test_rendered_fields_follow_the_original_format() -> None:
    for e in shipped():
        assert e["target_entity"].startswith(f"{e['title']} - ")
        assert roles.entity_name(e["target_entity"]) == e["title"]
        assert e["description"].startswith("I am thinking of ") and e["description"].endswith(
            "yes/no questions!"
        )
        assert e["goal"].startswith("Guess the ") and e["goal"].endswith(" I am thinking of.")
        assert e["title"] not in e["description"]


def test_every_attribute_question_gets_a_scripted_yes() -> None:
    """The structured facts are what the scripted oracle answers from: every fact is a Yes."""
    for task in all_tasks():
        data = task.data
        keywords = roles.entity_keywords(data["title"], data["target_entity"], data["category"])
        for key, values in data["attributes"].items():
            for value in values:
                question = f"Are you thinking of {facts.article(value)} {value}?"
                if key in QUESTION_TEMPLATES:
                    question = QUESTION_TEMPLATES[key].format(s="it", v=value)
                assert roles.scripted_oracle(question, keywords) == "Yes", (task.item_key, question)


def test_titles_are_judged_right_and_never_confused() -> None:
    tasks = all_tasks()
    for task in tasks:
        title, target = task.data["title"], task.data["target_entity"]
        assert roles.content_words(title), title  # the word rule of the judge needs content words
        assert roles.scripted_judge(title, title, target) and roles.scripted_judge(
            title.upper(), title, target
        )
        # No other entity's title counts as a right guess (e.g. "Elephant" contains "ant").
        others = [t.data["title"] for t in tasks if t is not task]
        assert not [o for o in others if roles.scripted_judge(o, title, target)], title


# ---------------------------------------------------------------- facts and rendering


def test_describe_and_teaser() -> None:
    attributes = {"kind": ["mammal", "big cat"], "size": ["large"], "materials": ["fur"], "uses": ["hunting"]}
    assert facts.describe(attributes) == "a large mammal and big cat, of fur, for hunting"
    assert facts.describe({"kind": ["owl"]}) == "an owl"
    assert facts.target_entity("Lion", {"kind": ["cat"], "colors": ["tan", "gold", "brown"]}) == (
        "Lion - a cat, tan, gold and brown"
    )
    assert facts.teaser("scientist") == (
        "I am thinking of a famous person. Try to guess who it is by asking yes/no questions!",
        "Guess the famous person I am thinking of.",
    )
    with pytest.raises(ValueError, match="unknown builtin category"):
        facts.teaser("spaceship")


@pytest.mark.parametrize(
    ("attributes", "message"),
    [
        ([], "must be an object"),
        ({"kind": []}, "'kind' must name"),
        ({"kind": ["x"], "smell": ["y"]}, "unknown attributes"),
        ({"kind": ["x"], "colors": "red"}, "'colors' must be a list"),
        ({"kind": ["x", ""]}, "'kind' must be a list of non-empty"),
    ],
)
def test_validate_attributes(attributes: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        facts.validate_attributes(attributes, "here")


def test_generator_refuses_bad_facts(tmp_path: Path) -> None:
    doc = json.loads(FACTS_PATH.read_text(encoding="utf-8"))
    doc["entities"][1]["title"] = doc["entities"][0]["title"].lower()
    bad = tmp_path / "facts.json"
    bad.write_text(json.dumps(doc), encoding="utf-8")
    with pytest.raises(ValueError, match=r"facts\.json: entity 'tp-002': duplicate"):
        generate_entities(path=bad)
    doc = json.loads(FACTS_PATH.read_text(encoding="utf-8"))
    doc["entities"][0]["category"] = "spaceship"
    bad.write_text(json.dumps(doc), encoding="utf-8")
    with pytest.raises(ValueError, match="unknown category 'spaceship'"):
        generate_entities(path=bad)


# ---------------------------------------------------------------- loaders (builtin)


def test_builtin_loader() -> None:
    train, test = load_telepathy_tasks("train"), load_telepathy_tasks("test")
    assert (len(train), len(test)) == (119, 41)
    assert {t.split for t in train} == {"train"} and {t.split for t in test} == {"test"}
    assert not {t.item_key for t in train} & {t.item_key for t in test}
    task = test[0]
    assert task.gym == "telepathy" and task.source == "builtin" and task.item_key == task.data["title"]
    assert task.prompt == builtin_prompt(task.data["description"])
    assert set(task.data) == {"id", "title", "description", "goal", "target_entity", "category", "attributes"}
    assert [t.item_key for t in load_tasks("telepathy", "test")] == [t.item_key for t in test]


def test_builtin_loader_filters_and_errors() -> None:
    assert {t.data["category"] for t in load_telepathy_tasks("test", category="animal")} == {"animal"}
    both = load_tasks("telepathy", "train", category=["bird", "fish"])
    assert {t.data["category"] for t in both} == {"bird", "fish"}
    with pytest.raises(ValueError, match="unknown telepathy categories"):
        load_telepathy_tasks(category="spaceship")
    with pytest.raises(ValueError, match="splits"):
        load_telepathy_tasks("validation")
    with pytest.raises(ValueError, match="source"):
        load_telepathy_tasks(source="hf")
    with pytest.raises(ValueError, match="data_root"):
        load_telepathy_tasks(source="userrl")
    with pytest.raises(ValueError, match="builtin telepathy tasks only"):
        load_telepathy_tasks(source="userrl", data_root="x", category="animal")


def test_system_prompt_is_short_and_protocol_free() -> None:
    assert len(TELEPATHY_SYSTEM_PROMPT.split()) < 150
    for word in ("action", "answer", "yes/no"):
        assert word in TELEPATHY_SYSTEM_PROMPT
    for protocol_word in ("[action]", "[answer]", "interact_with_env", "tool", "JSON", "search"):
        assert protocol_word not in TELEPATHY_SYSTEM_PROMPT


# ---------------------------------------------------------------- solver


@pytest.mark.parametrize("split", ["test", "train"])
def test_solver_solves_every_builtin_task(split: str) -> None:
    env = make_env("telepathy")
    for i, task in enumerate(load_telepathy_tasks(split)):
        steps = solve_episode(env, task, np.random.default_rng(i))
        questions = steps[:-1]
        assert steps[-1][:3] == ("answer", task.data["title"], "Correct! Your guess is right.")
        assert steps[-1][3] == 1.0 and 3 <= len(questions) <= 5
        assert all(choice == "action" for choice, *_ in questions)
        # The guess is grounded: the last question names the entity, and the oracle confirmed it.
        assert questions[-1][1] in {t.format(name=task.data["title"]) for t in CONFIRM_TEMPLATES}
        # Attribute questions (and the naming one) are answered Yes; a broad opener (if any) No.
        opener = questions[0][1] in {
            "Are you thinking of a person?",
            "Are you thinking of an animal?",
            "Is it a vehicle?",
        }
        assert [q[2] for q in questions] == ["No"] * opener + ["Yes"] * (len(questions) - opener), (
            task.item_key
        )


def test_solver_is_deterministic_and_varies_with_the_rng() -> None:
    task = load_telepathy_tasks("test")[0]
    first = [make_solver("telepathy", task, np.random.default_rng(5)).next_action(None) for _ in range(5)]
    assert first == [
        make_solver("telepathy", task, np.random.default_rng(5)).next_action(None) for _ in range(5)
    ]
    plans = {tuple(TelepathySolver(task, np.random.default_rng(s)).plan) for s in range(40)}
    assert len(plans) >= 5 and {len(p) for p in plans} >= {4, 5, 6}


def test_persons_are_never_asked_if_they_are_animals() -> None:
    persons = [t for t in all_tasks() if "person" in roles.hypernyms(t.data["category"])]
    for seed in range(10):
        for task in persons:
            plan = TelepathySolver(task, np.random.default_rng(seed)).plan
            assert ("action", "Are you thinking of an animal?") not in plan
            assert ("action", "Are you thinking of a person?") not in plan


def test_attribute_questions_use_the_right_subject() -> None:
    task = next(t for t in all_tasks() if t.item_key == "Marie Curie")
    questions = attribute_questions(task, np.random.default_rng(0))
    assert questions[0].startswith("Are you thinking of ") and "this person" in " ".join(questions[1:])


def test_solver_on_a_task_without_attributes() -> None:
    data = {
        "id": "entity_x",
        "title": "Kiwi",
        "description": "d",
        "goal": "g",
        "target_entity": "Kiwi - a small brown fuzzy fruit, green inside",
        "category": "food",
        "attributes": {},
    }
    task = Task("telepathy", "Kiwi", builtin_prompt("d"), data)
    assert description_questions(task) == ["Is it a small brown fuzzy fruit?"]
    assert (
        description_questions(Task("telepathy", "K", builtin_prompt("d"), dict(data, target_entity="Kiwi")))
        == []
    )
    steps = solve_episode(make_env("telepathy"), task, np.random.default_rng(2))
    assert steps[-1][2:] == ("Correct! Your guess is right.", 1.0)
    assert ("action", "Is it a small brown fuzzy fruit?", "Yes", 0.0) in steps


def test_solver_finishes_when_the_guess_is_rejected() -> None:
    task = load_telepathy_tasks("test")[0]
    solver = TelepathySolver(task, np.random.default_rng(0))
    plan_length = len(solver.plan)
    actions = [solver.next_action("Yes") for _ in range(plan_length + 1)]
    assert actions[-2] == ("answer", task.data["title"]) and actions[-1] == ("finish", "")


def test_solver_guesses_only_a_name_the_oracle_confirmed() -> None:
    task = load_telepathy_tasks("test")[0]
    solver = TelepathySolver(task, np.random.default_rng(0))
    actions = [solver.next_action("Yes") for _ in range(len(solver.plan) - 1)]
    assert actions[-1] == ("action", solver.confirm) and task.data["title"] in solver.confirm
    with pytest.raises(UngroundedTask, match="did not|answered"):
        solver.next_action("No")


def test_solver_touches_no_global_rng() -> None:
    with global_rngs_untouched():
        solve_episode(make_env("telepathy"), load_telepathy_tasks("test")[3], np.random.default_rng(1))


# ---------------------------------------------------------------- loaders (userrl): fake folders

ENTITY = {
    "id": "entity_003",
    "title": "Lion",
    "description": "I am thinking of an animal. Try to guess what it is by asking yes/no questions!",
    "goal": "Guess the animal I am thinking of.",
    "target_entity": "Lion - a large wild cat",
    "category": "animal",
}


def _fake_root(
    tmp_path: Path, entities: object, titles: list[str], file: str = "telepathy_multiturn/test"
) -> Path:
    write_json(tmp_path / "gyms/TelepathyGym/telepathygym/data/all_entities_refined.json", entities)
    rows = [
        original_row(
            "interact_telepathygym",
            i,
            {"env_name": "TelepathyGym", "title": t, "category": "animal"},
            split="test",
            user="guess",
        )
        for i, t in enumerate(titles)
    ]
    write_parquet(tmp_path / f"data/{file}.parquet", rows)
    return tmp_path


def test_userrl_loader_on_a_fake_folder(tmp_path: Path) -> None:
    root = _fake_root(
        tmp_path, [ENTITY, dict(ENTITY, id="entity_004", title="Piano")], ["LION", "entity_004"]
    )
    lion, piano = load_tasks("telepathy", "test", source="userrl", data_root=root)
    assert lion.item_key == "LION" and lion.source == "userrl" and lion.split == "test"
    assert lion.data == {**ENTITY, "attributes": {}}
    assert piano.data["title"] == "Piano"  # the id is accepted as the lookup key too
    assert lion.prompt == [{"role": "system", "content": "sys"}, {"role": "user", "content": "guess"}]
    env = make_env("telepathy", lion)
    env.reset()
    assert env.step("[answer] lion")[1:3] == (1.0, True)


def test_userrl_loader_alltrain_has_no_telepathy_rows(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    root = _fake_root(tmp_path, [ENTITY], [], file="alltrain_multiturn/train")
    (tmp_path / "data/alltrain_multiturn/train.parquet").unlink()
    pl.DataFrame(
        {
            "data_source": ["interact_function"],
            "prompt": [[{"role": "system", "content": "s"}]],
            "extra_info": [{"split": "train"}],
        }
    ).write_parquet(tmp_path / "data/alltrain_multiturn/train.parquet")
    assert load_telepathy_tasks("alltrain", "userrl", root) == []
    assert "has no interact_telepathygym rows" in caplog.text


def test_userrl_loader_errors(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"all_entities_refined\.json not found: data_root"):
        load_telepathy_tasks("test", "userrl", tmp_path / "nowhere")
    with pytest.raises(ValueError, match="UserRL telepathy splits"):
        load_telepathy_tasks("dev", "userrl", tmp_path)
    root = _fake_root(tmp_path / "a", "[{", ["Lion"])
    with pytest.raises(ValueError, match=r"all_entities_refined\.json: not valid JSON"):
        load_telepathy_tasks("test", "userrl", root)
    root = _fake_root(tmp_path / "b", [ENTITY], ["Tiger"])
    with pytest.raises(ValueError, match=r"test\.parquet: row 0 has telepathy title 'Tiger'"):
        load_telepathy_tasks("test", "userrl", root)
    root = _fake_root(tmp_path / "c", [ENTITY, dict(ENTITY, id="entity_009", title="LION")], ["Lion"])
    with pytest.raises(ValueError, match="duplicate title or id"):
        load_telepathy_tasks("test", "userrl", root)
    root = _fake_root(tmp_path / "d", [dict(ENTITY, target_entity="")], ["Lion"])
    with pytest.raises(ValueError, match="entity 'Lion' needs a non-empty string 'target_entity'"):
        load_telepathy_tasks("test", "userrl", root)


# ---------------------------------------------------------------- the original data (when present)


@pytest.mark.shared_data
@needs_shared_data
@pytest.mark.parametrize(("split", "count"), [("train", 360), ("test", 41), ("alltest", 41), ("alltrain", 0)])
def test_every_original_row_loads_and_resolves(split: str, count: int) -> None:
    tasks = load_telepathy_tasks(split, "userrl", DATA_ROOT)
    assert len(tasks) == count
    frame = pl.read_parquet(DATA_ROOT / USERRL_PARQUET[split])
    rows = frame.filter(pl.col("data_source") == "interact_telepathygym").iter_rows(named=True)
    env = make_env("telepathy")
    for task, row in zip(tasks, rows, strict=True):
        kwargs = row["extra_info"]["tools_kwargs"]["interact_with_env"]["create_kwargs"]
        assert task.item_key == kwargs["title"] == row["reward_model"]["title"]
        assert task.data["target_entity"] == row["reward_model"]["ground_truth"]
        assert task.data["category"] == kwargs["category"]
        assert task.prompt == [dict(m) for m in row["prompt"]]  # verbatim
        env.reset(options={"task": task})
        assert env.step(f"[answer] {task.data['title']}")[1] == 1.0  # the scripted judge accepts the title


@pytest.mark.shared_data
@needs_shared_data
def test_original_entities_index() -> None:
    index = userrl.envs.telepathy.tasks.load_userrl_entities(DATA_ROOT)
    assert len({id(e) for e in index.values()}) == 401
