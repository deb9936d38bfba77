"""The user-reply task family (issue 17 item 3) without Ray: config keys and their errors, the humanlm gym's
tasks in both modes of docs/spec/ALGORITHMS.md §5.2, the user_reply protocol (opening, stop strings, one reply
per episode) through the one episode loop, and the group scorer's rewards, counters and refusals to score
silently."""

from __future__ import annotations

import asyncio
from collections import Counter

import pytest

from userrl.actors.env_runner import EpisodeSpec
from userrl.chat import ChatFormat
from userrl.config import ConfigError, parse_config
from userrl.engines.base import GenerationOutput, GenerationRequest
from userrl.humanlm.fields import FIELD_NAMES
from userrl.humanlm.judge import JudgeOutcome
from userrl.humanlm.trainer_config import TRAIN_USER_DEFAULTS, UserSimulatorConfig, merge_defaults
from userrl.rollout import RolloutLimits, TokenPolicy, cut_at_stop_strings, new_trajectory, run_episode

# userrl.humanlm.env registers the gym when first asked for (HumanLM's plug-in, userrl/plugins.py); importing it at
# module level here would add `humanlm` to GYMS before the agent gyms' parametrized tests are collected.


def _config(**humanlm):
    return parse_config(merge_defaults({"humanlm": humanlm, "policy": {"model": "tiny-random"}}))


def _tasks(config, split="train", evaluation=False):
    from userrl.envs import load_tasks

    return load_tasks("humanlm", split, **config.task_options("humanlm", evaluation=evaluation))


def test_modes_expand_the_rows_as_the_spec_says():
    from userrl.humanlm.data import load_rows

    rows = load_rows("train")
    separate = _tasks(_config(mode="separate_system_prompt"))
    assert len(rows) == 335 and len(separate) == 7 * 335
    # Item i is row i mod N with field i // N.
    for i in (0, 334, 335, 1000, 7 * 335 - 1):
        assert separate[i].data["row_index"] == i % 335 and separate[i].data["field"] == FIELD_NAMES[i // 335]
    assert separate[0].data["messages"][0]["content"].startswith("You are a real human named HUMAN.")
    only = _tasks(_config(mode="response_only"))
    assert len(only) == 335 and {t.data["field"] for t in only} == {"response"}
    # Evaluation during training uses the response field only (the spec's validation).
    assert {t.data["field"] for t in _tasks(_config(), "test", evaluation=True)} == {"response"}


def test_config_errors_name_the_key_and_the_fix():
    with pytest.raises(ConfigError, match="env.max_turns=3: a user-reply task is one reply; set env.max_turns=1"):
        parse_config(merge_defaults({"env": {"max_turns": 3}}))
    with pytest.raises(ConfigError, match="set env.protocol=user_reply"):
        parse_config(merge_defaults({"env": {"protocol": "tool_call"}}))
    with pytest.raises(ConfigError, match="not \\['function'\\]"):
        parse_config(merge_defaults({"env": {"gyms": [{"name": "humanlm"}, {"name": "function"}]}}))
    with pytest.raises(ConfigError, match="humanlm.judge=openai needs humanlm.judge_llm"):
        parse_config(merge_defaults({"humanlm": {"judge": "openai"}}))
    with pytest.raises(ConfigError, match="humanlm.mode"):
        parse_config(merge_defaults({"humanlm": {"mode": "sequential"}}))
    with pytest.raises(ConfigError, match="unknown field\\(s\\) \\['tone'\\]"):
        parse_config(merge_defaults({"humanlm": {"field_weights": {"tone": 1.0}}}))
    with pytest.raises(ConfigError, match="set sft.source=rows with env.protocol=user_reply"):
        parse_config(merge_defaults({"sft": {"enabled": True, "source": "solver"}}))
    with pytest.raises(ConfigError, match="sft.source=rows with env.protocol=tool_call"):
        parse_config({"policy": {"model": "tiny-random"}, "sft": {"enabled": True, "source": "rows"}})
    assert _config().sft.source == "rows" and parse_config(merge_defaults({"sft": {"enabled": True}})).sft.enabled


def test_builder_fills_humanlm_settings_and_keeps_the_callers():
    config = (UserSimulatorConfig().humanlm(mode="response_only").training(group_size=2)
              .policy(model="tiny-random").to_config())
    assert config.env.protocol == "user_reply" and config.env.max_turns == 1
    assert config.training.group_size == 2 and config.training.use_kl_loss and config.training.kl_loss_coef == 0.001
    assert config.policy.temperature == 0.8 and config.evaluation.temperature == 0.4
    assert config.humanlm.mode == "response_only"
    assert TRAIN_USER_DEFAULTS["training"]["group_size"] == 4  # the defaults are not mutated
    assert config.policy.max_new_tokens == 512


def test_thinking_raises_the_default_response_limit_to_1024():
    def build(**policy) -> int:
        return (UserSimulatorConfig().humanlm(thinking=True).policy(model="tiny-random", **policy)
                .to_config().policy.max_new_tokens)

    assert build() == 1024 and build(max_new_tokens=300) == 300
    assert parse_config(merge_defaults({"humanlm": {"thinking": True}})).policy.max_new_tokens == 1024
    assert TRAIN_USER_DEFAULTS["policy"]["max_new_tokens"] == 512
    tasks = _tasks(_config(thinking=True))
    assert {t.max_new_tokens for t in tasks} == {1024}


def test_prompt_budget_drops_overlong_rows_and_counts_them(caplog):
    from userrl.humanlm.env import skipped_rows

    config = _config(prompt_budget=400)
    tasks = _tasks(config)
    skipped = skipped_rows("train", mode="separate_system_prompt", prompt_budget=400)
    assert skipped and sum(skipped.values()) > 0
    assert len(tasks) == 7 * (335 - sum(skipped.values()))
    assert "rows skipped over humanlm.prompt_budget=400" in caplog.text
    # A persona that alone exceeds the budget is named as such; with no row left the loader refuses.
    with pytest.raises(ValueError, match="every one of the 335 rows exceeds prompt_budget=200 tokens "
                       "\\({'persona_over_budget': 335}\\)"):
        _tasks(_config(prompt_budget=200, mode="response_only"))


class _Scripted:
    """A generate function that samples fixed texts (tokenized), one per episode uid, with logprob -0.5."""

    def __init__(self, tokenizer, replies):
        self.tokenizer, self.replies, self.requests = tokenizer, replies, []

    async def __call__(self, request: GenerationRequest) -> GenerationOutput:
        self.requests.append(request)
        ids = self.tokenizer.encode(self.replies[request.cache_key], add_special_tokens=False)
        ids = ids[: request.max_new_tokens]
        return GenerationOutput(ids, [-0.5] * len(ids), "length" if len(ids) == request.max_new_tokens else "stop")


def _play(tokenizer, task, replies, limits=None):
    from userrl.envs import make_env

    chat = ChatFormat(tokenizer, "user_reply")
    generate = _Scripted(tokenizer, replies)
    policy = TokenPolicy(chat, generate)
    limits = limits or RolloutLimits(max_turns=1, max_new_tokens=64, max_model_len=4096, max_response_len=512)
    trajs = [asyncio.run(run_episode(make_env("humanlm", task), task, policy, limits, uid=uid, group_id="g0"))
             for uid in replies]
    return trajs, generate


def test_one_reply_per_episode_cut_after_the_closing_tag(tokenizer):
    task = _tasks(_config(mode="response_only"), "test")[0]
    trajs, generate = _play(tokenizer, task, {"a": "<response>Fine, I agree.</response> and then some more text",
                                              "b": "no tags at all"})
    a, b = trajs
    for traj in trajs:
        traj.check()
        assert len(traj.turns) == 1 and traj.turns[0].executed and traj.stop_reason == "env_done"
        assert traj.episode_return == 0.0  # pending: the group scorer writes it
    # The opening is the task's own messages: the field prompt, then the context with assistant turns kept.
    assert a.messages[: len(task.data["messages"])] == task.data["messages"]
    assert "You are a real human named HUMAN." in tokenizer.decode(a.input_ids[: a.prompt_len])
    # Decoding ended at </response>: the trained tokens are the reply up to and including the tag.
    assert a.messages[-1]["content"] == "<response>Fine, I agree.</response>"
    assert tokenizer.decode([t for t, m in zip(a.input_ids, a.loss_mask, strict=True) if m]).endswith("</response>")
    assert b.messages[-1]["content"] == "no tags at all" and len(a.messages) == len(task.data["messages"]) + 1
    assert len(generate.requests) == 2


def test_each_field_samples_up_to_its_own_token_limit_under_the_policy_cap(tokenizer):
    """Spec 5.2's field table: a latent field's rollout samples at most 48 tokens, the response at most 512;
    a lower policy.max_new_tokens (a small machine's cap) wins over both."""
    tasks = _tasks(_config(mode="separate_system_prompt"), "test")
    stance = next(t for t in tasks if t.data["field"] == "stance")
    goal = next(t for t in tasks if t.data["field"] == "goal")
    response = next(t for t in tasks if t.data["field"] == "response")
    wide = RolloutLimits(max_turns=1, max_new_tokens=2048, max_model_len=8192, max_response_len=4096)
    for task, expected in ((stance, 48), (goal, 48), (response, 512)):
        _, generate = _play(tokenizer, task, {"a": "<stance>calm</stance>"}, wide)
        assert [r.max_new_tokens for r in generate.requests] == [expected], task.data["field"]
    narrow = RolloutLimits(max_turns=1, max_new_tokens=24, max_model_len=8192, max_response_len=4096)
    for task in (stance, response):
        _, generate = _play(tokenizer, task, {"a": "<stance>calm</stance>"}, narrow)
        assert [r.max_new_tokens for r in generate.requests] == [24]


def test_a_task_without_its_own_token_cap_keeps_the_policys():
    from userrl.envs import Task

    prompt = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]
    limits = RolloutLimits(max_new_tokens=64)
    assert limits.for_task(Task("function", "k", prompt, {})).max_new_tokens == 64
    assert limits.for_task(Task("function", "k", prompt, {}, max_new_tokens=10)).max_new_tokens == 10
    assert limits.for_task(Task("function", "k", prompt, {}, max_new_tokens=100)).max_new_tokens == 64
    with pytest.raises(ValueError, match="max_new_tokens must be a positive integer or None, got 0"):
        Task("function", "k", prompt, {}, max_new_tokens=0)


def test_cut_at_stop_strings_keeps_the_logprobs_of_the_kept_tokens(tokenizer):
    ids = tokenizer.encode("<goal>win</goal> trailing", add_special_tokens=False)
    out = cut_at_stop_strings(GenerationOutput(ids, [float(-i) for i in range(len(ids))], "length"), tokenizer,
                              ("</goal>",))
    assert tokenizer.decode(out.token_ids) == "<goal>win</goal>" and out.finish_reason == "stop"
    assert out.logprobs == [float(-i) for i in range(len(out.token_ids))]
    same = GenerationOutput(ids[:3], [0.0] * 3, "length")
    assert cut_at_stop_strings(same, tokenizer, ("</goal>",)) is same


class _FailingJudge:
    """A judge whose call for one candidate text never gives a usable reply (the spec's final failure)."""

    name = "failing"

    def __init__(self, bad: str):
        self.bad = bad

    async def judge(self, row, field_name, candidates):
        failed = self.bad in candidates
        stats = Counter({"judge_calls": 1, **({"judge_failures": 1} if failed else {})})
        return JudgeOutcome([0.0 if failed else 0.5 for _ in candidates], stats=stats, failed=failed)


def test_group_scorer_writes_rewards_and_counts_what_it_cannot_score(tokenizer):
    from userrl.humanlm.scoring import HumanLMGroupScorer

    config = _config(mode="response_only")
    task = _tasks(config, "test")[0]
    truth = task.data["row"]["reward_model"]["ground_truth"]
    replies = {"exact": f"<response>{truth}</response>", "close": f"<response>{truth.split('.')[0]}.</response>",
               "junk": "<response>bananas</response> extra", "empty": "<response></response>",
               "untagged": truth}
    trajs, _ = _play(tokenizer, task, replies)
    specs = [EpisodeSpec(task, uid, "g0") for uid in replies]
    scorer = HumanLMGroupScorer(config)
    metrics = scorer.score(specs, trajs)
    rewards = {t.uid: t.episode_return for t in trajs}
    # Strict parsing: a missing block and an empty value score 0 (docs/spec/ALGORITHMS.md §5.2); "junk" ended
    # at its closing tag (the stop string), so it parses, and the judge gives its unrelated word 0.
    assert rewards["junk"] == rewards["empty"] == rewards["untagged"] == 0.0
    assert 0 < rewards["close"] < 1
    # The ground-truth rule: a copy of the real reply scores min(1, best other + 0.1).
    assert rewards["exact"] == pytest.approx(min(1.0, rewards["close"] + 0.1))
    assert metrics["humanlm/response/valid_rate"] == pytest.approx(4 / 5)
    assert metrics["humanlm/response/score"] == pytest.approx(sum(rewards.values()) / 5)
    assert metrics["humanlm/invalid_parses"] == 1 and metrics["humanlm/empty_generations"] == 1
    assert metrics["humanlm/ground_truth_matches"] == 1 and metrics["humanlm/groups"] == 1

    # A failed judge call: aborted and counted under env.role_failure=abort, the spec's 0 under fallback.
    trajs, _ = _play(tokenizer, task, replies)
    failing = HumanLMGroupScorer(config, train_judge=_FailingJudge(truth.split(".")[0] + "."))
    metrics = failing.score(specs, trajs)
    # The call held both distinct judged replies; the copy of the real reply is scored from theirs.
    aborted = {t.uid for t in trajs if t.aborted}
    assert aborted == {"close", "junk", "exact"}
    close = next(t for t in trajs if t.uid == "close")
    assert close.error == "role_call_failed:humanlm_judge" and close.turns[0].failed_role_calls == 1
    assert metrics["humanlm/aborted_judge_failures"] == 3 and metrics["humanlm/judge_failures"] == 1
    assert metrics["humanlm/response/samples"] == 2  # aborted replies are in no mean
    fallback = parse_config(merge_defaults({"humanlm": {"mode": "response_only"}, "env": {"role_failure": "fallback"}}))
    trajs, _ = _play(tokenizer, task, replies)
    HumanLMGroupScorer(fallback, train_judge=_FailingJudge(truth.split(".")[0] + ".")).score(specs, trajs)
    close = next(t for t in trajs if t.uid == "close")
    assert not close.aborted and close.episode_return == 0.0 and close.turns[0].failed_role_calls == 1


def test_a_prompt_over_the_model_length_is_aborted_not_scored(tokenizer):
    from userrl.humanlm.scoring import HumanLMGroupScorer

    config = _config(mode="response_only")
    task = _tasks(config, "test")[0]
    limits = RolloutLimits(max_turns=1, max_new_tokens=16, max_model_len=64, max_response_len=512)
    trajs, generate = _play(tokenizer, task, {"a": "<response>x</response>"}, limits)
    assert not generate.requests and trajs[0].stop_reason == "context_full"
    metrics = HumanLMGroupScorer(config).score([EpisodeSpec(task, "a", "g0")], trajs)
    assert trajs[0].aborted and trajs[0].error == "prompt_over_model_len"
    assert metrics["humanlm/prompt_over_model_len"] == 1 and "humanlm/score_mean" not in metrics


def test_evaluation_scores_flexible_parses_with_the_validation_judge(tokenizer):
    from userrl.humanlm.scoring import HumanLMGroupScorer

    config = _config(mode="response_only")
    task = _tasks(config, "test")[0]
    truth = task.data["row"]["reward_model"]["ground_truth"]
    replies = {"tagged": f"Well: <response>{truth.split('.')[0]}.</response>", "plain": truth.split(".")[0] + "."}
    trajs, _ = _play(tokenizer, task, replies)
    records = []
    metrics = HumanLMGroupScorer(config).score([EpisodeSpec(task, u, "g0") for u in replies], trajs,
                                               evaluation=True, records=records)
    # Flexible parsing: a tag pair anywhere counts, and a missing one falls back to the whole text.
    assert all(t.episode_return > 0 for t in trajs)
    assert metrics["eval/humanlm/response/valid_rate"] == 0.0  # neither is a strict parse
    assert metrics["eval/humanlm/response/tag_rate"] == 0.5
    assert {r["judge"] for r in records} == {"scripted"} and len(records) == 2


def test_sft_demonstrations_are_the_rows_real_replies_in_the_strict_format(tokenizer):
    """sft.source=rows: the prompt the rollout renders for the item, then the row's ground truth as the one
    tag block of the item's field (no end-of-turn token: the rollout cuts a reply after its closing tag)."""
    from userrl.envs import make_env
    from userrl.humanlm.sft import user_reply_demonstrations

    chat = ChatFormat(tokenizer, "user_reply")
    task = _tasks(_config(mode="response_only"), "test")[0]  # the first Persuade test row, turn 1
    (demo,) = user_reply_demonstrations([task], chat, episodes=1)
    demo.check()
    trained = [t for t, m in zip(demo.input_ids, demo.loss_mask, strict=True) if m]
    assert tokenizer.decode(trained) == ("<response>I am not convinced yet. I would need evidence. You have not "
                                         "addressed my argument.</response>")
    # The prompt is token for token what the rollout renders for this item (TokenPolicy.start).
    rollout = new_trajectory(task, "r", "r")
    TokenPolicy(chat, None).start(rollout, task, make_env("humanlm", task))
    assert demo.input_ids[: demo.prompt_len] == rollout.input_ids
    # separate_system_prompt: a latent field's item is demonstrated with the row's ground-truth state; the
    # fields our gyms know nothing of (emotion, belief) give no demonstration rather than a made-up one.
    separate = _tasks(_config(), "test")
    first_persuade = next(t.data["row"]["extra_info"]["target_id"] for t in separate if t.gym == "humanlm"
                          and t.data["row"]["extra_info"]["gym"] == "persuade")
    by_field = {t.data["field"]: t for t in separate if t.data["row"]["extra_info"]["target_id"] == first_persuade}
    demos = user_reply_demonstrations([by_field["stance"], by_field["emotion"], by_field["belief"]], chat, 3)
    texts = {tokenizer.decode([t for t, m in zip(d.input_ids, d.loss_mask, strict=True) if m]) for d in demos}
    claim = "Cash should be phased out in favor of digital payments"
    assert texts == {f'<stance>Strongly Agree toward the claim "{claim}"; unchanged</stance>'}
    with pytest.raises(ValueError, match="use humanlm.mode=response_only"):
        user_reply_demonstrations([by_field["emotion"]], chat, 1)
