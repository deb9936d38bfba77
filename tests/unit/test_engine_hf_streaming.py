"""Incremental decoding of the hf engine and the replica's token stream, without Ray: tokens are handed out
as they are sampled (before the next decoding step), they are exactly the tokens of a whole-batch decode,
and a stream's caller going away stops its row."""

from __future__ import annotations

import asyncio

import pytest
import torch

from userrl.actors.policy_replica import PolicyReplica
from userrl.engines.base import GenerationRequest
from userrl.engines.hf import HFEngine

PROMPTS = [[1, 504, 2137, 30, 7, 9], [1, 42, 43], [1, 900, 901, 902, 903, 904, 905, 906]]


@pytest.fixture(scope="module")
def engine(tiny_model) -> HFEngine:
    torch.set_num_threads(1)
    return HFEngine(tiny_model)


def _requests() -> list[GenerationRequest]:
    # Greedy, seeded sampling with top-p, and a row that ends early on a stop token: different lengths.
    return [GenerationRequest(PROMPTS[0], 12, temperature=0),
            GenerationRequest(PROMPTS[1], 9, temperature=0.8, top_p=0.9, seed=5),
            GenerationRequest(PROMPTS[2], 12, temperature=1.0, seed=2)]


def test_on_token_reports_each_token_before_the_next_step(engine):
    whole = engine.generate(_requests())
    forwards = []
    hook = engine.model.register_forward_hook(lambda *_: forwards.append(1))
    reported: list[tuple[int, int, int]] = []  # (row, token, decoding steps run when it was reported)
    try:
        incremental = engine.generate(_requests(), on_token=lambda row, token: reported.append(
            (row, token, len(forwards))))
    finally:
        hook.remove()
    for row, out in enumerate(incremental):
        assert out.token_ids == whole[row].token_ids and out.logprobs == whole[row].logprobs
        assert [t for r, t, _ in reported if r == row] == out.token_ids
        # The k-th token of a row is reported after k forward passes: before the next one runs.
        assert [n for r, _, n in reported if r == row] == list(range(1, len(out.token_ids) + 1))


def test_greedy_incremental_decode_equals_transformers_generate(engine):
    reported: list[int] = []
    (out,) = engine.generate([GenerationRequest(PROMPTS[0], 10, temperature=0)],
                             on_token=lambda row, token: reported.append(token))
    reference = engine.model.generate(torch.tensor([PROMPTS[0]]), max_new_tokens=10, do_sample=False)
    assert reported == out.token_ids == reference[0, len(PROMPTS[0]):].tolist()


def test_on_token_false_ends_only_that_row(engine):
    whole = engine.generate(_requests())
    reported: list[int] = []

    def on_token(row: int, token: int) -> bool:
        reported.append(row)
        return not (row == 0 and reported.count(0) == 3)  # row 0's caller goes away after 3 tokens

    out = engine.generate(_requests(), on_token=on_token)
    assert out[0].token_ids == whole[0].token_ids[:3]
    assert out[1].token_ids == whole[1].token_ids and out[2].token_ids == whole[2].token_ids


def test_replica_stream_yields_tokens_while_the_batch_decodes(tiny_model):
    """Two streamed requests and one whole request decode as one batch; each stream gets its tokens in
    chunks as they are sampled, the last chunk carrying the output that equals the non-streamed one."""
    replica = PolicyReplica(tiny_model, num_threads=1)
    requests = [GenerationRequest(PROMPTS[0], 40, temperature=0), GenerationRequest(PROMPTS[1], 30, seed=4),
                GenerationRequest(PROMPTS[2], 20, seed=9)]

    async def collect(request):
        chunks = []
        async for chunk in replica.generate_stream(request):
            chunks.append(chunk)
        return chunks

    async def main():
        return await asyncio.gather(collect(requests[0]), collect(requests[1]), replica.generate(requests[2]))

    first, second, whole = asyncio.run(main())
    # Streamed and whole requests shared the batch: one after another they would take 40 + 30 + 20 steps.
    assert replica.get_stats()["steps"] < 60
    expected = PolicyReplica(tiny_model, num_threads=1)
    for request, chunks in ((requests[0], first), (requests[1], second)):
        alone = asyncio.run(expected.generate(request))
        assert [t for c in chunks for t in c.token_ids] == alone.token_ids
        assert chunks[-1].output is not None and chunks[-1].output.token_ids == alone.token_ids
        assert all(c.output is None for c in chunks[:-1])
        assert len(chunks) > 2  # not one blob at the end
    assert whole.token_ids == asyncio.run(expected.generate(requests[2])).token_ids


def test_a_stream_whose_caller_goes_away_stops_its_row(tiny_model):
    replica = PolicyReplica(tiny_model, num_threads=1)

    async def main():
        stream = replica.generate_stream(GenerationRequest(PROMPTS[0], 500, temperature=0))
        first = await anext(stream)
        await stream.aclose()  # what Serve does when the HTTP client disconnects
        other = await replica.generate(GenerationRequest(PROMPTS[1], 3, temperature=0))
        return first, other

    first, other = asyncio.run(main())
    assert first.token_ids and first.output is None
    stats = replica.get_stats()
    # The row ended at the decoding step after the close: far fewer than its 500 tokens were sampled
    # (with all-at-once decoding the first chunk would only come after all 500).
    assert stats["decoded_tokens"] - len(other.token_ids) < 500
    assert len(other.token_ids) == 3


def test_an_engine_that_is_not_incremental_streams_one_chunk(tiny_model):
    """The vllm engine's case (tokens come with the whole output): one chunk, tokens and output together."""
    replica = PolicyReplica(tiny_model, num_threads=1)
    replica.engine.incremental = False  # declared per engine class; this instance plays one without it
    request = GenerationRequest(PROMPTS[0], 6, temperature=0)

    async def main():
        return [chunk async for chunk in replica.generate_stream(request)], await replica.generate(request)

    chunks, whole = asyncio.run(main())
    assert len(chunks) == 1 and chunks[0].token_ids == whole.token_ids == chunks[0].output.token_ids
