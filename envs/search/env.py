"""SearchEnv: answer a (multi-hop) factoid question, searching first if needed (docs/spec/GYMS.md §4).

Searches go to a search backend (backends.py). The default, `local_corpus`, is BM25 over our own
fictional corpus, which holds the answers of the builtin questions. The original web search (`serper`)
is not available offline, so episodes of source "userrl" (the real-world Bamboogle questions) also
search our fictional corpus unless another backend or corpus is given: it does not contain their answers,
and a warning says so when such a task is loaded.
"""

from __future__ import annotations

import asyncio
import logging
import math
from functools import cache
from pathlib import Path
from typing import Any, ClassVar

from gymnasium import spaces

from userrl.envs.base import BOOL_SPACE, MAX_ACTION_CHARS, MultiTurnEnv, Task, text_space
from userrl.envs.search.backends import (
    MAX_SEARCH_RESULTS,
    LocalCorpusBackend,
    OracleStubBackend,
    SearchBackend,
    SearchError,
    check_backend_name,
    format_results,
)
from userrl.envs.search.judge import (
    JUDGE_MAX_TOKENS,
    JUDGE_ROLE,
    JUDGE_SYSTEM_PROMPT,
    exact_match,
    judge_user_message,
    scripted_judge,
    validate_judgment,
)
from userrl.envs.text import norm

logger = logging.getLogger(__name__)

# Every feedback string of section 4, verbatim.
MAX_SEARCHES_REACHED = "You have reached the maximum number of searches. Please answer now."
SEARCH_ERROR = "Search error: the search timed out. Try again or answer."
CORRECT = "Correct! Your answer is right."
INCORRECT = "Incorrect. You may search more or try another answer."
INVALID_ACTION = "Invalid action. Allowed choices: search, answer."
FINISHED = "Episode finished. The correct answer was: {answer}"
#: The reset text; like every reset text it is never shown to the agent (§0.3).
WELCOME = "SearchGym: a question is ready. Search for information, then answer."

EVAL_METHODS = ("llm", "rule")
USERRL_OFFLINE_WARNING = (
    "Search: source 'userrl' (Bamboogle) episodes search the builtin fictional corpus, because the original "
    "web search is unavailable offline; the corpus does not contain their answers, so these are closed-book "
    "scores."
)


class SearchEnv(MultiTurnEnv):
    """The Search gym: search (at most max_search_steps times), then answer; a correct answer pays 1."""

    gym_name: ClassVar[str] = "search"
    allowed_choices: ClassVar[tuple[str, ...]] = ("search", "answer")
    normalize_rewards_default: ClassVar[bool] = False
    uses_role_client: ClassVar[bool] = True
    role_names: ClassVar[tuple[str, ...]] = (JUDGE_ROLE,)

    def _configure(
        self,
        *,
        eval_method: str = "llm",
        search_backend: str | SearchBackend = "local_corpus",
        search_corpus: str | Path | None = None,
        max_search_steps: int = 5,
        max_search_results: int = MAX_SEARCH_RESULTS,
        search_timeout_s: float = 30.0,
    ) -> None:
        """Gym keywords: the judge method, search backend (name or object), corpus and limits.

        `eval_method="llm"` runs the judge role after a failed exact match: the scripted stand-in when the
        judge's backend (`backend`, or `role_backends={"answer_judge": ...}`) is "scripted", the model
        otherwise; `"rule"` is exact match only. Search has no preset differences (§0.9).
        """
        if eval_method not in EVAL_METHODS:
            raise ValueError(f"eval_method must be one of {list(EVAL_METHODS)}, got {eval_method!r}")
        for key, value, low in (
            ("max_search_steps", max_search_steps, 0),
            ("max_search_results", max_search_results, 1),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ValueError(f"{key} must be an integer >= {low}, got {value!r}")
        if not math.isfinite(search_timeout_s) or search_timeout_s <= 0:
            raise ValueError(
                f"search_timeout_s must be a positive number of seconds, got {search_timeout_s!r}"
            )
        self.judge_backend = self.role_backends[JUDGE_ROLE]
        self.eval_method = eval_method
        self.max_search_steps = max_search_steps
        self.max_search_results = max_search_results
        self.search_timeout_s = float(search_timeout_s)
        self._search, self.search_backend_name = resolve_search_backend(search_backend, search_corpus)
        # The oracle stub needs the task's question and answer, so it is built per task (_load_task).
        self._oracle = isinstance(search_backend, str) and search_backend == "scripted"
        self._builtin_corpus = search_corpus is None

    def _roles_needing_client(self) -> list[str]:
        """The judge calls the model only with eval_method 'llm' ('rule' is exact match only)."""
        return list(super()._roles_needing_client()) if self.eval_method == "llm" else []

    def _observation_fields(self) -> dict[str, spaces.Space]:
        return {
            "question": text_space(MAX_ACTION_CHARS),
            "step_count": self.count_space(),
            "episode_complete": BOOL_SPACE,
            "answered_correctly": BOOL_SPACE,
        }

    def _load_task(self, task: Task) -> None:
        data = task.data
        question, answer = data.get("question"), data.get("answer")
        if (
            not isinstance(question, str)
            or not question.strip()
            or not isinstance(answer, str)
            or not norm(answer)
        ):
            raise ValueError(
                f"search task {task.item_key!r}: data needs a non-empty 'question' and an 'answer' with at "
                "least one letter or digit"
            )
        self._question_id = str(data.get("id", task.item_key))
        self._question = question.strip()
        self._gold = answer.strip()
        if self._oracle:
            self._search = OracleStubBackend(self._question, self._gold)
        if task.source == "userrl" and self.search_backend_name == "local_corpus" and self._builtin_corpus:
            _warn_userrl_offline()

    def _gym_info(self) -> dict[str, Any]:
        return {
            "question_id": self._question_id,
            "correct_answer": self._gold,
            "submitted_answer": self.submitted_answer,
            "search_history": list(self.search_history),
            "search_count": self.search_count,
            "search_backend": self.search_backend_name,
        }

    def _extra_obs(self) -> dict[str, Any]:
        return {"question": self._question, "answered_correctly": self.answered_correctly}

    def _reset_impl(self) -> tuple[str, dict[str, Any], dict[str, Any]]:
        self.answered_correctly = False
        self.submitted_answer: str | None = None
        self.search_history: list[str] = []
        self.search_count = 0
        return WELCOME, self._extra_obs(), self._gym_info()

    async def _astep_impl(
        self, choice: str, content: str
    ) -> tuple[str, float, bool, dict[str, Any], dict[str, Any]]:
        base, terminated = 0.0, False
        if choice == "search":
            feedback = await self._run_search(content)
        elif choice == "answer":
            feedback, base, terminated = await self._answer(content)
        elif choice == "finish":
            terminated = True
            feedback = FINISHED.format(answer=self._gold)
        else:
            feedback = INVALID_ACTION
        reward = self.shaped_reward(base, self.step_penalty * self.step_count)
        return feedback, reward, terminated, self._extra_obs(), self._gym_info()

    async def _run_search(self, query: str) -> str:
        # Every search counts, refused and failed ones included; only those sent out enter the history.
        self.search_count += 1
        if self.search_count > self.max_search_steps:
            return MAX_SEARCHES_REACHED
        self.search_history.append(query)
        assert self._search is not None  # set in _configure, or in _load_task for the oracle stub
        try:
            results = await asyncio.wait_for(
                self._search.search(query, self.max_search_results), self.search_timeout_s
            )
        except (SearchError, TimeoutError):
            return SEARCH_ERROR
        return format_results(query, results, self.max_search_results)

    async def _answer(self, answer: str) -> tuple[str, float, bool]:
        self.submitted_answer = answer
        correct = exact_match(answer, self._gold)
        # An answer without a letter or digit cannot match anything: no judge call for it.
        if not correct and self.eval_method == "llm" and norm(answer):
            correct = await self._judge(answer)
        if correct:
            self.answered_correctly = True
            return CORRECT, 1.0, True
        return INCORRECT, 0.0, False

    async def _judge(self, answer: str) -> bool:
        if self.judge_backend == "scripted":
            return scripted_judge(answer, self._gold)
        assert self.llm is not None  # checked in _configure
        value, call = await self.llm.complete_json(
            JUDGE_ROLE,
            JUDGE_SYSTEM_PROMPT,
            judge_user_message(self._question, self._gold, answer),
            validate_judgment,
            max_tokens=JUDGE_MAX_TOKENS,
        )
        self.record_lm_call(call.role, call.attempts, call.ok, call.latency_s)
        # Fallback (docs/spec/GYMS.md §4): a judge that never gave a valid reply counts as incorrect.
        return bool(value) if value is not None else False


def resolve_search_backend(
    search_backend: str | SearchBackend, search_corpus: str | Path | None
) -> tuple[SearchBackend | None, str]:
    """(backend object, name) for the search_backend keyword; None for the per-task oracle stub."""
    if isinstance(search_backend, str):
        check_backend_name(search_backend)
        if search_backend != "local_corpus":
            if search_corpus is not None:
                raise ValueError("search_corpus is only used by search_backend='local_corpus'")
            return None, search_backend
        # Built (and cached per process) now, so that no step pays for indexing.
        return LocalCorpusBackend(search_corpus), search_backend
    if isinstance(search_backend, SearchBackend):
        if search_corpus is not None:
            raise ValueError("search_corpus cannot be combined with a search backend object")
        return search_backend, str(search_backend.name)
    raise TypeError(f"search_backend must be a backend name or a SearchBackend, got {search_backend!r}")


@cache
def _warn_userrl_offline() -> None:
    """Say once per process that UserRL (Bamboogle) episodes cannot find their answers offline."""
    logger.warning(USERRL_OFFLINE_WARNING)
