"""`userrl play <gym>`: a person plays the agent's side in the terminal against the simulated user."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from rich.console import Console

from userrl.envs import load_tasks, make_env


def play(gym: str, *, split: str = "test", index: int | None = None, seed: int = 0, source: str = "builtin",
         data_root: str | None = None, read: Callable[[str], str] = input, console: Console | None = None) -> float:
    """Play one episode; actions are lines like `[search] test`. Returns the episode return."""
    console = console or Console()
    tasks = load_tasks(gym, split=split, source=source, data_root=data_root)
    task = tasks[index if index is not None else int(np.random.default_rng(seed).integers(len(tasks)))]
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
