"""The user-reply task family (docs/spec/ALGORITHMS.md §5.2) as a one-step gym, `humanlm`, played by the one episode loop.

A task is one (row, field) item of a `UserReplyTask`: the field's persona-bearing system prompt plus the
row's context messages (`native_prompt()`), which `env.protocol: user_reply` renders as they are. The
policy writes one message, the simulated user's reply (tag blocks); the env's one step records it and ends
the episode with reward 0.0 *pending*: HumanLM's judge scores all of a GRPO group's candidates in one call,
which no single episode can do, so the reward is written into the trajectory after the rollout by the group
scorer (userrl/humanlm/scoring.py, called by the RolloutCoordinator for every trajectory of this gym).

This module registers the gym when imported, which HumanLM's plug-in does (userrl/humanlm/plugin.py) the
first time the registry is asked for a gym it does not know, so it stays out of the agent gyms' lists and tests.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

from userrl.envs.base import MultiTurnEnv, Task
from userrl.envs.registry import register_gym
from userrl.humanlm.data import GYMS as SOURCE_GYMS
from userrl.humanlm.data import load_parquet, load_rows, read_jsonl
from userrl.humanlm.format import TaskItem, UserReplyTask, check_mode
from userrl.humanlm.row import Row

log = logging.getLogger(__name__)

GYM_NAME = "humanlm"


class UserReplyEnv(MultiTurnEnv):
    """One user reply per episode: the step records it; the group scorer writes its reward after the rollout."""

    gym_name: ClassVar[str] = GYM_NAME
    allowed_choices: ClassVar[tuple[str, ...]] = ("answer",)
    user_reply_task: ClassVar[bool] = True
    group_scorer: ClassVar[str | None] = "humanlm"
    config_section: ClassVar[str | None] = "humanlm"

    def _load_task(self, task: Task) -> None:
        missing = [key for key in ("row", "field", "messages") if key not in task.data]
        if missing:
            raise ValueError(f"humanlm task {task.item_key!r} lacks {missing}; build tasks with load_user_reply_tasks")

    def native_prompt(self) -> list[dict[str, str]]:
        """The field's system prompt and the row's context messages (assistant turns stay assistant)."""
        if self.task is None:
            raise RuntimeError("UserReplyEnv holds no task yet: pass task=... or reset with one")
        return [dict(m) for m in self.task.data["messages"]]

    async def _astep_impl(self, choice: str, content: str) -> tuple[str, float, bool, dict, dict]:
        # 0.0 is a placeholder, never a score: the group scorer overwrites it (or aborts the episode).
        return "", 0.0, True, {}, {"reward_pending": "group_scorer"}


def item_task(item: TaskItem, split: str) -> Task:
    """The Task of one (row, field) item: a [system, user] summary prompt, the full messages in data, and the
    field's token limit as the task's own cap (Task.max_new_tokens: 48 for a latent field, 512 for response,
    1024 for any field with thinking)."""
    last_user = next((m["content"] for m in reversed(item.messages) if m["role"] == "user"), "")
    return Task(gym=GYM_NAME, item_key=item.key,
                prompt=[dict(item.messages[0]), {"role": "user", "content": last_user}],
                data={"row": item.row.to_record(), "row_index": item.row_index, "field": item.field,
                      "messages": item.messages, "prefix_blocks": [list(b) for b in item.prefix_blocks]},
                split=split, max_new_tokens=item.max_tokens)


def read_rows(path: str | Path) -> list[Row]:
    """Rows from a HumanLM-format parquet or JSONL file; malformed rows are skipped and logged, not fatal."""
    path = Path(path)
    if path.suffix == ".jsonl":
        return read_jsonl(path)
    return load_parquet(path, skip_bad_rows=True,
                        on_skip=lambda why: log.warning("humanlm: skipped a malformed row: %s", why))


def load_reply_task(split: str, *, mode: str, data_files: Mapping[str, str] | None = None,
                    gyms: tuple[str, ...] | list[str] = SOURCE_GYMS, prompt_budget: int | None = None,
                    thinking: bool = False, warn: bool = True) -> UserReplyTask:
    """The UserReplyTask of a split: rows from `data_files[split]` (HumanLM parquet or JSONL) when given, else
    our gyms' shipped rows; rows over `prompt_budget` are dropped and counted (a warning names how many)."""
    check_mode(mode)
    if data_files and split in data_files:
        rows = read_rows(data_files[split])
    elif data_files:
        raise ValueError(f"humanlm.data_files has no {split!r} file (it has {sorted(data_files)}); add one, "
                         "e.g. humanlm.data_files.test=path/to/test.parquet")
    else:
        rows = load_rows(split, gyms)
    task = UserReplyTask(rows, mode, prompt_budget, thinking)
    if task.skipped and warn:
        log.warning("humanlm %s: %d of %d rows skipped over humanlm.prompt_budget=%s tokens: %s", split,
                    sum(task.skipped.values()), len(rows), prompt_budget, dict(task.skipped))
    return task


def load_user_reply_tasks(split: str = "train", source: str = "builtin", data_root: str | Path | None = None, *,
                          mode: str = "separate_system_prompt", data_files: Mapping[str, str] | None = None,
                          gyms: tuple[str, ...] | list[str] = SOURCE_GYMS, prompt_budget: int | None = None,
                          thinking: bool = False, **filters: Any) -> list[Task]:
    """The items of a split in one mode (7x in separate_system_prompt, ordered as the spec's expansion; the
    response field with no prefix in response_only and sequential, whose curriculum builds its own items)."""
    if filters.get("difficulty") is not None:
        raise ValueError("env.gyms[humanlm].difficulty: the humanlm gym has no difficulty levels; remove it")
    task = load_reply_task(split, mode=mode, data_files=data_files, gyms=gyms, prompt_budget=prompt_budget,
                           thinking=thinking)
    return [item_task(task[index], split) for index in range(len(task))]


def skipped_rows(split: str, *, mode: str, data_files: Mapping[str, str] | None = None,
                 gyms: tuple[str, ...] | list[str] = SOURCE_GYMS, prompt_budget: int | None = None,
                 thinking: bool = False) -> dict[str, int]:
    """How many rows of a split the prompt budget drops, by reason (for reports)."""
    return dict(load_reply_task(split, mode=mode, data_files=data_files, gyms=gyms, prompt_budget=prompt_budget,
                                thinking=thinking, warn=False).skipped)


register_gym(GYM_NAME, UserReplyEnv, load_user_reply_tasks, gymnasium_id="userrl/HumanLM-v0")
