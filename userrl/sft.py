"""Supervised warm start: demonstrations as token-exact trajectories (loss on assistant tokens only)."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from userrl.chat import ChatFormat
from userrl.envs import Task, UngroundedTask, make_env, make_solver
from userrl.envs.registry import get_gym
from userrl.plugins import registered
from userrl.trajectory import ROLE_IDS, Trajectory, TurnRecord

log = logging.getLogger(__name__)


def trajectory_from_messages(messages: list[dict[str, str]], chat: ChatFormat, uid: str = "demo",
                             env_name: str = "", item_key: str = "", prompt_messages: int = 2,
                             tools: list[dict[str, Any]] | None = None) -> Trajectory:
    """Tokenize [system, user, (assistant, (tool | user)+)*] the way the rollout would have sampled it.

    The first `prompt_messages` messages are the episode's opening, outside the loss (2 for an agent's
    [system, user]; a user-reply task's whole persona prompt + context), rendered with `tools` (native_tools:
    the gym's schemas, for a chat template that renders them). A sampled message ends with the end-of-turn
    token, unless it ends with one of the protocol's stop strings: the rollout cuts a reply there
    (user_reply: after a field's closing tag), so the demonstration ends there too. The messages after an
    assistant message (tool results; under native_tools the user's reply) take the first one's role.
    """
    if [m["role"] for m in messages[:2]] != ["system", "user"]:
        raise ValueError(f"demonstration {uid}: messages must start with system, user")
    if not 2 <= prompt_messages < len(messages) + 1:
        raise ValueError(f"demonstration {uid}: prompt_messages={prompt_messages} must be in [2, {len(messages)}]")
    traj = Trajectory(uid=uid, group_id=uid, env_name=env_name, item_key=item_key, messages=list(messages))
    for ids, role in chat.encode_prompt(list(messages[:prompt_messages]), tools):
        traj.append(ids, role)
    traj.prompt_len = len(traj.input_ids)
    rest, turn = messages[prompt_messages:], -1
    i = 0
    while i < len(rest):
        message = rest[i]
        if message["role"] != "assistant":
            raise ValueError(f"demonstration {uid}: expected an assistant message at position {i + 2}")
        turn += 1
        traj.turn_starts.append(traj.response_len)
        if turn > 0:
            traj.append(chat.header_ids, ROLE_IDS["assistant"], turn=turn)
        content = message["content"]
        stopped = any(content.endswith(stop) for stop in chat.stop_strings)
        sampled = chat._encode(content) + ([] if stopped else [chat.tokenizer.eos_token_id])
        traj.append(sampled, ROLE_IDS["assistant"], sampled=True, turn=turn)
        record = TurnRecord(n_sampled=len(sampled))
        traj.turns.append(record)
        i += 1
        replies = []
        while i < len(rest) and rest[i]["role"] != "assistant":
            replies.append(rest[i])
            i += 1
        if replies:
            record.executed = True
            record.feedback = replies[0]["content"]
            # As TokenPolicy.observe files them: one segment, in the role of its first message.
            traj.append(chat.encode_after_assistant(replies), ROLE_IDS[replies[0]["role"]], turn=turn)
    traj.stop_reason = "env_done"
    return traj


def within_length(demos: list[Trajectory], max_len: int, source: str) -> list[Trajectory]:
    """The demonstrations a rollout could have played, at most max_len (policy.max_model_len) tokens; the
    longer ones are dropped and counted in a warning (a rollout is cut there, so training on them teaches
    what the policy never plays). None left is an error naming the limit."""
    kept = [demo for demo in demos if len(demo.input_ids) <= max_len]
    if demos and not kept:
        raise ValueError(f"sft: every one of the {len(demos)} demonstrations from {source} is longer than "
                         f"policy.max_model_len={max_len} tokens (the shortest has "
                         f"{min(len(d.input_ids) for d in demos)}); raise policy.max_model_len")
    if len(kept) < len(demos):
        log.warning("sft: %d of %d demonstrations from %s are longer than policy.max_model_len=%d tokens and "
                    "were dropped", len(demos) - len(kept), len(demos), source, max_len)
    return kept


def solver_demonstrations(tasks: list[Task], chat: ChatFormat, episodes: int, seed: int = 0,
                          max_turns: int = 16, env_kwargs: dict[str, Any] | None = None,
                          max_len: int | None = None) -> list[Trajectory]:
    """Play `episodes` tasks (cycling) with each gym's scripted solver.

    Each demonstration is the episode a rollout of `chat`'s protocol would have played had the policy written
    the solver's moves: the same opening (under native_tools the gym's prompt and tool schemas), each move as
    the protocol's assistant text, executed as the rollout parses it, and the feedback filed as the rollout
    files it (native_tools: a tool call's result as a tool message, a message to the user followed by the
    user's reply). Tasks the solver cannot ground (it raises UngroundedTask), episodes that earn no reward
    and, with max_len (policy.max_model_len), demonstrations longer than a rollout may be are skipped.
    """
    rng = np.random.default_rng(seed)
    # A seeded shuffle, so a mixture's demonstrations come from every gym, not the first in the list.
    tasks = [tasks[int(i)] for i in rng.permutation(len(tasks))]
    demos: list[Trajectory] = []
    grounded = [True] * len(tasks)
    n = overlong = 0
    while len(demos) < episodes:
        if not any(grounded):
            raise ValueError(f"no task of {sorted({t.gym for t in tasks})} has a grounded, rewarded "
                             f"demonstration (UngroundedTask or no reward; {overlong} longer than "
                             f"policy.max_model_len={max_len}); choose other gyms or levels for sft, or raise "
                             "policy.max_model_len")
        index = n % len(tasks)
        n += 1
        if not grounded[index]:
            continue
        task = tasks[index]
        try:
            messages, tools, episode_return = _solver_messages(task, chat, rng, max_turns,
                                                               (env_kwargs or {}).get(task.gym, {}))
        except UngroundedTask:
            grounded[index] = False  # the transcript cannot justify an answer: no demonstration of it
            continue
        if episode_return <= 0:
            grounded[index] = False  # a grounded plan that earned nothing would teach failing
            continue
        demo = trajectory_from_messages(messages, chat, uid=f"demo-{len(demos)}", env_name=task.gym,
                                        item_key=task.item_key, tools=tools)
        if max_len is not None and len(demo.input_ids) > max_len:
            grounded[index], overlong = False, overlong + 1  # a rollout is cut at max_len: never teach past it
            continue
        demos.append(demo)
    if overlong:
        log.warning("sft: %d tasks' solver demonstrations are longer than policy.max_model_len=%d tokens; they "
                    "were skipped", overlong, max_len)
    return demos


def _solver_messages(task: Task, chat: ChatFormat, rng: np.random.Generator, max_turns: int,
                     env_kwargs: dict[str, Any]) -> tuple[list[dict[str, str]], list[dict[str, Any]], float]:
    """One solver episode as (messages, tool schemas, return), played like run_episode plays a policy's turns."""
    protocol = chat.protocol
    # The episode follows the protocol's rules for the gym (native_tools: its native ones), as
    # env_runner_group.env_kwargs sets them.
    env = make_env(task.gym, task, **{**protocol.env_kwargs(get_gym(task.gym)), **env_kwargs})
    try:
        messages, tools = chat.episode_opening(task, env)
        env.reset()
        solver = make_solver(task.gym, task, rng)
        protocol.start_demonstration(solver, task.gym, messages, tools)
        feedback, episode_return = None, 0.0
        for _ in range(max_turns):
            text = protocol.demonstration_text(*solver.next_action(feedback))
            if text is None:
                break  # the plan is over where the protocol's episode is not (native_tools' finish)
            parsed = chat.parse(text)  # what the rollout executes: the first call of the text, as it parses it
            if parsed.action is None:
                break  # the rollout would end here (no_tool_call), unrewarded
            messages.append({"role": "assistant", "content": text})
            observation, reward, terminated, truncated, _ = env.step(parsed.action)
            feedback, episode_return = observation["feedback"], episode_return + float(reward)
            messages.extend(chat.tool_messages(parsed, feedback))
            if terminated or truncated:
                break
        return messages, tools, episode_return
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


@dataclass(frozen=True)
class DemoRequest:
    """What an SFT source is asked for (from the run's config: sft.episodes, experiment.seed, env.max_turns,
    policy.max_model_len, sft.path)."""

    episodes: int
    seed: int
    max_turns: int
    max_len: int
    path: str | None = None


#: A source of SFT demonstrations: (the request, the training tasks on rank 0, the chat format) ->
#: demonstrations, each at most `request.max_len` tokens.
SFTSource = Callable[[DemoRequest, list[Task], ChatFormat], list[Trajectory]]

#: Registry name (`sft.source`) -> SFT source.
SFT_SOURCES: dict[str, SFTSource] = {}


def register_sft_source(name: str, source: SFTSource) -> SFTSource:
    """Add an SFT source under `name` (re-registering replaces it)."""
    SFT_SOURCES[name] = source
    return source


def get_sft_source(name: str) -> SFTSource:
    """The SFT source registered under `name` (ValueError naming the known ones); plug-ins' sources are
    registered on the first lookup of a name not built in."""
    return registered(SFT_SOURCES, name, "SFT source")


def _solver_source(request: DemoRequest, tasks: list[Task], chat: ChatFormat) -> list[Trajectory]:
    return solver_demonstrations(tasks, chat, request.episodes, seed=request.seed, max_turns=request.max_turns,
                                 max_len=request.max_len)


def _file_source(request: DemoRequest, tasks: list[Task], chat: ChatFormat) -> list[Trajectory]:
    return within_length(file_demonstrations(request.path, chat), request.max_len, f"sft.path={request.path}")


register_sft_source("solver", _solver_source)
register_sft_source("file", _file_source)
