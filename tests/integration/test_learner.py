"""The FSDP2 learner group: sharding, equivalence of 1 and 2 learners, and learning that really happens."""

import json

import pytest
import torch
import torch.distributed as dist
from ray.train import ScalingConfig
from ray.train.torch import TorchTrainer
from transformers import LlamaConfig, LlamaForCausalLM

from userrl.config import parse_config
from userrl.engines.base import GenerationRequest
from userrl.engines.hf import HFEngine
from userrl.estimators import make_estimator
from userrl.learner import Learner
from userrl.trajectory import Trajectory, TurnRecord

pytestmark = pytest.mark.slow


def _batch(length: int = 32) -> list[Trajectory]:
    gen = torch.Generator().manual_seed(0)
    trajectories = []
    for i, reward in enumerate([1.0, 0.0, 0.5, 0.0]):
        t = Trajectory(uid=f"u{i}", group_id=f"g{i // 2}", env_name="function", item_key=f"k{i // 2}")
        t.append(torch.randint(5, 500, (length - 4,), generator=gen).tolist(), 1)
        t.turn_starts, t.prompt_len = [0], length - 4
        t.append(torch.randint(5, 500, (4,), generator=gen).tolist(), 2, sampled=True, turn=0, logprobs=[-1.0] * 4)
        t.turns = [TurnRecord(reward=reward, executed=True, n_sampled=4)]
        trajectories.append(t)
    return trajectories


def _gradient_loop(loop_config):
    """The loss and full gradient of one update per learner setting (plain, then with gradient checkpointing)
    in the same process group: gradients are compared, not weights after an AdamW step (whose first step is
    about lr * sign(g), so a gradient of 1e-9 against -1e-9 from another summation order moves a weight 2 lr)."""
    for name, learners in loop_config["variants"].items():
        config = parse_config({"training": {"lr": 1e-3, "micro_batch_tokens": 64}, "learners": learners})
        learner = Learner(loop_config["model"], config, pad_token_id=0)
        local = sum(p.to_local().numel() for p in learner.model.parameters())
        total = sum(p.numel() for p in learner.model.parameters())
        batch = _batch()
        advantages, _, _ = make_estimator(config, 0).estimate(batch, learner.compute_values)
        loss, grads = learner.loss_and_gradients(batch, advantages)
        fractions = [None] * learner.world_size
        dist.all_gather_object(fractions, local / total)
        if learner.rank == 0:
            torch.save(grads, f"{loop_config['out']}-{name}.pt")
            with open(f"{loop_config['out']}-{name}.json", "w") as f:
                json.dump({"fractions": fractions, "loss": loss}, f)


def _run(model, out, workers, variants):
    """`_gradient_loop` on `workers` learners: one in this process (a one-member gloo group, no worker start),
    more through Ray Train. Returns (gradients, {fractions, loss}) per variant."""
    loop_config = {"model": model, "out": out, "variants": variants}
    if workers == 1:
        dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
        try:
            _gradient_loop(loop_config)
        finally:
            dist.destroy_process_group()
    else:
        TorchTrainer(_gradient_loop, train_loop_config=loop_config,
                     scaling_config=ScalingConfig(num_workers=workers, resources_per_worker={"CPU": 1})).fit()
    return {name: (torch.load(f"{out}-{name}.pt"), json.load(open(f"{out}-{name}.json"))) for name in variants}


def test_two_learners_shard_and_match_one(ray_local, tiny_model, tmp_path):
    (one_grads, one), = _run(tiny_model, str(tmp_path / "one"), 1, {"plain": {}}).values()
    two_runs = _run(tiny_model, str(tmp_path / "two"), 2, {"plain": {}, "ckpt": {"gradient_checkpointing": True}})
    two_grads, two = two_runs["plain"]
    assert one["fractions"] == [1.0]
    assert all(0.4 < f < 0.6 for f in two["fractions"]) and sum(two["fractions"]) == pytest.approx(1.0)
    assert one_grads.keys() == two_grads.keys() == dict(LlamaForCausalLM.from_pretrained(tiny_model)
                                                        .named_parameters()).keys()
    assert sum(g.norm() for g in one_grads.values()) > 0

    def relative_error(grads):
        diff = torch.cat([(grads[n] - one_grads[n]).flatten() for n in one_grads])
        return float(diff.norm() / torch.cat([g.flatten() for g in one_grads.values()]).norm())

    assert relative_error(two_grads) < 1e-5
    assert one["loss"] == pytest.approx(two["loss"], abs=1e-6)
    # Gradient checkpointing recomputes the same forward in the backward pass: the same gradient.
    recomputed_grads, recomputed = two_runs["ckpt"]
    assert relative_error(recomputed_grads) < 1e-5
    assert one["loss"] == pytest.approx(recomputed["loss"], abs=1e-6)


def test_grpo_raises_the_reward_of_a_token_level_task(tmp_path):
    """A one-turn task rewarding token 5: sign, masking and broadcast must all be right for this to learn."""
    torch.manual_seed(0)
    path = tmp_path / "tiny16"
    LlamaForCausalLM(LlamaConfig(vocab_size=16, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                 num_attention_heads=2, num_key_value_heads=1, tie_word_embeddings=True,
                                 pad_token_id=0)).save_pretrained(path)
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        config = parse_config({"training": {"lr": 1e-2, "micro_batch_tokens": 4096, "mean_score_round": None}})
        learner = Learner(str(path), config, pad_token_id=0)
        engine = HFEngine(str(path))
        prompt, means = [1, 2, 3], []
        for iteration in range(10):
            requests = [GenerationRequest(prompt, 6, seed=iteration * 100 + i) for i in range(32)]
            batch = []
            for i, out in enumerate(engine.generate(requests)):
                t = Trajectory(uid=f"u{i}", group_id=f"g{i // 8}", env_name="toy", item_key=f"k{i // 8}")
                t.append(prompt, 1)
                t.prompt_len, t.turn_starts = len(prompt), [0]
                t.append(out.token_ids, 2, sampled=True, turn=0, logprobs=out.logprobs)
                reward = sum(tok == 5 for tok in out.token_ids) / len(out.token_ids)
                t.turns = [TurnRecord(reward=reward, executed=True, n_sampled=len(out.token_ids))]
                batch.append(t)
            means.append(sum(t.episode_return for t in batch) / len(batch))
            advantages, _, _ = make_estimator(config, 0).estimate(batch, learner.compute_values)
            learner.update(batch, advantages)
            engine.load_state_dict(learner.full_state_dict())
        # A bfloat16 replica is sent bfloat16: the float32 weights rounded once, on the learner.
        full = learner.full_state_dict()
        sent = learner.gathered_weights(torch.bfloat16)
        assert {dtype for _, _, dtype in sent.metadata} == {"bfloat16"}
        for (name, shape, _), (sent_name, tensor) in zip(sent.metadata, sent.tensors, strict=True):
            assert name == sent_name and tuple(tensor.shape) == shape
            assert torch.equal(tensor, full[name].to(torch.bfloat16)), name
    finally:
        dist.destroy_process_group()
    assert means[0] < 0.2
    assert sum(means[-3:]) / 3 > means[0] + 0.2, means
