"""One multi-turn episode, as data: the loop of docs/spec/ALGORITHMS.md §1.2, with no Ray in it."""

from __future__ import annotations

import logging
import zlib
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, fields, replace
from typing import Any

from pydantic import BaseModel

from userrl.chat import ChatFormat, ParsedTurn
from userrl.config import EnvConfig, PolicyConfig, UserRLConfig
from userrl.engines.base import GenerationOutput, GenerationRequest
from userrl.envs import MultiTurnEnv, Task
from userrl.trajectory import ROLE_IDS, Trajectory, TurnRecord

log = logging.getLogger(__name__)

GenerateFn = Callable[[GenerationRequest], Awaitable[GenerationOutput]]


def _config_default(section: type[BaseModel], key: str) -> Any:
    return section.model_fields[key].default


@dataclass
class RolloutLimits:
    """Budgets of one episode: the run config's keys of the same names (`from_config`), and their defaults."""

    max_turns: int = _config_default(EnvConfig, "max_turns")
    max_new_tokens: int = _config_default(PolicyConfig, "max_new_tokens")
    max_model_len: int = _config_default(PolicyConfig, "max_model_len")
    max_response_len: int = _config_default(PolicyConfig, "max_response_len")
    temperature: float = _config_default(PolicyConfig, "temperature")
    top_p: float = _config_default(PolicyConfig, "top_p")
    show_reward_in_feedback: bool = _config_default(EnvConfig, "show_reward_in_feedback")
    #: "abort": a step whose role call failed (after its retries) aborts the episode, counted and excluded;
    #: "fallback": the gym's fallback reply stands in and the episode goes on (docs/spec/GYMS.md §0.6).
    role_failure: str = _config_default(EnvConfig, "role_failure")

    @classmethod
    def from_config(cls, config: UserRLConfig, temperature: float | None = None) -> RolloutLimits:
        """The episode budgets of a config, each read from `env` or `policy` by name (temperature: the
        policy's unless given)."""
        limits = cls(**{f.name: getattr(config.env if f.name in EnvConfig.model_fields else config.policy, f.name)
                        for f in fields(cls)})
        return limits if temperature is None else replace(limits, temperature=temperature)

    def for_task(self, task: Task) -> RolloutLimits:
        """These limits with `max_new_tokens` lowered to the task's own cap (Task.max_new_tokens), if it has a lower one."""
        if task.max_new_tokens is None or task.max_new_tokens >= self.max_new_tokens:
            return self
        return replace(self, max_new_tokens=task.max_new_tokens)


def request_seed(base_seed: int, uid: str, turn: int) -> int:
    """A per-request sampling seed that does not depend on how requests are batched."""
    return zlib.crc32(f"{base_seed}:{uid}:{turn}".encode()) & 0x7FFFFFFF


@dataclass
class AgentTurn:
    """One assistant turn as the episode loop sees it, whatever produced it."""

    turn: int
    parsed: ParsedTurn
    finish_reason: str
    n_sampled: int
    policy_version: int | None = None
    #: The front end's own record of the reply (message-level: the assistant message and its call ids).
    reply: Any = None


class EpisodePolicy(ABC):
    """The agent's side of an episode: writes the prompt, takes turns, and files the env's feedback.

    Token-level (TokenPolicy: a replica's tokens, masks and logprobs) and message-level
    (openai_policy.OpenAIPolicy: any OpenAI-compatible endpoint) front ends share `run_episode`.
    """

    @abstractmethod
    def start(self, traj: Trajectory, task: Task, env: MultiTurnEnv) -> None:
        """Put the task's opening messages into the trajectory (`env` holds the task: its tools, if any)."""

    @abstractmethod
    async def act(self, traj: Trajectory, turn: int, limits: RolloutLimits, seed: int) -> AgentTurn | None:
        """Take one assistant turn; None when the context has no room for one."""

    @abstractmethod
    def observe(self, traj: Trajectory, turn: AgentTurn, feedback: str, limits: RolloutLimits) -> bool:
        """File the env's feedback to `turn`; False when it did not fit the context."""


async def run_episode(
    env: MultiTurnEnv,
    task: Task,
    policy: EpisodePolicy,
    limits: RolloutLimits,
    *,
    uid: str,
    group_id: str,
    seed: int = 0,
) -> Trajectory:
    """Play one episode (docs/spec/ALGORITHMS.md §1.2) within `limits` and the task's own token cap; never raises for env, policy
    or parse failures (they abort it)."""
    limits = limits.for_task(task)
    traj = new_trajectory(task, uid, group_id)
    try:
        policy.start(traj, task, env)
    except Exception as error:  # noqa: BLE001 - e.g. a gym without tools under native_tools: this episode only
        log.warning("cannot open episode %s: %s: %s", uid, type(error).__name__, error)
        env.close()
        return abort_trajectory(traj, f"prompt_exception:{type(error).__name__}")
    if not reset_env(env, task, traj):
        return traj
    versions: list[int] = []
    try:
        for turn in range(limits.max_turns):
            try:
                reply = await policy.act(traj, turn, limits, request_seed(seed, uid, turn))
            except Exception as error:  # noqa: BLE001 - a policy failure aborts this episode only
                log.warning("policy failed in episode %s: %s: %s", uid, type(error).__name__, error)
                return abort_trajectory(traj, f"generate_exception:{type(error).__name__}", versions)
            if reply is None:
                traj.stop_reason = "context_full"
                break
            if reply.policy_version is not None:
                versions.append(reply.policy_version)
            record = TurnRecord(n_sampled=reply.n_sampled)
            traj.turns.append(record)
            if reply.finish_reason == "length":
                traj.stop_reason = "length"
                break
            outcome = await apply_turn(env, reply.parsed, record, limits)
            if outcome is None:
                traj.stop_reason = "no_tool_call"
                break
            fits = policy.observe(traj, reply, outcome.feedback, limits)
            if outcome.error:
                return abort_trajectory(traj, outcome.error, versions)
            if not fits:
                traj.stop_reason = "context_full"
                break
            if outcome.done:
                traj.stop_reason = "env_done"
                break
    finally:
        env.close()
    traj.policy_version = min(versions) if versions else 0
    return traj


class TokenPolicy(EpisodePolicy):
    """The token-level front end: rendered ids, loss masks and sampler logprobs from `generate`."""

    def __init__(self, chat: ChatFormat, generate: GenerateFn):
        self.chat, self.generate = chat, generate

    def start(self, traj: Trajectory, task: Task, env: MultiTurnEnv) -> None:
        """The rendered prompt (system + user, with the gym's tools under native_tools), outside the loss."""
        messages, tools = self.chat.episode_opening(task, env)
        traj.messages = [dict(m) for m in messages]
        for ids, role in self.chat.encode_prompt(messages, tools):
            traj.append(ids, role)
        traj.prompt_len = len(traj.input_ids)

    async def act(self, traj: Trajectory, turn: int, limits: RolloutLimits, seed: int) -> AgentTurn | None:
        """The assistant header, then sampled tokens up to the turn and context budgets."""
        header = self.chat.header_ids if turn > 0 else []
        room = min(limits.max_model_len - len(traj.input_ids),
                   limits.max_response_len - traj.response_len) - len(header)
        if room <= 1:
            return None
        traj.turn_starts.append(traj.response_len)
        traj.append(header, ROLE_IDS["assistant"], turn=turn)
        request = GenerationRequest(
            prompt_ids=list(traj.input_ids), max_new_tokens=min(room - 1, limits.max_new_tokens),
            temperature=limits.temperature, top_p=limits.top_p, seed=seed,
            stop_token_ids=self.chat.stop_token_ids, cache_key=traj.uid,
        )
        try:
            out = await self.generate(request)
        except Exception:
            traj.turn_starts.pop()  # the aborted trajectory keeps what was played before this turn
            _truncate(traj, len(traj.input_ids) - len(header))
            raise
        if self.chat.stop_strings:
            out = cut_at_stop_strings(out, self.chat.tokenizer, self.chat.stop_strings)
        traj.append(out.token_ids, ROLE_IDS["assistant"], sampled=True, turn=turn, logprobs=out.logprobs)
        text = self.chat.tokenizer.decode(out.token_ids, skip_special_tokens=True)
        traj.messages.append({"role": "assistant", "content": text})
        return AgentTurn(turn, self.chat.parse(text), out.finish_reason, len(out.token_ids), out.policy_version)

    def observe(self, traj: Trajectory, turn: AgentTurn, feedback: str, limits: RolloutLimits) -> bool:
        """The tool (or, for a message to the user, user) message's ids, cut to what the context has room for."""
        tool_messages = self.chat.tool_messages(turn.parsed, feedback)
        if not tool_messages:  # a protocol whose episode ends with the reply (user_reply): nothing to file
            return True
        traj.messages.extend(tool_messages)
        tool_ids = self.chat.encode_after_assistant(tool_messages)
        room = min(limits.max_model_len - len(traj.input_ids), limits.max_response_len - traj.response_len)
        traj.append(tool_ids[:max(room, 0)], ROLE_IDS[tool_messages[0]["role"]], turn=turn.turn)
        return len(tool_ids) <= room


def cut_at_stop_strings(out: GenerationOutput, tokenizer: Any, stops: tuple[str, ...]) -> GenerationOutput:
    """The output cut after the token that completes the first stop string (finish reason `stop`), else as is.

    The engines stop on token ids only; the tokens after a stop string would be trained on although the
    reply ended there, so they are dropped with their logprobs (the kept tokens' logprobs do not depend on them).
    """
    text = ""
    for k, token in enumerate(out.token_ids):
        text += tokenizer.decode([token], skip_special_tokens=True)
        if any(stop in text for stop in stops):
            return GenerationOutput(out.token_ids[:k + 1], out.logprobs[:k + 1], "stop", out.policy_version)
    return out


def _truncate(traj: Trajectory, length: int) -> None:
    for name in ("input_ids", "role_ids", "loss_mask", "turn_ids", "sampler_logprobs"):
        del getattr(traj, name)[length:]


def abort_trajectory(traj: Trajectory, error: str, versions: list[int] | None = None) -> Trajectory:
    """Mark an episode as failed (counted, excluded from updates and metrics), keeping what it played."""
    traj.aborted = True
    traj.error = error
    traj.stop_reason = "aborted"
    traj.policy_version = min(versions) if versions else 0
    return traj


# ---------------------------------------------------------------------------------------------------------
# Episode bookkeeping shared by every policy front end (token-level here, message-level in openai_policy).


@dataclass
class TurnOutcome:
    """What executing one assistant turn on the env produced."""

    feedback: str
    error: str | None
    done: bool


def new_trajectory(task: Task, uid: str, group_id: str) -> Trajectory:
    """An empty trajectory for one episode of `task` (stop reason max_turns until something ends it)."""
    return Trajectory(uid=uid, group_id=group_id, env_name=task.gym, item_key=task.item_key,
                      data_source=f"{task.source}_{task.gym}", stop_reason="max_turns")


def reset_env(env: MultiTurnEnv, task: Task, traj: Trajectory) -> bool:
    """Reset env on task; on failure the trajectory is aborted and False is returned."""
    try:
        env.reset(options={"task": task})
    except Exception as error:  # noqa: BLE001 - a broken env is counted, never fatal to the batch
        log.exception("env reset failed for %s/%s", task.gym, task.item_key)
        abort_trajectory(traj, f"reset_exception:{type(error).__name__}")
        return False
    return True


async def apply_turn(env: MultiTurnEnv, parsed: ParsedTurn, record: TurnRecord,
                     limits: RolloutLimits) -> TurnOutcome | None:
    """Execute the first call of a parsed assistant turn and fill its record; None when it has no call."""
    record.n_tool_calls = parsed.n_tool_calls
    action = parsed.action
    if action is None:
        return None
    result = await env.astep(action)
    record.executed = True
    record.choice, record.content = parsed.calls[0]
    record.reward = float(result.reward)
    record.terminated, record.truncated = bool(result.terminated), bool(result.truncated)
    feedback = str(result.observation.get("feedback", ""))
    if limits.show_reward_in_feedback:
        feedback = f"{feedback}\nReward: {result.reward}"
    record.feedback = feedback
    info = result.info if isinstance(result.info, dict) else {}
    calls = info.get("lm_calls") or []
    failed = [call for call in calls if not call.get("ok", True)]
    record.role_calls, record.failed_role_calls = len(calls), len(failed)
    tool_call = info.get("tool_call")  # gyms that expose tools (MultiTurnEnv.exposes_tools)
    if isinstance(tool_call, dict):
        record.tool, record.tool_error = str(tool_call.get("name", "")), bool(tool_call.get("error", False))
    error = info.get("error")
    if not error and failed and limits.role_failure == "abort":
        # The gym's fallback stood in for the user or judge: the step's reward is not the role's verdict.
        error = f"role_call_failed:{failed[0].get('role', '?')}"
    return TurnOutcome(feedback, str(error) if error else None, record.terminated or record.truncated)
