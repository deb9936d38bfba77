import asyncio
import threading

import pytest
import torch

from userrl.actors.policy_replica import PolicyReplica
from userrl.engines.base import GenerationRequest
from userrl.engines.hf import HFEngine

PROMPTS = [[1, 504, 2137, 30, 7, 9], [1, 42, 43], [1, 900, 901, 902, 903, 904, 905, 906]]


def test_greedy_matches_transformers_generate(tiny_model):
    engine = HFEngine(tiny_model)
    outputs = engine.generate([GenerationRequest(p, 6, temperature=0) for p in PROMPTS])
    for prompt, out in zip(PROMPTS, outputs, strict=True):
        ref = engine.model.generate(torch.tensor([prompt]), max_new_tokens=6, do_sample=False)[0, len(prompt):]
        assert out.token_ids == ref.tolist()
        assert out.finish_reason == "length"


def test_logprobs_are_the_sampling_distribution(tiny_model):
    engine = HFEngine(tiny_model)
    out = engine.generate([GenerationRequest(PROMPTS[0], 4, temperature=0.7, seed=3)])[0]
    ids = torch.tensor([PROMPTS[0] + out.token_ids])
    with torch.no_grad():
        logits = engine.model(ids).logits[0, len(PROMPTS[0]) - 1:-1] / 0.7
    expected = torch.log_softmax(logits, -1).gather(-1, torch.tensor(out.token_ids)[:, None])[:, 0]
    assert torch.allclose(torch.tensor(out.logprobs), expected, atol=1e-4)


def test_seeded_sampling_does_not_depend_on_the_batch(tiny_model):
    engine = HFEngine(tiny_model)
    alone = engine.generate([GenerationRequest(PROMPTS[1], 8, seed=11)])[0]
    batched = engine.generate([GenerationRequest(p, 8, seed=11 if i == 1 else i) for i, p in enumerate(PROMPTS)])[1]
    assert alone.token_ids == batched.token_ids


def test_stop_tokens_end_a_request(tiny_model):
    engine = HFEngine(tiny_model)
    first = engine.generate([GenerationRequest(PROMPTS[0], 5, temperature=0)])[0].token_ids
    out = engine.generate([GenerationRequest(PROMPTS[0], 5, temperature=0, stop_token_ids=[first[1]])])[0]
    stop_at = first.index(first[1])
    assert out.token_ids == first[: stop_at + 1] and out.finish_reason == "stop"


def test_replica_batches_concurrent_requests_and_versions_weights(tiny_model):
    replica = PolicyReplica(tiny_model, num_threads=1)

    async def main():
        outs = await asyncio.gather(*(replica.generate(GenerationRequest(p, 3, seed=1)) for p in PROMPTS * 4))
        state = {k: v.clone() for k, v in replica.engine.model.state_dict().items()}
        state["model.embed_tokens.weight"].zero_()
        await replica.load_weights(state, 7)
        after = await replica.generate(GenerationRequest(PROMPTS[0], 3, temperature=0))
        return outs, after

    outs, after = asyncio.run(main())
    stats = replica.get_stats()
    # Decoded together: alone, each request's 3 tokens would take 3 forward passes (36 in all).
    assert len(outs) == 12 and stats["requests"] == 13 and stats["steps"] < 36 - 12
    assert after.policy_version == 7 and replica.get_version() == 7
    assert float(replica.engine.model.get_input_embeddings().weight.abs().sum()) == 0.0



def test_replica_skips_requests_whose_caller_gave_up(tiny_model):
    """A request cancelled right after it was sent (a rollout stopped early) is dropped, not decoded to its end."""
    replica = PolicyReplica(tiny_model, num_threads=1)

    async def main():
        tasks = [asyncio.ensure_future(replica.generate(GenerationRequest(p, n, seed=1)))
                 for p, n in zip(PROMPTS, (3, 500, 3), strict=True)]
        await asyncio.sleep(0)  # all three are submitted
        tasks[1].cancel()
        return await asyncio.gather(*tasks, return_exceptions=True)

    outs = asyncio.run(main())
    assert isinstance(outs[1], asyncio.CancelledError)
    assert len(outs[0].token_ids) == len(outs[2].token_ids) == 3
    stats = replica.get_stats()
    assert stats["requests"] == 2 and stats["generated_tokens"] == 6
    assert stats["decoded_tokens"] < 6 + 500  # the cancelled row left at its next step at the latest


def test_prefix_cache_gives_the_same_tokens_as_a_full_prefill(tiny_model):
    """The next turn of an episode reuses the KV of the previous one and samples exactly the same."""
    cached, plain = HFEngine(tiny_model), HFEngine(tiny_model)
    turn1 = [GenerationRequest(p, 5, seed=i, cache_key=f"ep{i}") for i, p in enumerate(PROMPTS)]
    probe = cached.generate([GenerationRequest(PROMPTS[0], 5, seed=0)])[0].token_ids
    turn1[0].stop_token_ids = [probe[1]]  # one row stops early: rows feed different numbers of tokens
    first = cached.generate(turn1)
    assert len(first[0].token_ids) < len(first[1].token_ids)
    assert len(cached._prefix) == 3
    turn2 = [GenerationRequest(p + o.token_ids + [7, 8, 9], 6, seed=10 + i, cache_key=f"ep{i}")
             for i, (p, o) in enumerate(zip(PROMPTS, first, strict=True))]
    turn2.append(GenerationRequest([1, 5, 6], 6, seed=99, cache_key="new"))  # a row without a cached prefix
    with_cache = cached.generate(turn2)
    without = plain.generate([GenerationRequest(r.prompt_ids, r.max_new_tokens, seed=r.seed) for r in turn2])
    for a, b in zip(with_cache, without, strict=True):
        assert a.token_ids == b.token_ids
        assert torch.allclose(torch.tensor(a.logprobs), torch.tensor(b.logprobs), atol=1e-4)


def test_ended_episode_drops_its_cached_prefix(tiny_model):
    """`end_session` (sent by the EnvRunner when an episode ends) frees that episode's KV and no other."""
    engine = HFEngine(tiny_model)
    engine.generate([GenerationRequest(p, 3, seed=i, cache_key=f"ep{i}") for i, p in enumerate(PROMPTS)])
    assert set(engine._prefix) == {"ep0", "ep1", "ep2"}
    engine.end_session("ep1")
    engine.end_session("never-seen")
    assert set(engine._prefix) == {"ep0", "ep2"}


def _alone(tiny_model, request: GenerationRequest) -> list[int]:
    return HFEngine(tiny_model).generate([request])[0].token_ids


def test_a_request_joins_a_running_batch_and_leaves_before_it_ends(tiny_model):
    """Continuous batching: a short request sent while a long one decodes is prefilled, decodes beside it
    and returns while the long one is still running; both sample exactly what they sample alone."""
    engine = HFEngine(tiny_model)
    long = GenerationRequest(PROMPTS[2], 400, temperature=1.0, seed=3)
    short = GenerationRequest(PROMPTS[0], 6, temperature=0.9, seed=8)
    started = threading.Event()
    long_future = engine.submit(long, on_token=lambda token: started.set())
    assert started.wait(30)
    short_output = engine.submit(short).result(timeout=60)
    assert not long_future.done()  # the short reply did not wait for the long one
    assert short_output.token_ids == _alone(tiny_model, short)
    assert long_future.result(timeout=120).token_ids == _alone(tiny_model, long)
    assert engine.counters()["steps"] < 400 + 6  # they shared decoding steps


def test_joining_rows_of_every_width_sample_as_alone(tiny_model):
    """Rows joining mid-batch with longer and shorter prompts, and one reusing its episode's kept KV, are
    left-padded into the running cache: each still samples the tokens and logprobs it samples alone."""
    engine = HFEngine(tiny_model, max_batch_size=3)  # the fourth request waits for a free row
    first_turn = engine.generate([GenerationRequest(PROMPTS[1], 4, seed=1, cache_key="ep")])[0]
    requests = [GenerationRequest(PROMPTS[0], 300, seed=2),
                GenerationRequest(PROMPTS[2] * 3, 10, seed=4),
                GenerationRequest(PROMPTS[1] + first_turn.token_ids + [7, 8], 12, seed=5, cache_key="ep"),
                GenerationRequest([1, 5], 8, temperature=0, seed=6)]
    gate = threading.Event()
    futures = [engine.submit(requests[0], on_token=lambda token: gate.set())]
    assert gate.wait(30)
    futures += [engine.submit(r) for r in requests[1:]]
    outputs = [f.result(timeout=120) for f in futures[1:]]
    assert not futures[0].done()  # they joined, and left, while the first row decoded
    outputs.insert(0, futures[0].result(timeout=120))
    assert engine.counters()["cached_prompt_tokens"] == len(PROMPTS[1]) + 3  # the episode's kept KV was used
    for request, output in zip(requests, outputs, strict=True):
        reference = HFEngine(tiny_model).generate([GenerationRequest(request.prompt_ids, request.max_new_tokens,
                                                                     request.temperature, seed=request.seed)])[0]
        assert output.token_ids == reference.token_ids
        assert torch.allclose(torch.tensor(output.logprobs), torch.tensor(reference.logprobs), atol=1e-4)


def test_a_long_prompt_is_prefilled_in_chunks_between_the_running_rows_steps(tiny_model):
    """Chunked prefill: a 400-token prompt sent while a row decodes goes through the model 32 tokens at a
    time, each chunk followed by a step of the running row (13 chunks: the row samples 12 tokens meanwhile,
    where one whole prefill would let it sample none); the long request still samples what it samples alone."""
    engine = HFEngine(tiny_model, prefill_chunk_tokens=32)
    events: list[str] = []
    gate = threading.Event()

    def running_token(token):
        events.append("running")
        gate.set()

    running = engine.submit(GenerationRequest(PROMPTS[0], 300, seed=2), on_token=running_token)
    assert gate.wait(30)
    long = GenerationRequest([1] + [100 + i % 500 for i in range(399)], 5, temperature=0.8, seed=4)
    sent = len(events)
    output = engine.submit(long, on_token=lambda token: events.append("long")).result(timeout=60)
    assert not running.done()
    between = events[sent:events.index("long")].count("running")
    assert 11 <= between <= 13, between  # 12, give or take the step in flight when it was sent
    alone_engine = HFEngine(tiny_model, prefill_chunk_tokens=32)
    alone = alone_engine.generate([long])[0]  # nothing decodes beside it: one pass
    assert alone_engine.counters()["prefill_chunks"] == 1
    assert output.token_ids == alone.token_ids
    assert torch.allclose(torch.tensor(output.logprobs), torch.tensor(alone.logprobs), atol=1e-4)
    running.cancel()


def test_a_request_that_cannot_be_prefilled_fails_alone(tiny_model):
    """A prompt the model cannot take (a token id past its vocabulary) fails its own request; the row that was
    decoding meanwhile goes on and samples what it samples alone, and the engine serves the next request."""
    engine = HFEngine(tiny_model)
    gate = threading.Event()
    running_request = GenerationRequest(PROMPTS[0], 200, seed=2)
    running = engine.submit(running_request, on_token=lambda token: gate.set())
    assert gate.wait(30)
    bad = engine.submit(GenerationRequest([1, engine.model.config.vocab_size + 5, 7], 4, seed=1))
    with pytest.raises(IndexError):
        bad.result(timeout=60)
    assert not running.done()
    assert running.result(timeout=120).token_ids == _alone(tiny_model, running_request)
    assert engine.generate([GenerationRequest(PROMPTS[1], 3, temperature=0)])[0].token_ids  # still serving


def test_the_hf_settings_reach_the_engine_and_unknown_ones_are_refused(tiny_model):
    """`policy.hf` (and Serve's engine_options with engine hf) configure the engine built for a replica."""
    from userrl.actors.policy_replica import build_engine
    from userrl.config import load_config

    config = load_config(None, ["policy.hf.prefill_chunk_tokens=96", "policy.hf.prefix_cache_size=3"])
    engine = build_engine("hf", tiny_model, "float32", 0, options=config.policy.hf.model_dump())
    assert (engine.prefill_chunk_tokens, engine.prefix_cache_size) == (96, 3)
    with pytest.raises(ValueError, match="prefill_chunk"):
        build_engine("hf", tiny_model, "float32", 0, options={"prefill_chunk": 96})
