"""`userrl evaluate`: every test item x pass of each gym, and the UserRL metrics (docs/spec/GYMS.md §0.10).

A checkpoint or a configured model plays through the usual replicas and env runners (an EnvRunnerGroup,
no learners); `--policy openai:MODEL@URL` plays message-level episodes against any OpenAI-compatible
endpoint in this process. Results are written as parquet shards (one gym x pass x chunk each, atomically)
under the output folder as episodes finish, so an interrupted evaluation resumes where it stopped: a re-run
reads the shards and plays only the missing (gym, item, pass) episodes (aborted ones are retried). At the
end episodes.parquet (one row per episode with its transcript) and metrics.json are written atomically and
logged to one MLflow run.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl
from rich.console import Console
from rich.table import Table

from userrl.actors.env_runner import EpisodeSpec
from userrl.checkpoint import Checkpoint, write_atomic
from userrl.commands.eval_metrics import EPISODE_SCHEMA, TRAVEL, flat_metrics, summarize
from userrl.config import GymSpec, UserRLConfig, apply_overrides, parse_config, read_config_data
from userrl.envs import GYMS, Task, load_tasks
from userrl.mua_metrics import LABELS
from userrl.progress import progress_bars
from userrl.protocols import get_protocol
from userrl.trajectory import Trajectory, TurnRecord

log = logging.getLogger(__name__)

#: episodes.parquet / shard columns: the metric inputs plus what a reader needs to audit an episode.
ROW_SCHEMA: dict[str, pl.DataType] = {
    **EPISODE_SCHEMA,
    "uid": pl.String(),
    "source": pl.String(),
    "split": pl.String(),
    "error": pl.String(),
    "stop_reason": pl.String(),
    "num_turns": pl.Int64(),
    "sampled_tokens": pl.Int64(),
    "seed": pl.Int64(),
    "temperature": pl.Float64(),
    "policy": pl.String(),
    "turns": pl.String(),  # JSON list of turn records (choice, content, reward, feedback, ...)
    "messages": pl.String(),  # JSON transcript
    "written_at": pl.Float64(),
}
KEY = ("gym", "item_key", "pass_index")
#: Episodes per shard (and per request to an env runner): the most an interruption can lose per chunk.
CHUNK_SIZE = 8
#: What must match for shards in an output folder to be reused.
FINGERPRINT_KEYS = ("policy", "temperature", "protocol", "max_turns", "max_steps", "max_new_tokens",
                    "max_model_len", "backend", "split", "seed", "show_reward_in_feedback", "reward_preset",
                    "openai_tools")


@dataclass
class Episode:
    """One planned episode: a test item and its pass index."""

    task: Task
    pass_index: int

    @property
    def key(self) -> tuple[str, str, int]:
        return self.task.gym, self.task.item_key, self.pass_index


@dataclass
class EvalResult:
    """What an evaluation produced."""

    out: Path
    summary: dict[str, Any]
    frame: pl.DataFrame
    played: int
    reused: int
    skipped: dict[str, str] = field(default_factory=dict)
    seconds: float = 0.0
    mlflow_run_id: str | None = None


# --------------------------------------------------------------------------------------------- planning


def policy_label(config: UserRLConfig, checkpoint: str | None, policy: str | None) -> tuple[str, str]:
    """(kind, label) of what is evaluated: checkpoint folder, OpenAI endpoint, or the configured model."""
    if checkpoint and policy:
        raise ValueError("pass either --checkpoint or --policy, not both")
    if policy:
        from userrl.openai_policy import parse_policy

        spec = parse_policy(policy)
        return "openai", f"openai:{spec.model}@{spec.base_url}"
    if checkpoint:
        return "checkpoint", str(Checkpoint.open(checkpoint, "--checkpoint").path)
    return "model", config.policy.model


def resolve_gyms(config: UserRLConfig, gyms: str | None) -> list[GymSpec]:
    """The gyms to evaluate on the evaluation split: 'all' (every registered gym), a comma list, or the
    config's gyms. A gym named in the config keeps its source, difficulty filter and kwargs."""
    configured = {spec.name: spec for spec in config.env.gyms}
    if gyms is None:
        names = list(configured)
    elif gyms.strip() == "all":
        names = sorted(GYMS)
    else:
        names = [name.strip() for name in gyms.split(",") if name.strip()]
        if not names:
            raise ValueError(f"--gyms {gyms!r}: give gym names separated by commas, or 'all'")
    specs = []
    for name in dict.fromkeys(names):
        base = configured.get(name)
        data = base.model_dump() if base is not None else {"name": name}  # GymSpec validates the name
        specs.append(GymSpec(**{**data, "split": config.evaluation.split}))
    return specs


def load_plan_tasks(config: UserRLConfig, specs: list[GymSpec]) -> tuple[dict[str, list[Task]], dict[str, str]]:
    """Test tasks per gym (the first max_episodes_per_gym items); gyms without data are skipped (§0.11)."""
    cap = config.evaluation.max_episodes_per_gym
    tasks, skipped = {}, {}
    for spec in specs:
        filters: dict[str, Any] = {"difficulty": spec.difficulty} if spec.difficulty is not None else {}
        try:
            found = load_tasks(spec.name, split=spec.split, source=spec.source, data_root=config.env.data_root,
                               **filters)
        except OSError as error:  # missing data (FileNotFoundError, TravelDataUnavailable): skip (§0.11)
            skipped[spec.name] = f"{type(error).__name__}: {error}"
            continue
        if not found:
            skipped[spec.name] = f"no tasks in split {spec.split!r}"
            continue
        tasks[spec.name] = found[:cap] if cap else found
    return tasks, skipped


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("_") or "policy"


def default_out(config: UserRLConfig, kind: str, label: str) -> Path:
    """<output_dir>/<name>/eval/<checkpoint folder | model | openai-model>[-T<temperature>]."""
    if kind == "checkpoint":
        name = Path(label).name
    elif kind == "openai":
        name = "openai-" + label.removeprefix("openai:").rsplit("@", 1)[0]
    else:
        name = Path(label).name or label
    temperature = config.evaluation.temperature
    return config.run_dir / "eval" / (_slug(name) + (f"-T{temperature:g}" if temperature > 0 else ""))


def standalone_config(config: UserRLConfig, specs: list[GymSpec]) -> UserRLConfig:
    """The config the episodes are played with: these gyms, and the standalone evaluation's reward preset and
    feedback setting in place of training's (docs/spec/GYMS.md §0.9)."""
    config = config.model_copy(deep=True)
    config.env.gyms = specs
    config.env.reward_preset = config.evaluation.reward_preset
    config.env.show_reward_in_feedback = config.evaluation.show_reward_in_feedback
    return config


def fingerprint(config: UserRLConfig, label: str) -> dict[str, Any]:
    """The settings that make shards comparable (passes, gyms and caps may change between runs)."""
    pc, ec = config.policy, config.env
    return {"policy": label, "temperature": config.evaluation.temperature, "protocol": ec.protocol,
            "max_turns": ec.max_turns, "max_steps": ec.max_steps,
            "max_new_tokens": config.evaluation.openai_max_tokens if label.startswith("openai:") else pc.max_new_tokens,
            "max_model_len": pc.max_model_len, "backend": ec.backend, "split": config.evaluation.split,
            "seed": config.experiment.seed, "show_reward_in_feedback": ec.show_reward_in_feedback,
            "reward_preset": ec.reward_preset,
            "openai_tools": config.evaluation.openai_tools if label.startswith("openai:") else None}


def prepare_out(out: Path, settings: dict[str, Any]) -> None:
    """Create the output folder, or check that its shards come from the same settings."""
    marker = out / "evaluation.json"
    if marker.is_file():
        previous = json.loads(marker.read_text())
        for key in FINGERPRINT_KEYS:
            if previous.get(key) != settings.get(key):
                raise ValueError(f"{out} holds results of a different evaluation ({key}: {previous.get(key)!r} "
                                 f"there, {settings.get(key)!r} now); pass another --out or delete that folder")
        return
    (out / "shards").mkdir(parents=True, exist_ok=True)
    write_atomic(marker, lambda tmp: tmp.write_text(json.dumps(settings, indent=2)))


# ---------------------------------------------------------------------------------------------- shards


def episode_row(traj: Trajectory, episode: Episode, seed: int, temperature: float, label: str) -> dict[str, Any]:
    """One parquet row: metric inputs, stop reason, turn records and the full transcript."""
    task = episode.task
    turns = [vars(turn) for turn in traj.turns]
    return {
        "gym": task.gym, "subset": task.data.get("subset") if task.gym == TRAVEL else None,
        "item_key": task.item_key, "pass_index": episode.pass_index, "episode_return": traj.episode_return,
        "aborted": traj.aborted, "turn_rewards": [t.reward for t in traj.turns],
        "turn_choices": [t.choice for t in traj.turns], "turn_contents": [t.content for t in traj.turns],
        "turn_executed": [t.executed for t in traj.turns], "uid": traj.uid, "source": task.source,
        "split": task.split, "error": traj.error, "stop_reason": traj.stop_reason, "num_turns": len(traj.turns),
        "sampled_tokens": sum(t.n_sampled for t in traj.turns), "seed": seed, "temperature": temperature,
        "policy": label, "turns": json.dumps(turns), "messages": json.dumps(traj.messages),
        "written_at": time.time(),
    }


def episode_trajectories(frame: pl.DataFrame) -> list[Trajectory]:
    """Episode rows back as trajectories with their turn records; an item's passes form one group."""
    return [Trajectory(uid=row["uid"] or "", group_id=f"{row['gym']}/{row['item_key']}", env_name=row["gym"],
                       item_key=row["item_key"], aborted=bool(row["aborted"]),
                       turns=[TurnRecord(**turn) for turn in json.loads(row["turns"] or "[]")])
            for row in frame.iter_rows(named=True)]


def rows_frame(rows: list[dict[str, Any]]) -> pl.DataFrame:
    """Rows as a DataFrame with ROW_SCHEMA."""
    return pl.DataFrame([{name: row.get(name) for name in ROW_SCHEMA} for row in rows], schema=ROW_SCHEMA)


def write_shard(out: Path, gym: str, pass_index: int, rows: list[dict[str, Any]]) -> Path:
    """Write one chunk's rows as a new shard (temp file + rename: a shard is whole or absent)."""
    path = out / "shards" / f"{_slug(gym)}-p{pass_index}-{uuid.uuid4().hex[:12]}.parquet"
    write_atomic(path, lambda tmp: rows_frame(rows).write_parquet(tmp))
    return path


def read_shards(out: Path) -> pl.DataFrame:
    """Every saved episode, one row per (gym, item, pass): a finished episode wins over an aborted one,
    a later write over an earlier one."""
    frames = [pl.read_parquet(path) for path in sorted((out / "shards").glob("*.parquet"))]
    if not frames:
        return rows_frame([])
    frame = pl.concat([f.select(list(ROW_SCHEMA)).cast(ROW_SCHEMA) for f in frames])
    return frame.sort(["aborted", "written_at"], descending=[False, True]).unique(list(KEY), keep="first",
                                                                                 maintain_order=True)


# -------------------------------------------------------------------------------------------------- play


def plan_episodes(tasks: dict[str, list[Task]], passes: int) -> list[Episode]:
    """Every test item x pass, pass-major so that early results cover every gym."""
    return [Episode(task, p) for p in range(passes) for gym in tasks for task in tasks[gym]]


def chunked(episodes: list[Episode], size: int) -> list[list[Episode]]:
    """Split into chunks of at most `size` episodes sharing one gym and one pass (one shard each)."""
    groups: dict[tuple[str, int], list[Episode]] = {}
    for episode in episodes:
        groups.setdefault((episode.task.gym, episode.pass_index), []).append(episode)
    return [group[i:i + size] for group in groups.values() for i in range(0, len(group), size)]


def episode_spec(episode: Episode) -> EpisodeSpec:
    """The EpisodeSpec of a planned episode (uid = eval/<gym>/<item>/p<pass>)."""
    group = f"eval/{episode.task.gym}/{episode.task.item_key}"
    # The pass index is in the uid, and so in every request's sampling seed: passes differ at temperature > 0.
    return EpisodeSpec(episode.task, uid=f"{group}/p{episode.pass_index}", group_id=group)


def _play_ray(config: UserRLConfig, checkpoint: str | None, chunks: list[list[Episode]], seeds: list[int],
              on_chunk: Callable[[int, list[Trajectory]], None]) -> None:
    """Play the chunks on replicas of `checkpoint` (a checked folder, `policy_label`'s) or the configured model."""
    from userrl.env_runner_group import episode_group
    from userrl.models import resolve_model

    config = config.with_absolute_paths()
    model_path = str(Checkpoint(checkpoint).model_dir) if checkpoint else resolve_model(config.policy.model)
    with episode_group(config, model_path) as group:
        ev = config.evaluation
        specs = [[episode_spec(e) for e in chunk] for chunk in chunks]
        for index, trajectories in group.launch(specs, seeds, ev.temperature, max(1, ev.concurrency // CHUNK_SIZE)):
            on_chunk(index, trajectories)


def _play_openai(config: UserRLConfig, policy: str, chunks: list[list[Episode]], seeds: list[int],
                 on_chunk: Callable[[int, list[Trajectory]], None]) -> None:
    from userrl.env_runner_group import env_kwargs
    from userrl.openai_policy import OpenAIEpisodePlayer, OpenAIPolicy, parse_policy
    from userrl.rollout import RolloutLimits

    ec, ev = config.env, config.evaluation
    limits = RolloutLimits.from_config(config, ev.temperature)

    async def run() -> None:
        client = OpenAIPolicy(parse_policy(policy), ec.protocol, ev.openai_max_tokens, ev.openai_timeout_s,
                              tools=ev.openai_tools)
        player = OpenAIEpisodePlayer(client, limits, env_kwargs(config), ev.concurrency, ec.backend, ec.llm)

        async def one(index: int) -> tuple[int, list[Trajectory]]:
            return index, await player.run([episode_spec(e) for e in chunks[index]], seeds[index])

        try:
            for future in asyncio.as_completed([one(i) for i in range(len(chunks))]):
                on_chunk(*(await future))
        finally:
            await client.aclose()

    asyncio.run(run())


# ------------------------------------------------------------------------------------------------ driver


def run_evaluation(config: UserRLConfig, *, checkpoint: str | None = None, policy: str | None = None,
                   gyms: str | None = None, out: str | Path | None = None,
                   console: Console | None = None) -> EvalResult:
    """Evaluate, resuming from the shards in `out`; writes episodes.parquet, metrics.json and an MLflow run."""
    start = time.perf_counter()
    ev = config.evaluation
    kind, label = policy_label(config, checkpoint, policy)
    specs = resolve_gyms(config, gyms)
    tasks, skipped = load_plan_tasks(config, specs)
    for gym, reason in skipped.items():
        if console:
            console.print(f"[yellow]warning:[/] gym {gym} skipped: {reason}")
        else:
            log.warning("gym %s skipped: %s", gym, reason)
    if not tasks:
        raise ValueError(f"no gym to evaluate: every requested gym was skipped ({', '.join(skipped)})")
    config = standalone_config(config, [spec for spec in specs if spec.name in tasks])
    out = Path(out) if out else default_out(config, kind, label)
    prepare_out(out, fingerprint(config, label))

    planned = plan_episodes(tasks, ev.passes)
    saved = read_shards(out)
    done = {tuple(key) for key in saved.filter(~pl.col("aborted")).select(KEY).iter_rows()}
    pending = [e for e in planned if e.key not in done]
    chunks = chunked(pending, CHUNK_SIZE)
    seeds = [config.experiment.seed + chunk[0].pass_index for chunk in chunks]
    if console:
        console.print(f"evaluating {label} on {', '.join(tasks)}: {len(planned)} episodes "
                      f"({ev.passes} pass(es), temperature {ev.temperature:g}); {len(planned) - len(pending)} "
                      f"already in {out}, {len(pending)} to play")
    played = 0

    def on_chunk(index: int, trajectories: list[Trajectory]) -> None:
        nonlocal played
        chunk = chunks[index]
        rows = [episode_row(t, e, seeds[index], ev.temperature, label) for t, e in zip(trajectories, chunk,
                                                                                        strict=True)]
        write_shard(out, chunk[0].task.gym, chunk[0].pass_index, rows)
        played += len(rows)
        if console:
            mean = sum(r["episode_return"] for r in rows) / len(rows)
            console.print(f"  {chunk[0].task.gym} pass {chunk[0].pass_index}: {len(rows)} episodes, mean return "
                          f"{mean:.3f}  ({played}/{len(pending)})")
        bars.update("episodes", played, len(pending))

    with progress_bars(console) as bars:  # the bar's rate leaves out Ray's and the replicas' start-up
        bars.update("episodes", 0, len(pending))
        if chunks:
            if kind == "openai":
                _play_openai(config, policy or "", chunks, seeds, on_chunk)
            else:
                _play_ray(config, label if kind == "checkpoint" else None, chunks, seeds, on_chunk)

    # Only this plan's episodes (a folder may hold more passes or items from an earlier, larger run),
    # ordered gym, item (split order), pass.
    keys = pl.DataFrame([(g, t.item_key, p, i) for i, (g, t, p) in enumerate(
        (g, t, p) for g in tasks for t in tasks[g] for p in range(ev.passes))],
        schema={"gym": pl.String, "item_key": pl.String, "pass_index": pl.Int64, "_order": pl.Int64}, orient="row")
    frame = read_shards(out).join(keys, on=list(KEY), how="inner").sort("_order").drop("_order")
    summary = summarize(frame)
    # The protocol's own metrics (native_tools: MUA-RL's); with one pass every item is a group of one.
    summary.update(get_protocol(config.env.protocol).episode_metrics(episode_trajectories(frame)))
    seconds = time.perf_counter() - start
    report = {"policy": label, "kind": kind, "passes": ev.passes, "temperature": ev.temperature,
              "max_episodes_per_gym": ev.max_episodes_per_gym, "split": ev.split, **summary,
              "skipped_gyms": skipped, "played": played, "reused": len(planned) - len(pending),
              "seconds": seconds}
    write_atomic(out / "episodes.parquet", lambda tmp: frame.write_parquet(tmp))
    write_atomic(out / "metrics.json", lambda tmp: tmp.write_text(json.dumps(report, indent=2)))
    result = EvalResult(out, summary, frame, played, len(planned) - len(pending), skipped, seconds)
    result.mlflow_run_id = _track(config, kind, label, out, summary, list(tasks))
    return result


def _track(config: UserRLConfig, kind: str, label: str, out: Path, summary: dict[str, Any],
           gyms: list[str]) -> str:
    """One MLflow run per evaluation: config + eval params, eval.* metrics, parquet and metrics.json."""
    from mlflow.entities import Param

    from userrl.tracking import MLflowTracker

    tracker = MLflowTracker(config, run_name=f"eval-{out.name}")
    ev = config.evaluation
    params = {"eval.kind": kind, "eval.policy": label, "eval.gyms": ",".join(gyms), "eval.out": str(out)}
    tracker.client.log_batch(tracker.run_id, params=[Param(k, str(v)[:500]) for k, v in params.items()])
    tracker.client.set_tag(tracker.run_id, "userrl.kind", "evaluation")
    tracker.client.set_tag(tracker.run_id, "policy", label)
    tracker.log_result(flat_metrics(summary), step=0)
    for name in ("metrics.json", "episodes.parquet"):
        tracker.client.log_artifact(tracker.run_id, str(out / name), "evaluation")
    tracker.finish("FINISHED")
    log.info("evaluation %s: passes %s, temperature %s", label, ev.passes, ev.temperature)
    return tracker.run_id


# ---------------------------------------------------------------------------------------------------- CLI


def _fmt(value: Any) -> str:
    return "-" if value is None else f"{value:.3f}"


def print_summary(result: EvalResult, console: Console) -> None:
    """The per-gym table (and Travel's sub-sets), the overall score and where everything went."""
    summary = result.summary
    table = Table(title=f"UserRL evaluation ({result.out})",
                  caption="micro_avg: mean over items of the mean return over passes; micro_max: best of k "
                  "passes (pass@k); score: Travel's per-aspect score, else micro_avg")
    for column in ("gym", "items", "passes", "episodes", "aborted", "micro_avg", "micro_max", "score"):
        table.add_column(column, justify="left" if column == "gym" else "right", no_wrap=True)
    for gym, m in summary["gyms"].items():
        table.add_row(gym, str(m["items"]), str(m["passes"]), str(m["episodes"]), str(m["aborted"]),
                      _fmt(m["micro_avg"]), _fmt(m["micro_max"]), _fmt(m["score"]))
    console.print(table)
    travel = summary["gyms"].get(TRAVEL)
    if travel:
        sub = Table(title="Travel sub-sets (last pass; score = per-aspect score over all passes)")
        for column in ("sub-set", "items", "micro_avg", "micro_max", "avg #1.0", "avg #0.8", "aspect score"):
            sub.add_column(column, justify="left" if column == "sub-set" else "right", no_wrap=True)
        for name, m in travel["subsets"].items():
            sub.add_row(name, str(m["items"]), _fmt(m["micro_avg"]), _fmt(m["micro_max"]),
                        _fmt(m["avg_number_of_1"]), _fmt(m["avg_number_of_08"]), _fmt(m["aspect_score"]))
        console.print(sub)
    if summary.get("mua"):
        print_mua(summary["mua"], console)
    console.print(f"[bold]overall[/] (task scores weighted by items): {_fmt(summary['overall'])}   "
                  f"core (mean of gym mean returns): {_fmt(summary['core'])}")
    console.print(f"played {result.played} episodes, reused {result.reused} from earlier shards, "
                  f"{summary['aborted']} aborted (excluded); {result.seconds:.1f}s")
    console.print(f"results: {result.out / 'episodes.parquet'}, {result.out / 'metrics.json'}; "
                  f"MLflow run {result.mlflow_run_id}")


def print_mua(metrics: dict[str, float], console: Console) -> None:
    """MUA-RL's metrics (userrl/mua_metrics.py): the batch's numbers, then one row per tool."""
    table = Table(title="MUA-RL (native tools; a group is an item's passes)")
    table.add_column("metric", no_wrap=True)
    table.add_column("value", justify="right", no_wrap=True)
    for name, label in LABELS.items():
        if name in metrics:
            table.add_row(label, f"{metrics[name]:g}" if name == "groups" else _fmt(metrics[name]))
    console.print(table)
    tools = [name.removeprefix("tool_calls/") for name in metrics if name.startswith("tool_calls/")]
    if tools:
        table = Table(title="MUA-RL tool calls")
        for column in ("tool", "calls", "error rate"):
            table.add_column(column, justify="left" if column == "tool" else "right", no_wrap=True)
        for tool in tools:
            table.add_row(tool, f"{metrics[f'tool_calls/{tool}']:g}", _fmt(metrics.get(f"tool_error_rate/{tool}")))
        console.print(table)


def evaluation_config(path: str | None, overrides: list[str], gyms: str | None) -> UserRLConfig:
    """The config, with `--gyms` (a comma list) as its env.gyms before it is checked, so that it is checked
    against the gyms evaluated (`--gyms tau env.protocol=native_tools` with the default gyms, which have no
    tools); a gym the config names keeps its settings there. `--gyms all` leaves env.gyms as it is."""
    data = apply_overrides(read_config_data(path) if path is not None else {}, overrides)
    names = [name.strip() for name in (gyms or "").split(",") if name.strip()]
    if names and gyms is not None and gyms.strip() != "all":
        env = data.setdefault("env", {})
        configured = {spec["name"]: spec for spec in env.get("gyms") or []
                      if isinstance(spec, dict) and isinstance(spec.get("name"), str)}
        env["gyms"] = [configured.get(name, {"name": name}) for name in dict.fromkeys(names)]
    return parse_config(data)


def _flag_overrides(args: Any) -> list[str]:
    checks = {"passes": (args.passes, 1), "max_episodes_per_gym": (args.max_episodes_per_gym, 1),
              "concurrency": (args.concurrency, 1)}
    overrides = []
    for name, (value, least) in checks.items():
        if value is not None:
            if value < least:
                raise ValueError(f"--{name.replace('_', '-')} must be >= {least}, got {value}")
            overrides.append(f"evaluation.{name}={value}")
    if args.temperature is not None:
        if args.temperature < 0:
            raise ValueError(f"--temperature must be >= 0, got {args.temperature}")
        overrides.append(f"evaluation.temperature={args.temperature}")
    return overrides


def cli_evaluate(args: Any, console: Console) -> int:
    """`userrl evaluate`: flags override the config's evaluation section; prints the metrics table."""
    config = evaluation_config(args.config, [*args.overrides, *_flag_overrides(args)], args.gyms)
    result = run_evaluation(config, checkpoint=args.checkpoint, policy=args.policy, gyms=args.gyms,
                            out=args.out, console=console)  # Ctrl+C: userrl/cli.py says what was kept
    print_summary(result, console)
    return EXIT_ABORTED if report_aborted(result, console) else 0


#: `userrl evaluate`'s exit status when episodes were aborted (excluded from the metrics; a re-run retries them).
EXIT_ABORTED = 3


def report_aborted(result: EvalResult, console: Console) -> int:
    """Print each gym's aborted episodes with their errors; returns how many there were."""
    aborted = result.frame.filter(pl.col("aborted"))
    if aborted.is_empty():
        return 0
    counts = aborted.group_by("gym", "error", maintain_order=True).len()
    for gym, error, count in counts.iter_rows():
        console.print(f"[red]aborted[/] {gym}: {count} episode(s): {error}")
    console.print(f"{aborted.height} episode(s) aborted and excluded from the metrics (exit status "
                  f"{EXIT_ABORTED}); run the same command again to retry them")
    return aborted.height
