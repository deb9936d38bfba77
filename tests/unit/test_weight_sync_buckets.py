"""The weight-sync group on its own: bucket plans, and a real gloo broadcast from rank 0 to two processes."""

from __future__ import annotations

import io
import multiprocessing

import torch

from userrl.weight_sync import (
    GatheredWeights,
    GroupSender,
    join_group,
    plan_buckets,
    receive_buckets,
    tensor_metadata,
)


def _weights() -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    return {
        "embed": torch.randn(40, 8, generator=generator),  # 1280 bytes: a bucket of its own at 1024
        "a": torch.randn(8, 8, generator=generator),
        "b": torch.randn(8, generator=generator),
        "steps": torch.arange(5, dtype=torch.int64),  # another dtype starts another bucket
        "c": torch.randn(3, 4, generator=generator).to(torch.bfloat16),
        "d": torch.randn(2, 2, generator=generator),
    }


def test_buckets_are_runs_of_one_dtype_within_the_size():
    metadata = tensor_metadata(_weights().items())
    assert metadata[0] == ("embed", (40, 8), "float32")
    # 1024 bytes: embed (1280) alone; a (256) + b (32); steps (int64); c (bf16); d (float32 again).
    assert plan_buckets(metadata, 1024) == [[0], [1, 2], [3], [4], [5]]
    assert plan_buckets(metadata, 10**6) == [[0, 1, 2], [3], [4], [5]]


def _receive(host: str, port: int, name: str, rank: int, metadata, results) -> None:
    group = join_group(host, port, name, rank, 3, "gloo", timeout_s=60)
    timings: dict[str, float] = {}
    received = {n: t.clone() for n, t in receive_buckets(group, metadata, 1024, torch.device("cpu"), timings)}
    # As bytes: a tensor put on the queue travels as a file descriptor that this process serves, and the
    # parent could ask for it after this process has exited.
    buffer = io.BytesIO()
    torch.save(received, buffer)
    results.put((rank, buffer.getvalue(), timings["receive_s"]))


def test_rank_zero_broadcasts_every_tensor_to_every_member():
    weights = _weights()
    sender = GroupSender("127.0.0.1", "gloo", torch.device("cpu"), timeout_s=60)
    context = multiprocessing.get_context("spawn")
    results = context.Queue()
    metadata = tensor_metadata(weights.items())
    members = [context.Process(target=_receive, args=("127.0.0.1", sender.port, sender.name, rank, metadata, results))
               for rank in (1, 2)]
    for member in members:
        member.start()
    try:
        sender.connect(3)
        sent = sender.send(GatheredWeights.from_state_dict(weights), 1024)
        answers = sorted((results.get(timeout=60) for _ in members), key=lambda answer: answer[0])
        answers = [(rank, torch.load(io.BytesIO(data)), receive_s) for rank, data, receive_s in answers]
    finally:
        for member in members:
            member.join(timeout=60)
    assert sent.error is None and sent.timings["broadcast_s"] > 0
    assert [rank for rank, _, _ in answers] == [1, 2]
    for _, received, receive_s in answers:
        assert receive_s > 0
        assert list(received) == list(weights)
        for name, tensor in weights.items():
            assert received[name].dtype == tensor.dtype and torch.equal(received[name], tensor)
    # Rank 0 keeps what it sent (for replicas that restart): equal to the weights, not aliasing them.
    for name, tensor in weights.items():
        assert torch.equal(sent.tensors[name], tensor) and sent.tensors[name].data_ptr() != tensor.data_ptr()
