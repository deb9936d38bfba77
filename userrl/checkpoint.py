"""The checkpoint: the layout of a saved iteration's folder, and the one way to find, check, read and write it.

A run keeps its checkpoints in `<run_dir>/checkpoints/iter_NNNNNN/` (NNNNNN: iterations done; 000000 is
the SFT warm start):

    model/                  Hugging Face folder (weights, config, tokenizer): what evaluate, export, serve
                            and a local user load as is
    optimizer.pt, rng.pt    the policy's full optimizer state; torch, numpy and python RNG states
    critic/, critic_optimizer.pt   the critic's weights and optimizer (the GAE estimators only)
    task_source.json        the training task source's state (only a source that learns has one)
    meta.json               iteration, policy_version, config, fit_id; written last

and, with `checkpointing.keep_best`, `checkpoints/best.json` names the checkpoint whose held-out metric was
best so far (`BestCheckpoint`); pruning never deletes it.

The Learner fills `iter_NNNNNN.tmp` (`staged`) and renames it into place, so a folder of the plain name
with a meta.json is complete, and a `.tmp` folder is what a killed writer left. The Learner's collective
save (torch.distributed) takes every name from here. This module imports neither torch nor Ray, nor
anything of userrl. `write_atomic` is the one temp-file-and-rename write of a single file.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

#: A run folder's subfolder of checkpoints.
CHECKPOINTS_DIR = "checkpoints"
#: A checkpoint folder is FOLDER_PREFIX + its iteration in 6 digits; while written it ends in STAGING_SUFFIX.
FOLDER_PREFIX, STAGING_SUFFIX = "iter_", ".tmp"
MODEL_DIR, META_FILE = "model", "meta.json"
OPTIMIZER_FILE, RNG_FILE = "optimizer.pt", "rng.pt"
#: The files a critic adds: its weights (a Hugging Face token-classification folder with one label, the value
#: head) and its optimizer state.
CRITIC_DIR, CRITIC_OPTIMIZER = "critic", "critic_optimizer.pt"
#: The training task source's state (written only when it has one).
TASK_SOURCE_FILE = "task_source.json"
#: Beside the checkpoint folders: which one scored best on `checkpointing.keep_best`'s metric.
BEST_FILE = "best.json"
#: The file that makes a folder a Hugging Face model folder.
_MODEL_CONFIG = "config.json"
#: The fix every "not a checkpoint" error names.
_FIX = "pass a checkpoint folder written by `userrl train`, `sft` or `train-user` (runs/<name>/checkpoints/iter_NNNNNN)"


def checkpoints_dir(run_dir: str | Path) -> Path:
    """The folder that holds a run's checkpoints."""
    return Path(run_dir) / CHECKPOINTS_DIR


def iteration_in_name(path: str | Path) -> int | None:
    """The iteration a checkpoint folder's name gives; None for a `.tmp` folder or any other name."""
    digits = Path(path).name.removeprefix(FOLDER_PREFIX)
    return int(digits) if Path(path).name.startswith(FOLDER_PREFIX) and digits.isdigit() else None


@dataclass(frozen=True)
class Checkpoint:
    """One checkpoint folder (complete or not) and its files; `meta` is read once, when first asked for."""

    path: Path

    def __post_init__(self) -> None:
        object.__setattr__(self, "path", Path(self.path))

    @classmethod
    def of_run(cls, run_dir: str | Path, iteration: int) -> Checkpoint:
        """The checkpoint a run writes after `iteration` iterations (it need not exist yet)."""
        return cls(checkpoints_dir(run_dir) / f"{FOLDER_PREFIX}{iteration:06d}")

    @classmethod
    def open(cls, path: str | Path, source: str) -> Checkpoint:
        """A checkpoint folder a user named, checked and resolved (actors may run in other folders).

        `source` is the flag or config field it came from (`--checkpoint`, `checkpointing.resume_from`): the
        FileNotFoundError names it, what is missing, and the fix.
        """
        checkpoint = cls(Path(path).expanduser().resolve())
        problem = checkpoint._problem()
        if problem:
            where = f"{source} {path}" if source.startswith("-") else f"{source}={path}"
            raise FileNotFoundError(f"{where} is not a userrl checkpoint folder: {problem}; {_FIX}")
        return checkpoint

    def _problem(self) -> str | None:
        if not self.path.is_dir():
            return "no such folder"
        if self.is_staging:
            return "it is half-written (its writer stopped before renaming it into place)"
        if not self.meta_file.is_file():
            return f"no {META_FILE} (written last: the checkpoint is incomplete)"
        if not (self.model_dir / _MODEL_CONFIG).is_file():
            return f"no {MODEL_DIR}/{_MODEL_CONFIG}"
        return None

    @property
    def model_dir(self) -> Path:
        """The policy as a Hugging Face folder (what evaluate, export, serve and a local user load)."""
        return self.path / MODEL_DIR

    @property
    def meta_file(self) -> Path:
        """meta.json: written last, so its presence marks a complete checkpoint."""
        return self.path / META_FILE

    @property
    def optimizer_file(self) -> Path:
        """The policy's optimizer state."""
        return self.path / OPTIMIZER_FILE

    @property
    def rng_file(self) -> Path:
        """The RNG states (torch, numpy, python)."""
        return self.path / RNG_FILE

    @property
    def critic_dir(self) -> Path:
        """The critic's Hugging Face folder (absent without a critic, e.g. an SFT warm start)."""
        return self.path / CRITIC_DIR

    @property
    def critic_optimizer_file(self) -> Path:
        """The critic's optimizer state."""
        return self.path / CRITIC_OPTIMIZER

    @property
    def task_source_file(self) -> Path:
        """The training task source's state (absent when the source has none)."""
        return self.path / TASK_SOURCE_FILE

    @property
    def staging_path(self) -> Path:
        """Where this checkpoint is written before it is renamed into place."""
        return self.path.with_name(self.path.name + STAGING_SUFFIX)

    @property
    def is_staging(self) -> bool:
        """Whether this is a `.tmp` folder (being written, or left by a killed writer): never a checkpoint."""
        return self.path.name.endswith(STAGING_SUFFIX)

    @property
    def is_complete(self) -> bool:
        """Whether the folder was renamed into place with its meta.json."""
        return not self.is_staging and self.meta_file.is_file()

    @cached_property
    def meta(self) -> dict[str, Any]:
        """meta.json's contents."""
        return json.loads(self.meta_file.read_text())

    @property
    def iteration(self) -> int:
        """Training iterations done when it was written (0: the SFT warm start)."""
        return self.meta["iteration"]

    @property
    def policy_version(self) -> int:
        """The policy version of its weights (the replicas' version on resume)."""
        return self.meta["policy_version"]

    @property
    def fit_id(self) -> str | None:
        """The id of the `fit()` that wrote it (a restarted learner group resumes only from its own fit's)."""
        return self.meta.get("fit_id")

    @property
    def protocol(self) -> str:
        """The action protocol it was trained with (the config's default when meta.json has no config)."""
        return ((self.meta.get("config") or {}).get("env") or {}).get("protocol", "tool_call")


def latest_complete(folder: str | Path, fit_id: str | None = None) -> Checkpoint | None:
    """The complete checkpoint with the highest iteration in `folder` (a run's checkpoints/), or None;
    with `fit_id`, only that fit's. `.tmp` folders, folders without meta.json and unreadable ones are skipped."""
    best: Checkpoint | None = None
    for path in Path(folder).glob(f"{FOLDER_PREFIX}*"):
        checkpoint = Checkpoint(path)
        with contextlib.suppress(OSError, ValueError, KeyError, TypeError):  # half-written or foreign: not ours
            if not checkpoint.is_complete or (fit_id is not None and checkpoint.fit_id != fit_id):
                continue
            if best is None or checkpoint.iteration > best.iteration:
                best = checkpoint
    return best


def remove_staging(folder: str | Path) -> list[Path]:
    """Delete the `.tmp` folders in a run's checkpoints/ (a killed writer's); returns them. Only while
    nothing writes there (a learner group's start)."""
    stale = list(Path(folder).glob(f"{FOLDER_PREFIX}*{STAGING_SUFFIX}"))
    for path in stale:
        shutil.rmtree(path, ignore_errors=True)
    return stale


def prune_checkpoints(written: Path, keep: int | None, protected: Path | None = None) -> list[Path]:
    """Delete the checkpoints older than `written` beyond the newest `keep` (counting it); returns them.

    iter_000000 (the SFT warm start) stays: runs and benchmarks start from it; so does `protected` (the best
    one). Higher-numbered folders are left alone: they belong to an earlier run in the same folder, and this
    run overwrites them as it goes.
    """
    if keep is None:
        return []
    number = iteration_in_name(written)
    numbered = ((p, iteration_in_name(p)) for p in written.parent.glob(f"{FOLDER_PREFIX}*")
                if p.is_dir() and (protected is None or p.resolve() != Path(protected).resolve()))
    older = sorted(((p, n) for p, n in numbered if n is not None and 0 < n < number), key=lambda pair: pair[1])
    doomed = [p for p, _ in older[: max(0, len(older) - (keep - 1))]]
    for path in doomed:
        shutil.rmtree(path, ignore_errors=True)
    return doomed


@dataclass
class BestCheckpoint:
    """`checkpointing.keep_best`: the held-out metric's best value so far, at which iteration, in which folder
    (the starting model's when nothing beat it), kept in `checkpoints/best.json` (so a resumed run goes on
    from it)."""

    folder: Path  #: the run's checkpoints/ folder
    metric: str
    mode: str = "max"
    value: float | None = None
    iteration: int | None = None
    path: str | None = None

    def __post_init__(self) -> None:
        file = self.folder / BEST_FILE
        if file.is_file():
            record = json.loads(file.read_text())
            if record.get("metric") == self.metric and record.get("mode") == self.mode:
                self.value, self.iteration, self.path = record["value"], record["iteration"], record["path"]

    def improves(self, metrics: dict[str, Any]) -> bool:
        """Whether `metrics` (an evaluation's) holds the metric, better than the best so far."""
        value = metrics.get(self.metric)
        if not isinstance(value, int | float) or value != value:  # absent, or NaN (no episode scored)
            return False
        return self.value is None or (value > self.value if self.mode == "max" else value < self.value)

    def record(self, value: float, iteration: int, path: str | Path) -> None:
        """Make (value, iteration, path) the best, in memory and in best.json."""
        self.value, self.iteration, self.path = float(value), iteration, str(path)
        self.folder.mkdir(parents=True, exist_ok=True)
        document = {"metric": self.metric, "mode": self.mode, "value": self.value, "iteration": iteration,
                    "path": self.path}
        write_atomic(self.folder / BEST_FILE, lambda tmp: tmp.write_text(json.dumps(document, indent=1)))


def replace_folder(staging: Path, path: Path) -> None:
    """Put a fully written folder at `path`, replacing what was there (the rename is the commit)."""
    if path.exists():
        shutil.rmtree(path)
    os.replace(staging, path)


@contextlib.contextmanager
def staged(path: str | Path) -> Iterator[Path]:
    """Write a checkpoint folder: the block fills `<name>.tmp`, renamed to `path` (replacing an older one) when
    the block ends. A block that raises leaves the `.tmp` folder, as a killed writer would: `remove_staging`
    clears those, and nothing reads them."""
    path = Path(path)
    staging = Checkpoint(path).staging_path
    if staging.exists():
        shutil.rmtree(staging)
    staging.mkdir(parents=True)
    yield staging
    replace_folder(staging, path)


def write_atomic(path: str | Path, write: Callable[[Path], object]) -> None:
    """Write a file whole or not at all: `write` fills a temp file beside `path`, which then replaces it."""
    path = Path(path)
    # Unique and hidden: concurrent writers never share a temp file, and globs for the real names skip it.
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}{STAGING_SUFFIX}")
    try:
        write(tmp)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def model_folder(name: str) -> str:
    """What a model name or folder loads from: a checkpoint folder's model/, anything else unchanged."""
    checkpoint = Checkpoint(Path(name).expanduser())
    if checkpoint.is_complete and (checkpoint.model_dir / _MODEL_CONFIG).is_file():
        return str(checkpoint.model_dir)
    return name


def checkpoint_of_model(folder: str | Path) -> Checkpoint | None:
    """The complete checkpoint whose model/ `folder` is, or None (an exported or any other model folder)."""
    folder = Path(folder)
    checkpoint = Checkpoint(folder.parent)
    return checkpoint if folder.name == MODEL_DIR and checkpoint.is_complete else None
