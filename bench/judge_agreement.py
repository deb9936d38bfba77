"""How well an LLM coverage judge agrees with IntentionGym's scripted judge (issue 33 item 4, "LLM judges").

Transcripts: held-out Intention conversations on the builtin test split (16 tasks). First each task's recorded
test conversation (userrl/humanlm/data through `simulator_agreement.conversations`: the scripted solver, some
turns replaced by off-topic ones), then more from the same generator (`humanlm.data.intention_conversation`)
with the seeds SEED+1, SEED+2, ... in turn, a conversation equal to one already taken skipped, until there are
`--transcripts` (default 100); the header says how many came from where, and when there are fewer.

Each transcript's agent questions are played against the gym with both roles scripted (the scripted judge
decides which details remain). Before each question the LLM judge gets what IntentionEnv._judge would send it:
JUDGE_SYSTEM_PROMPT and roles.judge_message(request, category, remaining details, exchanges, question), its
reply parsed strictly (validate_judgement, then covered_positions), with the client's retries and failure
accounting. Every call of the run is sent at once (one asyncio.gather), so the engine batches them.

Per (step, remaining detail) pair, covered by the scripted judge vs by the LLM judge: a confusion table,
accuracy, Cohen's kappa, precision and recall of "covered" (the scripted judge as the reference). A call the
validator rejected on every attempt covers nothing (the env's fallback); the same over successful calls only;
and is_task_related agreement over successful calls.

    .venv/bin/python bench/judge_agreement.py                                       # SmolLM2-135M, hf engine
    .venv/bin/python bench/judge_agreement.py --judge tiny-random --transcripts 3 --max-tokens 48   # smoke
    .venv/bin/python bench/judge_agreement.py --judge-url http://127.0.0.1:8000/v1 --judge-model Qwen/Qwen3-32B

100 transcripts make 414 judge calls (349 distinct inputs) over 1,254 (step, remaining detail) pairs, 296 of
them covered by the scripted judge. SmolLM2-135M writes no JSON object for this prompt (it continues the
list or paraphrases the dialogue until the token cap), so every call fails and the all-calls table equals a
judge that never covers anything; the measurement is meant for models that can follow the prompt.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import platform
import shlex
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from userrl.envs import Task, make_env, tool_call_to_action
from userrl.envs.intention import roles
from userrl.envs.intention.scripted import scripted_judgement
from userrl.envs.llm import RoleCall, RoleClient, UserModel
from userrl.humanlm.data import SEED, intention_conversation, seed_of

sys.path.insert(0, str(Path(__file__).resolve().parent))
from simulator_agreement import conversations  # noqa: E402 - the recorded test conversations

GYM = "intention"
MAX_SEEDS = 50  # seeds tried per task for more transcripts
COVERED = ("covered, all calls (failed: nothing)", "covered, successful calls")
RELATED, SAME = "is_task_related, successful calls", "same covered set, successful calls"


def transcripts(n: int, n_tasks: int | None) -> tuple[list[tuple[Task, int, list[str]]], int]:
    """n distinct held-out transcripts (task, env seed, agent messages), recorded ones first; how many recorded."""
    recorded = conversations(GYM, n_tasks)
    out = [(t, seed_of(SEED, GYM, t.item_key), m) for t, m in recorded]
    seen = {(t.item_key, tuple(m)) for t, m in recorded}
    for k, (task, _) in itertools.product(range(1, MAX_SEEDS), recorded):
        if len(out) >= n:
            break
        seed = seed_of(SEED + k, GYM, task.item_key)  # as gym_rows seeds the recorded ones
        turns = intention_conversation(task, np.random.default_rng(seed), seed)[1]
        messages = [context[-1]["content"] for context, _, _ in turns]  # each context ends with the question
        if (task.item_key, tuple(messages)) not in seen:
            seen.add((task.item_key, tuple(messages)))
            out.append((task, seed, messages))
    return out[:n], min(n, len(recorded))


def walk(task: Task, seed: int, messages: list[str]) -> list[dict[str, Any]]:
    """Per question, both roles scripted: the LLM judge's message, the remaining count and the scripted verdict."""
    env = make_env(GYM, task, seed=seed, backend="scripted", max_steps=len(messages) + 1)
    env.reset()
    steps = []
    for question in messages:
        remaining = [env._details[i] for i in env.remaining]
        verdict = scripted_judgement(question, env._task_words, [env._keywords[i] for i in env.remaining])
        steps.append({"task": task.item_key, "remaining": len(remaining), "related": verdict.is_task_related,
                      "covered": roles.covered_positions(verdict, len(remaining)),
                      "message": roles.judge_message(env._task_text, env._category, remaining, env.exchanges, question)})
        _, _, terminated, truncated, _ = env.step(tool_call_to_action("action", question))
        if terminated or truncated:
            break
    env.close()
    return steps


async def judge_all(client: RoleClient, steps: list[dict[str, Any]],
                    args: argparse.Namespace) -> list[tuple[roles.Judgement | None, RoleCall]]:
    """Every step's LLM verdict, all calls at once: (the judgement or None when every attempt failed, the call)."""
    return list(await asyncio.gather(*(
        client.complete_json(roles.JUDGE_ROLE, roles.JUDGE_SYSTEM_PROMPT, s["message"], roles.validate_judgement,
                             max_tokens=args.max_tokens, temperature=args.temperature, seed=args.seed + i)
        for i, s in enumerate(steps))))


def agreement(pairs: list[tuple[bool, bool]]) -> dict[str, Any]:
    """(reference, judged) pairs: confusion counts, accuracy, Cohen's kappa, precision and recall (None: undefined)."""
    n = len(pairs)
    tp, fn = sum(s and m for s, m in pairs), sum(s and not m for s, m in pairs)
    fp, tn = sum(m and not s for s, m in pairs), sum(not s and not m for s, m in pairs)
    po = (tp + tn) / n if n else None
    pe = ((tp + fp) * (tp + fn) + (fn + tn) * (fp + tn)) / n**2 if n else None
    kappa = (po - pe) / (1 - pe) if po is not None and pe is not None and pe < 1 else None
    return {"pairs": n, "tp": tp, "fn": fn, "fp": fp, "tn": tn, "accuracy": po, "kappa": kappa,
            "precision": tp / (tp + fp) if tp + fp else None, "recall": tp / (tp + fn) if tp + fn else None}


def score(steps: list[dict[str, Any]], verdicts: list[tuple[roles.Judgement | None, RoleCall]]) -> dict[str, Any]:
    """Coverage agreement over all calls and successful ones, is_task_related agreement, per-step LLM positions."""
    covered_all, covered_ok, related, exact = [], [], [], []
    for step, (value, call) in zip(steps, verdicts, strict=True):
        step["llm"] = roles.covered_positions(value, step["remaining"]) if value is not None else []
        step["llm_related"] = None if value is None else value.is_task_related
        step["ok"], step["attempts"] = call.ok, call.attempts
        pairs = [(p in step["covered"], p in step["llm"]) for p in range(step["remaining"])]
        covered_all += pairs
        if value is not None:
            covered_ok += pairs
            related.append((step["related"], value.is_task_related))
            exact.append(sorted(step["llm"]) == sorted(step["covered"]))
    return {COVERED[0]: agreement(covered_all), COVERED[1]: agreement(covered_ok), RELATED: agreement(related),
            SAME: sum(exact) / len(exact) if exact else None}


def make_client(args: argparse.Namespace) -> tuple[RoleClient, str]:
    """The judge's role client and its description: an OpenAI-compatible endpoint, or an in-process replica."""
    if args.judge_url:
        from userrl.envs.openai_client import LLMConfig, OpenAIRoleClient

        config = LLMConfig(base_url=args.judge_url, model=args.judge_model, temperature=args.temperature,
                           max_tokens=args.max_tokens, timeout_s=args.timeout_s, attempts=args.attempts,
                           max_concurrency=args.batch)
        return OpenAIRoleClient(config), f"{args.judge_model} at {args.judge_url}"
    from transformers import AutoTokenizer

    from userrl.actors.policy_replica import PolicyReplica
    from userrl.models import resolve_model
    from userrl.users import ReplicaRoleClient

    path = resolve_model(args.judge)
    tokenizer = AutoTokenizer.from_pretrained(path)
    replica = PolicyReplica(path, args.engine, dtype=args.dtype, max_batch_size=args.batch,
                            num_threads=args.threads, pad_token_id=tokenizer.pad_token_id or 0)
    client = ReplicaRoleClient([replica], tokenizer, max_tokens=args.max_tokens, temperature=args.temperature,
                               attempts=args.attempts, timeout_s=args.timeout_s, user_model=UserModel(args.judge))
    return client, f"{args.judge} (in-process PolicyReplica, {args.engine} engine, {args.dtype})"


def fmt(x: Any) -> str:
    """A number for the tables: 3 decimals for fractions, '-' when undefined."""
    return "-" if x is None else f"{x:.3f}" if isinstance(x, float) else str(x)


def report(meta: dict[str, Any], accounting: dict[str, Any], results: dict[str, Any]) -> None:
    """Print the run's header, the call accounting and the agreement tables (markdown)."""
    m, a = meta, accounting
    fewer = f" (FEWER than the {m['asked']} asked: no more distinct ones)" if m["transcripts"] < m["asked"] else ""
    print(f"# LLM judge vs scripted judge, IntentionGym\n\ncommand: `{m['command']}`  ")
    print(f"judge: {m['judge']}, max_tokens {m['max_tokens']}, temperature {m['temperature']}  ")
    print(f"date: {m['date']}; machine: {m['machine']}; wall {m['wall_s']} s (judge calls {a['judge_s']} s)  ")
    print(f"transcripts: {m['transcripts']}{fewer} on {m['tasks']} test tasks: {m['recorded']} recorded test "
          f"conversations, {m['transcripts'] - m['recorded']} more from intention_conversation, seeds {SEED}+k\n")
    print("| calls | failed (every attempt rejected) | of them, every reply cut at max_tokens | attempts | tokens "
          "| tokens/call | distinct inputs |")
    print(f"|---|---|---|---|---|---|---|\n| {a['calls']} | {a['failed']} | {a['failed_at_cap']} | {a['attempts']} "
          f"| {a['tokens']} | {a['tokens'] / max(1, a['calls']):.1f} | {a['distinct_inputs']} |")
    if a["errors"]:
        print(f"\nerrors of failed calls: {', '.join(a['errors'])}")
    for name in COVERED:
        r = results[name]
        print(f"\n{name}: {r['pairs']} (step, remaining detail) pairs\n\n| scripted \\ LLM | covered | not covered |")
        print(f"|---|---|---|\n| covered | {r['tp']} | {r['fn']} |\n| not covered | {r['fp']} | {r['tn']} |")
    print("\n| agreement | pairs | accuracy | Cohen's kappa | precision | recall |\n|---|---|---|---|---|---|")
    for name in (*COVERED, RELATED):
        r = results[name]
        print(f"| {name} | {r['pairs']} | {fmt(r['accuracy'])} | {fmt(r['kappa'])} | {fmt(r['precision'])} "
              f"| {fmt(r['recall'])} |")
    r = results[COVERED[0]]
    print(f"\na judge that never covers anything: accuracy {fmt((r['fp'] + r['tn']) / max(1, r['pairs']))}, kappa 0; "
          f"steps whose LLM covered set equals the scripted one (successful calls): {fmt(results[SAME])}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--judge", default="smollm2-135m", help="model name or folder, served in-process")
    parser.add_argument("--engine", default="hf", choices=("hf", "vllm", "auto"), help="its engine (default hf)")
    parser.add_argument("--dtype", default="float32", help="its dtype (default float32; bfloat16 on a GPU)")
    parser.add_argument("--judge-url", help="an OpenAI-compatible server instead, e.g. http://127.0.0.1:8000/v1")
    parser.add_argument("--judge-model", default="default", help="the server's model name (with --judge-url)")
    parser.add_argument("--transcripts", type=int, default=100, help="held-out transcripts (default 100)")
    parser.add_argument("--tasks", type=int, help="use only the first N test tasks (default all)")
    parser.add_argument("--max-tokens", type=int, default=128, help="tokens per judge reply (default 128)")
    parser.add_argument("--temperature", type=float, default=0.0, help="decoding temperature (default greedy)")
    parser.add_argument("--attempts", type=int, default=3, help="attempts per call (greedy: a rejected reply is final)")
    parser.add_argument("--timeout-s", type=float, default=3600.0, help="per attempt (queueing in the engine counts)")
    parser.add_argument("--batch", type=int, default=32, help="requests decoded (or sent) together (default 32)")
    parser.add_argument("--threads", type=int, default=os.cpu_count(), help="torch threads (default all cores)")
    parser.add_argument("--seed", type=int, default=0, help="seed of call i: seed + i (sampling only)")
    parser.add_argument("--output", type=Path, help="write the numbers and per-step verdicts to this JSON file")
    args = parser.parse_args(argv)

    began = time.perf_counter()
    chosen, n_recorded = transcripts(args.transcripts, args.tasks)
    steps = [s for task, seed, messages in chosen for s in walk(task, seed, messages)]
    client, judge = make_client(args)
    judging = time.perf_counter()
    verdicts = asyncio.run(judge_all(client, steps, args))
    calls = [c for _, c in verdicts]
    meta = {"command": shlex.join([sys.executable, *sys.argv]), "judge": judge, "max_tokens": args.max_tokens,
            "temperature": args.temperature, "date": f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC",
            "machine": f"{os.cpu_count()} cores, {platform.machine()}", "wall_s": round(time.perf_counter() - began, 1),
            "asked": args.transcripts, "transcripts": len(chosen), "recorded": n_recorded,
            "tasks": len({t.item_key for t, _, _ in chosen})}
    accounting = {"calls": len(calls), "failed": sum(not c.ok for c in calls),
                  "failed_at_cap": sum(not c.ok and c.tokens >= c.attempts * args.max_tokens for c in calls),
                  "attempts": sum(c.attempts for c in calls), "tokens": sum(c.tokens for c in calls),
                  "errors": sorted({c.error for c in calls if c.error}),
                  "distinct_inputs": len({s["message"] for s in steps}),
                  "judge_s": round(time.perf_counter() - judging, 1)}
    results = score(steps, verdicts)
    report(meta, accounting, results)
    if args.output:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        record = {**meta, "calls": accounting, "agreement": results,
                  "steps": [{k: v for k, v in s.items() if k != "message"} for s in steps]}
        args.output.write_text(json.dumps(record, indent=2) + "\n")
        print(f"\nwritten: {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
