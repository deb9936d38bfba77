"""The critic of the GAE estimators (issue #16): its gradient over ranks and micro-batches, every estimator end
to end, and exact resume with the critic's own checkpoint.

The reference is the clipped value loss of docs/spec/ALGORITHMS.md §4.7 over the whole mini-batch, written out
here on a plain (unsharded) transformers token-classification model; gradients are compared, not weights
after an AdamW step.
"""

import json
import socket
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from ray.train import ScalingConfig
from ray.train.torch import TorchTrainer
from safetensors.torch import load_file
from transformers import AutoModelForTokenClassification

from userrl.checkpoint import CRITIC_DIR, CRITIC_OPTIMIZER
from userrl.config import parse_config
from userrl.learner import Learner, ValueTargets
from userrl.trainer import TrainerConfig
from userrl.trajectory import Trajectory, TurnRecord

pytestmark = pytest.mark.slow

CLIP = 0.5
BUDGETS = (64, 4096)  # one or two trajectories per micro-batch (padding micro-batches on rank 1), or one per rank
TOLERANCE = 1e-5
# Per trajectory: prompt length, then per turn (sampled tokens, env tokens after them).
LAYOUTS = [(5, [(4, 3), (3, 0)]), (4, [(16, 6), (12, 8), (3, 0)]), (6, [(9, 0)]), (3, [(2, 5), (5, 2)])]


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


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


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
            dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{_free_port()}", rank=0, world_size=1)
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


def _config(tmp_path, **training):
    return (TrainerConfig()
            .experiment(name="gae", seed=2, output_dir=str(tmp_path))
            .environment(gyms=[{"name": "function", "difficulty": [0]}], protocol="bracket", max_turns=3, max_steps=3)
            .policy(model="tiny-random", max_new_tokens=6, max_model_len=512, num_cpus_per_replica=0.5, num_threads=1)
            .env_runners(num_env_runners=1)
            .training(batch_size=2, group_size=2, lr=1e-4, micro_batch_tokens=1024, **training)
            .learners(num_learners=2)
            .tracking(experiment="gae", mlflow_uri=f"sqlite:///{tmp_path}/mlflow.db"))


def test_a_gae_estimator_trains_end_to_end(ray_local, tiny_model, tmp_path):
    """gae_multiturn with cumulative returns, StarPO-S and the format penalty, one iteration.

    The learner's critic path is the same for every GAE estimator, which differ only in the function
    `gae_advantages` dispatches to: every estimator through that dispatch against the per-row oracle is
    tests/unit/test_algorithms_gae.py::test_gae_advantages_matches_per_row_oracle_and_batch_whitening, the config's
    settings reaching it tests/unit/test_estimator_config.py, and gae_bilevel_weighted trains three iterations in
    the resume test below (an end-to-end run per estimator cost 95 s of the suite for the same learner path)."""
    algo = (_config(tmp_path, adv_estimator="gae_multiturn", mt_gae_returns="cumulative", iterations=1,
                    rollout_filter_ratio=0.5, format_penalty=-0.1).checkpointing(every=0).build_trainer())
    try:
        results = algo.fit()
    finally:
        algo.stop()
    assert [r["iteration"] for r in results] == [1]  # more iterations: the resume test below
    for r in results:
        for key in ("critic/value_loss", "critic/explained_variance", "critic/value_mean", "critic/return_mean",
                    "critic/grad_norm", "learner/loss"):
            assert key in r and r[key] == r[key], key  # present and not NaN
        assert r["critic/grad_norm"] > 0
        assert r["rollout/filtered_episodes"] == 2.0  # StarPO-S at 0.5: one of the two groups of two is left out


def test_exact_resume_with_the_critic(ray_local, tiny_model, tmp_path):
    """gae_bilevel_weighted, 3 iterations straight, against 2 + a resumed third: policy and critic equal."""
    def config(folder):
        return _config(folder, adv_estimator="gae_bilevel_weighted", iterations=3).checkpointing(every=1)

    straight = config(tmp_path / "a").build_trainer()
    try:
        results = straight.fit()
    finally:
        straight.stop()
    checkpoint = tmp_path / "a" / "gae" / "checkpoints" / "iter_000002"
    assert (checkpoint / CRITIC_DIR / "model.safetensors").is_file() and (checkpoint / CRITIC_OPTIMIZER).is_file()

    resumed = config(tmp_path / "b").checkpointing(every=1, resume_from=str(checkpoint)).build_trainer()
    try:
        again = resumed.fit()
    finally:
        resumed.stop()
    assert [r["iteration"] for r in again] == [3]
    assert again[0]["rollout/sampled_tokens"] == results[-1]["rollout/sampled_tokens"]
    for key in ("learner/loss", "critic/value_loss", "critic/value_mean"):
        assert again[0][key] == pytest.approx(results[-1][key], abs=1e-5), key
    for part in ("model", CRITIC_DIR):
        a = load_file(tmp_path / "a" / "gae" / "checkpoints" / "iter_000003" / part / "model.safetensors")
        b = load_file(tmp_path / "b" / "gae" / "checkpoints" / "iter_000003" / part / "model.safetensors")
        assert a.keys() == b.keys()
        for key in a:
            torch.testing.assert_close(a[key], b[key], atol=1e-5, rtol=1e-4)
