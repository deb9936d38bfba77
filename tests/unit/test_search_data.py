"""Search data: the fictional world and corpus, the BM25 index, the questions, the loaders and the solver."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

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

import userrl.envs.search  # noqa: F401  (registers the gym until the registry imports every gym)
from userrl.envs import load_tasks, make_env, solve_episode
from userrl.envs.search.corpus import (
    BUILTIN_CORPUS_PATH,
    CorpusIndex,
    Document,
    corpus_index,
    index_tokens,
    load_corpus,
)
from userrl.envs.search.generate import contains_phrase, main, render_corpus, render_questions
from userrl.envs.search.solver import SearchSolver
from userrl.envs.search.tasks import (
    BUILTIN_QUESTIONS_PATH,
    SEARCH_SYSTEM_PROMPT,
    SEARCH_USER_SUFFIX,
    load_search_tasks,
)
from userrl.envs.search.world import build_world
from userrl.envs.solving import UngroundedTask, play_episode

QUESTIONS_JSON = DATA_ROOT / "gyms/SearchGym/searchgym/data/questions.json"
needs_shared_data = needs_shared_file(QUESTIONS_JSON)


def shipped_questions() -> list[dict]:
    return json.loads(BUILTIN_QUESTIONS_PATH.read_text(encoding="utf-8"))["questions"]


# ---------------------------------------------------------------- the shipped corpus and questions


def test_shipped_files_are_small_and_regenerate_identically() -> None:
    assert BUILTIN_CORPUS_PATH.stat().st_size < 1_000_000
    assert BUILTIN_QUESTIONS_PATH.stat().st_size < 1_000_000
    assert main(["--check"]) == 0  # a fresh run gives both files byte for byte


def test_generator_writes_both_files(tmp_path: Path) -> None:
    corpus, questions = tmp_path / "c.jsonl", tmp_path / "q.json"
    assert main(["--corpus", str(corpus), "--questions", str(questions), "--seed", "7"]) == 0
    documents = load_corpus(corpus)
    assert len(documents) == len(load_corpus(BUILTIN_CORPUS_PATH))
    assert documents != load_corpus(BUILTIN_CORPUS_PATH)  # another seed, another world
    records = json.loads(questions.read_text(encoding="utf-8"))["questions"]
    assert questions.read_text(encoding="utf-8") == render_questions(records, 7)
    assert corpus.read_text(encoding="utf-8") == render_corpus(list(documents))
    assert main(["--corpus", str(corpus), "--questions", str(questions), "--check"]) == 1


def test_shipped_corpus() -> None:
    docs = load_corpus(BUILTIN_CORPUS_PATH)
    assert len(docs) >= 300 and len({d.title for d in docs}) == len(docs)
    for doc in docs:
        sentences = [s for s in re.split(r"(?<=[.!?])\s+", doc.text) if s]
        assert 2 <= len(sentences) <= 5 and len(doc.text) < 400, doc
    # A few sentences per entity of every kind.
    titles = {d.title for d in docs}
    assert (
        sum(t.startswith("Mount ") for t in titles) >= 15 and sum(t.endswith(" River") for t in titles) >= 20
    )
    assert sum(t.startswith("University of ") for t in titles) >= 10


def test_shipped_questions_counts_splits_and_ids() -> None:
    questions = shipped_questions()
    assert len(questions) >= 100
    assert len({q["id"] for q in questions}) == len(questions)
    assert len({q["question"] for q in questions}) == len(questions)
    hops = Counter(q["hops"] for q in questions)
    assert hops[2] >= 30 and hops[1] + hops[2] == len(questions)
    for n in (1, 2):
        n_test = sum(q["split"] == "test" for q in questions if q["hops"] == n)
        assert 0.25 * hops[n] <= n_test <= 0.4 * hops[n]
    assert len({q["template"] for q in questions}) >= 30


def test_every_question_is_supported_by_its_documents() -> None:
    by_title = {d.title: d for d in load_corpus(BUILTIN_CORPUS_PATH)}
    for q in shipped_questions():
        docs = [by_title[t] for t in q["supporting"]]
        assert len(docs) == q["hops"] == len(q["search_plan"])
        assert contains_phrase(f"{docs[-1].title} {docs[-1].text}", q["answer"]), q
        assert not contains_phrase(q["question"], q["answer"]), q
        if q["hops"] == 2:
            # A two-hop answer needs the second document: the first one does not state it.
            assert not contains_phrase(f"{docs[0].title} {docs[0].text}", q["answer"]), q
            assert docs[0].title != docs[1].title


def test_every_planned_query_finds_its_document() -> None:
    index = corpus_index()
    for q in shipped_questions():
        for title, options in zip(q["supporting"], q["search_plan"], strict=True):
            assert options
            for query in options:
                assert title in [d.title for d, _ in index.search(query, 5)], (q["id"], query)


def test_two_hop_bridges_name_their_second_document() -> None:
    by_title = {d.title: d for d in load_corpus(BUILTIN_CORPUS_PATH)}
    for q in shipped_questions():
        if q["hops"] == 2:
            first, second = (by_title[t] for t in q["supporting"])
            # The bridge entity (the second document's subject) is named in the first document.
            bridge = second.title.removesuffix(" River").removeprefix("Mount ")
            assert contains_phrase(first.text, bridge), q


# ---------------------------------------------------------------- the fictional world


def test_world_is_seeded_and_consistent() -> None:
    a, b, c = build_world(1), build_world(1), build_world(2)
    assert a == b and a != c
    for person in a.people.values():
        assert person.birth_city in a.cities and person.university in a.universities and person.achievement
    for inv in a.inventions.values():
        assert (
            a.people[inv.inventor].achievement == inv.name and inv.name in a.companies[inv.company].products
        )
        assert inv.year > a.people[inv.inventor].birth_year
    for river in a.rivers.values():
        assert river.cities and all(a.cities[city].river == river.name for city in river.cities)
        assert river.name in a.mountains[river.source].rivers
    for country in a.countries.values():
        assert a.cities[country.capital].is_capital and a.cities[country.capital].country == country.name
    one_word = [*a.countries, *a.cities, *a.rivers, *a.mountains, *(p.split()[1] for p in a.people)]
    assert len({n.lower() for n in one_word}) == len(one_word)


def test_generation_touches_no_global_rng() -> None:
    with global_rngs_untouched(seed=3):
        build_world(5)


# ---------------------------------------------------------------- corpus loading and the BM25 index


def test_index_tokens_follow_the_content_word_rules() -> None:
    assert index_tokens("The Rivers of Calhaven, founded in 1204; the river's source!") == [
        "river",
        "calhaven",
        "founded",
        "1204",
        "river",
        "source",
    ]


def test_bm25_ranking_ties_and_limits() -> None:
    index = CorpusIndex(
        [
            Document("A", "red fox"),
            Document("B", "red red panda"),
            Document("C", "blue whale"),
            Document("D", "red fox"),
        ]
    )
    assert [d.title for d, _ in index.search("red fox", 5)] == ["A", "D", "B"]  # ties keep corpus order
    assert [d.title for d, _ in index.search("red fox", 1)] == ["A"]
    assert index.search("green", 5) == [] and index.search("", 5) == [] and index.search("red", 0) == []
    scores = [s for _, s in index.search("red fox", 5)]
    assert scores == sorted(scores, reverse=True) and all(s > 0 for s in scores)


def test_corpus_index_is_cached_per_file(tmp_path: Path) -> None:
    assert corpus_index() is corpus_index(BUILTIN_CORPUS_PATH)
    path = tmp_path / "c.jsonl"
    path.write_text('{"title": "T", "text": "some text"}\n\n', encoding="utf-8")
    assert corpus_index(path) is corpus_index(str(path)) and len(corpus_index(path).documents) == 1


@pytest.mark.parametrize(
    ("content", "match"),
    [
        ('{"title": "T", "text": "x"}\n{not json\n', r"c\.jsonl:2: not valid JSON"),
        ('{"title": "T", "text": "x"}\n{"title": "T", "text": "y"}\n', r"c\.jsonl:2: duplicate title 'T'"),
        ('{"title": "T"}\n', r"c\.jsonl:1: 'title' and 'text' must be non-empty strings"),
        ('["T", "x"]\n', r"c\.jsonl:1: expected a JSON object"),
        ("\n\n", r"c\.jsonl: the search corpus has no documents"),
    ],
)
def test_load_corpus_errors(tmp_path: Path, content: str, match: str) -> None:
    path = tmp_path / "c.jsonl"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(ValueError, match=match):
        load_corpus(path)


def test_load_corpus_missing_file(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="search corpus not found"):
        load_corpus(tmp_path / "none.jsonl")


# ---------------------------------------------------------------- loaders (builtin)


def test_builtin_loader() -> None:
    train, test = load_search_tasks("train"), load_search_tasks("test")
    assert len(train) + len(test) == len(shipped_questions()) and len(test) >= 40
    assert {t.split for t in train} == {"train"} and {t.split for t in test} == {"test"}
    assert not {t.item_key for t in train} & {t.item_key for t in test}
    task = test[0]
    assert task.gym == "search" and task.source == "builtin" and task.difficulty == task.data["hops"]
    assert task.prompt == [
        {"role": "system", "content": SEARCH_SYSTEM_PROMPT},
        {"role": "user", "content": f"{task.data['question']}\n{SEARCH_USER_SUFFIX}"},
    ]
    assert set(task.data) == {"id", "question", "answer", "hops", "supporting", "search_plan"}


def test_builtin_loader_filters_and_errors(tmp_path: Path) -> None:
    assert {t.difficulty for t in load_search_tasks(hops=2)} == {2}
    assert {t.difficulty for t in load_tasks("search", "test", hops=[1, 2])} == {1, 2}
    with pytest.raises(ValueError, match="hop counts"):
        load_search_tasks(hops=3)
    with pytest.raises(ValueError, match="splits"):
        load_search_tasks("validation")
    with pytest.raises(ValueError, match="source"):
        load_search_tasks(source="web")
    with pytest.raises(ValueError, match="data_root"):
        load_search_tasks(source="userrl")


def test_system_prompt_is_short_and_protocol_free() -> None:
    assert len(SEARCH_SYSTEM_PROMPT.split()) < 150
    for word in ("search", "answer", "fictional"):
        assert word in SEARCH_SYSTEM_PROMPT
    for protocol_word in ("[search]", "[answer]", "interact_with_env", "tool", "JSON"):
        assert protocol_word not in SEARCH_SYSTEM_PROMPT


# ---------------------------------------------------------------- solver


def test_solver_solves_every_builtin_task() -> None:
    env = make_env("search")
    for task in load_search_tasks("test") + load_search_tasks("train"):
        steps = solve_episode(env, task, np.random.default_rng(0))
        assert steps[-1][2:] == ("Correct! Your answer is right.", 1.0), (task.item_key, steps)
        assert [s[0] for s in steps] == ["search"] * task.data["hops"] + ["answer"]
        for (_, _, feedback, _), title in zip(steps, task.data["supporting"], strict=False):
            assert f"\n{title}: " in feedback or re.search(rf"\n\d\. {re.escape(title)}: ", feedback)


def test_solver_is_deterministic_and_varies_its_queries() -> None:
    task = next(t for t in load_search_tasks("test") if t.data["hops"] == 2)
    env = make_env("search")
    plans = [solve_episode(env, task, np.random.default_rng(5)) for _ in range(2)]
    assert plans[0] == plans[1]
    assert plans[0][-1][:2] == ("answer", task.data["answer"])
    for (choice, query, _, _), options in zip(plans[0], task.data["search_plan"], strict=False):
        assert choice == "search" and query in options
    variants = {SearchSolver(task, np.random.default_rng(s)).next_action(None)[1] for s in range(30)}
    assert len(variants) > 1


def test_solver_answers_only_what_the_results_state() -> None:
    task = load_search_tasks("test")[0]
    task.data = {k: task.data[k] for k in ("id", "question", "answer")}
    # Without a plan it searches the question itself; the answer is given once a result states it.
    solver = SearchSolver(task, np.random.default_rng(0))
    assert solver.next_action(None) == ("search", task.data["question"])
    results = f"Search results for 'q':\n1. Reference: {task.data['answer']}"
    assert solver.next_action(results) == ("answer", task.data["answer"])
    assert solver.next_action("Incorrect. You may search more or try another answer.") == ("finish", "")
    # Results that never state it leave no justified answer: no demonstration.
    solver = SearchSolver(task, np.random.default_rng(0))
    solver.next_action(None)
    with pytest.raises(UngroundedTask, match="never state the answer"):
        solver.next_action("No relevant results found.")


# ---------------------------------------------------------------- loaders (userrl): error paths on fake folders

ITEM = {
    "id": "Bamboogle-1",
    "question": "Who was president in the year Citibank was founded?",
    "answer": "james madison",
}


def _fake_root(tmp_path: Path, items: object, ids: list[str], truth: str | None = "james madison") -> Path:
    write_json(tmp_path / "gyms/SearchGym/searchgym/data/questions.json", items)
    rows = [
        original_row(
            "interact_searchgym",
            i,
            {"env_name": "SearchGym", "id": item_id},
            split="test",
            user="q?",
            reward_model={"ground_truth": truth, "id": item_id, "style": "rule"},
        )
        for i, item_id in enumerate(ids)
    ]
    write_parquet(tmp_path / "data/bamboogle_multiturn/test.parquet", rows)
    return tmp_path


def test_userrl_loader_on_a_fake_folder(tmp_path: Path) -> None:
    root = _fake_root(tmp_path, [ITEM], ["Bamboogle-1"])
    (task,) = load_tasks("search", "test", source="userrl", data_root=root)
    assert task.item_key == "Bamboogle-1" and task.source == "userrl" and task.data == ITEM
    assert task.prompt == [{"role": "system", "content": "sys"}, {"role": "user", "content": "q?"}]
    root2 = _fake_root(tmp_path / "b", [ITEM], ["Bamboogle-1"], truth=None)
    assert len(load_search_tasks("test", "userrl", root2)) == 1


@pytest.mark.parametrize(
    ("items", "ids", "truth", "error", "match"),
    [
        ("[{not json", ["Bamboogle-1"], "james madison", ValueError, r"questions\.json: not valid JSON"),
        (
            {"id": "x"},
            ["Bamboogle-1"],
            "james madison",
            ValueError,
            r"questions\.json: expected a JSON array",
        ),
        (
            [dict(ITEM, answer="")],
            ["Bamboogle-1"],
            "",
            ValueError,
            r"item 'Bamboogle-1' needs a non-empty string 'answer'",
        ),
        ([ITEM, ITEM], ["Bamboogle-1"], "james madison", ValueError, r"duplicate id 'Bamboogle-1'"),
        (
            [ITEM],
            ["Bamboogle-1", "Bamboogle-9"],
            "james madison",
            ValueError,
            r"test\.parquet: row 1 has question id 'Bamboogle-9'",
        ),
        (
            [ITEM],
            ["Bamboogle-1"],
            "John Adams",
            ValueError,
            r"row 0 \('Bamboogle-1'\) has ground_truth 'John Adams'",
        ),
    ],
)
def test_userrl_loader_errors(
    tmp_path: Path, items: object, ids: list[str], truth: str, error: type[Exception], match: str
) -> None:
    root = _fake_root(tmp_path, items, ids, truth)
    with pytest.raises(error, match=match):
        load_search_tasks("test", "userrl", root)


def test_userrl_loader_missing_files_and_splits(tmp_path: Path) -> None:
    with pytest.raises(
        FileNotFoundError, match=r"questions\.json not found: data_root must point at a UserRL"
    ):
        load_search_tasks("test", "userrl", tmp_path / "nowhere")
    root = _fake_root(tmp_path, [ITEM], ["Bamboogle-1"])
    with pytest.raises(FileNotFoundError, match=r"alltest_multiturn/test\.parquet not found"):
        load_search_tasks("alltest", "userrl", root)
    with pytest.raises(ValueError, match="evaluation-only and has no training file"):
        load_search_tasks("train", "userrl", root)
    with pytest.raises(ValueError, match="the hops filter applies to builtin search tasks only"):
        load_search_tasks("test", "userrl", root, hops=1)


# ---------------------------------------------------------------- the original data (skipped when absent)


@pytest.mark.shared_data
@needs_shared_data
@pytest.mark.parametrize(("split", "rows"), [("test", 125), ("alltest", 62), ("alltrain", 0)])
def test_every_original_parquet_row_loads_and_resolves(split: str, rows: int) -> None:
    tasks = load_tasks("search", split, source="userrl", data_root=DATA_ROOT)
    assert len(tasks) == rows
    if split == "test":
        frame = pl.read_parquet(DATA_ROOT / "data/bamboogle_multiturn/test.parquet")
        for task, row in zip(tasks, frame.iter_rows(named=True), strict=True):
            assert task.prompt == [{"role": m["role"], "content": m["content"]} for m in row["prompt"]]
            assert task.item_key == row["reward_model"]["id"]
            assert row["reward_model"]["ground_truth"].strip() == task.data["answer"]
            assert task.prompt[1]["content"].startswith(task.data["question"])
    env = make_env("search")
    for task in tasks:
        assert task.source == "userrl" and task.split == "test"
        # Offline, the search goes over our fictional corpus, which cannot state the real-world answer:
        # the grounded solver refuses to demonstrate it (it would have to answer from hidden state).
        solver = SearchSolver(task, np.random.default_rng(0))
        try:
            steps = play_episode(env, task, solver)
        except UngroundedTask:
            continue
        assert steps[-1][2:] == ("Correct! Your answer is right.", 1.0)
        assert any(contains_phrase(s[2], task.data["answer"]) for s in steps if s[0] == "search")


@pytest.mark.shared_data
@needs_shared_data
def test_original_questions_file() -> None:
    items = json.loads(QUESTIONS_JSON.read_text(encoding="utf-8"))
    assert len(items) == 125
    assert [i["id"] for i in items] == [f"Bamboogle-{n}" for n in range(1, 126)]
