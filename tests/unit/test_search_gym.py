"""SearchEnv (docs/spec/GYMS.md §4): feedback strings, rewards, search limits, backends, judges, spaces."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import userrl.envs.search  # noqa: F401  (registers userrl/Search-v0 until the registry imports every gym)
from userrl.envs import Task
from userrl.envs.json_extract import extract_json_object
from userrl.envs.llm import RoleCall
from userrl.envs.search import env as senv
from userrl.envs.search.backends import NO_RESULTS, SearchError, SearchResults, format_results
from userrl.envs.search.env import SearchEnv
from userrl.envs.search.judge import JUDGE_SYSTEM_PROMPT, scripted_judge, validate_judgment
from userrl.envs.search.tasks import builtin_prompt

QUESTION = "Who invented the spiral loom used in Calhaven?"
ANSWER = "Ilsa Marrow"
TINY_CORPUS = [
    {"title": "Alpha", "text": "Alpha is a red fox living in the forest."},
    {"title": "Beta", "text": "Beta is a blue whale living in the ocean."},
    {"title": "Gamma", "text": "Gamma is a red panda living in the\nmountains."},
]


def make_task(
    question: str = QUESTION, answer: str = ANSWER, key: str = "q-1", source: str = "builtin"
) -> Task:
    data = {"id": key, "question": question, "answer": answer}
    return Task("search", key, builtin_prompt(question), data, source=source)


def started(task: Task | None = None, **kwargs: Any) -> SearchEnv:
    env = SearchEnv(task or make_task(), **kwargs)
    env.reset()
    return env


def feedback(env: SearchEnv, action: str) -> str:
    return env.step(action)[0]["feedback"]


@pytest.fixture
def tiny_corpus(tmp_path: Path) -> Path:
    path = tmp_path / "tiny.jsonl"
    path.write_text("".join(json.dumps(d) + "\n" for d in TINY_CORPUS), encoding="utf-8")
    return path


class StaticBackend:
    """A search backend double: fixed results, a failure, or a hang."""

    name = "static"

    def __init__(
        self, results: SearchResults | None = None, fail: bool = False, sleep_s: float = 0.0
    ) -> None:
        self.results = results or SearchResults()
        self.fail = fail
        self.sleep_s = sleep_s
        self.queries: list[tuple[str, int]] = []

    async def search(self, query: str, k: int) -> SearchResults:
        self.queries.append((query, k))
        if self.sleep_s:
            await asyncio.sleep(self.sleep_s)
        if self.fail:
            raise SearchError("backend down")
        return self.results


class FakeJudgeClient:
    """A RoleClient double of an external model: canned raw replies, parsed like the real client (§0.6)."""

    def __init__(self, replies: list[str], attempts: int = 3) -> None:
        self.replies = list(replies)
        self.max_attempts = attempts
        self.calls: list[dict[str, Any]] = []

    async def complete_json(
        self,
        role: str,
        system: str,
        user: str,
        validate: Callable[[dict[str, Any]], Any],
        *,
        max_tokens: int | None = None,
        temperature: float | None = None,
    ) -> tuple[Any, RoleCall]:
        self.calls.append({"role": role, "system": system, "user": user, "max_tokens": max_tokens})
        for attempt in range(1, self.max_attempts + 1):
            reply = self.replies.pop(0) if self.replies else "garbage"
            try:
                return validate(extract_json_object(reply)), RoleCall(role, attempt, True, 0.01)
            except (ValueError, KeyError, TypeError):
                continue
        return None, RoleCall(role, self.max_attempts, False, 0.03)

    async def complete_text(self, role: str, system: str, user: str, **_: Any) -> tuple[str | None, RoleCall]:
        raise AssertionError("the Search gym has no free-text role")


# ---------------------------------------------------------------- search: local corpus (BM25)


def test_search_results_format_on_a_corpus(tiny_corpus: Path) -> None:
    env = started(search_corpus=tiny_corpus)
    obs, reward, terminated, truncated, info = env.step("[search] red fox")
    assert obs["feedback"] == (
        "Search results for 'red fox':\n"
        "1. Alpha: Alpha is a red fox living in the forest.\n"
        "2. Gamma: Gamma is a red panda living in the mountains."
    )
    assert (reward, terminated, truncated) == (0.0, False, False)
    assert info["search_history"] == ["red fox"] and info["search_count"] == 1
    assert info["search_backend"] == "local_corpus"


@pytest.mark.parametrize("query", ["zebra", "", "the of and", "中文"])
def test_search_without_results(tiny_corpus: Path, query: str) -> None:
    env = started(search_corpus=tiny_corpus)
    obs, reward, terminated, _, info = env.step(f"[search] {query}")
    assert (obs["feedback"], reward, terminated) == ("No relevant results found.", 0.0, False)
    assert info["search_count"] == 1


def test_search_over_the_builtin_corpus_by_default() -> None:
    env = started()
    text = feedback(env, "[search] Ivrand country capital")
    assert text.startswith("Search results for 'Ivrand country capital':\n1. Ivrand: Ivrand is a country")
    assert len(text.splitlines()) == 6


def test_at_most_max_search_results(tiny_corpus: Path) -> None:
    env = started(search_corpus=tiny_corpus, max_search_results=1)
    assert (
        feedback(env, "[search] red")
        == "Search results for 'red':\n1. Alpha: Alpha is a red fox living in the forest."
    )


def test_sixth_search_is_refused_without_a_backend_call() -> None:
    backend = StaticBackend(SearchResults([("T", "s")]))
    env = started(search_backend=backend)
    for i in range(5):
        assert feedback(env, f"[search] q{i}") == "Search results for 'q{i}':\n1. T: s".replace("{i}", str(i))
    for _ in range(2):
        obs, reward, terminated, _, info = env.step("[search] more")
        assert (obs["feedback"], reward, terminated) == (
            "You have reached the maximum number of searches. Please answer now.",
            0.0,
            False,
        )
    assert len(backend.queries) == 5 and all(k == 5 for _, k in backend.queries)
    assert info["search_history"] == [f"q{i}" for i in range(5)] and info["search_count"] == 7
    assert env.step(f"[answer] {ANSWER}")[1:3] == (1.0, True)


def test_max_search_steps_is_configurable() -> None:
    env = started(search_backend=StaticBackend(), max_search_steps=0)
    assert (
        feedback(env, "[search] x") == "You have reached the maximum number of searches. Please answer now."
    )


def test_answer_box_comes_first_and_the_list_is_capped() -> None:
    organic = [(f"T{i}", f"snippet\n{i}") for i in range(6)]
    env = started(search_backend=StaticBackend(SearchResults(organic, answer_box=("Answer", "42"))))
    assert feedback(env, "[search] q") == (
        "Search results for 'q':\n1. Answer: 42\n2. T0: snippet 0\n3. T1: snippet 1\n4. T2: snippet 2\n"
        "5. T3: snippet 3"
    )
    assert format_results("q", SearchResults()) == NO_RESULTS


@pytest.mark.parametrize("backend", [StaticBackend(fail=True), StaticBackend(sleep_s=5.0)])
def test_search_failure_and_timeout(backend: StaticBackend) -> None:
    env = started(search_backend=backend, search_timeout_s=0.05)
    obs, reward, terminated, _, info = env.step("[search] anything")
    assert (obs["feedback"], reward, terminated) == (
        "Search error: the search timed out. Try again or answer.",
        0.0,
        False,
    )
    assert info["search_count"] == 1 and info["search_history"] == ["anything"] and info["error"] is None


# ---------------------------------------------------------------- search: the scripted oracle stub


def test_oracle_stub_leaks_the_answer_on_two_shared_content_words() -> None:
    env = started(search_backend="scripted")
    assert feedback(env, "[search] spiral loom inventor") == (
        f"Search results for 'spiral loom inventor':\n1. Reference: {ANSWER}\n2. Related: {QUESTION}"
    )
    assert env.step("[search] spiral")[0]["feedback"] == "No relevant results found."
    assert env.step("[search] who invented it")[4]["search_backend"] == "scripted"


def test_oracle_stub_is_rebuilt_per_task() -> None:
    env = SearchEnv(make_task(), search_backend="scripted")
    env.reset(options={"task": make_task("Which river flows through Dorwick city?", "Savra", key="q-2")})
    assert feedback(env, "[search] Dorwick river") == (
        "Search results for 'Dorwick river':\n1. Reference: Savra\n2. Related: Which river flows through Dorwick city?"
    )


# ---------------------------------------------------------------- answers and the scripted judge


@pytest.mark.parametrize(
    "content", ["Ilsa Marrow", "  ilsa marrow ", "ILSA-MARROW!", "It was Ilsa Marrow.", "Dr. Ilsa Marrow"]
)
def test_correct_answer(content: str) -> None:
    env = started()
    obs, reward, terminated, truncated, info = env.step(f"[answer] {content}")
    assert (obs["feedback"], reward, terminated, truncated) == (
        "Correct! Your answer is right.",
        1.0,
        True,
        False,
    )
    assert obs["answered_correctly"] is True and obs["episode_complete"] is True
    assert info["submitted_answer"] == content.strip() and info["lm_calls"] == []


@pytest.mark.parametrize(
    "content", ["Marrow", "Ilsa Marrow or maybe someone else entirely", "", "?!", "Ilsa"]
)
def test_wrong_answer(content: str) -> None:
    env = started()
    obs, reward, terminated, _, info = env.step(f"[answer] {content}")
    assert (obs["feedback"], reward, terminated) == (
        "Incorrect. You may search more or try another answer.",
        0.0,
        False,
    )
    assert obs["answered_correctly"] is False and info["submitted_answer"] == content
    assert env.step("[answer] Ilsa Marrow")[1:3] == (1.0, True)


@pytest.mark.parametrize(
    ("answer", "gold", "expected"),
    [
        ("1843", "1843", True),
        ("in 1843", "1843", True),
        ("Sea of Ostra", "Sea of Ostra", True),
        ("the Sea of Ostra", "Sea of Ostra", True),
        ("Mount Kelvar", "Kelvar", True),
        ("it is Kelvar peak", "Kelvar", True),  # three extra words are allowed ...
        ("it is the Kelvar peak", "Kelvar", False),  # ... four are not
        ("Ostra", "Sea of Ostra", False),
        ("November 6, 1905", "November 6, 1905", True),
        ("6 November 1905", "November 6, 1905", True),
        ("Titan IIIE", "Titan IIIE", True),
        ("Titan", "Titan IIIE", False),
        ("anything", "?!", False),
        ("", "Kelvar", False),
    ],
)
def test_scripted_judge(answer: str, gold: str, expected: bool) -> None:
    assert scripted_judge(answer, gold) is expected


def test_rule_eval_method_is_exact_match_only() -> None:
    env = started(eval_method="rule")
    assert (
        feedback(env, "[answer] It was Ilsa Marrow.")
        == "Incorrect. You may search more or try another answer."
    )
    assert feedback(env, "[answer] ilsa  marrow") == "Correct! Your answer is right."


# ---------------------------------------------------------------- the llm judge (fake client)

GOOD = '{"reasoning": "same person", "judgment": "Yes", "feedback": "Your answer is right."}'
BAD = '{"reasoning": "different", "judgment": "No", "feedback": "Your answer names someone else."}'


def llm_env(replies: list[str], **kwargs: Any) -> tuple[SearchEnv, FakeJudgeClient]:
    client = FakeJudgeClient(replies)
    return started(backend="openai", llm=client, **kwargs), client


@pytest.mark.parametrize(
    ("replies", "correct", "attempts"),
    [
        ([GOOD], True, 1),
        ([BAD], False, 1),
        (['<think>{"judgment": "No"}</think>\n' + GOOD], True, 1),  # a leading think block
        (["```json\n" + GOOD + "\n```"], True, 1),  # fenced JSON
        (['{"reasoning": null, "judgment": true, "feedback": null}'], True, 1),  # true/null literals
        (['Sure, here is my verdict: {"judgment": " YES ", "feedback": "ok"} hope it helps'], True, 1),
        (['{"judgment": "Maybe"}'], False, 1),  # anything but Yes counts as No (valid, not retried)
        (["no json here", '{"judgment": 3}', GOOD], True, 3),  # garbage and a bad type are retried
    ],
)
def test_llm_judge_replies(replies: list[str], correct: bool, attempts: int) -> None:
    env, client = llm_env(replies)
    obs, reward, terminated, _, info = env.step("[answer] Dr. I. Marrow")
    assert (reward, terminated, obs["answered_correctly"]) == (float(correct), correct, correct)
    assert obs["feedback"] == (
        "Correct! Your answer is right."
        if correct
        else "Incorrect. You may search more or try another answer."
    )
    (call,) = info["lm_calls"]
    assert call["role"] == "answer_judge" and call["ok"] is True and call["attempts"] == attempts
    (request,) = client.calls
    assert request["system"] == JUDGE_SYSTEM_PROMPT and request["max_tokens"] == 512
    assert request["user"] == f"Question: {QUESTION}\nGold answer: {ANSWER}\nAgent's answer: Dr. I. Marrow"


def test_llm_judge_failure_falls_back_to_incorrect() -> None:
    env, client = llm_env(["garbage", "<think>still thinking", '{"verdict": "Yes"}'])
    obs, reward, terminated, _, info = env.step("[answer] I. Marrow")
    assert (obs["feedback"], reward, terminated) == (
        "Incorrect. You may search more or try another answer.",
        0.0,
        False,
    )
    assert info["lm_calls"] == [{"role": "answer_judge", "attempts": 3, "ok": False, "latency_s": 0.03}]
    assert info["error"] is None


def test_llm_judge_is_skipped_on_exact_match_empty_answers_and_rule_method() -> None:
    env, client = llm_env([GOOD] * 3)
    env.step("[answer] !!")
    assert env.step("[answer] Ilsa Marrow")[4]["lm_calls"] == []
    env, client = llm_env([GOOD], eval_method="rule")
    assert feedback(env, "[answer] Dr. I. Marrow") == "Incorrect. You may search more or try another answer."
    assert client.calls == []


def test_llm_judge_feedback_is_not_shown() -> None:
    env, _ = llm_env(['{"reasoning": "x", "judgment": "No", "feedback": "SECRET hint"}'])
    assert "SECRET" not in feedback(env, "[answer] someone")


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ({"judgment": "Yes"}, True),
        ({"judgment": "no"}, False),
        ({"judgment": False}, False),
        ({"judgment": "Yes."}, False),
    ],
)
def test_validate_judgment(value: dict[str, Any], expected: bool) -> None:
    assert validate_judgment(value) is expected


@pytest.mark.parametrize("value", [{}, {"judgment": None}, {"judgment": ["Yes"]}])
def test_validate_judgment_rejects(value: dict[str, Any]) -> None:
    with pytest.raises((KeyError, TypeError)):
        validate_judgment(value)


def test_judge_backend_override_and_missing_client() -> None:
    env = started(backend="openai", role_backends={"answer_judge": "scripted"})
    assert feedback(env, "[answer] It was Ilsa Marrow.") == "Correct! Your answer is right."
    started(backend="openai", eval_method="rule")  # no judge, so no client needed
    with pytest.raises(ValueError, match="no llm RoleClient"):
        SearchEnv(make_task(), backend="openai")


# ---------------------------------------------------------------- finish, invalid choices, limits


def test_finish_reveals_the_answer() -> None:
    env = started()
    obs, reward, terminated, truncated, _ = env.step("[finish]")
    assert (obs["feedback"], reward, terminated, truncated) == (
        "Episode finished. The correct answer was: Ilsa Marrow",
        0.0,
        True,
        False,
    )
    assert feedback(env, "[answer] Ilsa Marrow") == "The episode has already ended."


@pytest.mark.parametrize("action", ["hello", "[action] ask", "[Search] x", "search: x", "", "[answer"])
def test_invalid_choice(action: str) -> None:
    env = started()
    obs, reward, terminated, _, _ = env.step(action)
    assert (obs["feedback"], reward, terminated) == (
        "Invalid action. Allowed choices: search, answer.",
        0.0,
        False,
    )


def test_correct_answer_on_the_last_step_terminates_only() -> None:
    env = started(max_steps=2)
    env.step("[answer] nobody")
    assert env.step("[answer] Ilsa Marrow")[1:4] == (1.0, True, False)


def test_reward_scale_step_penalty_and_normalize() -> None:
    assert started(reward_scale=2.0).step("[answer] Ilsa Marrow")[1] == 2.0
    env = started(step_penalty=0.1)
    assert env.step("[answer] x")[1] == pytest.approx(-0.1)
    assert env.step("[answer] Ilsa Marrow")[1] == pytest.approx(0.8)
    assert started(step_penalty=0.1, normalize_rewards=True).step("[answer] x")[1] == 0.0


def test_observation_and_info_fields() -> None:
    env = SearchEnv(make_task(key="bam-7"), search_backend=StaticBackend())
    obs, info = env.reset()
    assert obs == {
        "feedback": senv.WELCOME,
        "question": QUESTION,
        "answered_correctly": False,
        "step_count": 0,
        "episode_complete": False,
    }
    _, _, _, _, info = env.step("[search] loom")
    assert {k: info[k] for k in ("question_id", "correct_answer", "submitted_answer", "search_history")} == {
        "question_id": "bam-7",
        "correct_answer": ANSWER,
        "submitted_answer": None,
        "search_history": ["loom"],
    }
    assert {"raw_action", "action_history", "total_reward", "error", "lm_calls"} <= set(info)


def test_reset_clears_the_episode_state() -> None:
    env = started(search_backend=StaticBackend())
    for _ in range(6):
        env.step("[search] q")
    env.step("[answer] Ilsa Marrow")
    obs, info = env.reset()
    assert obs["answered_correctly"] is False and info["search_count"] == 0 and info["search_history"] == []
    assert feedback(env, "[search] q") == NO_RESULTS


# ---------------------------------------------------------------- configuration and task validation


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"eval_method": "judge"}, ValueError, "eval_method"),
        ({"reward_preset": "test"}, ValueError, "reward_preset"),
        ({"search_backend": "serper"}, ValueError, "network access"),
        ({"search_backend": "bing"}, ValueError, "unknown search backend"),
        ({"search_backend": 3}, TypeError, "search_backend"),
        ({"search_backend": "scripted", "search_corpus": "x.jsonl"}, ValueError, "search_corpus"),
        ({"max_search_steps": -1}, ValueError, "max_search_steps"),
        ({"max_search_results": 0}, ValueError, "max_search_results"),
        ({"search_timeout_s": 0.0}, ValueError, "search_timeout_s"),
        ({"search_corpus": "/nowhere/corpus.jsonl"}, FileNotFoundError, "search corpus not found"),
        ({"correct_reward": 2.0}, TypeError, "unexpected keyword"),
    ],
)
def test_bad_configuration(kwargs: dict[str, Any], error: type[Exception], match: str) -> None:
    with pytest.raises(error, match=match):
        SearchEnv(make_task(), **kwargs)


def test_both_reward_presets_play_identically() -> None:
    for preset in ("train", "eval"):
        assert started(reward_preset=preset).step("[answer] Ilsa Marrow")[1] == 1.0


@pytest.mark.parametrize(
    "data", [{"question": "Q?"}, {"question": "", "answer": "A"}, {"question": "Q?", "answer": "?!"}]
)
def test_bad_task_data_is_refused_at_load(data: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="'k'"):
        SearchEnv(Task("search", "k", builtin_prompt("Q?"), data))


def test_userrl_tasks_on_the_builtin_corpus_warn_once(caplog: pytest.LogCaptureFixture) -> None:
    senv._warn_userrl_offline.cache_clear()
    with caplog.at_level(logging.WARNING, logger="userrl.envs.search.env"):
        SearchEnv(make_task(source="userrl"))
        SearchEnv(make_task(source="userrl"))
        SearchEnv(make_task(source="builtin"))
    assert [r.getMessage() for r in caplog.records] == [senv.USERRL_OFFLINE_WARNING]
    assert "does not contain their answers" in senv.USERRL_OFFLINE_WARNING


# ---------------------------------------------------------------- gymnasium integration


def test_the_search_step_stays_fast() -> None:
    env = started()
    start = time.perf_counter()
    for i in range(5):
        env.step(f"[search] river mountain city {i}")
    assert time.perf_counter() - start < 1.0
