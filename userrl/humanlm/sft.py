"""HumanLM's SFT source, `sft.source: rows` (registered by its plug-in): the rows' real replies and ground-truth
latent states as demonstrations of the user-reply task."""

from __future__ import annotations

import numpy as np

from userrl.chat import ChatFormat
from userrl.envs import Task
from userrl.humanlm.format import demonstration_target
from userrl.humanlm.row import Row
from userrl.sft import DemoRequest, trajectory_from_messages, within_length
from userrl.trajectory import Trajectory


def user_reply_demonstrations(tasks: list[Task], chat: ChatFormat, episodes: int,
                              seed: int = 0) -> list[Trajectory]:
    """Demonstrations of the user-reply task (sft.source=rows): each item's prompt exactly as the task
    renders it (the field's persona-bearing system prompt + the row's context), and as the reply the row's
    ground truth in the strict format, `<field>value</field>` (format.demonstration_target).

    The target is the row's real reply for the response field and its ground-truth latent state for a
    latent field; items of a latent field the row has no ground truth for are left out (nothing is made
    up). `episodes` demonstrations are drawn from a seeded shuffle of the rest, cycling when there are fewer.
    """
    if not chat.protocol.user_replies:
        raise ValueError(f"sft.source=rows demonstrates user replies: it needs env.protocol=user_reply, "
                         f"not {chat.protocol.name}")
    usable: list[tuple[Task, str]] = []
    for task in tasks:
        if "row" not in task.data or "field" not in task.data:
            raise ValueError(f"sft.source=rows: task {task.gym}:{task.item_key} is not a user-reply item "
                             "(the humanlm gym's tasks are)")
        target = demonstration_target(Row.from_record(task.data["row"], task.item_key), task.data["field"])
        if target is not None:
            usable.append((task, target))
    if not usable:
        raise ValueError(f"sft.source=rows: none of the {len(tasks)} items has a ground truth for its field; "
                         "use humanlm.mode=response_only (every row has its real reply)")
    order = np.random.default_rng(seed).permutation(len(usable))
    demos = []
    for n in range(episodes):
        task, target = usable[int(order[n % len(usable)])]
        messages = [dict(m) for m in task.data["messages"]]
        demos.append(trajectory_from_messages(messages + [{"role": "assistant", "content": target}], chat,
                                              uid=f"demo-{n}", env_name=task.gym, item_key=task.item_key,
                                              prompt_messages=len(messages)))
    return demos


def rows_source(request: DemoRequest, tasks: list[Task], chat: ChatFormat) -> list[Trajectory]:
    """The SFT source `rows`: user_reply_demonstrations of the training tasks, within policy.max_model_len."""
    demos = user_reply_demonstrations(tasks, chat, request.episodes, seed=request.seed)
    return within_length(demos, request.max_len, "the rows")
