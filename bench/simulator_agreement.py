"""How close a trained user simulator comes to our gyms' scripted users, next to the untrained model (issue 17
item 4, "Back into the gyms").

Two measurements, both in this process (in-process replicas of the hf engine, no Ray):

1. Agreement in the gyms. For the first `--tasks` Persuade and Intention test tasks, the agent messages of
   the recorded test conversation (userrl/humanlm/data: the scripted solver, some turns weakened) are played
   against three users of the same gym: (a) the scripted user, (b) the base model and (c) the checkpoint,
   both asked in HumanLM's format (env.local_user_format=humanlm: the HumanLM user client, its persona and
   the conversation as the training rows render them; each model user sees its own earlier replies).
   Intention's coverage judge stays scripted, so only the user differs. Per agent message:
   * Persuade: the stance label the user reveals (the label in its <stance> block, which moves the gym's
     stance) equals the scripted persuadee's stance after the same argument;
   * Intention: the answer the user reveals agrees with the scripted user's: the scripted user named an
     option ("For <detail>, I'd go with <option>.") and the reply names the same option, or the scripted
     user named none (off-topic question) and the reply names none of the task's options either.
   A turn a model user's episode did not reach (Persuade ends when its stance reaches Strongly Disagree),
   and a turn whose role call failed (the gym's fallback reply stood in), count as disagreement. Rates are
   over every scripted turn; a constant user's rates are printed next to them.
2. The judge score on the humanlm test split, as `userrl evaluate-user` scores it (response field,
   scripted validation judge, flexible parsing), for the first `--judge-rows` rows of each gym; also the
   strict valid rate (the reply is exactly one closed <response> block) and the rate of replies that hit
   the token limit before a closing tag.

    .venv/bin/python bench/simulator_agreement.py --checkpoint runs/humanlm-smollm2/checkpoints/iter_000040
    .venv/bin/python bench/simulator_agreement.py --base tiny-random --checkpoint <folder> --tasks 1 --judge-rows 2

Decoding is greedy by default (`--temperature`), and at most `--max-tokens` tokens per field (default 64; the
response field's own limit is 512, and the recorded replies are one or two sentences: a reply cut at the cap
is still read with the flexible parse, as the user client does, and "unclosed" counts it). Every episode and
judge row of one model is decoded concurrently (one batch), so a model's time is about (the longest
conversation's turns + 1) x max-tokens decoding steps. On the loaded 2-core machine an earlier, sequential
version needed over 14 minutes for SmolLM2 at 1 task per gym and 128 tokens, which is why the defaults are small.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import sys
import time
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from userrl.actors.policy_replica import PolicyReplica
from userrl.envs import Task, load_tasks, make_env, tool_call_to_action
from userrl.envs.intention.scripted import NOT_SURE_REPLY
from userrl.envs.persuade.roles import stance_index
from userrl.humanlm.data import SEED, load_rows, seed_of
from userrl.humanlm.format import parse_strict
from userrl.humanlm.judge import ScriptedJudge, score_group
from userrl.humanlm.row import Row
from userrl.humanlm.user import HumanLMUserClient
from userrl.users import resolve_user_model

GYMS = ("persuade", "intention")
CHOICE = {"persuade": "answer", "intention": "action"}
#: Intention's coverage judge stays scripted: only the user differs between the three runs.
ROLE_BACKENDS = {"persuade": {}, "intention": {"intention_judge": "scripted"}}
MAX_STEPS = 8
STEP_TIMEOUT_S = 3600.0


def conversations(gym: str, n_tasks: int) -> list[tuple[Task, list[str]]]:
    """The first n test tasks of a gym with the agent messages of their recorded test conversation."""
    by_task: dict[str, list[Row]] = defaultdict(list)
    for row in load_rows("test", (gym,)):
        by_task[row.extra["task_id"]].append(row)
    tasks = {t.item_key: t for t in load_tasks(gym, "test")}
    out = []
    for task_id, rows in list(by_task.items())[:n_tasks]:
        last = max(rows, key=lambda r: r.extra["turn"])
        out.append((tasks[task_id], [m["content"] for m in last.context if m["role"] == "assistant"]))
    return out


async def play(gym: str, task: Task, messages: Sequence[str], client: HumanLMUserClient | None) -> list[dict]:
    """Play the agent messages against one user; per message reached, what the user revealed."""
    kwargs: dict[str, Any] = {"backend": "scripted"}
    if client is not None:
        kwargs = {"backend": "local", "llm": client, "role_backends": ROLE_BACKENDS[gym]}
    # No step timeout to speak of: a 2-core machine decodes every episode's reply in one batch.
    env = make_env(gym, task, seed=seed_of(SEED, gym, task.item_key), max_steps=MAX_STEPS,
                   step_timeout_s=STEP_TIMEOUT_S, **kwargs)
    env.reset()
    turns = []
    for message in messages:
        step = await env.astep(tool_call_to_action(CHOICE[gym], message))
        observation, info = step.observation, step.info
        calls = info.get("lm_calls") or []
        turn = {"reply": observation["feedback"], "ok": not step.aborted and all(c["ok"] for c in calls)}
        if gym == "persuade":
            answer = info.get("json_response")
            turn["stance"] = "" if answer is None else answer["stance"]  # a failed call reveals nothing
            turn["stance_named"] = answer is not None and stance_index(answer["stance"]) is not None
        else:
            turn["options"] = named_options(observation["feedback"], env._details)
        turns.append(turn)
        if step.terminated or step.truncated:
            break
    env.close()
    return turns


def named_options(reply: str, details: Sequence[Any]) -> list[str]:
    """The options of the task's details that a reply names (whole words, any case), longest first."""
    found = []
    for option in sorted({o.strip() for d in details for o in d.options}, key=len, reverse=True):
        if re.search(r"(?<!\w)" + re.escape(option) + r"(?!\w)", reply, re.IGNORECASE):
            found.append(option)
    return found


def agrees(gym: str, scripted: dict, simulated: dict | None) -> bool:
    """Whether a simulated turn reveals what the scripted user's revealed (the rule in the docstring)."""
    if simulated is None or not simulated["ok"]:  # not reached, or the role call failed: nothing revealed
        return False
    if gym == "persuade":
        return stance_index(simulated["stance"]) == stance_index(scripted["stance"])
    if scripted["reply"] == NOT_SURE_REPLY or not scripted["options"]:
        return not simulated["options"]
    return scripted["options"][0] in simulated["options"]


def agreement(plays: dict[str, list[tuple[Task, list[str]]]], reference: dict[str, list[list[dict]]],
              transcripts: dict[str, list[list[dict]]]) -> dict[str, float]:
    """Per gym: the share of scripted turns the model user agrees with, failed role calls, turns played."""
    metrics: dict[str, float] = {}
    for gym in plays:
        played = transcripts[gym]
        pairs = [(s, sim[i] if i < len(sim) else None) for ref, sim in zip(reference[gym], played, strict=True)
                 for i, s in enumerate(ref)]
        turns = [t for sim in played for t in sim]
        metrics[f"{gym}/agreement"] = sum(agrees(gym, s, m) for s, m in pairs) / len(pairs)
        metrics[f"{gym}/scripted_turns"] = float(len(pairs))
        metrics[f"{gym}/turns_played"] = float(len(turns))
        metrics[f"{gym}/failed_role_calls"] = float(sum(not t["ok"] for t in turns))
        if gym == "persuade":
            metrics[f"{gym}/stance_label_rate"] = sum(t["stance_named"] for t in turns) / max(1, len(turns))
    return metrics


async def evaluate(client: HumanLMUserClient, plays: dict[str, list[tuple[Task, list[str]]]],
                   rows: Sequence[Row], seed: int) -> tuple[dict[str, list[list[dict]]], list[str]]:
    """Every episode of both gyms and every judge row at once (the replica decodes them in one batch)."""
    episodes = [play(gym, task, messages, client) for gym, items in plays.items() for task, messages in items]
    replies = [client.reply_text("response", r.persona, r.context, seed=seed + i) for i, r in enumerate(rows)]
    done = await asyncio.gather(*episodes, *replies)
    played, texts = done[:len(episodes)], done[len(episodes):]
    transcripts, start = {}, 0
    for gym, items in plays.items():
        transcripts[gym], start = list(played[start:start + len(items)]), start + len(items)
    return transcripts, list(texts)


async def judge_scores(rows: Sequence[Row], texts: Sequence[str]) -> dict[str, float]:
    """The response field of each row as evaluate-user scores it, plus strict validity and cut-off replies."""
    judge = ScriptedJudge()
    scores = [(await score_group(judge, r, [t], "response", strict=False)).rewards[0]
              for r, t in zip(rows, texts, strict=True)]
    return {"judge_score": sum(scores) / len(scores),
            "valid_rate_strict": sum(parse_strict(t, "response").valid for t in texts) / len(texts),
            "unclosed_rate": sum("</response>" not in t for t in texts) / len(texts),
            "rows": float(len(rows))}


def make_client(model: str, args: argparse.Namespace) -> HumanLMUserClient:
    from transformers import AutoTokenizer

    path = resolve_user_model(model, "humanlm")
    tokenizer = AutoTokenizer.from_pretrained(path)
    replica = PolicyReplica(path, num_threads=args.threads, pad_token_id=tokenizer.pad_token_id or 0,
                            max_batch_size=args.batch)
    return HumanLMUserClient([replica], tokenizer, max_tokens=args.max_tokens, temperature=args.temperature,
                             attempts=args.attempts, timeout_s=args.timeout_s)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint", required=True,
                        help="the trained simulator: a `userrl train-user` checkpoint folder (or its model/)")
    parser.add_argument("--base", default="smollm2-135m", help="the untrained model (default smollm2-135m)")
    parser.add_argument("--tasks", type=int, default=3, help="test tasks per gym for the agreement (default 3)")
    parser.add_argument("--judge-rows", type=int, default=8, help="test rows per gym for the judge score (default 8)")
    parser.add_argument("--max-tokens", type=int, default=64, help="tokens per field at most (default 64)")
    parser.add_argument("--temperature", type=float, default=0.0, help="decoding temperature (default greedy)")
    parser.add_argument("--attempts", type=int, default=2, help="attempts per role call (default 2)")
    parser.add_argument("--timeout-s", type=float, default=600.0, help="seconds per generation at most")
    parser.add_argument("--threads", type=int, default=2, help="torch threads of each engine (default 2)")
    parser.add_argument("--batch", type=int, default=32, help="requests decoded together (default 32)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, help="write the numbers and the transcripts to this JSON file")
    args = parser.parse_args(argv)

    plays = {gym: conversations(gym, args.tasks) for gym in GYMS}
    reference = {gym: [asyncio.run(play(gym, t, m, None)) for t, m in items] for gym, items in plays.items()}
    rows = [r for gym in GYMS for r in load_rows("test", (gym,))[:args.judge_rows]]
    results: dict[str, Any] = {"tasks_per_gym": args.tasks, "judge_rows": len(rows), "max_tokens": args.max_tokens,
                               "temperature": args.temperature, "models": {}}
    transcripts: dict[str, Any] = {"scripted": reference}
    # What a constant user would score: always the most common stance label / never naming an option.
    labels = [t["stance"] for ref in reference["persuade"] for t in ref]
    quiet = [not t["options"] for ref in reference["intention"] for t in ref]
    results["constant_baselines"] = {"persuade/agreement": max(map(labels.count, labels)) / len(labels),
                                     "intention/agreement": sum(quiet) / len(quiet)}
    for label, model in (("untrained", args.base), ("trained", args.checkpoint)):
        began = time.perf_counter()
        client = make_client(model, args)
        transcripts[label], texts = asyncio.run(evaluate(client, plays, rows, args.seed))
        metrics = agreement(plays, reference, transcripts[label])
        metrics.update(asyncio.run(judge_scores(rows, texts)))
        transcripts[f"{label}_judge_replies"] = texts
        metrics["seconds"] = round(time.perf_counter() - began, 1)
        results["models"][label] = {"model": model, **metrics}
        del client
    print(f"{'':10} {'persuade agree':>14} {'intention agree':>15} {'judge score':>11} {'strict valid':>12} "
          f"{'unclosed':>8} {'seconds':>7}")
    for label, m in results["models"].items():
        print(f"{label:10} {m['persuade/agreement']:>14.3f} {m['intention/agreement']:>15.3f} "
              f"{m['judge_score']:>11.3f} {m['valid_rate_strict']:>12.2f} {m['unclosed_rate']:>8.2f} "
              f"{m['seconds']:>7.0f}")
    constant = results["constant_baselines"]
    print(f"{'constant':10} {constant['persuade/agreement']:>14.3f} {constant['intention/agreement']:>15.3f}"
          "   (the most common stance label every turn; never naming an option)")
    turns = {gym: int(results["models"]["trained"][f"{gym}/scripted_turns"]) for gym in GYMS}
    print(f"scripted turns: {turns}; judge rows: {len(rows)} (scripted judge, flexible parsing)")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({**results, "transcripts": transcripts}, indent=2) + "\n")
        print(f"written: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
