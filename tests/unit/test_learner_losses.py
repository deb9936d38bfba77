"""The learner's declared hooks without a model: micro-batch losses (`userrl.losses`) against plain oracles, their
shares adding up to the mini-batch loss, and the estimator choice (`userrl.estimators`)."""

import math

import pytest
import torch

from userrl.batch import TensorBatch, collate
from userrl.config import load_config
from userrl.estimators import GAEEstimator, GRPOMultiTurnEstimator, make_estimator
from userrl.forward import ForwardPass
from userrl.losses import ClippedValueLoss, PPOPolicyLoss, SFTLoss
from userrl.trajectory import Trajectory, TurnRecord

PAD = 0
# Per trajectory: prompt ids, then per turn (sampled ids, tool ids).
LAYOUTS = [
    ([11, 12, 13], [([21, 22], [31]), ([23, 24, 25], [])]),
    ([14, 15], [([26], [32, 33]), ([27, 28], [])]),
    ([16, 17, 18, 19], [([29, 30, 34], [])]),
]


def _trajectories() -> list[Trajectory]:
    out = []
    for i, (prompt, turns) in enumerate(LAYOUTS):
        t = Trajectory(uid=f"u{i}", group_id=f"g{i % 2}", env_name="function", item_key="k")
        t.append(prompt, 1)
        t.prompt_len = len(prompt)
        for k, (sampled, tool) in enumerate(turns):
            t.turn_starts.append(len(t.input_ids) - len(prompt))
            t.append(sampled, 2, sampled=True, turn=k, logprobs=[-0.5] * len(sampled))
            t.append(tool, 3, turn=k)
            t.turns.append(TurnRecord(reward=float(k + i) if tool else 0.0, executed=bool(tool), n_sampled=len(sampled)))
        t.check()
        out.append(t)
    return out


def _logp(token: int) -> float:
    return -((token % 7) + 1) / 10


def _value(token: int) -> float:
    return (token % 5) / 5


class TableForward(ForwardPass):
    """A model-free forward: log-probabilities and values read off the token ids."""

    def logprobs(self, model, batch: TensorBatch, need_entropy=False, temperature=1.0):
        logp = (-((batch.input_ids[:, 1:] % 7) + 1) / 10).float()
        return logp, (torch.full_like(logp, 0.25) if need_entropy else None)

    def values(self, critic, batch: TensorBatch):
        values = ((batch.input_ids % 5) / 5).float()
        values[:, 0] = 0.0
        return values


def _config(*overrides: str):
    return load_config(None, list(overrides))


def _forward(config) -> TableForward:
    return TableForward(config, torch.device("cpu"), bf16=False)


def _shares(loss, trajectories: list[Trajectory], cuts: list[list[int]]) -> tuple[float, dict[str, float]]:
    """The sum of the micro-batch shares over `cuts`, and the summed metric sums, as the learner's loop adds them."""
    denominator = loss.denominator(collate(trajectories, PAD))
    total, sums = 0.0, dict.fromkeys(loss.sum_keys, 0.0)
    for cut in cuts:
        share, micro = loss(collate([trajectories[i] for i in cut], PAD), cut, denominator)
        total += float(share)
        for key, value in micro.items():
            sums[key] += value
    return total, sums


def _trained_targets(t: Trajectory) -> list[int]:
    """Positions p >= 1 whose token is trained (the targets of input_ids[1:])."""
    return [p for p in range(1, len(t.input_ids)) if t.loss_mask[p]]


CUTS = [[[0, 1, 2]], [[0], [1, 2]], [[0], [1], [2]]]


@pytest.mark.parametrize("cuts", CUTS)
def test_sft_shares_add_up_to_the_token_mean_and_sequence_sum_oracles(cuts):
    trajectories = _trajectories()
    token_mean = _config("training.loss_agg_mode=token-mean")
    terms = [[-_logp(t.input_ids[p]) for p in _trained_targets(t)] for t in trajectories]
    expected = sum(map(sum, terms)) / sum(map(len, terms))
    total, sums = _shares(SFTLoss(None, _forward(token_mean), token_mean), trajectories, cuts)
    assert total == pytest.approx(expected)
    assert sums["trained_tokens"] == sum(map(len, terms))
    assert sums["processed_tokens"] == sum(len(t.input_ids) for t in trajectories)
    # |sampler logprob (-0.5) - logp| summed over the trained tokens.
    assert sums["sampler_logprob_gap"] == pytest.approx(sum(abs(-0.5 - _logp(t.input_ids[p]))
                                                            for t in trajectories for p in _trained_targets(t)))
    seq_sum = _config("training.loss_agg_mode=seq-mean-token-sum")
    total, _ = _shares(SFTLoss(None, _forward(seq_sum), seq_sum), trajectories, cuts)
    assert total == pytest.approx(sum(map(sum, terms)) / len(terms))


@pytest.mark.parametrize("cuts", CUTS)
def test_ppo_on_policy_shares_are_minus_the_mean_advantage_plus_the_entropy_bonus(cuts):
    """On policy the ratio is 1 (no clipping), so the surrogate is -A per trained token."""
    trajectories = _trajectories()
    config = _config("training.loss_agg_mode=token-mean", "training.entropy_coeff=0.1")
    advantages = [torch.arange(len(t.input_ids), dtype=torch.float32) - 4.0 for t in trajectories]
    loss = PPOPolicyLoss(None, _forward(config), config, 1.0, advantages, None, None)
    targets = [(i, p) for i, t in enumerate(trajectories) for p in _trained_targets(t)]
    expected = sum(-float(advantages[i][p]) for i, p in targets) / len(targets) - 0.1 * 0.25
    total, sums = _shares(loss, trajectories, cuts)
    assert total == pytest.approx(expected)
    n = len(targets)
    assert sums["importance_ratio_mean"] == pytest.approx(n) and sums["pg_clipfrac"] == 0.0
    assert sums["entropy"] == pytest.approx(0.25 * n)
    metrics = loss.metrics({"loss": total, **sums}, grad_norm=2.0)
    assert metrics["importance_ratio_mean"] == pytest.approx(1.0) and metrics["entropy"] == pytest.approx(0.25)
    assert (metrics["loss"], metrics["grad_norm"], metrics["trained_tokens"]) == (total, 2.0, n)


def test_ppo_clips_the_ratio_against_old_logprobs():
    """old = logp - 1: ratio e > 1 + clip, so a positive advantage's term is -A * (1 + clip_ratio_high)."""
    trajectories = _trajectories()
    config = _config("training.clip_ratio_high=0.25")
    advantages = [torch.ones(len(t.input_ids)) for t in trajectories]
    old = [torch.tensor([_logp(x) - 1.0 for x in t.input_ids[1:]]) for t in trajectories]
    loss = PPOPolicyLoss(None, _forward(config), config, 1.0, advantages, old, None)
    total, sums = _shares(loss, trajectories, [[0, 2], [1]])
    assert total == pytest.approx(-1.25)
    n = sum(len(_trained_targets(t)) for t in trajectories)
    assert sums["pg_clipfrac"] == pytest.approx(n) and sums["approx_kl"] == pytest.approx(-n)


def test_ppo_dual_clip_bounds_a_negative_advantage_and_its_fraction_is_logged():
    """old = logp - 2: ratio e^2 > clip_ratio_c = 3, so a negative advantage's term is -A * 3, not -A * e^2."""
    trajectories = _trajectories()
    config = _config("training.clip_ratio_c=3.0")
    advantages = [-torch.ones(len(t.input_ids)) for t in trajectories]
    old = [torch.tensor([_logp(x) - 2.0 for x in t.input_ids[1:]]) for t in trajectories]
    loss = PPOPolicyLoss(None, _forward(config), config, 1.0, advantages, old, None)
    assert "kl" not in loss.sum_keys  # no reference, no KL to log
    total, sums = _shares(loss, trajectories, [[0, 2], [1]])
    assert total == pytest.approx(3.0)
    n = sum(len(_trained_targets(t)) for t in trajectories)
    metrics = loss.metrics({"loss": total, **sums}, grad_norm=1.0)
    # The ordinary clip does not bind here: the unclipped term (-A * e^2) is the larger one.
    assert metrics["pg_clipfrac_dual"] == pytest.approx(1.0) and metrics["pg_clipfrac"] == 0.0
    assert sums["pg_clipfrac_dual"] == pytest.approx(n)


class ShiftedReference(TableForward):
    """The reference's log-probabilities 0.3 below the policy's on every token."""

    def logprobs(self, model, batch: TensorBatch, need_entropy=False, temperature=1.0):
        logp, entropy = super().logprobs(model, batch, need_entropy, temperature)
        return (logp - 0.3, entropy) if model == "reference" else (logp, entropy)


@pytest.mark.parametrize("cuts", CUTS)
def test_ppo_kl_to_the_reference_is_in_the_loss_and_logged(cuts):
    """low_var_kl (k3) with ref - logp = -0.3 on every token: exp(-0.3) + 0.3 - 1 per token."""
    trajectories = _trajectories()
    config = _config("training.use_kl_loss=true", "training.kl_loss_coef=0.5", "training.kl_loss_type=low_var_kl")
    advantages = [torch.zeros(len(t.input_ids)) for t in trajectories]
    loss = PPOPolicyLoss(None, ShiftedReference(config, torch.device("cpu"), bf16=False), config, 1.0,
                         advantages, None, "reference")
    k3 = math.exp(-0.3) + 0.3 - 1.0
    total, sums = _shares(loss, trajectories, cuts)
    assert total == pytest.approx(0.5 * k3)  # token-mean: the advantage terms are 0
    metrics = loss.metrics({"loss": total, **sums}, grad_norm=1.0)
    assert metrics["kl"] == pytest.approx(k3) and metrics["pg_clipfrac_dual"] == 0.0


@pytest.mark.parametrize("mask_obs", [True, False])
def test_value_loss_shares_add_up_to_half_the_mean_squared_error(mask_obs):
    """old values = the values: no clipping, 0.5 * mean (V - R)^2 over the critic's positions."""
    trajectories = _trajectories()
    config = _config("training.adv_estimator=gae", f"critic.mask_obs={str(mask_obs).lower()}")
    values = [torch.tensor([0.0] + [_value(x) for x in t.input_ids[1:]]) for t in trajectories]
    returns = [torch.linspace(-1.0, 1.0, len(t.input_ids)) for t in trajectories]
    loss = ClippedValueLoss(None, _forward(config), config, values, returns)
    positions = []
    for i, t in enumerate(trajectories):
        first = t.loss_mask.index(1)
        positions += [(i, p) for p in range(len(t.input_ids)) if t.loss_mask[p] or (not mask_obs and p >= first)]
    expected = 0.5 * sum((float(values[i][p]) - float(returns[i][p])) ** 2 for i, p in positions) / len(positions)
    for cuts in CUTS:
        total, sums = _shares(loss, trajectories, cuts)
        assert total == pytest.approx(expected)
        assert sums["value_tokens"] == len(positions) and sums["vf_clipfrac"] == 0.0
    metrics = loss.metrics({"loss": expected, **sums}, grad_norm=1.5)
    assert metrics == {"critic/value_loss": expected, "critic/vf_clipfrac": 0.0, "critic/grad_norm": 1.5}


def test_the_estimator_is_chosen_once_and_only_gae_asks_for_values():
    trajectories = _trajectories()
    asked = []

    def values(batch: list[Trajectory]) -> list[torch.Tensor]:
        asked.append(len(batch))
        return [torch.zeros(len(t.input_ids)) for t in batch]

    grpo = make_estimator(_config(), PAD)
    assert type(grpo) is GRPOMultiTurnEstimator
    advantages, _, targets = grpo.estimate(trajectories, values)
    assert targets is None and asked == []
    assert [len(a) for a in advantages] == [len(t.input_ids) for t in trajectories]

    gae = make_estimator(_config("training.adv_estimator=gae"), PAD)
    assert type(gae) is GAEEstimator
    advantages, stats, targets = gae.estimate(trajectories, values)
    assert asked == [3] and set(targets.stats) >= {"explained_variance", "value_mean", "return_mean", "score_mean"}
    assert [len(r) for r in targets.returns] == [len(t.input_ids) for t in trajectories]
    assert stats == {"score_mean": targets.stats["score_mean"]}
