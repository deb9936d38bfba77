"""`userrl play <gym>`: a person plays the agent's side in the terminal against the simulated user."""

from __future__ import annotations

import difflib
from collections.abc import Callable

import numpy as np
from rich.console import Console

from userrl.envs import Task, load_tasks, make_env


def pick_task(tasks: list[Task], task_id: str | None, index: int | None, seed: int) -> Task:
    """A task by item key, by index, or at random (seeded)."""
    if task_id is not None:
        by_key = {t.item_key: t for t in tasks}
        if task_id not in by_key:
            close = difflib.get_close_matches(task_id, list(by_key), n=3)
            hint = f"; did you mean {', '.join(close)}?" if close else f" ({len(tasks)} tasks in this split)"
            raise ValueError(f"no task {task_id!r} in gym {tasks[0].gym!r}, split {tasks[0].split!r}{hint}")
        return by_key[task_id]
    if index is not None:
        if not 0 <= index < len(tasks):
            raise ValueError(f"--index {index} is out of range: this split has {len(tasks)} tasks")
        return tasks[index]
    return tasks[int(np.random.default_rng(seed).integers(len(tasks)))]


def play(gym: str, *, split: str = "test", index: int | None = None, task_id: str | None = None, seed: int = 0,
         source: str = "builtin", data_root: str | None = None, read: Callable[[str], str] = input,
         console: Console | None = None) -> float:
    """Play one episode; actions are lines like `[search] test`. Returns the episode return."""
    console = console or Console()
    task = pick_task(load_tasks(gym, split=split, source=source, data_root=data_root), task_id, index, seed)
    env = make_env(gym, task)
    env.reset()
    console.rule(f"{gym} - {task.item_key}")
    for message in task.prompt:
        console.print(f"[bold]{message['role']}[/]: {message['content']}\n")
    console.print("Type an action such as [cyan]\\[answer] 42[/] ([cyan]\\[finish][/] ends, an empty line quits).")
    total, done = 0.0, False
    while not done:
        try:
            action = read("you> ").strip()
        except EOFError:
            break
        if not action:
            break
        observation, reward, terminated, truncated, _ = env.step(action)
        total += reward
        done = terminated or truncated
        console.print(f"[green]env[/]: {observation['feedback']}  [dim](reward {reward:g}, return {total:g})[/]")
    env.close()
    console.print(f"episode return: {total:g}")
    return total
