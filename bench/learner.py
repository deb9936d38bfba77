"""Learner throughput: FSDP2 GRPO updates in tokens/s and as a fraction of the device's measured peak.

N learner ranks (`--learners`, one process each: gloo on CPU, NCCL and one GPU each on a GPU machine)
load the model with userrl's `Learner` (FSDP2 per decoder layer + root) and run GRPO updates on
synthetic trajectories of fixed shape (`--batch` sequences of `--prompt` prompt tokens then
`--response` sampled tokens, random ids, rewards 0/1 in groups so every row has an advantage).
In the same run every rank times a square matmul in the compute dtype (bf16 or fp32) to measure
the peak the group can reach; model FLOPs per processed token follow PaLM (appendix B):
6 x (non-embedding parameters) + 12 x layers x width x sequence length, plus the LM head on the
positions that go through it (the learner computes logits of trained positions only). MFU is
achieved model FLOP/s over the measured peak. The full-state gather that feeds every weight sync is
timed too. `--architecture` builds a randomly initialised model of a published architecture instead
(MFU needs no trained weights), so a GPU machine without network or model files can measure a 0.5B or
1.5B model; the bench imports neither Ray nor MLflow, so such a machine needs only torch, transformers
and pydantic. `--estimators grpo_multiturn,gae_multiturn` runs the same updates once per estimator, one after
the other, and prints them side by side: what the critic of the GAE estimators costs (its value pass before
the update, its own update, its memory). `--logprob-chunks 0,1024` runs the same updates once per
`learners.logprob_chunk_tokens` (0: log-probabilities through the full logits; N: from the hidden state, N scored
tokens at a time) and prints them side by side, with each rank's peak memory; `--allocators system,jemalloc` the same per
`learners.allocator` (the ranks started under glibc's malloc, then under Ray's jemalloc). `--turns` and `--env-tokens` split
the sampled tokens into turns with untrained tool/user tokens between them, as in a multi-turn episode.

    .venv/bin/python bench/learner.py --learners 2 --precision bfloat16       # CPU (2 gloo ranks)
    .venv/bin/python bench/learner.py --estimators grpo_multiturn,gae_multiturn   # the critic's cost
    .venv/bin/python bench/learner.py --logprob-chunks 0,1024 --batch 16 --prompt 180 --turns 3 --response 30 \
        --env-tokens 20 --gradient-checkpointing                  # the quickstart's batch, both scoring paths
    .venv/bin/python bench/learner.py --learners 1 --precision bfloat16 --batch 64 --prompt 1024 \\
        --response 1024 --micro-batch-tokens 16384 --architecture qwen2.5-0.5b # one GPU
"""

from __future__ import annotations

import argparse
import contextlib
import os
import socket
import statistics
import tempfile
import threading
import time

# Published configurations (the models' config.json, sizes only): what FLOPs and memory depend on.
ARCHITECTURES = {
    "smollm2-135m": dict(model_type="llama", hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
                         num_attention_heads=9, num_key_value_heads=3, head_dim=64, vocab_size=49152),
    "qwen2.5-0.5b": dict(model_type="qwen2", hidden_size=896, intermediate_size=4864, num_hidden_layers=24,
                         num_attention_heads=14, num_key_value_heads=2, vocab_size=151936),
    "qwen2.5-1.5b": dict(model_type="qwen2", hidden_size=1536, intermediate_size=8960, num_hidden_layers=28,
                         num_attention_heads=12, num_key_value_heads=2, vocab_size=151936),
}


def random_model(architecture: str, folder: str) -> str:
    """Write a randomly initialised bf16 model of a published architecture (tied embeddings) into `folder`."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.for_model(**ARCHITECTURES[architecture], tie_word_embeddings=True, pad_token_id=0,
                                  max_position_embeddings=32768)
    with torch.device("cuda" if torch.cuda.is_available() else "cpu"):  # initialising 1.5B on a CPU takes minutes
        model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    model.save_pretrained(folder)
    return folder


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def matmul_peak(device, dtype, size: int, repeats: int) -> float:
    """FLOP/s of one square matmul in `dtype` on `device` (best of `repeats`, after a warm-up)."""
    import torch

    a = torch.randn(size, size, device=device).to(dtype)
    b = torch.randn(size, size, device=device).to(dtype)
    best = float("inf")
    for i in range(repeats + 1):
        if device.type == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        torch.matmul(a, b)
        if device.type == "cuda":
            torch.cuda.synchronize()
        if i:  # the first call is the warm-up
            best = min(best, time.perf_counter() - start)
    return 2 * size**3 / best


def model_flops_per_update(model_config, rows: int, seq: int, scored: int) -> float:
    """Training FLOPs (forward + backward) of one update over `rows` sequences of `seq` tokens, `scored` of them
    through the LM head."""
    from userrl.models import head_dim

    width, layers = model_config.hidden_size, model_config.num_hidden_layers
    vocab = model_config.vocab_size
    kv_width = model_config.num_key_value_heads * head_dim(model_config)
    per_layer = (2 * width * width + 2 * width * kv_width  # q, o and k, v projections
                 + 3 * width * model_config.intermediate_size)  # gated MLP
    dense = 6 * layers * per_layer + 12 * layers * width * seq
    head = 6 * vocab * width  # the scored positions only
    return rows * (seq * dense + scored * head)


class PeakRSS:
    """The largest resident set size of this process while the `with` block runs, sampled every 5 ms."""

    def __enter__(self) -> PeakRSS:
        import psutil

        self.peak, self._stop, process = 0, threading.Event(), psutil.Process()

        def sample() -> None:
            while not self._stop.is_set():
                self.peak = max(self.peak, process.memory_info().rss)
                self._stop.wait(0.005)

        self._thread = threading.Thread(target=sample, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()


def _trajectories(rows: int, group: int, prompt: int, response: int, vocab: int, seed: int, turns: int = 1,
                  env_tokens: int = 0):
    """`rows` episodes of random ids: a prompt, then `response` sampled tokens over `turns` turns with
    `env_tokens` tool/user tokens after every turn but the last."""
    import random

    from userrl.trajectory import ROLE_IDS, Trajectory, TurnRecord

    rng = random.Random(seed)
    sizes = [response // turns + (k < response % turns) for k in range(turns)]
    out = []
    for i in range(rows):
        t = Trajectory(uid=f"u{i}", group_id=f"g{i // group}", env_name="bench", item_key=f"g{i // group}",
                       prompt_len=prompt)
        t.append([rng.randrange(vocab) for _ in range(prompt)], ROLE_IDS["user"])
        for k, size in enumerate(sizes):
            t.turn_starts.append(len(t.input_ids) - prompt)
            t.append([rng.randrange(vocab) for _ in range(size)], ROLE_IDS["assistant"], sampled=True, turn=k,
                     logprobs=[-1.0] * size)
            if k < turns - 1:
                t.append([rng.randrange(vocab) for _ in range(env_tokens)], ROLE_IDS["tool"], turn=k)
            t.turns.append(TurnRecord(reward=float(i % 2) if k == turns - 1 else 0.0, executed=True,
                                      n_sampled=size))
        out.append(t)
    return out


def _rank(rank: int, world: int, port: int, model_path: str, args: argparse.Namespace, results,
          estimator: str, logprob_chunk: int) -> None:
    import torch
    import torch.distributed as dist
    from transformers import AutoConfig

    from userrl.config import parse_config
    from userrl.estimators import make_estimator
    from userrl.learner import Learner
    from userrl.weight_sync import DEFAULT_BUCKET_BYTES, BucketBuffers, pack_buckets

    cuda = torch.cuda.is_available() and not args.cpu
    if cuda:
        torch.cuda.set_device(rank)
    else:
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // world))
    dist.init_process_group("nccl" if cuda else "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world)
    device = torch.device("cuda", rank) if cuda else torch.device("cpu")
    config = parse_config({
        "policy": {"model": model_path},
        "training": {"batch_size": args.batch // args.group, "group_size": args.group, "lr": 1e-6,
                     "micro_batch_tokens": args.micro_batch_tokens, "adv_estimator": estimator},
        "learners": {"num_learners": world, "precision": args.precision, "use_gpu": cuda,
                     "gradient_checkpointing": args.gradient_checkpointing,
                     "logprob_chunk_tokens": logprob_chunk}})
    dtype = torch.bfloat16 if args.precision == "bfloat16" else torch.float32
    dist.barrier()
    peak = matmul_peak(device, dtype, args.matmul_size or (8192 if cuda else 2048), 10 if cuda else 5)
    model_config = AutoConfig.from_pretrained(model_path)
    learner = Learner(model_path, config, model_config.pad_token_id or 0)  # synthetic ids: any pad will do
    trajectories = _trajectories(args.batch, args.group, args.prompt, args.response, model_config.vocab_size, 0,
                                 args.turns, args.env_tokens)
    seq = len(trajectories[0].input_ids)
    # Scored positions: the trained ones on the chunked path; from the first trained one on through the full logits.
    scored = args.response if logprob_chunk else seq - args.prompt
    estimator = make_estimator(learner.config, learner.pad_token_id)
    advantage_seconds = []
    for _ in range(2):  # with a critic: its forward pass over the batch and the all-gather of the values
        start = time.perf_counter()
        advantages, _, targets = estimator.estimate(trajectories, learner.compute_values)
        advantage_seconds.append(time.perf_counter() - start)
    seconds, metrics = [], {}
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    import psutil

    rss_before = psutil.Process().memory_info().rss / 2**30
    with PeakRSS() as update_rss:
        for step in range(args.warmup + args.updates):
            if cuda:
                torch.cuda.synchronize()
            dist.barrier()
            start = time.perf_counter()
            metrics = learner.update(trajectories, advantages, targets)
            if cuda:
                torch.cuda.synchronize()
            if step >= args.warmup:
                seconds.append(time.perf_counter() - start)
    memory_gb = torch.cuda.max_memory_allocated() / 2**30 if cuda else None
    gather = []
    for _ in range(2):
        start = time.perf_counter()
        learner.full_state_dict()
        gather.append(time.perf_counter() - start)
    # The group path's sending side without the wire: gather tensor by tensor on the device, pack buckets.
    buffers, bucketed = BucketBuffers(), []
    for _ in range(3):
        start = time.perf_counter()
        sent = pack_buckets(learner.gathered_weights(), DEFAULT_BUCKET_BYTES, buffers=buffers)
        if cuda:
            torch.cuda.synchronize()
        bucketed.append((time.perf_counter() - start, sent.timings))
    peaks, rss = [None] * world, [None] * world
    dist.all_gather_object(peaks, peak)
    dist.all_gather_object(rss, (update_rss.peak / 2**30, rss_before))
    if rank == 0:
        results.put({"peak": sum(peaks), "seconds": seconds, "advantage_seconds": advantage_seconds, "metrics": metrics, "gather": gather, "bucketed": bucketed[1:], "rss_gb": max(peak for peak, _ in rss),
                     "rss_before_gb": max(before for _, before in rss),
                     "flops": model_flops_per_update(model_config, args.batch, seq, scored),
                     "device": torch.cuda.get_device_name(0) if cuda else f"CPU, {os.cpu_count()} cores",
                     "memory_gb": memory_gb})
    dist.destroy_process_group()


@contextlib.contextmanager
def _environment(variables: dict[str, str]):
    """os.environ with `variables` set while the block runs (the processes it starts inherit them)."""
    before = {k: os.environ.get(k) for k in variables}
    os.environ.update(variables)
    try:
        yield
    finally:
        for k, v in before.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--architecture", choices=sorted(ARCHITECTURES),
                        help="instead of --model: random weights of this published architecture")
    parser.add_argument("--learners", type=int, default=2)
    parser.add_argument("--precision", default="bfloat16", choices=["bfloat16", "float32"])
    parser.add_argument("--batch", type=int, default=16, help="sequences per update")
    parser.add_argument("--group", type=int, default=4, help="rollouts per task (advantage groups)")
    parser.add_argument("--prompt", type=int, default=256)
    parser.add_argument("--response", type=int, default=128, help="sampled (trained) tokens per sequence")
    parser.add_argument("--turns", type=int, default=1, help="turns the sampled tokens are split into")
    parser.add_argument("--env-tokens", type=int, default=0, help="tool/user tokens after each turn but the last")
    parser.add_argument("--micro-batch-tokens", type=int, default=2048)
    parser.add_argument("--gradient-checkpointing", action="store_true")
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--updates", type=int, default=3)
    parser.add_argument("--matmul-size", type=int, default=0, help="peak probe size (0: 8192 on GPU, 2048 on CPU)")
    parser.add_argument("--cpu", action="store_true", help="stay on the CPU even where a GPU exists")
    parser.add_argument("--estimators", default="grpo_multiturn",
                        help="comma-separated training.adv_estimator values, run one after the other")
    parser.add_argument("--logprob-chunks", default="1024",
                        help="comma-separated learners.logprob_chunk_tokens values (0: full logits), run one "
                        "after the other")
    parser.add_argument("--allocators", default="auto",
                        help="comma-separated learners.allocator values (system, jemalloc, auto), the ranks "
                        "started under each in turn")
    args = parser.parse_args()
    if args.batch % args.group:
        parser.error("--batch must be a multiple of --group")
    if not 1 <= args.turns <= args.response:
        parser.error("--turns must be between 1 and --response")
    import torch
    import torch.multiprocessing as mp

    from userrl.allocator import allocator_env, resolve_allocator
    from userrl.models import resolve_model
    from userrl.weight_sync import DEFAULT_BUCKET_BYTES

    if args.architecture:
        args.model = args.architecture + " (random weights)"
        scratch = tempfile.TemporaryDirectory(prefix=f"{args.architecture}-")  # removed when main returns
        model_path = random_model(args.architecture, scratch.name)
    else:
        model_path = resolve_model(args.model)  # once, before the ranks start (a first run converts the GGUF)
    context = mp.get_context("spawn")
    runs = {}
    allocators = args.allocators.split(",")
    for estimator in args.estimators.split(","):
        for chunk in (int(c) for c in args.logprob_chunks.split(",")):
            for allocator in allocators:
                results = context.SimpleQueue()
                # The ranks are new processes: they start under the allocator their environment names.
                with _environment(allocator_env(allocator)):
                    mp.start_processes(_rank, args=(args.learners, _free_port(), model_path, args, results,
                                                    estimator, chunk), nprocs=args.learners, join=True,
                                       start_method="spawn")
                name = f"{estimator}, chunk {chunk}" if chunk else f"{estimator}, full logits"
                runs[name + (f", {resolve_allocator(allocator)}" if len(allocators) > 1 else "")] = results.get()
    first = next(iter(runs.values()))
    print(f"\nmodel {args.model}, {first['device']}, torch {torch.__version__}; {args.batch} sequences x "
          f"({args.prompt} prompt + {args.response} sampled in {args.turns} turns + {args.env_tokens} tool tokens "
          f"between turns) per update, micro-batches of {args.micro_batch_tokens} tokens, gradient checkpointing "
          f"{'on' if args.gradient_checkpointing else 'off'}, {args.updates} timed updates after {args.warmup} "
          "warm-up\n")
    memory = "peak GPU memory in the updates GiB" if first["memory_gb"] is not None else (
        "peak RSS per rank in the updates GiB")
    print("| estimator, log-probabilities | learners | precision | processed tokens/update | advantages s "
          f"| s/update (median) | tokens/s | model TFLOP/s | measured peak TFLOP/s | MFU | full-state gather s | {memory} |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    base = None
    for name, r in runs.items():
        median = statistics.median(r["seconds"])
        processed = r["metrics"]["processed_tokens"]
        achieved = r["flops"] / median  # the policy's FLOPs only: a critic's work shows as a lower MFU
        peak_memory = r["memory_gb"] if r["memory_gb"] is not None else r["rss_gb"]
        print(f"| {name} | {args.learners} | {args.precision} | {processed:.0f} "
              f"| {min(r['advantage_seconds']):.2f} | {median:.2f} | {processed / median:.0f} "
              f"| {achieved / 1e12:.3f} | {r['peak'] / 1e12:.3f} | {achieved / r['peak']:.3f} "
              f"| {statistics.median(r['gather']):.2f} | {peak_memory:.2f} |")
        base = base or (median + min(r["advantage_seconds"]), peak_memory)
        if (median + min(r["advantage_seconds"]), peak_memory) != base:
            print(f"  {name} / {next(iter(runs))}: advantages + update time "
                  f"{(median + min(r['advantage_seconds'])) / base[0]:.2f}x, peak memory {peak_memory / base[1]:.2f}x")
    for estimator, r in runs.items():
        phases = {k: statistics.median(t[k] for _, t in r["bucketed"]) for k in r["bucketed"][0][1]}
        print(f"\n{estimator}: weight sync's sending side without the wire (gather on the device + pack "
              f"{DEFAULT_BUCKET_BYTES >> 20} MiB buckets + keep a host copy), median of 2: "
              f"{statistics.median(s for s, _ in r['bucketed']):.3f} s ("
              + ", ".join(f"{k} {v:.3f}" for k, v in phases.items()) + ")")
        print(f"{estimator}: update seconds {', '.join(f'{s:.2f}' for s in r['seconds'])}; "
              f"loss {r['metrics']['loss']:.4f}, grad norm {r['metrics']['grad_norm']:.3f}"
              + (f"; value loss {r['metrics']['critic/value_loss']:.4f}" if "critic/value_loss" in r["metrics"] else "")
              + f"; RSS per rank before the updates {r['rss_before_gb']:.2f} GiB")


if __name__ == "__main__":
    main()
