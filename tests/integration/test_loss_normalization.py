"""One global loss normalization (issue #14): the learner's gradient is that of one loss over the mini-batch.

Whatever the number of learners (1, 2) and the micro-batch cuts (one, some or all trajectories per
micro-batch; ranks with different numbers of micro-batches, so empty padding ones), the gradient the FSDP2
learner steps on must equal the gradient of a single full-batch loss computed here with a plain, unsharded
transformers model. Gradients are compared, not weights after an AdamW step (whose first update is about
lr * sign(g) and hides scale errors).
"""

import json
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from ray.train import ScalingConfig
from ray.train.torch import TorchTrainer
from transformers import AutoModelForCausalLM

from userrl.batch import plan_micro_batches
from userrl.config import parse_config
from userrl.learner import Learner
from userrl.trajectory import Trajectory, TurnRecord

pytestmark = pytest.mark.slow

MODES = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum")
# (loss, aggregation): the PPO loss in every mode; with KL and entropy terms, and SFT, in two modes each.
CASES = [("ppo", mode) for mode in MODES] + [
    ("ppo+kl+entropy", "token-mean"), ("ppo+kl+entropy", "seq-mean-token-mean"),
    ("sft", "token-mean"), ("sft", "seq-mean-token-sum")]
# 64: micro-batches of one trajectory or of two short ones, and padding micro-batches on the ranks with fewer;
# 4096: one micro-batch per rank (the whole mini-batch with one learner).
BUDGETS = (64, 4096)
# learners.logprob_chunk_tokens per budget: scored from the hidden state in chunks of 5 tokens (several per
# micro-batch) or of the default size (one), and the plain path through the full logits (0).
LOGPROB_CHUNKS = {64: (5,), 4096: (1024, 0)}
TEMPERATURE = 0.8  # RL terms use the sampling temperature; SFT is plain cross-entropy (T = 1)
KL_COEF, ENTROPY_COEF = 0.3, 0.05
TOLERANCE = 1e-5  # relative error of the whole gradient vector

# Per trajectory: prompt length, then per turn (sampled tokens, tool tokens); the last turn has no tool reply.
# Lengths 33, 33, 47, 17, 25: the plan balances the ranks' tokens, and with these two ranks at budget 64 still
# run different numbers of micro-batches (padding ones).
LAYOUTS = [
    (7, [(5, 4), (3, 3), (7, 0)]),
    (4, [(13, 2), (12, 0)]),
    (8, [(9, 5), (4, 4), (6, 3), (2, 0)]),
    (5, [(12, 0)]),
    (7, [(2, 6), (8, 0)]),
]
HEADER = 2  # assistant header tokens before every turn after the first


def _trajectories() -> list[Trajectory]:
    gen = torch.Generator().manual_seed(1)

    def ids(n: int) -> list[int]:
        return torch.randint(5, 5000, (n,), generator=gen).tolist()

    trajectories = []
    for i, (prompt, turns) in enumerate(LAYOUTS):
        t = Trajectory(uid=f"u{i}", group_id=f"g{i % 2}", env_name="function", item_key=f"k{i % 2}")
        t.append(ids(prompt), 1)
        t.prompt_len = prompt
        for k, (sampled, tool) in enumerate(turns):
            t.turn_starts.append(len(t.input_ids) - prompt)
            if k > 0:
                t.append(ids(HEADER), 2, turn=k)
            t.append(ids(sampled), 2, sampled=True, turn=k, logprobs=[-1.0] * sampled)
            t.append(ids(tool), 3, turn=k)
            t.turns.append(TurnRecord(reward=0.1 * k if tool else 0.0, executed=tool > 0, n_sampled=sampled))
        t.check()
        trajectories.append(t)
    return trajectories


def _advantages(trajectories: list[Trajectory]) -> list[torch.Tensor]:
    """Hand-built advantages that vary per turn (and in sign), on the sampled tokens only."""
    gen = torch.Generator().manual_seed(2)
    advantages = []
    for t in trajectories:
        per_turn = torch.randn(len(t.turns), generator=gen)
        adv = torch.zeros(len(t.input_ids))
        for pos, (turn, mask) in enumerate(zip(t.turn_ids, t.loss_mask, strict=True)):
            if mask:
                adv[pos] = per_turn[turn]
        advantages.append(adv)
    return advantages


def _key(kind: str, mode: str) -> str:
    return f"{kind}/{mode}"


# ---------------------------------------------------------------------------------------------------
# The reference: one full-batch loss on a plain transformers model, written out term by term
# ---------------------------------------------------------------------------------------------------


def _aggregate(per_sequence: list[torch.Tensor], mode: str) -> torch.Tensor:
    """per_sequence: each trajectory's per-token terms on its loss tokens."""
    if mode == "token-mean":
        return torch.cat(per_sequence).sum() / sum(len(x) for x in per_sequence)
    kept = [x for x in per_sequence if len(x)]
    if mode == "seq-mean-token-mean":
        return sum(x.mean() for x in kept) / len(kept)
    return sum(x.sum() for x in kept) / len(kept)


def _reference(model, trajectories, advantages, kind: str, mode: str) -> tuple[float, dict[str, torch.Tensor]]:
    model.zero_grad(set_to_none=True)
    pg, kl, entropy, nll = [], [], [], []
    for t, adv in zip(trajectories, advantages, strict=True):
        ids = torch.tensor(t.input_ids)
        logits = model(input_ids=ids[None]).logits[0, :-1].float()
        mask = torch.tensor(t.loss_mask[1:]) == 1  # the token at position p + 1 is predicted at p
        targets = ids[1:, None]
        if kind == "sft":
            nll.append(-torch.log_softmax(logits, -1).gather(-1, targets)[:, 0][mask])
            continue
        log_probs = torch.log_softmax(logits / TEMPERATURE, -1)
        logp = log_probs.gather(-1, targets)[:, 0]
        a = adv[1:]
        ratio = torch.exp(logp - logp.detach())  # on policy: old log-probs = the current ones
        unclipped, clipped = -a * ratio, -a * torch.clamp(ratio, 0.8, 1.2)
        ppo = torch.maximum(unclipped, clipped)
        per_token = torch.where(a < 0, torch.minimum(ppo, -a * 3.0), ppo)
        pg.append(per_token[mask])
        kl.append((logp - logp.detach())[mask])  # k1 against the (identical) initial reference policy
        entropy.append(-(log_probs.exp() * log_probs).sum(-1)[mask])
    if kind == "sft":
        loss = _aggregate(nll, mode)
    else:
        loss = _aggregate(pg, mode)
        if kind == "ppo+kl+entropy":
            loss = loss + KL_COEF * _aggregate(kl, mode) - ENTROPY_COEF * _aggregate(entropy, mode)
    loss.backward()
    return float(loss.detach()), {name: p.grad.detach().clone() for name, p in model.named_parameters() if p.grad is not None}


# ---------------------------------------------------------------------------------------------------
# The learner group: every configuration in one Ray Train run per world size
# ---------------------------------------------------------------------------------------------------


def _gradients_loop(loop_config):
    config = parse_config({
        "policy": {"temperature": TEMPERATURE},
        "training": {"grad_clip": 1e9, "use_kl_loss": True, "kl_loss_type": "kl"},
        "learners": {"precision": "float32"},
    })
    learner = Learner(loop_config["model"], config, pad_token_id=0)
    trajectories = _trajectories()
    advantages = _advantages(trajectories)
    reference = torch.load(loop_config["reference"])
    results = {}
    training = learner.config.training
    for budget, chunk in ((b, c) for b in BUDGETS for c in LOGPROB_CHUNKS[b]):
        learner.config.learners.logprob_chunk_tokens = chunk
        for kind, mode in CASES:
            training.micro_batch_tokens, training.loss_agg_mode = budget, mode
            training.kl_loss_coef = KL_COEF if kind == "ppo+kl+entropy" else 0.0
            training.entropy_coeff = ENTROPY_COEF if kind == "ppo+kl+entropy" else 0.0
            loss, grads = learner.loss_and_gradients(trajectories, None if kind == "sft" else advantages)
            ref_loss, ref_grads = reference[_key(kind, mode)]
            assert grads.keys() == ref_grads.keys()
            diff = torch.cat([(grads[n] - ref_grads[n]).flatten() for n in ref_grads])
            norm = torch.cat([g.flatten() for g in ref_grads.values()])
            results[f"{_key(kind, mode)}/{budget}/chunk{chunk}"] = {
                "grad_rel_error": float(diff.norm() / norm.norm()), "loss": loss, "ref_loss": ref_loss}
    if learner.rank == 0:
        with open(loop_config["out"], "w") as f:
            json.dump(results, f)
    dist.barrier()


def test_gradient_is_one_global_loss_for_any_ranks_and_micro_batches(ray_local, tiny_model, tmp_path):
    trajectories, advantages = _trajectories(), _advantages(_trajectories())
    lengths = [len(t.input_ids) for t in trajectories]
    # The configurations cover what broke before: a trajectory alone in its micro-batch, several in one,
    # and ranks with different numbers of micro-batches (so empty padding micro-batches).
    plans = [plan_micro_batches(len(lengths), lengths, world, budget) for world in (1, 2) for budget in BUDGETS]
    micros = [micro for plan in plans for rank in plan for micro in rank]
    assert any(len(m) == 1 for m in micros) and any(len(m) > 1 for m in micros) and any(not m for m in micros)

    model = AutoModelForCausalLM.from_pretrained(tiny_model, dtype=torch.float32)
    model.config.use_cache = False
    reference = {_key(kind, mode): _reference(model, trajectories, advantages, kind, mode) for kind, mode in CASES}
    assert all(sum(g.norm() for g in grads.values()) > 0 for _, grads in reference.values())
    torch.save(reference, tmp_path / "reference.pt")

    failures = []
    for world in (1, 2):
        out = str(tmp_path / f"world{world}.json")
        loop_config = {"model": tiny_model, "reference": str(tmp_path / "reference.pt"), "out": out}
        if world == 1:  # a one-member process group in this process: the same learner, without a worker start
            dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
            try:
                _gradients_loop(loop_config)
            finally:
                dist.destroy_process_group()
        else:
            TorchTrainer(_gradients_loop, train_loop_config=loop_config,
                         scaling_config=ScalingConfig(num_workers=world, resources_per_worker={"CPU": 1})).fit()
        for case, result in json.loads(Path(out).read_text()).items():
            loss_ok = result["loss"] == pytest.approx(result["ref_loss"], rel=1e-5, abs=1e-6)
            if result["grad_rel_error"] > TOLERANCE or not loss_ok:
                failures.append(f"world={world} {case}: {result}")
    assert not failures, "\n".join(failures)
