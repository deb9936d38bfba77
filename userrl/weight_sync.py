"""Weight sync through a torch.distributed group: learner rank 0 broadcasts, the vLLM workers receive.

The group is its own: a `TCPStore` opened by learner rank 0 and a gloo (CPU) or NCCL (GPU) backend built
on it, with learner rank 0 as group rank 0 and every vLLM worker of every joining replica after it. It
never touches the default process group of either side (the learners' FSDP group, vLLM's own).

One sync: the metadata (names, shapes, dtypes) goes to the workers first (through Ray, with the call
that makes them receive), so both sides plan the same buckets (`plan_buckets`): runs of consecutive
tensors of one dtype, up to `bucket_bytes`, packed flat. Rank 0 fills a bucket from the learner's
gathered tensors and broadcasts it; the workers read the tensors out of it as views (no copy) and feed
them to vLLM's in-place reload while the next bucket is on its way.

Only plain torch here: the learner side needs no vLLM.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

#: (name, shape, dtype name) of one tensor of a sync, in the order it is sent.
TensorMeta = tuple[str, tuple[int, ...], str]

#: Default bucket: big enough that per-broadcast latency does not matter, small enough to bound memory.
DEFAULT_BUCKET_BYTES = 128 * 2**20
#: Seconds a member waits for the others (joining, or one broadcast) before the group is given up.
GROUP_TIMEOUT_S = 120.0


def dtype_name(dtype: torch.dtype) -> str:
    """`torch.float32` -> "float32"."""
    return str(dtype).removeprefix("torch.")


def tensor_metadata(named: Iterable[tuple[str, torch.Tensor]]) -> list[TensorMeta]:
    """The metadata of named tensors (their global shape for DTensors)."""
    return [(name, tuple(tensor.shape), dtype_name(tensor.dtype)) for name, tensor in named]


def _numel(meta: TensorMeta) -> int:
    count = 1
    for size in meta[1]:
        count *= size
    return count


def _nbytes(meta: TensorMeta) -> int:
    return _numel(meta) * getattr(torch, meta[2]).itemsize


def plan_buckets(metadata: list[TensorMeta], bucket_bytes: int) -> list[list[int]]:
    """Indices of `metadata` per bucket: consecutive tensors of one dtype, at most `bucket_bytes` each
    (a larger tensor is a bucket of its own)."""
    buckets: list[list[int]] = []
    size, dtype = 0, None
    for index, meta in enumerate(metadata):
        nbytes = _nbytes(meta)
        if not buckets or meta[2] != dtype or size + nbytes > bucket_bytes:
            buckets.append([])
            size, dtype = 0, meta[2]
        buckets[-1].append(index)
        size += nbytes
    return buckets


@dataclass
class GatheredWeights:
    """What a sync sends: the metadata up front, then the tensors in that order.

    `tensors` may be a learner's collective gather (every learner rank iterates it to the end, rank 0
    sends what it yields), or a plain state dict's items (`from_state_dict`).
    """

    metadata: list[TensorMeta]
    tensors: Iterator[tuple[str, torch.Tensor]]
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))

    @classmethod
    def from_state_dict(cls, state_dict: dict[str, torch.Tensor]) -> GatheredWeights:
        """Weights already in hand (a full state dict on one process)."""
        first = next(iter(state_dict.values()), None)
        device = first.device if first is not None else torch.device("cpu")
        return cls(tensor_metadata(state_dict.items()), iter(state_dict.items()), device)


def backend_for(device: torch.device) -> str:
    """gloo for CPU tensors, NCCL for CUDA tensors."""
    return "nccl" if device.type == "cuda" else "gloo"


def _backend(store: dist.Store, rank: int, world_size: int, backend: str, timeout_s: float):
    timeout = timedelta(seconds=timeout_s)
    if backend == "gloo":
        return dist.ProcessGroupGloo(store, rank, world_size, timeout)
    if backend == "nccl":
        options = dist.ProcessGroupNCCL.Options()
        options._timeout = timeout
        return dist.ProcessGroupNCCL(store, rank, world_size, options)
    raise ValueError(f"weight-sync backend {backend!r} is unknown; use 'gloo' or 'nccl'")


def join_group(host: str, port: int, name: str, rank: int, world_size: int, backend: str,
               timeout_s: float = GROUP_TIMEOUT_S):
    """Join the group `name` whose store rank 0 opened at host:port (blocks until every member joined)."""
    store = dist.TCPStore(host, port, is_master=False, timeout=timedelta(seconds=timeout_s))
    return _backend(dist.PrefixStore(name, store), rank, world_size, backend, timeout_s)


def _broadcast(group, tensor: torch.Tensor):
    """Start broadcasting `tensor` from group rank 0 (it runs on the backend's own thread); returns its work."""
    options = dist.BroadcastOptions()
    options.rootRank, options.rootTensor = 0, 0
    return group.broadcast([tensor], options)


@dataclass
class SendResult:
    """What a sync sent: every tensor (views into CPU copies of the buckets), seconds per phase, and the
    error that stopped the broadcasts (None when every bucket went out)."""

    tensors: dict[str, torch.Tensor]
    timings: dict[str, float]
    error: BaseException | None = None


class BucketBuffers:
    """Bucket memory kept from one sync to the next, one flat tensor per bucket of the plan.

    Fresh memory is slow on a busy machine (every page faults in; 128 MiB took 0.2-0.75 s on the 2-core
    dev machine), so on CPU each side allocates its buckets once and overwrites them at every sync. On GPU
    the caching allocator already reuses freed memory: buckets live for one sync only there, and the
    sender's host copy of them (the weights kept for the object store) goes to pinned buffers allocated
    once: a copy into fresh pageable memory took 1.45 s of a 0.5B model's sync on an H200, the gather
    and packing 0.03 s.
    """

    def __init__(self):
        self._key: tuple | None = None
        self._buffers: list[torch.Tensor] = []
        self._host_key: tuple | None = None
        self._host: list[torch.Tensor] = []

    def get(self, buckets: list[list[TensorMeta]], device: torch.device) -> list[torch.Tensor]:
        """A flat tensor per bucket (the same ones as last time when the plan and device are the same)."""
        key = (tuple(m for bucket in buckets for m in bucket), str(device))
        if device.type == "cuda" or key != self._key:
            self._buffers = [torch.empty(sum(_numel(m) for m in bucket), dtype=getattr(torch, bucket[0][2]),
                                         device=device) for bucket in buckets]
            self._key = None if device.type == "cuda" else key
        return self._buffers

    def host(self, buckets: list[list[TensorMeta]]) -> list[torch.Tensor]:
        """Pinned host tensors the size of the buckets (the same ones as last time for the same plan)."""
        key = tuple(m for bucket in buckets for m in bucket)
        if key != self._host_key:
            self._host = [torch.empty(sum(_numel(m) for m in bucket), dtype=getattr(torch, bucket[0][2]),
                                      pin_memory=True) for bucket in buckets]
            self._host_key = key
        return self._host


def _views(buffer: torch.Tensor, metas: list[TensorMeta]) -> Iterator[tuple[str, torch.Tensor]]:
    offset = 0
    for meta in metas:
        count = _numel(meta)
        yield meta[0], buffer[offset: offset + count].view(meta[1])
        offset += count


def pack_buckets(weights: GatheredWeights, bucket_bytes: int, broadcast: Callable[[torch.Tensor], Any] | None = None,
                 buffers: BucketBuffers | None = None) -> SendResult:
    """Pack the tensors of `weights` into buckets and hand each to `broadcast` (None: none is sent).

    `broadcast` starts a bucket's transfer and returns its work (waited for at the end), so the next
    bucket is packed while the last one is on its way. Iterates `weights.tensors` to its end even after
    a broadcast failed (the learner's other ranks are in the same collective gather); the failure is in
    the result. The buckets stay (on CPU) as the weights of this version, for replicas that get them
    through the object store; they are overwritten by the next sync that uses the same `buffers`.
    """
    timings = {"gather_s": 0.0, "pack_s": 0.0, "broadcast_s": 0.0}
    kept: dict[str, torch.Tensor] = {}
    error: BaseException | None = None
    works = []
    tensors = iter(weights.tensors)
    plan = [[weights.metadata[i] for i in indices] for indices in plan_buckets(weights.metadata, bucket_bytes)]
    buffers = buffers or BucketBuffers()
    on_gpu = weights.device.type == "cuda"
    device_buckets = buffers.get(plan, weights.device)
    for metas, buffer, host in zip(plan, device_buckets, buffers.host(plan) if on_gpu else device_buckets,
                                   strict=True):
        offset = 0
        for meta in metas:
            tick = time.perf_counter()
            name, tensor = next(tensors)
            timings["gather_s"] += time.perf_counter() - tick
            if name != meta[0] or tuple(tensor.shape) != meta[1]:
                raise ValueError(f"weight sync: got {name} {tuple(tensor.shape)}, the metadata said {meta[0]} {meta[1]}")
            tick = time.perf_counter()
            buffer[offset: offset + tensor.numel()].copy_(tensor.reshape(-1))
            offset += _numel(meta)
            timings["pack_s"] += time.perf_counter() - tick
        tick = time.perf_counter()
        if broadcast is not None and error is None:
            try:
                works.append(broadcast(buffer))
            except RuntimeError as failure:  # a member died or timed out: finish the gather, report it
                error = failure
        timings["broadcast_s"] += time.perf_counter() - tick
        if on_gpu:  # asynchronous: overlaps the next bucket's gather; complete before this function returns
            host.copy_(buffer, non_blocking=True)
        kept.update(_views(host, metas))
    tick = time.perf_counter()
    for work in works:
        try:
            work.wait()
        except RuntimeError as failure:
            error = error or failure
    if on_gpu:
        torch.cuda.synchronize(weights.device)  # the host copies are complete before anyone reads `kept`
    timings["broadcast_s"] += time.perf_counter() - tick
    for name, _ in tensors:
        raise ValueError(f"weight sync: {name} is not in the metadata")
    return SendResult(kept, timings, error)


class GroupSender:
    """Group rank 0 (learner rank 0): opens the store, forms the group, broadcasts buckets."""

    def __init__(self, host: str, backend: str, device: torch.device, timeout_s: float = GROUP_TIMEOUT_S):
        self.host, self.backend, self.device, self.timeout_s = host, backend, device, timeout_s
        self.name = f"userrl-weights-{uuid.uuid4().hex[:8]}"
        # Port 0: the OS picks a free one; members learn it from `port`.
        self.store = dist.TCPStore(host, 0, is_master=True, wait_for_workers=False,
                                   timeout=timedelta(seconds=timeout_s))
        self.port = self.store.port
        self.group = None
        self.buffers = BucketBuffers()

    def connect(self, world_size: int) -> None:
        """Form the group with `world_size - 1` members joining meanwhile (blocks until they have)."""
        self.group = _backend(dist.PrefixStore(self.name, self.store), 0, world_size, self.backend, self.timeout_s)

    def send(self, weights: GatheredWeights, bucket_bytes: int) -> SendResult:
        """Broadcast every tensor of `weights` in buckets (see `pack_buckets`)."""
        return pack_buckets(weights, bucket_bytes, lambda bucket: _broadcast(self.group, bucket), self.buffers)

    def close(self) -> None:
        """Drop the group (members leave theirs on their own)."""
        self.group = None


def receive_buckets(group, metadata: list[TensorMeta], bucket_bytes: int, device: torch.device,
                    timings: dict[str, float], buffers: BucketBuffers | None = None
                    ) -> Iterator[tuple[str, torch.Tensor]]:
    """The tensors broadcast by rank 0, as views into each received bucket (adds `receive_s` to timings).

    The next bucket's transfer is started before this one's tensors are handed out, so it arrives while
    the caller loads them.
    """
    plan = [[metadata[i] for i in indices] for indices in plan_buckets(metadata, bucket_bytes)]
    received = (buffers or BucketBuffers()).get(plan, device)
    works = [_broadcast(group, received[0])] if plan else []
    for index, metas in enumerate(plan):
        tick = time.perf_counter()
        works[index].wait()
        if index + 1 < len(plan):
            works.append(_broadcast(group, received[index + 1]))
        timings["receive_s"] = timings.get("receive_s", 0.0) + time.perf_counter() - tick
        yield from _views(received[index], metas)
