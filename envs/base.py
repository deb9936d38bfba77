"""Common contract of every gym (docs/spec/GYMS.md §0.2-§0.3, §0.8): Task, StepResult, action parsing, MultiTurnEnv."""

from __future__ import annotations

import asyncio
import concurrent.futures
import copy
import hashlib
import json
import logging
import math
import string
from collections.abc import Callable, Coroutine, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

import gymnasium
import numpy as np
from gymnasium import spaces

if TYPE_CHECKING:
    from userrl.envs.llm import RoleClient

logger = logging.getLogger(__name__)

#: Every prefix a gym recognises (0.2.2); each is exactly 8 characters with its brackets.
ACTION_CHOICES: tuple[str, ...] = ("action", "answer", "search", "finish")
#: The `choice` enum of the interact_with_env tool schema (0.2).
TOOL_CHOICES: tuple[str, ...] = ("action", "answer", "search")

#: info["tool_call"] of a step of a gym that exposes tools and whose step called one: {"name": the tool's name,
#: "error": whether the tool returned an error}. A call of no tool the gym has (an unknown name, a call the gym
#: cannot read) is named INVALID_TOOL_CALL, so a model's invented names never become metric keys.
INVALID_TOOL_CALL = "invalid_call"

ENDED_FEEDBACK = "The episode has already ended."
TIMEOUT_FEEDBACK = "The environment did not respond in time; the episode has ended."
EXCEPTION_FEEDBACK = "The environment failed on this step; the episode has ended."

#: The names of `backend` and of every `role_backends` value, the same as the config's `env.backend`:
#: `scripted` runs the model-free stand-ins; `openai` and `local` both mean "use the role client passed
#: as llm" (which server answers is the client's business, not the gym's).
BACKENDS: tuple[str, ...] = ("scripted", "openai", "local")
#: The reward presets of docs/spec/GYMS.md §0.9 that every gym accepts.
REWARD_PRESET_NAMES: tuple[str, ...] = ("train", "eval")

#: Longest action / feedback text the declared gymnasium spaces admit (generous: no real step comes close).
MAX_ACTION_CHARS = 32_768
MAX_FEEDBACK_CHARS = 1_048_576

_T = TypeVar("_T")


@dataclass
class Task:
    """One episode item: which gym, its item key, the agent's first context and the gym payload."""

    gym: str
    item_key: str
    prompt: list[dict[str, str]]
    data: dict[str, Any]
    split: str = "train"
    difficulty: int | None = None
    source: str = "builtin"
    #: This task's own cap on the tokens one agent turn may sample (e.g. a user simulator's 48 for a latent
    #: state); the episode loop samples at most the smaller of it and the policy's `policy.max_new_tokens`. None: the
    #: policy's cap alone.
    max_new_tokens: int | None = None

    def __post_init__(self) -> None:
        if self.max_new_tokens is not None and (isinstance(self.max_new_tokens, bool)
                                                or not isinstance(self.max_new_tokens, int) or self.max_new_tokens < 1):
            raise ValueError(f"Task {self.item_key!r}: max_new_tokens must be a positive integer or None, "
                             f"got {self.max_new_tokens!r}")
        roles = [m.get("role") if isinstance(m, Mapping) else None for m in self.prompt]
        if roles != ["system", "user"] or not all(isinstance(m.get("content"), str) for m in self.prompt):
            raise ValueError(
                f"Task {self.item_key!r}: prompt must be exactly [system, user] messages with string "
                f"content, got roles {roles}"
            )
        # Parquet rows arrive as polars/arrow mappings; keep plain dicts so tasks pickle and compare cleanly.
        self.prompt = [{"role": m["role"], "content": m["content"]} for m in self.prompt]


@dataclass
class StepResult:
    """What one env step returns (0.3)."""

    observation: dict[str, Any]
    reward: float
    terminated: bool
    truncated: bool
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def aborted(self) -> bool:
        """True when the step timed out or raised (0.8); the trainer marks such trajectories."""
        return self.info.get("error") is not None

    def as_tuple(self) -> tuple[dict[str, Any], float, bool, bool, dict[str, Any]]:
        """The gymnasium 5-tuple (observation, reward, terminated, truncated, info)."""
        return self.observation, self.reward, self.terminated, self.truncated, self.info


def parse_action(text: str) -> tuple[str, str]:
    """Split an action string into (choice, content) per 0.2.2; choice is "none" without a known prefix."""
    stripped = text.strip()
    for choice in ACTION_CHOICES:
        prefix = f"[{choice}]"
        if stripped.startswith(prefix):
            return choice, stripped[len(prefix) :].strip()
    return "none", stripped


def _as_text(value: Any) -> str:
    """Read a tool argument as a string (0.2.1 step 1); models sometimes emit numbers or lists."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        return str(value)


def tool_call_to_action(choice: str | None, content: str | None) -> str:
    """Turn one interact_with_env call into the gym's action string (0.2.1)."""
    choice_s, content_s = _as_text(choice), _as_text(content)
    if choice_s in TOOL_CHOICES:
        prefix = f"[{choice_s}]"
        # Leading blanks are ignored by the gym parser anyway; checking after lstrip avoids "[answer] [answer] 5".
        return content_s if content_s.lstrip().startswith(prefix) else f"{prefix} {content_s}"
    if choice_s == "finish":
        return "[finish]"
    return content_s


def item_key_hash(item_key: str) -> int:
    """H(item_key) of 0.3.1: the first 8 bytes of SHA-256 as an unsigned big-endian integer."""
    return int.from_bytes(hashlib.sha256(item_key.encode("utf-8")).digest()[:8], "big")


def make_rng(seed: int | None, item_key: str) -> np.random.Generator:
    """The env's private generator of 0.3.1 (fresh entropy when seed is None)."""
    if seed is None:
        return np.random.default_rng()
    return np.random.default_rng([int(seed), item_key_hash(item_key)])


class UnicodeText(spaces.Text):
    """A Text space whose membership test accepts every character.

    gymnasium's Text only admits a finite charset, but feedback and actions are arbitrary Unicode (model
    output, user simulators). The charset is kept for sampling only, so `sample()` still yields fuzz input.
    """

    def contains(self, x: Any) -> bool:
        """Any str whose length is within [min_length, max_length]."""
        return isinstance(x, str) and self.min_length <= len(x) <= self.max_length

    def __repr__(self) -> str:
        return f"UnicodeText({self.min_length}, {self.max_length})"


# Printable ASCII plus a few non-ASCII characters that real model output contains.
_SAMPLE_CHARSET = string.printable + "éüß–—‘’“”…°×÷€中文"


def text_space(max_length: int) -> UnicodeText:
    """A UnicodeText space of up to max_length characters."""
    return UnicodeText(max_length, min_length=0, charset=_SAMPLE_CHARSET)


BOOL_SPACE = spaces.Discrete(2)


class ScalarBox(spaces.Box):
    """A shape-() float64 Box (default [0, 1]) that holds plain Python numbers.

    Observations stay JSON-friendly floats instead of 0-d arrays; gymnasium's Box would cast them and warn.
    """

    def __init__(self, low: float = 0.0, high: float = 1.0) -> None:
        super().__init__(low=low, high=high, shape=(), dtype=np.float64)

    def contains(self, x: Any) -> bool:
        """Any real number (not bool) within [low, high]."""
        if isinstance(x, bool) or not isinstance(x, int | float | np.integer | np.floating):
            return False
        return bool(self.low <= float(x) <= self.high)


def run_sync(coro: Coroutine[Any, Any, _T]) -> _T:
    """Run a coroutine to completion from sync code, whether or not this thread already runs a loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    # asyncio.run cannot nest inside a running loop: give the coroutine its own loop in a worker thread.
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, coro).result()


def check_backend(value: Any, name: str = "backend") -> str:
    """value itself; ValueError naming the field and the valid backends unless it is one of BACKENDS."""
    if not isinstance(value, str) or value not in BACKENDS:
        raise ValueError(f"{name} must be one of {list(BACKENDS)}, got {value!r}")
    return value


class MultiTurnEnv(gymnasium.Env):
    """Base class of all gyms: common step rules (0.3), private rng (0.3.1), step timeouts/errors (0.8).

    Subclasses set `gym_name` and `allowed_choices`, and implement `_load_task`, `_reset_impl`,
    `_astep_impl` and `_observation_fields` (plus `_configure` for gym-specific keyword arguments).
    Gyms with model-backed roles set `uses_role_client` and `role_names`; the base then takes their `llm`
    client and `role_backends`. The base also resolves `reward_preset` (0.9) into gym keywords, and draws
    a train task at reset when none was given (gymnasium's `make(id).reset(seed=...)`).
    The base owns the observation fields `feedback`, `step_count` and `episode_complete` (the last two
    only where a subclass declares them) and the info keys raw_action, action_history, total_reward,
    error and lm_calls.
    """

    gym_name: ClassVar[str] = ""
    #: The gym's builtin train tasks, loaded once (set by the registry's `register_gym`): what `reset` draws
    #: from when it names no task.
    train_task_source: ClassVar[Callable[[], Sequence[Task]] | None] = None
    #: The choices the gym's prompt offers (informational; `[finish]` is accepted where a gym handles it).
    allowed_choices: ClassVar[tuple[str, ...]] = TOOL_CHOICES
    #: Per-gym default of `normalize_rewards` (0.3).
    normalize_rewards_default: ClassVar[bool] = False
    #: Whether the gym has model-backed roles (user, oracle, judge): it then takes an `llm` RoleClient.
    uses_role_client: ClassVar[bool] = False
    #: The gym's model-backed roles: the keys `role_backends` may name.
    role_names: ClassVar[tuple[str, ...]] = ()
    #: Whether the gym offers its tools as native function calls (`env.protocol: native_tools`); such a gym
    #: overrides `tool_schemas` and `native_prompt`, and reports each step that called a tool in info["tool_call"]
    #: (see INVALID_TOOL_CALL).
    exposes_tools: ClassVar[bool] = False
    #: Whether the gym is a single-turn user-reply task (a user simulator's, played with a protocol whose
    #: `user_replies` is true): its opening is `native_prompt()`, its step only records the reply, and the
    #: reward is written after the rollout by its `group_scorer`, which judges a group's replies together.
    user_reply_task: ClassVar[bool] = False
    #: The registered group scorer (userrl/group_scorers.py) that writes this gym's rewards after each
    #: rollout, or None when its env steps reward the episodes themselves.
    group_scorer: ClassVar[str | None] = None
    #: The plug-in config section (userrl/config.register_config_section) whose `task_options` this gym's
    #: task loader takes, or None when it takes none.
    config_section: ClassVar[str | None] = None
    #: Gym keywords that `env.protocol: native_tools` implies (the gym's own rules for native episodes).
    native_tools_kwargs: ClassVar[Mapping[str, Any]] = {}
    #: Reward preset -> the gym keywords it sets (0.9); a keyword the caller gives (not None) wins.
    reward_presets: ClassVar[Mapping[str, Mapping[str, Any]]] = {name: {} for name in REWARD_PRESET_NAMES}
    metadata: ClassVar[dict[str, Any]] = {"render_modes": []}

    def __init__(
        self,
        task: Task | None = None,
        *,
        max_steps: int = 16,
        seed: int | None = 42,
        reward_scale: float = 1.0,
        step_penalty: float = 0.0,
        backend: str = "scripted",
        step_timeout_s: float = 120.0,
        normalize_rewards: bool | None = None,
        reward_preset: str = "train",
        llm: RoleClient | None = None,
        role_backends: Mapping[str, str] | None = None,
        **gym_kwargs: Any,
    ) -> None:
        super().__init__()
        if isinstance(max_steps, bool) or not isinstance(max_steps, int | np.integer) or max_steps < 1:
            raise ValueError(f"max_steps must be an integer >= 1, got {max_steps!r}")
        if seed is not None and (
            isinstance(seed, bool) or not isinstance(seed, int | np.integer) or seed < 0
        ):
            raise ValueError(f"seed must be a non-negative integer or None, got {seed!r}")
        if not math.isfinite(step_timeout_s) or step_timeout_s <= 0:
            raise ValueError(f"step_timeout_s must be a positive number of seconds, got {step_timeout_s!r}")
        if not math.isfinite(reward_scale) or not math.isfinite(step_penalty):
            raise ValueError("reward_scale and step_penalty must be finite numbers")
        if not isinstance(reward_preset, str) or reward_preset not in self.reward_presets:
            raise ValueError(
                f"reward_preset must be one of {sorted(self.reward_presets)}, got {reward_preset!r}"
            )
        self.max_steps = int(max_steps)
        self.seed = None if seed is None else int(seed)
        self.reward_scale = float(reward_scale)
        self.step_penalty = float(step_penalty)
        self.backend = check_backend(backend)
        self.step_timeout_s = float(step_timeout_s)
        self.normalize_rewards = (
            self.normalize_rewards_default if normalize_rewards is None else bool(normalize_rewards)
        )
        self.reward_preset = reward_preset
        self.llm = llm
        self.role_backends = self._resolve_role_backends(llm, role_backends)
        for key, value in self.reward_presets[reward_preset].items():
            if gym_kwargs.get(key) is None:
                gym_kwargs[key] = value
        self._configure(**gym_kwargs)
        self._check_role_client()

        self.action_space = text_space(MAX_ACTION_CHARS)
        self.observation_space = spaces.Dict(
            {"feedback": text_space(MAX_FEEDBACK_CHARS), **self._observation_fields()}
        )

        self.task: Task | None = None
        self.rng: np.random.Generator = np.random.default_rng()  # replaced at every reset (0.3.1)
        #: Draws the train task of a reset that names none; seeded by reset(seed=...) (None until needed).
        self._task_rng: np.random.Generator | None = None
        #: True until a task is given (constructor or reset options): until then every reset draws one.
        self._draws_tasks = task is None
        self.step_count = 0
        self.total_reward = 0.0
        self.action_history: list[str] = []
        self.last_error: str | None = None
        self._lm_calls: list[dict[str, Any]] = []
        self._last_obs: dict[str, Any] = {}
        self._last_extra_info: dict[str, Any] = {}
        self._needs_reset = True
        self._done = False
        self._failed = False
        self._closed = False
        self._stepping = False
        if task is not None:
            self._set_task(task)

    def _resolve_role_backends(
        self, llm: RoleClient | None, role_backends: Mapping[str, str] | None
    ) -> dict[str, str]:
        """Every role's backend: its override in role_backends, else `backend` (names checked)."""
        overrides = dict(role_backends or {})
        if not self.uses_role_client:
            if llm is not None or overrides:
                raise TypeError(
                    f"{type(self).__name__} has no model-backed roles: it takes no llm or role_backends"
                )
            return {}
        unknown = sorted(set(overrides) - set(self.role_names))
        if unknown:
            raise ValueError(
                f"role_backends has unknown roles {unknown}; {self.gym_name}'s roles are {list(self.role_names)}"
            )
        for role, backend in overrides.items():
            check_backend(backend, f"role_backends[{role!r}]")
        return {role: overrides.get(role, self.backend) for role in self.role_names}

    def _roles_needing_client(self) -> Iterable[str]:
        """The roles that will call the model (backend not scripted); a gym may exclude roles it never runs."""
        return [role for role, backend in self.role_backends.items() if backend != "scripted"]

    def _check_role_client(self) -> None:
        """ValueError when a role uses a model backend but no llm client was given."""
        needing = sorted(self._roles_needing_client())
        if needing and self.llm is None:
            raise ValueError(
                f"{self.gym_name} roles {needing} use a model backend "
                f"({sorted({self.role_backends[r] for r in needing})}) but no llm RoleClient was given "
                "(llm=...); use backend='scripted' for the model-free stand-ins"
            )

    # ------------------------------------------------------------------ subclass hooks

    def _configure(self, **gym_kwargs: Any) -> None:
        """Accept gym-specific constructor keywords; the base accepts none."""
        if gym_kwargs:
            raise TypeError(f"{type(self).__name__} got unexpected keyword arguments: {sorted(gym_kwargs)}")

    def _observation_fields(self) -> dict[str, spaces.Space]:
        """Spaces of the observation fields besides `feedback`."""
        return {}

    def _load_task(self, task: Task) -> None:
        """Validate and pre-process a task's data (raise ValueError on bad data)."""

    def _reset_impl(self) -> tuple[str, dict[str, Any], dict[str, Any]]:
        """Start an episode on self.task: (welcome feedback, extra observation, gym info)."""
        return "", {}, {}

    async def _astep_impl(
        self, choice: str, content: str
    ) -> tuple[str, float, bool, dict[str, Any], dict[str, Any]]:
        """Process one parsed action: (feedback, reward, terminated, extra observation, gym info)."""
        raise NotImplementedError

    def _close_impl(self) -> None:
        """Release gym resources (called once)."""

    # ------------------------------------------------------------------ native tools (env.protocol: native_tools)

    def tool_schemas(self) -> list[dict[str, Any]]:
        """OpenAI-style function schemas of the current task's tools; [] for gyms that expose none."""
        return []

    def native_prompt(self) -> list[dict[str, str]]:
        """The opening of a native-tools (or user_reply) episode of the current task (default: the task's prompt)."""
        if self.task is None:
            raise RuntimeError(f"{type(self).__name__} holds no task yet: pass task=... or reset with one")
        return [dict(m) for m in self.task.prompt]

    # ------------------------------------------------------------------ helpers for subclasses

    def count_space(self) -> spaces.Discrete:
        """Space of `step_count` (0..max_steps)."""
        return spaces.Discrete(self.max_steps + 1)

    def shaped_reward(self, base: float, penalty: float = 0.0) -> float:
        """base * reward_scale - penalty, clipped to [0, 1] when normalize_rewards is on."""
        reward = base * self.reward_scale - penalty
        return min(1.0, max(0.0, reward)) if self.normalize_rewards else reward

    def record_lm_call(self, role: str, attempts: int, ok: bool, latency_s: float) -> None:
        """Log one model call of the current step into info["lm_calls"]."""
        self._lm_calls.append({"role": role, "attempts": attempts, "ok": ok, "latency_s": latency_s})

    @property
    def done(self) -> bool:
        """Whether the current episode is over (terminated, truncated, failed or closed)."""
        return self._done

    # ------------------------------------------------------------------ gymnasium API

    def _set_task(self, task: Task) -> None:
        if not isinstance(task, Task):
            raise TypeError(f"task must be a userrl.envs.Task, got {type(task).__name__}")
        if self.gym_name and task.gym != self.gym_name:
            raise ValueError(
                f"{type(self).__name__} plays gym {self.gym_name!r} but the task {task.item_key!r} "
                f"belongs to gym {task.gym!r}"
            )
        self._load_task(task)
        self.task = task

    def _draw_task(self, seed: int | None) -> Task:
        """A task of the gym's builtin train split, drawn with seed (the same seed draws the same task)."""
        source = type(self).train_task_source
        tasks = source() if source is not None else ()
        if not tasks:
            raise ValueError(
                f"{type(self).__name__}.reset() needs a task: pass task=... to the constructor or "
                f"reset(options={{'task': task}}); gym {self.gym_name!r} has no registered train tasks to draw"
            )
        if seed is not None or self._task_rng is None:
            # Without a seed, the first draw follows the env's base seed and later ones continue it.
            self._task_rng = np.random.default_rng(self.seed if seed is None else int(seed))
        # A copy, so that nothing an episode does to its task reaches the cached train set.
        return copy.deepcopy(tasks[int(self._task_rng.integers(len(tasks)))])

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """Start an episode; options={"task": Task} replaces the task, seed replaces the base seed.

        Without a task (neither given to the constructor nor in options) a task of the gym's train split
        is drawn, with seed when given: gymnasium's `make(id).reset(seed=0)` plays a reproducible task.
        """
        if self._failed:
            raise RuntimeError("this env failed on a step (timeout or exception) and must be discarded")
        if self._closed:
            raise RuntimeError("this env is closed; create a new one")
        super().reset(seed=seed)
        options = dict(options or {})
        unknown = sorted(set(options) - {"task"})
        if unknown:
            raise ValueError(f"unknown reset options {unknown}; the only option is 'task'")
        if "task" in options:
            self._set_task(options["task"])
            self._draws_tasks = False
        elif self._draws_tasks:
            self._set_task(self._draw_task(seed))
        if seed is not None:
            # A seed given to reset becomes the env's base seed from now on (gymnasium semantics).
            self.seed = int(seed)
        self.rng = make_rng(self.seed, self.task.item_key)
        # Expose the same generator as gymnasium's np_random, so there is only one source of randomness.
        self._np_random = self.rng
        self.step_count = 0
        self.total_reward = 0.0
        self.action_history = []
        self.last_error = None
        self._lm_calls = []
        self._done = False
        self._needs_reset = False
        feedback, extra_obs, extra_info = self._reset_impl()
        obs = self._observation(feedback, extra_obs)
        self._last_obs, self._last_extra_info = obs, dict(extra_info)
        return obs, self._info(None, extra_info, None)

    def step(self, action: str) -> tuple[dict[str, Any], float, bool, bool, dict[str, Any]]:
        """Sync wrapper of astep returning the gymnasium 5-tuple; prefer astep inside an event loop."""
        return run_sync(self.astep(action)).as_tuple()

    async def astep(self, action: str) -> StepResult:
        """Take one step with an action string (0.3), under the step timeout (0.8)."""
        raw = action if isinstance(action, str) else ("" if action is None else str(action))
        if self._needs_reset:
            raise RuntimeError("call reset() before step()")
        if self._done:
            return StepResult(
                dict(self._last_obs, feedback=ENDED_FEEDBACK),
                0.0,
                True,
                False,
                self._info(raw, self._last_extra_info, None, lm_calls=[]),
            )
        if self._stepping:
            # One env, one step at a time: the original ran concurrent calls on one env (0.11).
            raise RuntimeError("a step is already running on this env; steps must be sequential")
        self._stepping = True
        try:
            self.step_count += 1
            self.action_history.append(raw)
            self._lm_calls = []
            choice, content = parse_action(raw)
            # The timeout can only interrupt a step at an await: gyms with blocking work must offload it
            # (e.g. asyncio.to_thread) for the limit to hold. Function is pure and microseconds long.
            try:
                outcome = await asyncio.wait_for(self._guarded_step(choice, content), self.step_timeout_s)
            except TimeoutError:
                return self._abort(raw, TIMEOUT_FEEDBACK, "step_timeout")
            if isinstance(outcome, BaseException):
                logger.error(
                    "%s step failed on item %r", type(self).__name__, self.task.item_key, exc_info=outcome
                )
                return self._abort(raw, EXCEPTION_FEEDBACK, f"step_exception:{type(outcome).__name__}")
            feedback, reward, terminated, extra_obs, extra_info = outcome
            truncated = not terminated and self.step_count >= self.max_steps
            self._done = terminated or truncated
            self.total_reward += reward
            obs = self._observation(feedback, extra_obs)
            self._last_obs, self._last_extra_info = obs, dict(extra_info)
            return StepResult(obs, reward, terminated, truncated, self._info(raw, extra_info, None))
        finally:
            self._stepping = False

    async def _guarded_step(self, choice: str, content: str) -> Any:
        """Run the subclass step; return its exception instead of raising it.

        Returning the exception keeps a TimeoutError raised *inside* the step (e.g. by a client) apart from
        the step timeout itself, which is the only TimeoutError that can escape wait_for.
        """
        try:
            feedback, reward, terminated, extra_obs, extra_info = await self._astep_impl(choice, content)
            if not isinstance(feedback, str):
                raise TypeError(f"step feedback must be a str, got {type(feedback).__name__}")
            reward = float(reward)
            if not math.isfinite(reward):
                raise ValueError(f"step reward must be finite, got {reward}")
            return feedback, reward, bool(terminated), dict(extra_obs), dict(extra_info)
        except Exception as exc:  # every failure inside a step ends the episode (0.8)
            return exc

    def _abort(self, raw: str, feedback: str, code: str) -> StepResult:
        """End the episode after a timeout or exception; the env is closed and never re-run (0.8)."""
        self._failed = True
        self._done = True
        self.last_error = code
        obs = self._observation(feedback, self._last_obs)
        self._last_obs = obs
        info = self._info(raw, self._last_extra_info, code)
        self.close()
        return StepResult(obs, 0.0, True, False, info)

    def _observation(self, feedback: str, extra_obs: Mapping[str, Any]) -> dict[str, Any]:
        obs: dict[str, Any] = {"feedback": feedback}
        obs.update((k, v) for k, v in extra_obs.items() if k != "feedback")
        fields = self.observation_space.spaces
        if "step_count" in fields:
            obs["step_count"] = self.step_count
        if "episode_complete" in fields:
            obs["episode_complete"] = self._done
        return obs

    def _info(
        self,
        raw: str | None,
        extra_info: Mapping[str, Any],
        error: str | None,
        *,
        lm_calls: list[dict[str, Any]] | None = None,
    ) -> dict[str, Any]:
        info = dict(extra_info)
        info.update(
            raw_action=raw,
            action_history=list(self.action_history),
            total_reward=self.total_reward,
            error=error,
            lm_calls=list(self._lm_calls if lm_calls is None else lm_calls),
        )
        return info

    def close(self) -> None:
        """Release resources; idempotent. A closed env cannot be reset again."""
        if self._closed:
            return
        self._closed = True
        self._done = True
        self._close_impl()
