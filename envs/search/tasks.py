"""Search task sets: our own fictional questions ("builtin") and the original Bamboogle files ("userrl").

Builtin questions are answerable from our own corpus (data/corpus.jsonl), which the default
`local_corpus` search backend indexes with BM25.

Source "userrl" loads the 125 Bamboogle questions of the original, with the parquet prompts verbatim.
Their answers are real-world facts that the original looked up with a web search, which is not
available offline. Unless an env is given another backend, these episodes search OUR fictional corpus,
which does not contain their answers: the agent can only answer them from its own knowledge. Scores on
them are therefore closed-book scores, not comparable with the original's web-search scores.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from userrl.envs.base import Task
from userrl.envs.loading import (
    check_builtin_split,
    check_userrl_split,
    index_by_id,
    item_id_of,
    label_filter,
    read_json_array,
    read_split_items,
    require_file,
    resolve_userrl_rows,
    source_loader,
    system_user_prompt,
    userrl_parquet,
)

GYM = "search"
DATA_SOURCE = "interact_searchgym"

#: The system message of builtin tasks. Choices and contents only: the chat layer appends how to act
#: (tool call or bracket line).
SEARCH_SYSTEM_PROMPT = (
    "You are playing SearchGym. You get a factual question about a fictional world, so your own "
    "knowledge will not help: the facts are in a collection of short encyclopedia documents. Some "
    "questions chain two facts, such as the birthplace of the person who invented something.\n"
    "Choices:\n"
    "- search: give a search query, a few keywords such as a name. You get the best-matching documents. "
    "You have at most 5 searches.\n"
    "- answer: give a short answer, such as a name, a place or a number. A correct answer ends the game; "
    "after a wrong one you may search more or answer again.\n"
    "Search for each fact you need, then answer. Your steps are limited."
)
SEARCH_USER_SUFFIX = "Plan your searches step by step, then give a short answer."

BUILTIN_QUESTIONS_PATH = Path(__file__).resolve().parent / "data" / "questions.json"
USERRL_QUESTIONS_JSON = Path("gyms/SearchGym/searchgym/data/questions.json")
#: Split name -> parquet file (relative to data_root). Search is evaluation-only in the original: it has
#: no training file, and the merged training file holds no Search rows.
USERRL_PARQUET = userrl_parquet("bamboogle_multiturn", splits=("test",))
HOP_COUNTS = (1, 2)


def builtin_prompt(question: str) -> list[dict[str, str]]:
    """The [system, user] prompt of a builtin question."""
    return system_user_prompt(SEARCH_SYSTEM_PROMPT, f"{question}\n{SEARCH_USER_SUFFIX}")


def validate_record(record: Any, where: str) -> dict[str, Any]:
    """Check one question item (string id, question, answer); ValueError names where and the id."""
    item_id = item_id_of(record, where)
    for key in ("question", "answer"):
        value = record.get(key)
        if not isinstance(value, str) or not value.strip():
            raise ValueError(f"{where}: item {item_id!r} needs a non-empty string {key!r}")
    return {"id": item_id, "question": record["question"].strip(), "answer": record["answer"].strip()}


def _builtin_record(raw: Any, where: str) -> dict[str, Any]:
    record = validate_record(raw, where)
    hops, plan, supporting = raw.get("hops"), raw.get("search_plan"), raw.get("supporting")
    if hops not in HOP_COUNTS or raw.get("split") not in ("train", "test"):
        raise ValueError(f"{where}: item {record['id']!r} needs hops 1 or 2 and split train/test")
    if not (
        isinstance(plan, list)
        and isinstance(supporting, list)
        and len(plan) == len(supporting) == hops
        and all(isinstance(t, str) for t in supporting)
        and all(isinstance(o, list) and o and all(isinstance(q, str) for q in o) for o in plan)
    ):
        raise ValueError(
            f"{where}: item {record['id']!r} needs one supporting title and one non-empty list of "
            "search queries per hop"
        )
    return {**record, "hops": hops, "supporting": list(supporting), "search_plan": [list(o) for o in plan]}


def load_builtin_tasks(
    split: str = "train", hops: int | Sequence[int] | None = None, path: str | Path | None = None
) -> list[Task]:
    """Our own questions (search/data/questions.json) of one split, optionally of some hop counts."""
    check_builtin_split(GYM, split)
    wanted = label_filter(GYM, "hop counts", hops, HOP_COUNTS)
    path = Path(path) if path is not None else BUILTIN_QUESTIONS_PATH
    # Search's loader has always given the data_root hint for a missing builtin file too; keep that message.
    require_file(path)
    tasks = []
    for item in read_split_items(path, "questions", _builtin_record):
        record = {k: v for k, v in item.items() if k != "split"}
        if item["split"] != split or (wanted is not None and record["hops"] not in wanted):
            continue
        tasks.append(
            Task(
                GYM,
                record["id"],
                builtin_prompt(record["question"]),
                record,
                split=split,
                difficulty=record["hops"],
                source="builtin",
            )
        )
    return tasks


def load_userrl_questions(data_root: str | Path) -> dict[str, dict[str, Any]]:
    """The original questions.json (Bamboogle), validated and indexed by id."""
    path = Path(data_root) / USERRL_QUESTIONS_JSON
    return index_by_id(read_json_array(path, "question items"), validate_record, path)


def load_userrl_tasks(split: str, data_root: str | Path) -> list[Task]:
    """Original parquet rows of one split (test, alltest, alltrain) resolved against questions.json."""
    check_userrl_split(
        GYM, split, USERRL_PARQUET, ": the original Search data is evaluation-only and has no training file"
    )
    questions = load_userrl_questions(data_root)
    questions_path = Path(data_root) / USERRL_QUESTIONS_JSON

    def same_answer(row: dict[str, Any], record: dict[str, Any], where: str) -> None:
        truth = (row.get("reward_model") or {}).get("ground_truth")
        if truth is not None and truth.strip() != record["answer"]:
            raise ValueError(
                f"{where} has ground_truth {truth!r}, but {questions_path} gives the answer {record['answer']!r}"
            )

    path = Path(data_root) / USERRL_PARQUET[split]
    columns = ["data_source", "prompt", "reward_model", "extra_info"]
    return resolve_userrl_rows(
        GYM, split, path, DATA_SOURCE, questions.get, what="question id", missing=f"not in {questions_path}",
        columns=columns, check=same_answer,
    )


#: load_search_tasks(split, source, data_root, hops=None): the registry's loader of Search tasks.
load_search_tasks = source_loader(GYM, load_builtin_tasks, load_userrl_tasks, builtin_only=("hops",))
