"""Supervised warm start: demonstrations as token-exact trajectories (loss on assistant tokens only)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from userrl.chat import ChatFormat
from userrl.envs import Task, UngroundedTask, make_env, make_solver, tool_call_to_action
from userrl.trajectory import ROLE_IDS, Trajectory, TurnRecord


def trajectory_from_messages(messages: list[dict[str, str]], chat: ChatFormat, uid: str = "demo",
                             env_name: str = "", item_key: str = "") -> Trajectory:
    """Tokenize [system, user, (assistant, tool+)*] the way the rollout would have sampled it."""
    if [m["role"] for m in messages[:2]] != ["system", "user"]:
        raise ValueError(f"demonstration {uid}: messages must start with system, user")
    traj = Trajectory(uid=uid, group_id=uid, env_name=env_name, item_key=item_key, messages=list(messages))
    for ids, role in chat.encode_prompt(list(messages[:2])):
        traj.append(ids, role)
    traj.prompt_len = len(traj.input_ids)
    rest, turn = messages[2:], -1
    i = 0
    while i < len(rest):
        message = rest[i]
        if message["role"] != "assistant":
            raise ValueError(f"demonstration {uid}: expected an assistant message at position {i + 2}")
        turn += 1
        traj.turn_starts.append(traj.response_len)
        if turn > 0:
            traj.append(chat.header_ids, ROLE_IDS["assistant"], turn=turn)
        sampled = chat._encode(message["content"]) + [chat.tokenizer.eos_token_id]
        traj.append(sampled, ROLE_IDS["assistant"], sampled=True, turn=turn)
        record = TurnRecord(n_sampled=len(sampled))
        traj.turns.append(record)
        i += 1
        tools = []
        while i < len(rest) and rest[i]["role"] != "assistant":
            tools.append(rest[i])
            i += 1
        if tools:
            record.executed = True
            record.feedback = tools[0]["content"]
            traj.append(chat.encode_after_assistant(tools), ROLE_IDS["tool"], turn=turn)
    traj.stop_reason = "env_done"
    return traj


def solver_demonstrations(tasks: list[Task], chat: ChatFormat, episodes: int, seed: int = 0,
                          max_turns: int = 16, env_kwargs: dict[str, Any] | None = None) -> list[Trajectory]:
    """Play `episodes` tasks (cycling) with each gym's scripted solver.

    Tasks the solver cannot ground (it raises UngroundedTask) and episodes that earn no reward are skipped.
    """
    rng = np.random.default_rng(seed)
    # A seeded shuffle, so a mixture's demonstrations come from every gym, not the first in the list.
    tasks = [tasks[int(i)] for i in rng.permutation(len(tasks))]
    demos: list[Trajectory] = []
    grounded = [True] * len(tasks)
    n = 0
    while len(demos) < episodes:
        if not any(grounded):
            raise ValueError(f"no task of {sorted({t.gym for t in tasks})} has a grounded, rewarded "
                             "demonstration (UngroundedTask or no reward); choose other gyms or levels for sft")
        index = n % len(tasks)
        n += 1
        if not grounded[index]:
            continue
        task = tasks[index]
        try:
            messages, episode_return = _solver_messages(task, chat, rng, max_turns,
                                                        (env_kwargs or {}).get(task.gym, {}))
        except UngroundedTask:
            grounded[index] = False  # the transcript cannot justify an answer: no demonstration of it
            continue
        if episode_return <= 0:
            grounded[index] = False  # a grounded plan that earned nothing would teach failing
            continue
        demos.append(trajectory_from_messages(messages, chat, uid=f"demo-{len(demos)}", env_name=task.gym,
                                              item_key=task.item_key))
    return demos


def _solver_messages(task: Task, chat: ChatFormat, rng: np.random.Generator, max_turns: int,
                     env_kwargs: dict[str, Any]) -> tuple[list[dict[str, str]], float]:
    env = make_env(task.gym, task, **env_kwargs)
    try:
        env.reset()
        solver = make_solver(task.gym, task, rng)
        messages = chat.initial_messages(task.prompt)
        feedback, episode_return = None, 0.0
        for _ in range(max_turns):
            choice, content = solver.next_action(feedback)
            messages.append({"role": "assistant", "content": chat.render_action(choice, content)})
            observation, reward, terminated, truncated, _ = env.step(tool_call_to_action(choice, content))
            feedback, episode_return = observation["feedback"], episode_return + float(reward)
            messages.append({"role": "tool", "content": feedback})
            if terminated or truncated:
                break
        return messages, episode_return
    finally:
        env.close()


def file_demonstrations(path: str | Path, chat: ChatFormat) -> list[Trajectory]:
    """Read a JSONL file with one {"messages": [...]} conversation per line."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"sft.path={path} does not exist (expected JSONL with a 'messages' list per line)")
    demos = []
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        if not line.strip():
            continue
        try:
            messages = json.loads(line)["messages"]
        except (json.JSONDecodeError, KeyError, TypeError) as error:
            raise ValueError(f"{path}:{number}: not a JSON object with a 'messages' list ({error})") from None
        demos.append(trajectory_from_messages(messages, chat, uid=f"file-{number}"))
    return demos
