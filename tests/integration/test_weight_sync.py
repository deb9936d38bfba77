"""Weight sync from a learner into the replicas: through the object store (hf) here, through the process group
(vllm) in test_engine_vllm.py, on that module's replica (one vLLM start for both).

Real parts only: an EnvRunnerGroup with its PolicyReplica actors, a Learner in this process (a one-member
gloo group, FSDP2-sharded), `Learner.gathered_weights()` sent by `EnvRunnerGroup.sync_weights`. After a
sync the replica must be the learner: its greedy tokens are the learner's argmax at every position, and
the logprob it reports for each sampled token is the learner's (float32 on both sides; the engine
parity tests measured gaps of 1e-5 at most, so 2e-3 still catches stale or half-loaded weights, which
are off by more than 0.01).
"""

from __future__ import annotations

import logging

import pytest
import torch

from userrl.engines.base import GenerationRequest
from userrl.trainer import TrainerConfig

pytestmark = pytest.mark.slow

LOGPROB_TOL = 2e-3
PROMPTS = ["What is the capital of France?", "List three prime numbers.", "Say hello in Spanish."]


def _config(model: str):
    return (TrainerConfig()
            .experiment(name="weight-sync", seed=0)
            .environment(gyms=[{"name": "function", "difficulty": [0]}], protocol="bracket", max_turns=2, max_steps=2)
            .policy(model=model, engine="hf", dtype="float32", max_new_tokens=16, max_model_len=512,
                    max_batch_size=4, num_cpus_per_replica=1)
            .env_runners(num_env_runners=1, num_cpus_per_env_runner=0.25)
            .learners(num_learners=1, precision="float32")
            .to_config())


def _perturb(learner, seed: int) -> None:
    """Move the learner's matrices away from what the replica holds (in place, on the local shards)."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for parameter in learner.model.parameters():
            local = parameter.to_local()
            if local.dim() == 2:
                local.add_(0.2 * local.std() * torch.randn(local.shape, generator=generator))


def _prompts(model_path: str) -> list[list[int]]:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_path)
    return [list(tokenizer.apply_chat_template([{"role": "user", "content": p}], add_generation_prompt=True,
                                               tokenize=True, return_dict=False)) for p in PROMPTS]


def _learner_logprobs(learner, prompt: list[int], tokens: list[int]) -> tuple[list[int], list[float]]:
    """The learner's argmax and log-probability at each generated position of prompt + tokens."""
    ids = torch.tensor([prompt + tokens])
    with torch.no_grad():
        logits = learner.model(input_ids=ids).logits[0, len(prompt) - 1: -1].float()
    learner.model.reshard()  # the root module keeps its parameters gathered after a forward
    logprobs = torch.log_softmax(logits, dim=-1)
    return logits.argmax(-1).tolist(), logprobs[torch.arange(len(tokens)), torch.tensor(tokens)].tolist()


def _assert_replica_is_the_learner(ray, replica, learner, prompts: list[list[int]], version: int) -> None:
    greedy = ray.get([replica.generate.remote(GenerationRequest(p, 12, temperature=0.0)) for p in prompts],
                     timeout=300)
    sampled = ray.get([replica.generate.remote(GenerationRequest(p, 12, temperature=1.0, seed=i))
                       for i, p in enumerate(prompts)], timeout=300)
    for prompt, out in zip(prompts, greedy, strict=True):
        assert out.policy_version == version
        argmax, _ = _learner_logprobs(learner, prompt, out.token_ids)
        assert out.token_ids == argmax
    gaps = []
    for prompt, out in zip(prompts, sampled, strict=True):
        _, logprobs = _learner_logprobs(learner, prompt, out.token_ids)
        gaps += [abs(a - b) for a, b in zip(out.logprobs, logprobs, strict=True)]
    assert len(gaps) == 12 * len(prompts) and max(gaps) < LOGPROB_TOL


def test_hf_replica_falls_back_to_the_object_store(ray_local, one_process_group, tiny_model, caplog):
    from userrl.env_runner_group import EnvRunnerGroup
    from userrl.learner import Learner

    config = _config(tiny_model)
    learner = Learner(tiny_model, config, pad_token_id=0)
    group = EnvRunnerGroup(config, tiny_model)
    try:
        _perturb(learner, 0)
        with caplog.at_level(logging.INFO, logger="userrl.env_runner_group"):
            group.sync_weights(learner.gathered_weights(), 1)
        assert group.sync_paths == {0: "object_store"}
        assert group.last_sync["object_store_s"] > 0 and "broadcast_s" not in group.last_sync  # no group
        assert "policy replica 0 uses the object store" in caplog.text
        _assert_replica_is_the_learner(ray_local, group.replicas[0], learner, _prompts(tiny_model), 1)
    finally:
        group.stop()
