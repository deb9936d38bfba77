"""The Search gym: multi-hop question answering over an offline BM25-indexed corpus.

Spec: docs/spec/GYMS.md §4.
"""

from userrl.envs.registry import register_gym
from userrl.envs.search.backends import (
    LocalCorpusBackend,
    OracleStubBackend,
    SearchBackend,
    SearchError,
    SearchResults,
    format_results,
)
from userrl.envs.search.corpus import BUILTIN_CORPUS_PATH, CorpusIndex, Document, corpus_index, load_corpus
from userrl.envs.search.env import SearchEnv
from userrl.envs.search.judge import JUDGE_SYSTEM_PROMPT, scripted_judge
from userrl.envs.search.solver import SearchSolver
from userrl.envs.search.tasks import SEARCH_SYSTEM_PROMPT, load_search_tasks

register_gym("search", SearchEnv, load_search_tasks, SearchSolver, "userrl/Search-v0")

__all__ = [
    "BUILTIN_CORPUS_PATH",
    "JUDGE_SYSTEM_PROMPT",
    "SEARCH_SYSTEM_PROMPT",
    "CorpusIndex",
    "Document",
    "LocalCorpusBackend",
    "OracleStubBackend",
    "SearchBackend",
    "SearchEnv",
    "SearchError",
    "SearchResults",
    "SearchSolver",
    "corpus_index",
    "format_results",
    "load_corpus",
    "load_search_tasks",
    "scripted_judge",
]
