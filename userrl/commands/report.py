"""`userrl report`: an experiment's MLflow runs -> tables (per gym) and learning curves, in one folder.

Runs and metric histories are read with MlflowClient into polars frames; plots are matplotlib PNGs
(Agg backend); the page is Markdown or HTML next to the PNGs and CSVs. The folder is built under a
temporary name and renamed into place, so a failed report never looks complete.
"""

from __future__ import annotations

import html
import os
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl
from rich.console import Console

from userrl.config import ConfigError
from userrl.envs.base import INVALID_TOOL_CALL
from userrl.mua_metrics import LABELS

# MLflow metric keys (our tracker writes "rollout/reward_mean" as "rollout.reward_mean").
REWARD, SUCCESS, VALID, TURNS = "rollout.reward_mean", "rollout.success_rate", "rollout.valid_action_rate", \
    "rollout.turns_mean"
GEN_TPS, TRAIN_TPS, EVAL_REWARD = "rollout.tokens_per_s", "learner.tokens_per_s", "eval.reward_mean"
# The critic of the GAE estimators (training.adv_estimator other than grpo_multiturn), once per iteration.
VALUE_LOSS, EXPLAINED_VAR = "critic.value_loss", "critic.explained_variance"
_HISTORY_PREFIXES = ("rollout.", "eval.", "learner.tokens_per_s", "learner.loss", "critic.")
# Shown for every run in the settings table whether they differ or not (critic.* only when some run has one).
_KEY_PARAMS = ("policy.model", "env.gyms", "training.iterations", "training.batch_size", "training.group_size",
               "training.lr", "training.adv_estimator", "training.turn_credit", "training.trajectory_score",
               "training.gamma", "critic.mask_obs")


@dataclass
class ExperimentData:
    """An experiment's runs (one row each) and their metric histories (long format)."""

    name: str
    uri: str
    runs: pl.DataFrame      # run_id, label, status, start, minutes
    params: pl.DataFrame    # run_id, key, value
    history: pl.DataFrame   # run_id, key, step, value


def default_tracking_uri() -> str:
    """$MLFLOW_TRACKING_URI, else the default local store runs/mlflow.db."""
    return os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{Path('runs/mlflow.db').resolve()}"


def load_experiment(name: str, uri: str) -> ExperimentData:
    """Read every run of an MLflow experiment with its params and metric histories."""
    from mlflow import MlflowClient

    if uri.startswith("sqlite:///") and not Path(uri.removeprefix("sqlite:///")).is_file():
        raise ConfigError(f"no MLflow store at {uri.removeprefix('sqlite:///')}; pass --tracking-uri "
                          "(e.g. sqlite:///runs/mlflow.db) or set MLFLOW_TRACKING_URI")
    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name(name)
    if experiment is None:
        known = sorted(e.name for e in client.search_experiments())
        raise ConfigError(f"no MLflow experiment {name!r} in {uri}; experiments there: {', '.join(known) or 'none'}")
    runs = client.search_runs([experiment.experiment_id], max_results=5000, order_by=["attributes.start_time ASC"])
    if not runs:
        raise ConfigError(f"MLflow experiment {name!r} in {uri} has no runs yet")
    rows, params, history = [], [], []
    names = [r.info.run_name or r.info.run_id[:8] for r in runs]
    for run, run_name in zip(runs, names, strict=True):
        run_id = run.info.run_id
        label = run_name if names.count(run_name) == 1 else f"{run_name} ({run_id[:6]})"
        end = run.info.end_time or int(time.time() * 1000)
        rows.append({"run_id": run_id, "label": label, "status": run.info.status,
                     "start": run.info.start_time, "minutes": (end - run.info.start_time) / 60000})
        params += [{"run_id": run_id, "key": k, "value": v} for k, v in run.data.params.items()]
        for key in run.data.metrics:
            if key.startswith(_HISTORY_PREFIXES):
                history += [{"run_id": run_id, "key": key, "step": m.step, "value": m.value}
                            for m in client.get_metric_history(run_id, key)]
    schema = {"run_id": pl.Utf8, "key": pl.Utf8, "step": pl.Int64, "value": pl.Float64}
    return ExperimentData(name, uri, pl.DataFrame(rows),
                          pl.DataFrame(params, schema={"run_id": pl.Utf8, "key": pl.Utf8, "value": pl.Utf8}),
                          pl.DataFrame(history, schema=schema))


def final_and_best(history: pl.DataFrame) -> pl.DataFrame:
    """Per run and metric: the value at the last step, the maximum, and the number of steps."""
    return (history.sort("step").group_by("run_id", "key", maintain_order=True)
            .agg(pl.col("value").last().alias("final"), pl.col("value").max().alias("best"),
                 pl.col("value").mean().alias("mean"), pl.col("step").max().alias("last_step")))


def _registered_gyms() -> set[str]:
    from userrl.envs import registry

    registry.discover_gyms()
    return set(registry.GYMS)


def gyms_of(history: pl.DataFrame) -> list[str]:
    """Gyms named by per-gym keys: training runs' `rollout.reward_mean.<gym>` / `eval.reward_mean.<gym>`,
    `userrl evaluate` runs' `eval.<gym>.<metric>`."""
    keys = history.get_column("key").unique().to_list()
    gyms = {k.rsplit(".", 1)[1] for k in keys if k.startswith((REWARD + ".", EVAL_REWARD + "."))}
    known = _registered_gyms()
    gyms |= {k.split(".")[1] for k in keys if k.startswith("eval.") and k.count(".") >= 2 and k.split(".")[1] in known}
    return sorted(gyms)


def varying_params(params: pl.DataFrame) -> list[str]:
    """Param keys whose values differ between runs (what a sweep varied)."""
    if params.is_empty():
        return []
    counts = params.group_by("key").agg(pl.col("value").n_unique().alias("n"), pl.len().alias("runs"))
    total = params.get_column("run_id").n_unique()
    ignore = ("experiment.name", "tracking.", "checkpointing.resume_from", "experiment.output_dir")
    return sorted(k for k, n, runs in counts.iter_rows()
                  if (n > 1 or runs < total) and not k.startswith(ignore))


def critic_runs(params: pl.DataFrame) -> list[str]:
    """Runs trained with a critic: a GAE estimator (training.adv_estimator other than grpo_multiturn)."""
    gae = params.filter((pl.col("key") == "training.adv_estimator") & (pl.col("value") != "grpo_multiturn"))
    return gae.get_column("run_id").to_list()


def _param_table(data: ExperimentData, keys: list[str]) -> pl.DataFrame:
    # A run without a critic shows '-' for critic.* (its config has the unused defaults).
    params = data.params.filter(~pl.col("key").str.starts_with("critic.")
                                | pl.col("run_id").is_in(critic_runs(data.params)))
    wide = (params.filter(pl.col("key").is_in(keys))
            .pivot(on="key", index="run_id", values="value") if keys else pl.DataFrame(schema={"run_id": pl.Utf8}))
    present = [k for k in keys if k in wide.columns]
    return data.runs.select("run_id", "label").join(wide, on="run_id", how="left").select(
        "run_id", "label", *present)


def _metric_columns(stats: pl.DataFrame, spec: list[tuple[str, str, str]]) -> pl.DataFrame:
    """`spec`: (column name, metric key, statistic) -> one column per entry, a row per run."""
    frames = []
    for column, key, stat in spec:
        part = stats.filter(pl.col("key") == key).select("run_id", pl.col(stat).alias(column))
        frames.append(part)
    out = frames[0]
    for part in frames[1:]:
        out = out.join(part, on="run_id", how="full", coalesce=True)
    return out


def overall_table(data: ExperimentData, stats: pl.DataFrame, varying: list[str]) -> pl.DataFrame:
    """One row per run: what varied, status, iterations, final/best reward, rates, throughput, eval."""
    spec = [("iters", REWARD, "last_step"), ("reward final", REWARD, "final"), ("reward best", REWARD, "best"),
            ("success final", SUCCESS, "final"), ("valid final", VALID, "final"), ("turns final", TURNS, "final"),
            ("gen tok/s", GEN_TPS, "mean"), ("train tok/s", TRAIN_TPS, "mean"),
            ("eval reward final", EVAL_REWARD, "final"), ("eval reward best", EVAL_REWARD, "best"),
            ("eval overall", "eval.overall", "final"), ("value loss final", VALUE_LOSS, "final"),
            ("explained var final", EXPLAINED_VAR, "final")]
    present = set(stats.get_column("key").unique().to_list())
    spec = [s for s in spec if s[1] in present]
    table = _param_table(data, varying).join(data.runs.select("run_id", "status", "minutes"), on="run_id")
    if spec:
        table = table.join(_metric_columns(stats, spec), on="run_id", how="left")
    return table.sort(by=[c for c in ("reward final",) if c in table.columns] or ["label"], descending=True,
                      nulls_last=True)


def gym_table(data: ExperimentData, stats: pl.DataFrame, gym: str, varying: list[str]) -> pl.DataFrame:
    """One row per run for one gym: training reward final/best, then every per-gym metric's final value."""
    all_keys = stats.get_column("key").unique().to_list()
    keys = sorted(k for k in all_keys if k.endswith("." + gym))
    evaluate_keys = sorted(k for k in all_keys if k.startswith(f"eval.{gym}."))  # from `userrl evaluate`
    spec = []
    if f"{REWARD}.{gym}" in keys:
        spec += [("reward final", f"{REWARD}.{gym}", "final"), ("reward best", f"{REWARD}.{gym}", "best")]
    if f"{EVAL_REWARD}.{gym}" in keys:
        spec += [("eval reward final", f"{EVAL_REWARD}.{gym}", "final"),
                 ("eval reward best", f"{EVAL_REWARD}.{gym}", "best")]
    spec += [(k.removesuffix("." + gym), k, "final") for k in keys
             if k not in (f"{REWARD}.{gym}", f"{EVAL_REWARD}.{gym}")]
    spec += [("eval " + k.removeprefix(f"eval.{gym}."), k, "final") for k in evaluate_keys]
    table = _param_table(data, varying).join(_metric_columns(stats, spec), on="run_id", how="inner")
    return table.sort(by=spec[0][0], descending=True, nulls_last=True)


# --- MUA-RL (env.protocol native_tools) ----------------------------------------------------------------

MUA_SOURCES = (("rollout", "training rollouts"), ("eval", "evaluation"))


def _mua_history(data: ExperimentData, source: str) -> pl.DataFrame:
    """`<source>.mua.*` rows (one value per run, key and step: a resumed run's re-logged step counts once), with
    `last`, the step of the run's last MUA-RL batch."""
    rows = (data.history.filter(pl.col("key").str.starts_with(f"{source}.mua."))
            .unique(["run_id", "key", "step"], keep="last", maintain_order=True)
            .with_columns(pl.col("key").str.strip_prefix(f"{source}.mua.")))
    last = rows.filter(pl.col("key") == "groups").group_by("run_id").agg(pl.col("step").max().alias("last"))
    return rows.join(last, on="run_id")


def mua_table(data: ExperimentData, source: str) -> pl.DataFrame | None:
    """One row per run: MUA-RL's metrics of its last batch (`<source>.mua.*`); None when no run has them."""
    rows = _mua_history(data, source)
    at_last = rows.filter((pl.col("step") == pl.col("last")) & pl.col("key").is_in(list(LABELS)))
    if at_last.is_empty():
        return None
    wide = at_last.pivot(on="key", index=["run_id", "last"], values="value", aggregate_function="last")
    present = [name for name in LABELS if name in wide.columns]
    table = wide.select("run_id", pl.col("last").alias("iteration"),  # groups is a count: a whole number
                        *((pl.col(n).cast(pl.Int64) if n == "groups" else pl.col(n)).alias(LABELS[n]) for n in present))
    return data.runs.select("run_id", "label").join(table, on="run_id", how="inner").sort("label")


def mua_tool_table(data: ExperimentData, source: str) -> pl.DataFrame | None:
    """One row per run and tool: calls and error rate in the last batch and over all batches (the error rate
    weighted by calls); None without calls. The tracker logs `rollout/mua/tool_calls/<tool>` as
    `rollout.mua.tool_calls.<tool>`."""
    rows = _mua_history(data, source)
    calls = (rows.filter(pl.col("key").str.starts_with("tool_calls."))
             .select("run_id", "step", "last", pl.col("key").str.strip_prefix("tool_calls.").alias("tool"),
                     pl.col("value").alias("calls")))
    if calls.is_empty():
        return None
    rates = (rows.filter(pl.col("key").str.starts_with("tool_error_rate."))
             .select("run_id", "step", pl.col("key").str.strip_prefix("tool_error_rate.").alias("tool"),
                     pl.col("value").alias("rate")))
    joined = calls.join(rates, on=["run_id", "step", "tool"], how="left")
    last = pl.col("step") == pl.col("last")
    table = joined.group_by("run_id", "tool").agg(
        pl.col("calls").filter(last).sum().cast(pl.Int64).alias("calls (last)"),
        pl.col("rate").filter(last).first().alias("error rate (last)"),
        pl.col("calls").sum().cast(pl.Int64).alias("calls (all)"),
        ((pl.col("rate") * pl.col("calls")).sum() / pl.col("calls").sum()).alias("error rate (all)"))
    return (data.runs.select("run_id", "label").join(table, on="run_id", how="inner")
            .sort(["label", "calls (all)", "tool"], descending=[False, True, False]))


def mua_sections(data: ExperimentData, fmt: str) -> list[tuple[str, str, str]]:
    """The MUA-RL tables (runs trained or evaluated with env.protocol native_tools), training then evaluation."""
    sections = []
    for source, what in MUA_SOURCES:
        table = mua_table(data, source)
        if table is None:
            continue
        note = ("Per run, the last batch: the share of groups whose episodes all succeeded, all failed, or some "
                "of each (only mixed groups carry a GRPO signal); tool calls and customer messages per episode, "
                "and the calls' share; the tools' error rate; distinct-n of the agent's customer messages.")
        sections.append((f"MUA-RL: {what}", "table", _with_note(note, render_table(table, fmt), fmt)))
        tools = mua_tool_table(data, source)
        if tools is not None:
            note = (f"Calls per tool ({INVALID_TOOL_CALL}: a call of no tool, an unknown name or an unreadable "
                    "call), in the last batch and summed over all batches, with the share that returned an error.")
            sections.append((f"MUA-RL tool calls: {what}", "table", _with_note(note, render_table(tools, fmt), fmt)))
    return sections


def _with_note(note: str, table: str, fmt: str) -> str:
    return f"<p>{html.escape(note)}</p>{table}" if fmt == "html" else f"{note}\n\n{table}"


# --- plots -------------------------------------------------------------------------------------------

def plot_curves(data: ExperimentData, panels: list[tuple[str, str]], ylabel: str, title: str, path: Path,
                unit_range: bool = False) -> bool:
    """One subplot per (metric key, panel title), one line per run; False when no run has the metrics.

    `unit_range`: the metrics are rates or returns in [0, 1], drawn on that whole range so runs compare.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    panels = [(k, t) for k, t in panels if not data.history.filter(pl.col("key") == k).is_empty()]
    if not panels:
        return False
    labels = dict(data.runs.select("run_id", "label").iter_rows())
    runs = data.runs.get_column("run_id").to_list()
    cmap = plt.get_cmap("tab10" if len(runs) <= 10 else "tab20")
    styles = ["-", "--", ":", "-."]
    markers = ["o", "s", "^", "D", "v", "P", "X", "*"]
    cols = min(3, len(panels))  # eight gyms wrap onto rows of three instead of one very wide strip
    rows_n = -(-len(panels) // cols)
    fig, grid = plt.subplots(rows_n, cols, figsize=(5.2 * cols + (3.2 if len(runs) > 1 else 0), 4.0 * rows_n),
                             squeeze=False)
    axes = grid.flatten()
    for ax in axes[len(panels):]:
        ax.set_visible(False)
    for ax, (key, panel_title) in zip(axes, panels, strict=False):
        rows = data.history.filter(pl.col("key") == key).sort("step")
        for i, run_id in enumerate(runs):
            series = rows.filter(pl.col("run_id") == run_id)
            if series.is_empty():
                continue
            steps, values = series.get_column("step").to_list(), series.get_column("value").to_list()
            ax.plot(steps, values, styles[(i // cmap.N) % len(styles)], color=cmap(i % cmap.N), linewidth=1.8,
                    marker=markers[i % len(markers)] if len(steps) <= 25 else None,
                    markersize=7 - 3 * i / max(len(runs) - 1, 1), label=labels[run_id])  # overlaps stay visible
        ax.set_title(panel_title, fontsize=11)
        ax.set_xlabel("iteration")
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
        first, last = rows.get_column("step").min(), rows.get_column("step").max()
        if last - first <= 12:  # few iterations: one tick each, and room around a single point
            ax.set_xticks(range(first, last + 1))
            ax.set_xlim(first - 0.5, last + 0.5)
        else:
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        if unit_range:
            ax.set_ylim(-0.03, 1.03)
        elif rows.get_column("value").min() >= 0:  # throughput and the like: from zero, not magnified noise
            ax.set_ylim(bottom=0)
    handles, names = axes[0].get_legend_handles_labels()
    for ax in axes[1:len(panels)]:  # runs missing from the first panel still get a legend entry
        for handle, name in zip(*ax.get_legend_handles_labels(), strict=True):
            if name not in names:
                handles.append(handle)
                names.append(name)
    fig.suptitle(title, fontsize=12)
    if len(runs) > 1:
        fig.legend(handles, names, loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize=9, frameon=False)
    fig.tight_layout()
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return True


def write_plots(data: ExperimentData, gyms: list[str], folder: Path) -> list[tuple[str, str]]:
    """The learning-curve PNGs; returns (file name, caption) of those written."""
    multi = len(gyms) > 1
    reward_panels = [(REWARD, "all gyms" if multi else "rollout reward")]
    reward_panels += [(f"{REWARD}.{g}", g) for g in gyms] if multi else []
    eval_panels = [(EVAL_REWARD, "all gyms" if multi else "evaluation reward")]
    eval_panels += [(f"{EVAL_REWARD}.{g}", g) for g in gyms] if multi else []
    rewards = data.history.filter(pl.col("key").str.starts_with(REWARD) | pl.col("key").str.starts_with(EVAL_REWARD))
    in_unit = rewards.is_empty() or rewards.get_column("value").is_between(0, 1).all()
    figures = [
        ("reward.png", "Mean episode return of the training rollouts", reward_panels, "mean return", in_unit),
        ("eval_reward.png", "Mean return on the evaluation split (greedy)", eval_panels, "mean return", in_unit),
        ("valid_action_rate.png", "Share of assistant turns that were valid actions",
         [(VALID, "valid-action rate"), (SUCCESS, "success rate")], "rate", True),
        ("tokens_per_s.png", "Throughput", [(GEN_TPS, "generation (rollout) tokens/s"),
                                            (TRAIN_TPS, "training (processed) tokens/s")], "tokens/s", False),
        ("critic.png", "Critic of the GAE estimators (runs with a critic only)",
         [(VALUE_LOSS, "value loss"), (EXPLAINED_VAR, "explained variance (1 = perfect)")], "", False),
    ]
    written = []
    for name, caption, panels, ylabel, unit in figures:
        if plot_curves(data, panels, ylabel, f"{data.name}: {caption.lower()}", folder / name, unit):
            written.append((name, caption))
    return written


# --- page --------------------------------------------------------------------------------------------

def _display(frame: pl.DataFrame, fmt: str) -> pl.DataFrame:
    """All cells as strings: 3 significant decimals, '-' for missing, pipes escaped for Markdown."""
    def cell(value: Any) -> str:
        if value is None:
            return "-"
        if isinstance(value, float):
            return f"{value:.1f}" if abs(value) >= 100 else f"{value:.3f}"
        text = str(value)
        return text.replace("|", "\\|") if fmt == "markdown" else text

    frame = frame.drop("run_id") if "run_id" in frame.columns else frame
    return pl.DataFrame({c: [cell(v) for v in frame.get_column(c).to_list()] for c in frame.columns})


def render_table(frame: pl.DataFrame, fmt: str) -> str:
    """A Markdown table (polars' own formatter) or an HTML table."""
    shown = _display(frame, fmt)
    if fmt == "html":
        head = "".join(f"<th>{html.escape(c)}</th>" for c in shown.columns)
        body = "".join("<tr>" + "".join(f"<td>{html.escape(v)}</td>" for v in row) + "</tr>"
                       for row in shown.iter_rows())
        return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"
    with pl.Config(tbl_formatting="MARKDOWN", tbl_hide_column_data_types=True, tbl_hide_dataframe_shape=True,
                   tbl_rows=-1, tbl_cols=-1, tbl_width_chars=65_000, fmt_str_lengths=10_000):
        return str(shown)


def _page(sections: list[tuple[str, str, str]], title: str, intro: str, fmt: str) -> str:
    """sections: (heading, kind, content) with kind 'table' (rendered), 'image' (file name) or 'text'."""
    if fmt == "html":
        parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title><style>"
                 "body{font-family:sans-serif;margin:2em;max-width:1400px}table{border-collapse:collapse;"
                 "font-size:13px;margin-bottom:1em}td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}"
                 "th{background:#f3f3f3}img{max-width:100%}</style></head><body>",
                 f"<h1>{html.escape(title)}</h1><p>{html.escape(intro)}</p>"]
        for heading, kind, content in sections:
            parts.append(f"<h2>{html.escape(heading)}</h2>")
            parts.append(content if kind == "table" else f"<img src='{html.escape(content)}' "
                         f"alt='{html.escape(heading)}'>" if kind == "image" else f"<p>{html.escape(content)}</p>")
        return "\n".join([*parts, "</body></html>\n"])
    parts = [f"# {title}\n", intro + "\n"]
    for heading, kind, content in sections:
        parts.append(f"## {heading}\n")
        parts.append(f"![{heading}]({content})\n" if kind == "image" else content + "\n")
    return "\n".join(parts)


def write_report(data: ExperimentData, out: Path, fmt: str = "markdown") -> Path:
    """Write tables, CSVs and PNGs for an experiment into `out` (atomically); returns the page's path."""
    out = out.resolve()
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        stats = final_and_best(data.history)
        varying = varying_params(data.params)
        gyms = gyms_of(data.history)
        overall = overall_table(data, stats, varying)
        sections = [("All runs", "table", render_table(overall, fmt))]
        for gym in gyms:
            sections.append((f"Gym: {gym}", "table", render_table(gym_table(data, stats, gym, varying), fmt)))
        sections += mua_sections(data, fmt)
        critic = bool(critic_runs(data.params))
        settings = [k for k in _KEY_PARAMS if k not in varying and (critic or not k.startswith("critic."))]
        sections.append(("Settings", "table", render_table(_param_table(data, settings), fmt)))
        for name, caption in write_plots(data, gyms, staging):
            sections.append((caption, "image", name))
        overall.write_csv(staging / "runs.csv")
        stats.join(data.runs.select("run_id", "label"), on="run_id").write_csv(staging / "metrics.csv")
        data.history.write_csv(staging / "history.csv")
        intro = (f"{data.runs.height} runs of MLflow experiment '{data.name}' ({data.uri}). "
                 f"Varying settings: {', '.join(varying) or 'none'}. "
                 "'final' is the value at the last logged iteration, 'best' the highest one; "
                 "throughput columns are means over iterations.")
        page = staging / ("report.html" if fmt == "html" else "report.md")
        page.write_text(_page(sections, f"Report: {data.name}", intro, fmt))
        old = None
        if out.exists():
            old = out.with_name(f".{out.name}.old-{os.getpid()}")
            out.rename(old)
        staging.rename(out)
        if old:
            shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return out / page.name


def cli_report(args: Any, console: Console) -> int:
    """`userrl report --experiment NAME [--out DIR] [--format markdown|html] [--tracking-uri URI]`."""
    uri = args.tracking_uri or default_tracking_uri()
    data = load_experiment(args.experiment, uri)
    out = Path(args.out or Path("reports") / args.experiment)
    page = write_report(data, out, args.format)
    console.print(f"[green]report[/]: {page}  ({data.runs.height} runs; tables, CSVs and plots in {page.parent})")
    return 0
