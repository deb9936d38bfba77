"""TRL's GRPOTrainer and userrl side by side: same model, tasks, episodes per step, limits and learning rate.

The task is the single-turn form of the Function gym, level 0 (the rule is one variable a/b/c/d). TRL's
GRPOTrainer cannot play the multi-turn gym as it is: its multi-turn path (`environment_factory`/`tools`)
drives tool calls parsed by the tokenizer's response template, which TRL provides only for known chat
templates (SmolLM2's ChatML is not one: `add_response_schema` raises), and its `rollout_func` hook would
mean writing userrl's episode loop again inside TRL. So both sides train on the same single-turn prompts:

    system: the Function gym's system prompt + the bracket protocol's instructions (userrl/protocols/bracket.py)
    user:   the gym's first user message + the transcript of the grounded solver's steps before its
            answer, played on the real env: `[search] test` -> "Test case: [a, b, c, d]",
            `[action] 0 b c d` -> "For numbers [0.0, b, c, d], the result is N."

and the one completion must be the `[answer] N` line. Reward: the gym's own reward for that completion,
exactly as userrl's rollout gives it to a one-turn episode (no stop token within the limit: 0; parsed with
`ChatFormat(tokenizer, "bracket")`; executed on a fresh FunctionEnv). userrl runs its real training
(`TrainerConfig(...).build_trainer().fit()`, Ray actors, FSDP learners) on the same prompts, loaded
through the Function gym's `source: userrl` task loader from a data folder this script writes
(functions.json + parquet rows whose prompt is the single-turn prompt), with `env.max_turns=1`.
`--userrl-multiturn N` adds a third run: userrl on the multi-turn gym itself (builtin level-0 tasks, the
model has to search and probe by itself, N turns), evaluated on the same single-turn held-out prompts.

Held-out success: greedy decoding of each final model (and of the starting model) on the same first
`--eval-tasks` test tasks, by this script with plain transformers `generate`, scored as above.

    .venv/bin/python bench/peer_trl.py --model smollm2-135m --steps 10 --prompts-per-step 4 --group-size 4
    .venv/bin/python bench/peer_trl.py --model tiny-random --steps 1 --prompts-per-step 2 --group-size 2 \
        --eval-tasks 4 --learners 1                                              # smoke test
"""

from __future__ import annotations

import argparse
import datetime as dt
import gc
import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent


# ------------------------------------------------------------------------------------------ the task


def single_turn_tasks(split: str, difficulty: int) -> list[Any]:
    """Builtin Function tasks of one split and level, with the grounded solver's steps before its answer
    (search test, then its probes) played on the real env and folded into the prompt."""
    import numpy as np

    from userrl.envs import Task, load_tasks, make_env, make_solver

    tasks = []
    for task in load_tasks("function", split, difficulty=[difficulty]):
        env = make_env("function", task)
        try:
            env.reset(options={"task": task})
            solver, feedback, lines = make_solver("function", task, np.random.default_rng(0)), None, []
            while (step := solver.next_action(feedback))[0] != "answer":
                action = f"[{step[0]}] {step[1]}"
                observation, _, terminated, truncated, _ = env.step(action)
                if terminated or truncated:
                    raise RuntimeError(f"{task.item_key}: the context step {action!r} ended the episode")
                feedback = observation["feedback"]
                lines += [action, feedback]
        finally:
            env.close()
        system, user = task.prompt
        prompt = [dict(system), {"role": "user", "content": (
            user["content"] + "\n\nYour steps so far, each followed by its result:\n" + "\n".join(lines)
            + "\n\nNow give the answer: one line [answer] followed by the number.")}]
        tasks.append(Task(task.gym, task.item_key, prompt, dict(task.data), split=split,
                          difficulty=task.difficulty, source="userrl"))
    return tasks


def write_data_root(folder: Path, splits: dict[str, list[Any]]) -> Path:
    """The single-turn tasks in the layout of the original UserRL files, for `env.data_root` (source userrl)."""
    import polars as pl

    functions = [{k: t.data[k] for k in ("id", "rule", "test_case", "expected_result")}
                 for tasks in splits.values() for t in tasks]
    path = folder / "gyms/FunctionGym/functiongym/data/functions.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(functions))
    for split, tasks in splits.items():
        rows = [{"data_source": "interact_function", "prompt": t.prompt,
                 "extra_info": {"split": split, "tools_kwargs": {"interact_with_env": {
                     "create_kwargs": {"id": t.item_key}}}}} for t in tasks]
        path = folder / f"data/function_multiturn/{split}.parquet"
        path.parent.mkdir(parents=True, exist_ok=True)
        pl.DataFrame(rows).write_parquet(path)
    from userrl.envs import load_tasks  # the loader userrl's runs will use must give back these prompts

    for split, tasks in splits.items():
        loaded = {t.item_key: t.prompt for t in load_tasks("function", split, source="userrl", data_root=folder)}
        if any(loaded.get(t.item_key) != t.prompt for t in tasks):
            raise RuntimeError(f"{folder}: the userrl loader does not give back the {split} prompts")
    return folder


class Scorer:
    """The reward of a one-turn episode, as userrl's rollout computes it (userrl/rollout.py, turn 0)."""

    def __init__(self, tokenizer: Any, max_steps: int):
        from userrl.chat import ChatFormat

        self.chat = ChatFormat(tokenizer, "bracket")
        self.tokenizer = tokenizer
        self.max_steps = max_steps

    def prompt_ids(self, task: Any) -> list[int]:
        """The first context's tokens exactly as userrl's rollout builds them."""
        return [i for ids, _ in self.chat.encode_prompt(self.chat.initial_messages(task.prompt)) for i in ids]

    def score(self, task: Any, completion_ids: list[int]) -> tuple[float, bool, bool]:
        """(reward, success, valid action) of one completion (token ids, stop token included if any)."""
        from userrl.envs import make_env

        stops = set(self.chat.stop_token_ids)
        if not completion_ids or completion_ids[-1] not in stops:
            return 0.0, False, False  # userrl: finish_reason "length", the turn is not executed
        text = self.tokenizer.decode(completion_ids, skip_special_tokens=True)
        parsed = self.chat.parse(text)
        if parsed.action is None:
            return 0.0, False, False  # userrl: stop_reason "no_tool_call"
        env = make_env("function", task, max_steps=self.max_steps)
        try:
            env.reset(options={"task": task})
            _, reward, terminated, _, _ = env.step(parsed.action)
        finally:
            env.close()
        return float(reward), bool(reward > 0 and terminated), True


# ------------------------------------------------------------------------------------------ evaluation


def evaluate(model_dir: str, tasks: list[Any], max_new_tokens: int, max_steps: int,
             batch_size: int = 16) -> dict[str, float]:
    """Greedy single-turn success on `tasks`, plain transformers generate in float32."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    scorer = Scorer(tokenizer, max_steps)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    successes = valid = 0
    start = time.perf_counter()
    for begin in range(0, len(tasks), batch_size):
        chunk = tasks[begin:begin + batch_size]
        prompts = [scorer.prompt_ids(t) for t in chunk]
        width = max(map(len, prompts))
        ids = torch.tensor([[pad] * (width - len(p)) + p for p in prompts])
        mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
        with torch.no_grad():
            out = model.generate(input_ids=ids, attention_mask=mask, do_sample=False,
                                 max_new_tokens=max_new_tokens, eos_token_id=scorer.chat.stop_token_ids,
                                 pad_token_id=pad)
        for task, row in zip(chunk, out[:, width:].tolist(), strict=True):
            stop = next((i for i, t in enumerate(row) if t in scorer.chat.stop_token_ids), None)
            _, success, ok = scorer.score(task, row if stop is None else row[:stop + 1])
            successes += success
            valid += ok
    del model
    gc.collect()
    return {"success": successes / len(tasks), "successes": successes, "n": len(tasks),
            "valid": valid / len(tasks), "seconds": time.perf_counter() - start}


# ------------------------------------------------------------------------------------------ the runs


@dataclass
class RunStats:
    """What one framework's training run measured."""

    name: str
    step_s: list[float] = field(default_factory=list)
    gen_s: list[float] = field(default_factory=list)
    sampled: list[int] = field(default_factory=list)
    train_success: list[float] = field(default_factory=list)
    setup_s: float = 0.0
    train_s: float = 0.0
    model_dir: str = ""
    notes: list[str] = field(default_factory=list)
    heldout: dict[str, float] = field(default_factory=dict)


def run_trl(args: argparse.Namespace, model_path: str, train: list[Any], folder: Path) -> RunStats:
    """TRL's GRPOTrainer on the single-turn prompts (its own transformers generation, one process)."""
    import torch
    from datasets import Dataset
    from transformers import AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    stats = RunStats("TRL GRPOTrainer")
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    scorer = Scorer(tokenizer, args.max_steps)
    by_id = {t.item_key: t for t in train}

    # TRL renders conversational prompts with apply_chat_template; check they are userrl's tokens.
    same = sum(tokenizer.apply_chat_template(scorer.chat.initial_messages(t.prompt), add_generation_prompt=True,
                                             tokenize=True, return_dict=False) == scorer.prompt_ids(t)
               for t in train)
    stats.notes.append(f"prompt tokens identical to userrl's for {same} of {len(train)} train prompts")

    def function_gym_reward(prompts: list, completions: list, completion_ids: list, task_id: list,
                            **kwargs: Any) -> list[float]:
        scored = [scorer.score(by_id[key], ids) for key, ids in zip(task_id, completion_ids, strict=True)]
        stats.train_success.append(sum(s for _, s, _ in scored) / len(scored))
        return [r for r, _, _ in scored]

    class TimedGRPOTrainer(GRPOTrainer):
        def _generate(self, prompts: list) -> Any:
            tick = time.perf_counter()
            out = super()._generate(prompts)
            stats.gen_s.append(time.perf_counter() - tick)
            stats.sampled.append(sum(len(ids) for ids in out[1]))  # completion ids, stop token included
            return out

    class StepTimer(TrainerCallback):
        def on_step_begin(self, *a: Any, **k: Any) -> None:
            self.began = time.perf_counter()

        def on_step_end(self, *a: Any, **k: Any) -> None:
            stats.step_s.append(time.perf_counter() - self.began)

    bf16 = args.precision == "bfloat16"
    config = GRPOConfig(
        output_dir=str(folder / "trl"), report_to="none", save_strategy="no", logging_steps=1,
        disable_tqdm=True, seed=args.seed, use_cpu=True, dataloader_num_workers=0,
        model_init_kwargs={"dtype": torch.float32}, bf16=bf16, gradient_checkpointing=args.gradient_checkpointing,
        max_steps=args.steps, per_device_train_batch_size=args.prompts_per_step * args.group_size,
        gradient_accumulation_steps=1, num_generations=args.group_size,
        max_completion_length=args.max_new_tokens, temperature=args.temperature, top_p=1.0, top_k=0,
        learning_rate=args.lr, lr_scheduler_type="constant", warmup_steps=0, weight_decay=0.01,
        adam_beta1=0.9, adam_beta2=0.999, max_grad_norm=1.0,
        beta=0.0, num_iterations=1, epsilon=0.2, loss_type="dapo", scale_rewards="group",
        remove_unused_columns=False, shuffle_dataset=True,
    )
    dataset = Dataset.from_list([{"prompt": scorer.chat.initial_messages(t.prompt), "task_id": t.item_key}
                                 for t in train])
    tick = time.perf_counter()
    trainer = TimedGRPOTrainer(model=model_path, reward_funcs=function_gym_reward, args=config,
                               train_dataset=dataset, processing_class=tokenizer, callbacks=[StepTimer()])
    stats.setup_s = time.perf_counter() - tick
    tick = time.perf_counter()
    trainer.train()
    stats.train_s = time.perf_counter() - tick
    stats.model_dir = str(folder / "trl" / "final")
    trainer.save_model(stats.model_dir)
    tokenizer.save_pretrained(stats.model_dir)
    stats.notes.append(f"TRL: {len(stats.gen_s)} generation batches for {len(stats.step_s)} optimizer steps")
    del trainer
    gc.collect()
    return stats


def run_userrl(args: argparse.Namespace, model: str, data_root: Path | None, folder: Path,
               multiturn: int = 0) -> RunStats:
    """userrl's own training (Ray actors, FSDP learners): single-turn prompts, or the multi-turn gym itself."""
    from userrl.checkpoint import Checkpoint
    from userrl.config import load_config
    from userrl.trainer import TrainerConfig

    name = f"userrl multi-turn gym ({multiturn} turns)" if multiturn else "userrl"
    stats = RunStats(name)
    gyms = ([{"name": "function", "difficulty": [args.difficulty]}] if multiturn
            else [{"name": "function", "source": "userrl", "split": "train"}])
    tag = f"multiturn{multiturn}" if multiturn else "single"
    config = (TrainerConfig(load_config(REPO / "experiments" / "quickstart.yaml"))
              .experiment(name=f"peer-trl-{tag}", output_dir=str(folder / "userrl"), seed=args.seed)
              .environment(gyms=gyms, data_root=None if multiturn else str(data_root), protocol="bracket",
                           max_turns=multiturn or 1, max_steps=args.max_steps)
              .policy(model=model, engine="hf", dtype=args.precision, max_new_tokens=args.max_new_tokens,
                      temperature=args.temperature, top_p=1.0)
              .training(iterations=args.steps, batch_size=args.prompts_per_step, group_size=args.group_size,
                        lr=args.lr, weight_decay=0.01, betas=(0.9, 0.999), grad_clip=1.0,
                        loss_agg_mode="token-mean", use_kl_loss=False, entropy_coeff=0.0, ppo_epochs=1,
                        mini_batch_size=None, async_rollout=False, filter_groups=False)
              .sft(enabled=False)
              .learners(num_learners=args.learners, precision=args.precision,
                        gradient_checkpointing=args.gradient_checkpointing)
              .evaluation(interval=0)
              .checkpointing(every=args.steps, keep=1)
              .tracking(experiment="bench-peer-trl", mlflow_uri=f"sqlite:///{folder}/mlflow.db")
              .overrides(args.set))
    tick = time.perf_counter()
    algo = config.build_trainer()
    stats.setup_s = time.perf_counter() - tick
    try:
        tick = time.perf_counter()
        results = algo.fit()
        stats.train_s = time.perf_counter() - tick
    finally:
        algo.stop()
    for r in results:
        stats.step_s.append(r["time/iteration_s"])
        stats.gen_s.append(r["time/rollout_s"])
        stats.sampled.append(int(r["rollout/sampled_tokens"]))
        stats.train_success.append(r["rollout/success_rate"])
    checkpoint = next(r["checkpoint"] for r in reversed(results) if "checkpoint" in r)
    stats.model_dir = str(Checkpoint(checkpoint).model_dir)
    stats.notes.append(f"{name}: {args.learners} FSDP learner(s), one hf replica; the last iteration's time "
                       "includes writing the checkpoint")
    return stats


# ------------------------------------------------------------------------------------------ report


def machine() -> str:
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor()) if Path("/proc/cpuinfo").exists() else ""
    try:
        load = "load average " + " ".join(f"{x:.1f}" for x in os.getloadavg())
    except OSError:
        load = ""
    return f"{os.cpu_count()} CPUs ({cpu}), {load}"


def versions() -> str:
    from importlib.metadata import version

    return ", ".join(f"{p} {version(p)}" for p in ("trl", "transformers", "torch", "ray"))


def table(runs: list[RunStats], before: dict[str, float]) -> str:
    lines = ["| framework | steps | s/step median | s/step mean | generation s/step | sampled tokens/step | "
             "sampled tok/s (generation) | sampled tok/s (whole step) | train success (sampled) | "
             "held-out before | held-out after | valid after | setup s | train s |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for run in runs:
        h = run.heldout
        lines.append(
            f"| {run.name} | {len(run.step_s)} | {statistics.median(run.step_s):.2f} | "
            f"{statistics.mean(run.step_s):.2f} | {statistics.mean(run.gen_s):.2f} | "
            f"{statistics.mean(run.sampled):.0f} | {sum(run.sampled) / max(sum(run.gen_s), 1e-9):.1f} | "
            f"{sum(run.sampled) / max(sum(run.step_s), 1e-9):.1f} | {statistics.mean(run.train_success):.3f} | "
            f"{before['success']:.3f} ({before['successes']}/{before['n']}) | "
            f"{h['success']:.3f} ({h['successes']}/{h['n']}) | {h['valid']:.2f} | "
            f"{run.setup_s:.1f} | {run.train_s:.1f} |")
    return "\n".join(lines)


def ratios(runs: list[RunStats]) -> str:
    trl = next((r for r in runs if r.name.startswith("TRL")), None)
    ours = next((r for r in runs if r.name == "userrl"), None)
    if trl is None or ours is None:
        return ""
    step = statistics.median(ours.step_s) / statistics.median(trl.step_s)
    gen = (sum(ours.sampled) / sum(ours.gen_s)) / max(sum(trl.sampled) / sum(trl.gen_s), 1e-9)
    whole = (sum(ours.sampled) / sum(ours.step_s)) / max(sum(trl.sampled) / sum(trl.step_s), 1e-9)
    return (f"userrl / TRL: s/step (median) {step:.2f} (below 1: userrl faster), sampled tok/s in generation "
            f"{gen:.2f}, sampled tok/s over whole steps {whole:.2f}; held-out success after "
            f"{ours.heldout['success']:.3f} vs {trl.heldout['success']:.3f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="smollm2-135m", help="smollm2-135m, tiny-random or a HF folder")
    parser.add_argument("--steps", type=int, default=10, help="optimizer steps (= userrl iterations)")
    parser.add_argument("--prompts-per-step", type=int, default=4)
    parser.add_argument("--group-size", type=int, default=4)
    parser.add_argument("--lr", type=float, default=5e-6)
    parser.add_argument("--max-new-tokens", type=int, default=24)
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--eval-tasks", type=int, default=80, help="first N test tasks (level 0 has 80)")
    parser.add_argument("--difficulty", type=int, default=0, help="Function level (the solver grounds 0-2)")
    parser.add_argument("--max-steps", type=int, default=5, help="the env's step limit")
    parser.add_argument("--precision", choices=["float32", "bfloat16"], default="float32",
                        help="float32: everything fp32 on both sides; bfloat16: fp32 weights with bf16 autocast in "
                        "both learners, TRL samples under that autocast, userrl's replica holds bf16 weights")
    parser.add_argument("--gradient-checkpointing", action=argparse.BooleanOptionalAction, default=True,
                        help="both sides (TRL's default, the quickstart's setting)")
    parser.add_argument("--learners", type=int, default=2, help="userrl FSDP learners (the quickstart's 2)")
    parser.add_argument("--frameworks", default="trl,userrl", help="which runs, in this order")
    parser.add_argument("--userrl-multiturn", type=int, default=0, metavar="TURNS",
                        help="also train userrl on the multi-turn gym with this many turns (0: no)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=None, help="keep models and logs here (default: a temporary folder)")
    parser.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE", help="more userrl config overrides")
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")

    from userrl.models import resolve_model

    started, began = dt.datetime.now().astimezone(), time.perf_counter()
    model_path = resolve_model(args.model)
    train = single_turn_tasks("train", args.difficulty)
    test = single_turn_tasks("test", args.difficulty)[: args.eval_tasks]
    frameworks = [f.strip() for f in args.frameworks.split(",") if f.strip()]
    unknown = set(frameworks) - {"trl", "userrl"}
    if unknown:
        parser.error(f"--frameworks: unknown {sorted(unknown)}; use trl, userrl")

    tmp = None if args.out else tempfile.TemporaryDirectory(prefix="userrl-peer-trl-")
    folder = Path(args.out or tmp.name).resolve()
    folder.mkdir(parents=True, exist_ok=True)
    try:
        data_root = write_data_root(folder / "data", {"train": train, "test": test})
        runs = []
        for framework in frameworks:
            print(f"== {framework}: {args.steps} steps of {args.prompts_per_step} x {args.group_size}", flush=True)
            run = (run_trl(args, model_path, train, folder) if framework == "trl"
                   else run_userrl(args, args.model, data_root, folder))
            runs.append(run)
            print(f"   {run.name}: train {run.train_s:.1f} s, steps {[round(s, 1) for s in run.step_s]}", flush=True)
        if args.userrl_multiturn:
            runs.append(run_userrl(args, args.model, None, folder, multiturn=args.userrl_multiturn))
        print(f"== held-out: greedy on {len(test)} test tasks", flush=True)
        before = evaluate(model_path, test, args.max_new_tokens, args.max_steps)
        for run in runs:
            run.heldout = evaluate(run.model_dir, test, args.max_new_tokens, args.max_steps)
    finally:
        if tmp is not None:
            tmp.cleanup()

    command = " ".join(shlex.quote(a) for a in [".venv/bin/python", "bench/peer_trl.py", *sys.argv[1:]])
    commit = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    print(f"\n{command}\n{started:%Y-%m-%d %H:%M %Z}, {machine()}; {versions()}; commit {commit}, "
          f"whole run {time.perf_counter() - began:.0f} s")
    print(f"model {args.model}, Function level {args.difficulty} single-turn ({len(train)} train prompts), "
          f"{args.steps} steps of {args.prompts_per_step} prompts x {args.group_size} = "
          f"{args.prompts_per_step * args.group_size} completions, max {args.max_new_tokens} new tokens, "
          f"temperature {args.temperature}, lr {args.lr:g} constant, AdamW wd 0.01, grad clip 1.0, no KL, "
          f"precision {args.precision}, gradient checkpointing {'on' if args.gradient_checkpointing else 'off'}\n")
    print(table(runs, before))
    print("\n" + ratios(runs))
    for run in runs:
        for note in run.notes:
            print(f"- {note}")
        if not any(run.train_success):
            print(f"- {run.name}: no sampled completion succeeded, so every advantage was 0: no policy-gradient "
                  "signal (only weight decay); start from a model that writes bracket lines (the SFT warm start) "
                  "to compare learning")
    print(f"- held-out: greedy, float32, transformers generate, first {len(test)} test tasks, "
          f"starting model {before['seconds']:.0f} s to evaluate")


if __name__ == "__main__":
    main()
