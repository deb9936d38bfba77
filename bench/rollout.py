"""Rollout throughput against the raw engine, a naive transformers loop, weight sync and the learner.

In one process run, on the same model and the same episodes:

  (a) raw engine: the same number of sequences and the same token counts as rollout (b), all submitted at
      once to the same replica, one `generate` each: an episode's prompt tokens (its first prompt, tool
      results and turn headers, concatenated) as the prompt, and exactly its sampled-token count as fixed
      length (no stop tokens): the engine's ceiling for the work the rollout did (the token after the first
      prompt is made the episode's own, so that, like (b), no two episodes share KV past the first prompt);
      (a0) the same with the first prompt only: the decode-only ceiling (less work than the rollout did);
  (b) userrl rollout: EnvRunner actors play multi-turn episodes of a gym with the scripted user against
      PolicyReplica actors (`--engine vllm` or `hf`), as a training iteration does (RolloutCoordinator.play);
  (c) naive loop: one episode at a time, each turn one transformers `generate` call (a subset of the
      episodes, reported per token);

then the learner's tokens/s on (b)'s trajectories (userrl.learner.Learner, one gloo process), and the
seconds to push its weights into the replica in place (as after every update), through the weight-sync
group and through the object store, alternately in the same run, with their ratio and phases.

    .venv/bin/python bench/rollout.py --engine vllm --tasks 8 --group 4
    .venv/bin/python bench/rollout.py --engine vllm --sync-only        # the weight sync alone
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import statistics
import time
from collections import Counter


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _parse(item: str) -> tuple[str, object]:
    """`key=value` with a YAML value (numbers, booleans)."""
    import yaml

    key, _, value = item.partition("=")
    return key, yaml.safe_load(value)


def _config(args: argparse.Namespace):
    from userrl.trainer import TrainerConfig

    vllm = {"enforce_eager": args.eager, **dict(_parse(item) for item in args.vllm)}
    return (TrainerConfig()
            .experiment(name="bench", seed=0)
            .environment(gyms=[{"name": args.gym, "difficulty": [0]}], protocol="bracket",
                         max_turns=args.max_turns, max_steps=args.max_turns)
            .policy(model=args.model, engine=args.engine, dtype=args.dtype, max_new_tokens=args.max_new_tokens,
                    max_model_len=2048, max_batch_size=64, vllm=vllm)
            .training(batch_size=args.tasks, group_size=args.group, micro_batch_tokens=4096)
            .learners(num_learners=1)
            .env_runners(num_env_runners=args.runners, num_cpus_per_env_runner=0.25)
            .policy(num_cpus_per_replica=1)
            .to_config())


def rollout(coordinator, iteration: int):
    """(b): one iteration's episodes through the env runners; returns trajectories and seconds."""
    from userrl.coordinator import episode_specs

    tc = coordinator.config.training
    specs = episode_specs(coordinator.train_tasks.sample(tc.batch_size, iteration), tc.group_size, f"b{iteration}")
    start = time.perf_counter()
    trajectories = coordinator.group.play(specs, seed=iteration)
    rollout.tasks = [spec.task for spec in specs]  # in the order of the trajectories
    return trajectories, time.perf_counter() - start


def turn_breakdown(group, reset: bool = False) -> dict[str, float]:
    """The env runners' seconds per phase of their turns (userrl/actors/turn_timing.py), summed."""
    import ray

    totals: Counter = Counter()
    for answer in ray.get([runner.turn_timings.remote(reset) for runner in group.runners]):
        totals.update(answer)
    return dict(totals)


def _print_breakdown(timings: dict[str, float], b_s: float, a_engine_s: float, a_s: float) -> None:
    """Where (b)'s episode time went, per turn and as episodes in each phase on average over (b)'s seconds."""
    from userrl.actors.turn_timing import PHASES

    turns, episodes = timings["turns"], timings["episodes"]
    total = sum(timings[phase] for phase in PHASES)
    print(f"\n(b) breakdown over {episodes:.0f} episodes, {turns:.0f} turns ({b_s:.2f} s): seconds summed over "
          "episodes, ms per turn, episodes in the phase on average")
    print("| phase | summed s | ms/turn | episodes on average |")
    print("|---|---|---|---|")
    for phase in PHASES:
        if timings[phase]:
            print(f"| {phase} | {timings[phase]:.2f} | {1000 * timings[phase] / turns:.1f} "
                  f"| {timings[phase] / b_s:.1f} |")
    print(f"| all | {total:.2f} | {1000 * total / turns:.1f} | {total / b_s:.1f} |")
    engine = timings["engine_open"] + timings["engine_first"] + timings["engine_decode"]
    print(f"(a) for comparison: its sequences spent {a_engine_s:.2f} s summed in the engine "
          f"({a_engine_s / a_s:.1f} on average over its {a_s:.2f} s); (b)'s turns {engine:.2f} s "
          f"({engine / b_s:.1f} on average)", flush=True)


def cold(replica, args: argparse.Namespace) -> None:
    """--cold-cache: drop the replica's prefix cache, so that each run computes its own prompts (without it, (a)
    and (a0) find the first prompts that (b) just computed in the cache, and compute less than (b) did)."""
    import ray

    if args.cold_cache and not ray.get(replica.reset_prefix_cache.remote()):
        raise RuntimeError("the replica's prefix cache could not be reset (a request still holds blocks)")


def _steps(before: dict, after: dict) -> tuple[int, int, float, int]:
    """Engine-core steps, their rows, output transfer seconds and prompt tokens computed (not from the prefix
    cache or a session's kept KV) between two `get_stats` answers (vllm)."""
    def delta(key: str) -> float:
        return after.get(key, 0) - before.get(key, 0)

    return (int(delta("steps")), int(delta("step_rows")), delta("step_output_s"),
            int(delta("prompt_tokens") - delta("cached_prompt_tokens")))


def raw_engine(replica, trajectories, first_prompt_only: bool = False, rest: str = "distinct") -> tuple[int, float]:
    """(a): one sequence per episode, all at once: its prompt tokens (or first prompt), its sampled-token count.

    `rest="distinct"`: the first token after the first prompt is replaced by one of the episode's own, and the
    tokens after the last sampled one (the last feedback, which (b) never sent) are left out, so that the engine
    computes what (b) computed; "shared" keeps both (the construction before 2026-11-26, for older figures). Without the sampled tokens between them, the tool results and headers of
    episodes of the same task are often identical (same action, same feedback), and the prefix cache let (a)
    skip them; (b)'s episodes diverge at their first sampled token and share nothing past the first prompt.
    """
    import ray

    from userrl.engines.base import GenerationRequest

    def prompt(i: int, t) -> list[int]:
        first = t.input_ids[: t.prompt_len]
        if first_prompt_only:
            return first
        end = len(t.input_ids)
        if rest == "distinct":  # the feedback after the last sampled token never reached (b)'s engine
            end = max(k for k, trained in enumerate(t.loss_mask) if trained) + 1
        after = [token for token, trained in zip(t.input_ids[t.prompt_len:end], t.loss_mask[t.prompt_len:end],
                                                 strict=True) if not trained]
        if rest == "distinct" and after:
            after[0] = 1000 + i  # same length, same compute; only the prefix cache can no longer match it
        return first + after

    requests = [GenerationRequest(prompt(i, t), t.num_sampled, temperature=1.0, seed=i)
                for i, t in enumerate(trajectories) if t.num_sampled]
    start = time.perf_counter()
    outputs = ray.get([replica.generate.remote(r) for r in requests])
    seconds = time.perf_counter() - start
    assert [len(o.token_ids) for o in outputs] == [r.max_new_tokens for r in requests]
    raw_engine.engine_s = sum(o.timing["done"] - o.timing["put"] for o in outputs
                              if o.timing and "put" in o.timing)  # sequences' summed time in the engine
    return sum(len(o.token_ids) for o in outputs), seconds


def naive_loop(config, model_path: str, episodes: int) -> tuple[int, float, int]:
    """(c): episodes one after another, each turn a transformers `generate` call."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from userrl.chat import ChatFormat
    from userrl.coordinator import TaskMixture
    from userrl.engines.base import GenerationOutput
    from userrl.envs import make_env
    from userrl.rollout import RolloutLimits, TokenPolicy, run_episode

    tokenizer = AutoTokenizer.from_pretrained(model_path)
    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=getattr(torch, config.policy.dtype)).eval()
    chat = ChatFormat(tokenizer, config.env.protocol)
    ec = config.env
    limits = RolloutLimits.from_config(config)

    async def generate(request):
        torch.manual_seed(request.seed)
        prompt = torch.tensor([request.prompt_ids])
        with torch.inference_mode():
            out = model.generate(prompt, attention_mask=torch.ones_like(prompt), do_sample=True,
                                 temperature=request.temperature, top_p=request.top_p, top_k=0,
                                 max_new_tokens=request.max_new_tokens, eos_token_id=request.stop_token_ids,
                                 pad_token_id=tokenizer.pad_token_id, output_scores=True, return_dict_in_generate=True)
            scores = model.compute_transition_scores(out.sequences, out.scores, normalize_logits=True)
        ids = out.sequences[0, prompt.shape[1]:].tolist()
        stop = bool(ids) and ids[-1] in request.stop_token_ids
        return GenerationOutput(ids, scores[0].tolist(), "stop" if stop else "length")

    tasks = TaskMixture(config).sample(episodes, 0)
    sampled, start = 0, time.perf_counter()
    for i, task in enumerate(tasks):
        env = make_env(task.gym, task, max_steps=ec.max_steps)
        traj = asyncio.run(run_episode(env, task, TokenPolicy(chat, generate), limits, uid=f"c{i}", group_id=f"c{i}"))
        sampled += traj.num_sampled
    return sampled, time.perf_counter() - start, len(tasks)


def client_costs(config, model_path: str, trajectories, tasks) -> dict[str, float]:
    """The runner's CPU per turn, replayed in this process: (b)'s episodes again through `run_episode` with
    their recorded tokens as the replies, the tokenizer's decode, the parse, the env step and the rendering
    of the tool message timed separately (what the `client` phase of the breakdown spends its time on)."""
    from transformers import AutoTokenizer

    from userrl.chat import ChatFormat
    from userrl.engines.base import GenerationOutput
    from userrl.env_runner_group import env_kwargs
    from userrl.envs import make_env
    from userrl.rollout import RolloutLimits, TokenPolicy, run_episode

    chat = ChatFormat(AutoTokenizer.from_pretrained(model_path), config.env.protocol)
    limits, kwargs = RolloutLimits.from_config(config), env_kwargs(config)
    spent: Counter = Counter()

    def timed(name: str, function):
        def wrapper(*args, **kw):
            tick = time.perf_counter()
            try:
                return function(*args, **kw)
            finally:
                spent[name] += time.perf_counter() - tick
        return wrapper

    def atimed(name: str, function):
        async def wrapper(*args, **kw):
            tick = time.perf_counter()
            try:
                return await function(*args, **kw)
            finally:
                spent[name] += time.perf_counter() - tick
        return wrapper

    chat.tokenizer.decode = timed("decode", chat.tokenizer.decode)
    chat.parse = timed("parse", chat.parse)
    chat.encode_after_assistant = timed("encode", chat.encode_after_assistant)
    turns = 0
    start = time.perf_counter()
    for traj, task in zip(trajectories, tasks, strict=True):
        sampled = [[token for token, trained, turn in zip(traj.input_ids, traj.loss_mask, traj.turn_ids, strict=True)
                    if trained and turn == k] for k in range(len(traj.turns))]

        played: list[int] = []

        async def replay(request, sampled=sampled, played=played):
            ids = sampled[len(played)]
            played.append(len(ids))
            stop = bool(ids) and ids[-1] in request.stop_token_ids
            return GenerationOutput(ids, [0.0] * len(ids), "stop" if stop else "length")

        tick = time.perf_counter()
        env = make_env(task.gym, task, **kwargs.get(task.gym, {}))
        spent["env_build"] += time.perf_counter() - tick
        env.astep = atimed("env_step", env.astep)
        asyncio.run(run_episode(env, task, TokenPolicy(chat, replay), limits, uid=traj.uid, group_id=traj.group_id))
        turns += len(played)
    total = time.perf_counter() - start
    named = sum(spent.values())
    print(f"runner CPU per turn, replayed in one process ({turns} turns, {len(trajectories)} episodes): " + ", ".join(
        f"{name} {1000 * seconds / turns:.2f} ms" for name, seconds in spent.most_common())
        + f", the rest of the episode loop {1000 * (total - named) / turns:.2f} ms "
          f"(total {1000 * total / turns:.2f} ms/turn; asyncio.run per episode included)", flush=True)
    return {name: seconds / turns for name, seconds in spent.items()}


def weight_sync(group, learner, repeats: int = 5) -> dict[str, list[dict[str, float]]]:
    """Learner -> replica weights swapped in place (+ version), both paths alternately, `repeats` times each.

    "group": `Learner.gathered_weights()` broadcast through the weight-sync group (formed by an untimed
    first sync); "object_store": `Learner.full_state_dict()` -> object store -> replica -> safetensors in
    /dev/shm -> reload (the path every sync took before, and the fallback now). Each run's per-phase
    seconds (`EnvRunnerGroup.last_sync`; "object_store" adds its gather).
    """
    version = 1
    group.sync_weights(learner.gathered_weights(), version)  # forms the group
    assert group.sync_paths == {0: "group"}, group.sync_paths
    runs: dict[str, list[dict[str, float]]] = {"group": [], "object_store": []}
    for repeat in range(repeats):
        for path in ("group", "object_store") if repeat % 2 == 0 else ("object_store", "group"):
            version += 1
            start = time.perf_counter()
            if path == "group":
                group.sync_weights(learner.gathered_weights(), version)
            else:
                tick = time.perf_counter()
                state = learner.full_state_dict()
                gather_s = time.perf_counter() - tick
                group.sync_weights(state, version, through="object_store")
                del state
            seconds = time.perf_counter() - start
            assert group.sync_paths == {0: path}, group.sync_paths
            phases = dict(group.last_sync)
            if path == "object_store":
                phases["gather_s"] = gather_s  # full_state_dict; the dict's own pass is in total_s
            runs[path].append({**phases, "total_s": seconds})
    return runs


def _print_weight_sync(runs: dict[str, list[dict[str, float]]]) -> None:
    group, store = runs["group"], runs["object_store"]
    med = {path: statistics.median(r["total_s"] for r in rs) for path, rs in runs.items()}
    for path, rs in runs.items():
        listed = ", ".join(f"{r['total_s']:.2f}" for r in rs)
        print(f"weight sync through the {path}: {listed} s "
              f"(median {med[path]:.2f})")
    print(f"object store / group = {med['object_store'] / med['group']:.2f}x (medians)")
    phases = ["gather_s", "pack_s", "broadcast_s", "receive_s", "load_s", "sessions_s", "cache_reset_s"]
    print("group path, median seconds per phase: " + ", ".join(
        f"{k.removesuffix('_s')} {statistics.median(r.get(k, 0.0) for r in group):.3f}" for k in phases))
    print("  (gather/pack/broadcast: learner rank 0; receive = waiting for and taking in the buckets, load = "
          "reload_weights + repack + tied head: the vLLM worker; cache_reset: prefix cache)")
    print("object-store path, median seconds per phase: gather (full_state_dict) "
          f"{statistics.median(r['gather_s'] for r in store):.3f}, object store + file + reload + cache reset "
          f"{statistics.median(r['object_store_s'] for r in store):.3f}")


def make_learner(config, model_path: str):
    """userrl's Learner in a one-process gloo group."""
    import torch.distributed as dist
    from transformers import AutoTokenizer

    from userrl.learner import Learner

    if not dist.is_initialized():
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{_free_port()}", rank=0, world_size=1)
    return Learner(model_path, config, AutoTokenizer.from_pretrained(model_path).pad_token_id)


def learner_throughput(learner, trajectories) -> tuple[dict, float]:
    """One GRPO update of the trajectories."""
    from userrl.estimators import make_estimator

    advantages, _, _ = make_estimator(learner.config, learner.pad_token_id).estimate(
        trajectories, learner.compute_values)
    start = time.perf_counter()
    metrics = learner.update(trajectories, advantages)
    return metrics, time.perf_counter() - start


def _measure(args: argparse.Namespace, config, model_path: str, group):
    """Runs (b), (a), (c), the learner update and the weight sync; None after (a) with --rollout-only, the
    weight sync's runs alone with --sync-only."""
    import ray

    from userrl.coordinator import RolloutCoordinator

    if args.sync_only:
        return weight_sync(group, make_learner(config, model_path), args.sync_repeats)
    coordinator = RolloutCoordinator(config, group)
    replica = group.replicas[0]
    rollout(coordinator, 100)  # warm-up: first requests, compiled shapes, env imports
    turn_breakdown(coordinator.group, reset=True)
    cold(replica, args)
    before = ray.get(replica.get_stats.remote())
    trajectories, b_s = rollout(coordinator, 1)
    timings = turn_breakdown(coordinator.group)
    b_tokens = sum(t.num_sampled for t in trajectories)
    turns = statistics.mean(len(t.turns) for t in trajectories)
    stops = Counter(t.stop_reason for t in trajectories)
    print(f"(b) rollout: {b_tokens} tokens in {b_s:.2f} s, {turns:.2f} turns/episode, stops {dict(stops)}", flush=True)
    stats = ray.get(replica.get_stats.remote())
    steps = {"b": _steps(before, stats)}
    cold(replica, args)
    after_b = ray.get(replica.get_stats.remote())
    a_tokens, a_s = raw_engine(replica, trajectories)
    after_a = ray.get(replica.get_stats.remote())
    steps["a"] = _steps(after_b, after_a)
    a_engine_s = raw_engine.engine_s
    print(f"(a) raw engine: {a_tokens} tokens in {a_s:.2f} s; b/a = {b_tokens / b_s / (a_tokens / a_s):.2f}",
          flush=True)
    cold(replica, args)
    after_b = ray.get(replica.get_stats.remote())
    shared = raw_engine(replica, trajectories, rest="shared")
    after_a = ray.get(replica.get_stats.remote())
    steps["a shared"] = _steps(after_b, after_a)
    print(f"(a, shared rest: before 2026-11-26) raw engine: {shared[0]} tokens in {shared[1]:.2f} s; "
          f"b/a = {b_tokens / b_s / (shared[0] / shared[1]):.2f}", flush=True)
    cold(replica, args)
    after_a = ray.get(replica.get_stats.remote())
    a0 = raw_engine(replica, trajectories, first_prompt_only=True)
    print(f"(a0) raw engine, first prompts: {a0[0]} tokens in {a0[1]:.2f} s; "
          f"b/a0 = {b_tokens / b_s / (a0[0] / a0[1]):.2f}", flush=True)
    steps["a0"] = _steps(after_a, ray.get(replica.get_stats.remote()))
    print(f"replica stats after (b): {stats}", flush=True)
    _print_breakdown(timings, b_s, a_engine_s, a_s)
    opened = {key: stats.get(key, 0) - before.get(key, 0)
              for key in ("session_opens", "open_prompt_tokens", "open_cached_tokens", "chunk_tokens")}
    if opened["session_opens"]:
        print(f"(b) prompt tokens: {opened['session_opens']} opening prompts of {opened['open_prompt_tokens']} tokens, "
              f"{opened['open_cached_tokens']} of them from the prefix cache; later turns' chunks "
              f"{opened['chunk_tokens']} tokens (all computed)", flush=True)
    for run, seconds in (("b", b_s), ("a", a_s), ("a shared", shared[1]), ("a0", a0[1])):
        count, rows, output_s, computed = steps[run]
        if count:
            print(f"({run}) engine steps: {count}, {rows / count:.1f} rows each on average, "
                  f"{1000 * seconds / count:.1f} ms per step, outputs reached the replica "
                  f"{1000 * output_s / count:.2f} ms after their step; {computed} prompt tokens computed",
                  flush=True)
    client_costs(config, model_path, trajectories, rollout.tasks)
    if args.rollout_only:
        return None
    naive = naive_loop(config, model_path, args.naive_episodes)
    learner = make_learner(config, model_path)
    metrics, learn_s = learner_throughput(learner, trajectories)
    sync = weight_sync(group, learner, args.sync_repeats)
    return trajectories, turns, stops, stats, (a_tokens, a_s), a0, (b_tokens, b_s), naive, (metrics, learn_s), sync


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--engine", default="vllm", choices=["vllm", "hf"])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--gym", default="function")
    parser.add_argument("--tasks", type=int, default=8)
    parser.add_argument("--group", type=int, default=4)
    parser.add_argument("--max-turns", type=int, default=3)
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--runners", type=int, default=2)
    parser.add_argument("--naive-episodes", type=int, default=4)
    parser.add_argument("--eager", action="store_true", help="vllm: no torch.compile (faster start)")
    parser.add_argument("--vllm", nargs="*", default=[], metavar="KEY=VALUE", help="policy.vllm settings")
    parser.add_argument("--rollout-only", action="store_true", help="skip (c), the learner and the weight sync")
    parser.add_argument("--sync-only", action="store_true", help="the weight sync only (both paths)")
    parser.add_argument("--cold-cache", action="store_true",
                        help="vllm: empty the prefix cache before (b), (a) and (a0), so each computes its own prompts")
    parser.add_argument("--sync-repeats", type=int, default=5, help="weight syncs per path")
    args = parser.parse_args()
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    import ray

    from userrl.env_runner_group import EnvRunnerGroup
    from userrl.models import resolve_model

    config = _config(args)
    model_path = resolve_model(args.model)
    ray.init(num_cpus=4, logging_config=ray.LoggingConfig(encoding="TEXT", log_level="WARNING"))
    start = time.perf_counter()
    group = EnvRunnerGroup(config, model_path)
    print(f"replica ({args.engine}) and {args.runners} env runners up in {time.perf_counter() - start:.1f} s")
    try:
        measured = _measure(args, config, model_path, group)
    finally:
        group.stop()  # the vLLM engine's own processes, then the actors
        ray.shutdown()
    if measured is None:
        return
    if args.sync_only:
        print(f"\nmodel {args.model} ({args.dtype}), engine {args.engine}, {os.cpu_count()} cores")
        _print_weight_sync(measured)
        return
    trajectories, turns, stops, stats, (a_tokens, a_s), (a0_tokens, a0_s), (b_tokens, b_s), \
        (c_tokens, c_s, c_episodes), (metrics, learn_s), sync = measured

    a, a0, b, c = a_tokens / a_s, a0_tokens / a0_s, b_tokens / b_s, c_tokens / c_s
    prompt_tokens = sum(len(t.input_ids) - t.num_sampled for t in trajectories)
    print(f"\nmodel {args.model} ({args.dtype}), engine {args.engine}, gym {args.gym} (bracket, scripted user), "
          f"{len(trajectories)} episodes = {args.tasks} tasks x {args.group}, {turns:.2f} turns/episode "
          f"(stops: {dict(stops)}), "
          f"max {args.max_new_tokens} new tokens/turn, {os.cpu_count()} cores\n")
    print("| run | episodes | sampled tokens | seconds | tokens/s |")
    print("|---|---|---|---|---|")
    print(f"| (a) raw engine, same token counts ({prompt_tokens} prompt tokens) | {len(trajectories)} | {a_tokens} "
          f"| {a_s:.2f} | {a:.1f} |")
    print(f"| (a0) raw engine, first prompts only | {len(trajectories)} | {a0_tokens} | {a0_s:.2f} | {a0:.1f} |")
    print(f"| (b) userrl rollout | {len(trajectories)} | {b_tokens} | {b_s:.2f} | {b:.1f} |")
    print(f"| (c) naive transformers loop | {c_episodes} | {c_tokens} | {c_s:.2f} | {c:.1f} |")
    print(f"\nb/a = {b / a:.2f}   b/a0 = {b / a0:.2f}   b/c = {b / c:.1f}   replica stats: {stats}")
    _print_weight_sync(sync)
    print(f"learner (1 process, float32, one GRPO update): {metrics['processed_tokens']:.0f} processed tokens "
          f"in {learn_s:.2f} s = {metrics['processed_tokens'] / learn_s:.0f} tokens/s "
          f"({metrics['trained_tokens']:.0f} trained tokens)")


if __name__ == "__main__":
    main()
