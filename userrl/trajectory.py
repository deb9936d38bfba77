"""The trajectory record (docs/spec/ALGORITHMS.md §1.1), batch collation and parquet round trips."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # polars is imported where frames are made: learners, which import this module, need none
    import polars as pl

ROLE_IDS = {"system": 0, "user": 1, "assistant": 2, "tool": 3}
PAD_ROLE = -1
STOP_REASONS = ("env_done", "no_tool_call", "length", "context_full", "max_turns", "aborted")


@dataclass
class TurnRecord:
    """One assistant generation and the env step it triggered."""

    reward: float = 0.0
    executed: bool = False
    choice: str = ""
    content: str = ""
    n_tool_calls: int = 0
    terminated: bool = False
    truncated: bool = False
    feedback: str = ""
    n_sampled: int = 0
    #: Calls of the env step to model-backed roles (simulated user, oracle, judge), and those that failed.
    role_calls: int = 0
    failed_role_calls: int = 0
    #: The tool the step called and whether it returned an error, as a gym that exposes tools reports them
    #: (info["tool_call"]; a call of no tool the gym has is named userrl.envs.base.INVALID_TOOL_CALL).
    tool: str = ""
    tool_error: bool = False


@dataclass
class Trajectory:
    """One sampled episode: exact token ids, roles, masks, turns and rewards."""

    uid: str
    group_id: str
    env_name: str
    item_key: str
    input_ids: list[int] = field(default_factory=list)
    prompt_len: int = 0
    role_ids: list[int] = field(default_factory=list)
    loss_mask: list[int] = field(default_factory=list)
    turn_ids: list[int] = field(default_factory=list)
    turn_starts: list[int] = field(default_factory=list)
    turns: list[TurnRecord] = field(default_factory=list)
    sampler_logprobs: list[float] = field(default_factory=list)
    stop_reason: str = ""
    aborted: bool = False
    error: str | None = None
    policy_version: int = 0
    data_source: str = ""
    messages: list[dict[str, str]] = field(default_factory=list)
    #: The model that played the episode's users and judges, and its version ("" for scripted users), and
    #: what their calls cost (userrl/user_session.py): generation requests, those a reply cache answered,
    #: tokens generated, requests sent again after their replica died, seconds the episode waited for them.
    user_model: str = ""
    user_version: int = 0
    user_requests: int = 0
    user_cache_hits: int = 0
    user_tokens: int = 0
    user_resent: int = 0
    user_wait_s: float = 0.0

    def append(self, ids: list[int], role: int, *, sampled: bool = False, turn: int = -1,
               logprobs: list[float] | None = None) -> None:
        """Append a segment of tokens that share a role, mask and turn index."""
        self.input_ids.extend(ids)
        self.role_ids.extend([role] * len(ids))
        self.loss_mask.extend([1 if sampled else 0] * len(ids))
        self.turn_ids.extend([turn] * len(ids))
        self.sampler_logprobs.extend(logprobs if logprobs is not None else [0.0] * len(ids))

    @property
    def response_len(self) -> int:
        return len(self.input_ids) - self.prompt_len

    @property
    def turn_rewards(self) -> list[float]:
        return [turn.reward for turn in self.turns]

    @property
    def episode_return(self) -> float:
        return float(sum(self.turn_rewards))

    @property
    def num_sampled(self) -> int:
        return int(sum(self.loss_mask))

    @property
    def succeeded(self) -> bool:
        """Whether the task ended by its own logic with a positive return."""
        return self.episode_return > 0 and any(turn.terminated for turn in self.turns)

    def check(self) -> None:
        """Assert the invariants of docs/spec/ALGORITHMS.md §1.5 (raises AssertionError)."""
        n = len(self.input_ids)
        assert len(self.role_ids) == len(self.loss_mask) == len(self.turn_ids) == len(self.sampler_logprobs) == n
        assert len(self.turns) == len(self.turn_starts)
        if self.turns:
            assert self.turn_starts[0] == 0
            assert all(a < b for a, b in zip(self.turn_starts, self.turn_starts[1:], strict=False))
        assert sum(self.loss_mask) == sum(turn.n_sampled for turn in self.turns)
        for role, mask, turn in zip(self.role_ids, self.loss_mask, self.turn_ids, strict=True):
            if mask:
                assert role == ROLE_IDS["assistant"] and turn >= 0
        for turn in self.turns:
            if not turn.executed:
                assert turn.reward == 0.0


_LIST_FIELDS = ("input_ids", "role_ids", "loss_mask", "turn_ids", "turn_starts", "sampler_logprobs")


def to_frame(trajectories: list[Trajectory]) -> pl.DataFrame:
    """One row per trajectory; nested records are kept as JSON strings for a stable schema."""
    rows = []
    for traj in trajectories:
        row = asdict(traj)
        row["turns"] = json.dumps(row["turns"])
        row["messages"] = json.dumps(row["messages"])
        row["episode_return"] = traj.episode_return
        row["num_turns"] = len(traj.turns)
        rows.append(row)
    import polars as pl

    schema = {name: pl.List(pl.Int64) for name in _LIST_FIELDS if name != "sampler_logprobs"}
    schema["sampler_logprobs"] = pl.List(pl.Float64)
    return pl.DataFrame(rows, schema_overrides=schema)


def from_frame(frame: pl.DataFrame) -> list[Trajectory]:
    """Inverse of `to_frame`."""
    out = []
    names = set(Trajectory.__dataclass_fields__)
    for row in frame.iter_rows(named=True):
        data: dict[str, Any] = {k: v for k, v in row.items() if k in names}
        data["turns"] = [TurnRecord(**t) for t in json.loads(data["turns"])]
        data["messages"] = json.loads(data["messages"])
        for name in _LIST_FIELDS:
            data[name] = list(data[name])
        out.append(Trajectory(**data))
    return out


def write_parquet(trajectories: list[Trajectory], path: str | Path) -> Path:
    """Write trajectories to a parquet file (atomically)."""
    from userrl.checkpoint import write_atomic

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, lambda tmp: to_frame(trajectories).write_parquet(tmp))
    return path


def read_parquet(path: str | Path) -> list[Trajectory]:
    """Read trajectories written by `write_parquet`."""
    import polars as pl

    return from_frame(pl.read_parquet(path))
