"""The critic of the GAE estimators (issue #16): its gradient over ranks and micro-batches.

A GAE estimator trained end to end, and exact resume with the critic's own checkpoint, are measured on the
reference run of test_reference_run.py.

The reference is the clipped value loss of docs/spec/ALGORITHMS.md §4.7 over the whole mini-batch, written out
here on a plain (unsharded) transformers token-classification model; gradients are compared, not weights
after an AdamW step.
"""

import json
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from ray.train import ScalingConfig
from ray.train.torch import TorchTrainer
from transformers import AutoModelForTokenClassification

from userrl.config import parse_config
from userrl.learner import Learner, ValueTargets
from userrl.trajectory import Trajectory, TurnRecord

pytestmark = pytest.mark.slow

CLIP = 0.5
BUDGETS = (64, 4096)  # one or two trajectories per micro-batch (padding micro-batches on rank 1), or one per rank
TOLERANCE = 1e-5
# Per trajectory: prompt length, then per turn (sampled tokens, env tokens after them).
LAYOUTS = [(15, [(4, 3), (3, 0)]), (4, [(16, 6), (12, 8), (3, 0)]), (16, [(9, 0)]), (13, [(2, 5), (5, 2)])]


def _trajectories() -> list[Trajectory]:
    gen = torch.Generator().manual_seed(4)
    out = []
    for i, (prompt, turns) in enumerate(LAYOUTS):
        t = Trajectory(uid=f"u{i}", group_id=f"g{i // 2}", env_name="function", item_key=f"k{i // 2}")
        t.append(torch.randint(5, 5000, (prompt,), generator=gen).tolist(), 1)
        t.prompt_len = prompt
        for k, (sampled, env) in enumerate(turns):
            t.turn_starts.append(len(t.input_ids) - prompt)
            t.append(torch.randint(5, 5000, (sampled,), generator=gen).tolist(), 2, sampled=True, turn=k,
                     logprobs=[-1.0] * sampled)
            t.append(torch.randint(5, 5000, (env,), generator=gen).tolist(), 3, turn=k)
            t.turns.append(TurnRecord(reward=0.5 * k if env else 0.0, executed=env > 0, n_sampled=sampled))
        t.check()
        out.append(t)
    return out


def _targets(trajectories: list[Trajectory]) -> ValueTargets:
    """Hand-made old values and returns (random, so that some positions clip and some do not)."""
    gen = torch.Generator().manual_seed(5)
    old = [torch.randn(len(t.input_ids), generator=gen) * 0.5 for t in trajectories]
    returns = [torch.randn(len(t.input_ids), generator=gen) for t in trajectories]
    return ValueTargets(old, returns, {})


def _reference(model, trajectories, targets: ValueTargets, mask_obs: bool) -> tuple[float, dict[str, torch.Tensor]]:
    """0.5 * mean over the batch's critic positions of max((V - R)^2, (clip(V, V_old +- 0.5) - R)^2)."""
    model.zero_grad(set_to_none=True)
    terms = []
    for t, old, ret in zip(trajectories, targets.old_values, targets.returns, strict=True):
        out = model(input_ids=torch.tensor(t.input_ids)[None]).logits[0, :, 0]
        values = torch.cat([torch.zeros(1), out[:-1]])  # token t was sampled in the state after tokens < t
        first = t.loss_mask.index(1)
        keep = [p for p in range(len(t.input_ids)) if (t.loss_mask[p] if mask_obs else p >= first)]
        v, o, r = values[keep], old[keep], ret[keep]
        clipped = torch.minimum(torch.maximum(v, o - CLIP), o + CLIP)
        terms.append(torch.maximum((v - r) ** 2, (clipped - r) ** 2))
    loss = 0.5 * torch.cat(terms).mean()
    loss.backward()
    return float(loss.detach()), {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}


def _gradients_loop(loop_config):
    config = parse_config({"training": {"adv_estimator": "gae", "grad_clip": 1e9},
                           "critic": {"model": loop_config["critic"], "cliprange_value": CLIP},
                           "learners": {"precision": "float32"}})
    learner = Learner(loop_config["policy"], config, pad_token_id=0, critic_path=loop_config["critic"])
    trajectories = _trajectories()
    targets = _targets(trajectories)
    reference = torch.load(loop_config["reference"])
    results = {}
    for budget in BUDGETS:
        for mask_obs in (True, False):
            learner.config.training.micro_batch_tokens = budget
            learner.config.critic.mask_obs = mask_obs
            loss, grads = learner.critic_loss_and_gradients(trajectories, targets)
            ref_loss, ref_grads = reference[str(mask_obs)]
            assert grads.keys() == ref_grads.keys()
            diff = torch.cat([(grads[n] - ref_grads[n]).flatten() for n in ref_grads])
            norm = torch.cat([g.flatten() for g in ref_grads.values()]).norm()
            results[f"mask_obs={mask_obs}/budget={budget}"] = {
                "grad_rel_error": float(diff.norm() / norm), "loss": loss, "ref_loss": ref_loss}
    if learner.rank == 0:
        Path(loop_config["out"]).write_text(json.dumps(results))
    dist.barrier()


def test_critic_gradient_is_one_global_value_loss_for_1_and_2_learners(ray_local, tiny_model, tmp_path):
    torch.manual_seed(0)  # the scalar head starts random: write it once, so learner and reference share it
    critic = tmp_path / "critic"
    AutoModelForTokenClassification.from_pretrained(tiny_model, num_labels=1).save_pretrained(critic)
    model = AutoModelForTokenClassification.from_pretrained(critic, dtype=torch.float32)
    trajectories = _trajectories()
    reference = {str(m): _reference(model, trajectories, _targets(trajectories), m) for m in (True, False)}
    assert reference["True"][0] != pytest.approx(reference["False"][0])  # the env tokens change the loss
    torch.save(reference, tmp_path / "reference.pt")

    failures = []
    for world in (1, 2):
        out = tmp_path / f"world{world}.json"
        loop_config = {"policy": tiny_model, "critic": str(critic), "reference": str(tmp_path / "reference.pt"),
                       "out": str(out)}
        if world == 1:
            dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
            try:
                _gradients_loop(loop_config)
            finally:
                dist.destroy_process_group()
        else:
            TorchTrainer(_gradients_loop, train_loop_config=loop_config,
                         scaling_config=ScalingConfig(num_workers=world, resources_per_worker={"CPU": 1})).fit()
        for case, result in json.loads(out.read_text()).items():
            if result["grad_rel_error"] > TOLERANCE or result["loss"] != pytest.approx(result["ref_loss"], rel=1e-5):
                failures.append(f"world={world} {case}: {result}")
    assert not failures, "\n".join(failures)
