"""bench/judge_agreement.py's arithmetic and its transcripts: agreement statistics against a plain oracle, and the
scripted walk against what the gym itself scores."""

from __future__ import annotations

import itertools

import pytest
from bench_module import load_bench


@pytest.fixture(scope="module")
def bench():
    """bench/judge_agreement.py as a module (it imports its sibling simulator_agreement from bench/)."""
    return load_bench("judge_agreement")


def test_agreement_against_the_definitions(bench):
    # 10 pairs (scripted, llm): 3 both covered, 1 missed, 2 extra, 4 neither.
    pairs = [(True, True)] * 3 + [(True, False)] + [(False, True)] * 2 + [(False, False)] * 4
    r = bench.agreement(pairs)
    assert (r["tp"], r["fn"], r["fp"], r["tn"]) == (3, 1, 2, 4)
    po = 7 / 10
    pe = (5 / 10) * (4 / 10) + (5 / 10) * (6 / 10)  # P(llm covers) P(scripted covers) + both "not"
    assert r["accuracy"] == pytest.approx(po) and r["kappa"] == pytest.approx((po - pe) / (1 - pe))
    assert r["precision"] == pytest.approx(3 / 5) and r["recall"] == pytest.approx(3 / 4)
    never = bench.agreement([(s, False) for s, _ in pairs])  # a judge that covers nothing: chance agreement
    assert never["kappa"] == pytest.approx(0.0) and never["precision"] is None and never["recall"] == 0.0
    assert bench.agreement([])["accuracy"] is None


def test_the_scripted_walk_is_what_the_gym_scores(bench):
    """Each transcript's scripted verdicts cover exactly the details the gym (both roles scripted) covers."""
    from userrl.envs import make_env, tool_call_to_action

    chosen, recorded = bench.transcripts(20, None)
    assert len(chosen) == 20 and recorded == 16  # the 16 test tasks' recorded conversations, then 4 generated
    assert len({(t.item_key, tuple(m)) for t, _, m in chosen}) == 20
    for task, seed, messages in itertools.islice(chosen, 0, 20, 4):
        steps = bench.walk(task, seed, messages)
        env = make_env("intention", task, seed=seed, backend="scripted", max_steps=len(messages) + 1)
        env.reset()
        for step, question in zip(steps, messages, strict=False):
            _, _, _, _, info = env.step(tool_call_to_action("action", question))
            assert len(step["covered"]) == len(info["newly_covered_details"])
            assert step["remaining"] >= len(step["covered"])
        env.close()
