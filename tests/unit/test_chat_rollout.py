"""Token-exact rollouts: masks cover exactly the sampled tokens; the ids decode to the conversation."""

import asyncio
import json

import numpy as np
import pytest

from userrl.chat import ChatFormat
from userrl.engines.base import GenerationOutput, GenerationRequest
from userrl.envs import load_tasks, make_env, make_solver
from userrl.protocols.bracket import parse_bracket
from userrl.protocols.choices import IGNORED_CALL_NOTICE
from userrl.protocols.tool_call import parse_tool_calls
from userrl.rollout import RolloutLimits, TokenPolicy, run_episode
from userrl.sft import solver_demonstrations
from userrl.trajectory import ROLE_IDS, read_parquet, write_parquet


class SolverPolicy:
    """A stand-in for the model: emits the privileged solver's actions as token ids."""

    def __init__(self, chat, task, extra_text=""):
        self.chat, self.solver, self.extra = chat, make_solver(task.gym, task, np.random.default_rng(0)), extra_text
        self.last_feedback = None

    async def __call__(self, request: GenerationRequest) -> GenerationOutput:
        choice, content = self.solver.next_action(self.last_feedback)
        ids = self.chat._encode(self.chat.render_action(choice, content) + self.extra) + [self.chat.tokenizer.eos_token_id]
        return GenerationOutput(ids, [-0.5] * len(ids), "stop", policy_version=3)


async def _play(chat, task, policy, limits):
    env = make_env(task.gym, task)
    original_astep = env.astep

    async def astep(action):
        result = await original_astep(action)
        policy.last_feedback = result.observation["feedback"]
        return result

    env.astep = astep
    return await run_episode(env, task, TokenPolicy(chat, policy), limits, uid="u0", group_id="g0")


@pytest.mark.parametrize("protocol", ["bracket", "tool_call"])
def test_solver_episode_is_token_exact(tokenizer, protocol):
    chat = ChatFormat(tokenizer, protocol)
    task = load_tasks("function", split="test", difficulty=[2])[0]
    traj = asyncio.run(_play(chat, task, SolverPolicy(chat, task), RolloutLimits(max_turns=8)))
    traj.check()
    assert traj.stop_reason == "env_done" and traj.episode_return == 1.0
    assert traj.policy_version == 3
    # The ids decode to the chat template's rendering of the readable messages.
    rendered = tokenizer.apply_chat_template(traj.messages, tokenize=False)
    assert tokenizer.decode(traj.input_ids) == rendered[: len(tokenizer.decode(traj.input_ids))]
    assert rendered.startswith(tokenizer.decode(traj.input_ids))
    # The loss mask covers exactly the sampled tokens, turn by turn, and they decode to the assistant texts.
    assistant = [m["content"] for m in traj.messages if m["role"] == "assistant"]
    for k, text in enumerate(assistant):
        ids = [t for t, m, turn in zip(traj.input_ids, traj.loss_mask, traj.turn_ids, strict=True) if m and turn == k]
        assert tokenizer.decode(ids, skip_special_tokens=True) == text
        assert ids[-1] == tokenizer.eos_token_id
    assert all(r == ROLE_IDS["assistant"] for r, m in zip(traj.role_ids, traj.loss_mask, strict=True) if m)
    assert sum(traj.loss_mask) == sum(t.n_sampled for t in traj.turns)
    assert all(lp == -0.5 for lp, m in zip(traj.sampler_logprobs, traj.loss_mask, strict=True) if m)


def test_extra_tool_calls_are_answered_but_not_executed(tokenizer):
    chat = ChatFormat(tokenizer, "tool_call")
    task = load_tasks("function", split="test", difficulty=[0])[0]
    policy = SolverPolicy(chat, task, extra_text="\n" + chat.render_action("answer", "123456"))
    traj = asyncio.run(_play(chat, task, policy, RolloutLimits(max_turns=8)))
    assert traj.turns[0].n_tool_calls == 2
    assert IGNORED_CALL_NOTICE in [m["content"] for m in traj.messages if m["role"] == "tool"]
    assert traj.episode_return == 1.0  # the ignored wrong answers never reached the env


def test_no_tool_call_ends_the_episode_with_zero_reward(tokenizer):
    chat = ChatFormat(tokenizer, "bracket")
    task = load_tasks("function", split="test")[0]

    async def chatter(request):
        ids = chat._encode("I think the answer is 7.") + [tokenizer.eos_token_id]
        return GenerationOutput(ids, [0.0] * len(ids), "stop")

    traj = asyncio.run(run_episode(make_env("function", task), task, TokenPolicy(chat, chatter), RolloutLimits(), uid="u", group_id="g"))
    traj.check()
    assert traj.stop_reason == "no_tool_call" and traj.turn_rewards == [0.0] and not traj.turns[0].executed


def test_engine_failure_is_a_counted_abort(tokenizer):
    chat = ChatFormat(tokenizer, "bracket")
    task = load_tasks("function", split="test")[0]

    async def broken(request):
        raise RuntimeError("engine down")

    traj = asyncio.run(run_episode(make_env("function", task), task, TokenPolicy(chat, broken), RolloutLimits(), uid="u", group_id="g"))
    assert traj.aborted and traj.stop_reason == "aborted" and traj.error.startswith("generate_exception")
    traj.check()


def test_context_budget_stops_the_episode(tokenizer):
    chat = ChatFormat(tokenizer, "bracket")
    task = load_tasks("function", split="test", difficulty=[2])[0]
    traj = asyncio.run(_play(chat, task, SolverPolicy(chat, task), RolloutLimits(max_turns=8, max_response_len=30)))
    assert traj.stop_reason in ("context_full", "length")
    assert traj.response_len <= 30


def test_parsers():
    assert parse_bracket("thinking...\n[search] test\n[answer] 5").calls == [("search", "test"), ("answer", "5")]
    assert parse_bracket("no action here").action is None
    parsed = parse_tool_calls('<tool_call>{"name": "interact_with_env", "arguments": {"choice": "answer", "content": "4"}}</tool_call>'
                              '<tool_call>{not json}</tool_call>')
    assert parsed.action == "[answer] 4" and parsed.n_tool_calls == 2
    assert parse_tool_calls('<tool_call>{"name": "other", "arguments": {}}</tool_call>').action is None


def test_demonstrations_round_trip_through_parquet(tokenizer, tmp_path):
    chat = ChatFormat(tokenizer, "bracket")
    demos = solver_demonstrations(load_tasks("function", difficulty=[1]), chat, episodes=4)
    for demo in demos:
        demo.check()
        assert demo.messages[-1]["role"] == "tool" and "Correct" in demo.messages[-1]["content"]
    back = read_parquet(write_parquet(demos, tmp_path / "demos.parquet"))
    assert len(demos) == 4
    assert [b.input_ids for b in back] == [d.input_ids for d in demos]
    assert [b.turns for b in back] == [d.turns for d in demos]
    assert back[0].messages == demos[0].messages


def test_demonstrations_skip_tasks_the_solver_cannot_ground(tokenizer):
    # Level-3 rules cannot be pinned down by a few probes: only the level-0 tasks give demonstrations.
    chat = ChatFormat(tokenizer, "bracket")
    tasks = load_tasks("function", difficulty=[3])[:5] + load_tasks("function", difficulty=[0])[:2]
    demos = solver_demonstrations(tasks, chat, episodes=6)
    assert len(demos) == 6 and {d.item_key for d in demos} == {t.item_key for t in tasks[5:]}
    with pytest.raises(ValueError, match="grounded"):
        solver_demonstrations(tasks[:5], chat, episodes=1)


def test_demonstrations_longer_than_a_rollout_are_skipped(tokenizer, caplog):
    chat = ChatFormat(tokenizer, "bracket")
    tasks = load_tasks("function", difficulty=[0])[:8]
    lengths = sorted(len(d.input_ids) for d in solver_demonstrations(tasks, chat, episodes=8))
    assert lengths[0] < lengths[-1]
    limit = lengths[len(lengths) // 2]
    demos = solver_demonstrations(tasks, chat, episodes=8, max_len=limit)
    assert len(demos) == 8 and max(len(d.input_ids) for d in demos) <= limit
    assert "longer than policy.max_model_len" in caplog.text
    with pytest.raises(ValueError, match=f"longer than policy.max_model_len={lengths[0] - 1}"):
        solver_demonstrations(tasks, chat, episodes=1, max_len=lengths[0] - 1)


def test_an_env_that_raises_gives_a_counted_aborted_episode(tokenizer):
    from userrl.envs.function import FunctionEnv

    class BrokenEnv(FunctionEnv):
        async def _astep_impl(self, choice, content):
            raise RuntimeError("simulated user crashed")

    chat = ChatFormat(tokenizer, "bracket")
    task = load_tasks("function", split="test")[0]
    traj = asyncio.run(run_episode(BrokenEnv(task), task, TokenPolicy(chat, SolverPolicy(chat, task)), RolloutLimits(),
                                   uid="u", group_id="g"))
    traj.check()
    assert traj.aborted and traj.stop_reason == "aborted"
    assert traj.error == "step_exception:RuntimeError"
    assert traj.turn_rewards == [0.0]


def test_file_demonstrations(tokenizer, tmp_path):
    from userrl.sft import file_demonstrations

    chat = ChatFormat(tokenizer, "bracket")
    messages = [{"role": "system", "content": "Play."}, {"role": "user", "content": "Go."},
                {"role": "assistant", "content": "[search] test"}, {"role": "tool", "content": "Test case: [1, 2, 3, 4]"},
                {"role": "assistant", "content": "[answer] 3"}]
    path = tmp_path / "demos.jsonl"
    path.write_text(json.dumps({"messages": messages}) + "\n")
    (demo,) = file_demonstrations(path, chat)
    demo.check()
    assert len(demo.turns) == 2 and demo.turns[0].feedback == "Test case: [1, 2, 3, 4]"
    trained = [t for t, m in zip(demo.input_ids, demo.loss_mask, strict=True) if m]
    assert tokenizer.decode(trained, skip_special_tokens=True) == "[search] test[answer] 3"
    path.write_text("not json\n")
    with pytest.raises(ValueError, match=r"demos.jsonl:1"):
        file_demonstrations(path, chat)


def test_file_demonstrations_over_max_model_len_are_dropped_and_counted(tokenizer, tmp_path, caplog):
    from userrl.sft import file_demonstrations, within_length

    chat = ChatFormat(tokenizer, "bracket")
    opening = [{"role": "system", "content": "Play."}, {"role": "user", "content": "Go."}]
    short = opening + [{"role": "assistant", "content": "[answer] 3"}]
    long = opening + [{"role": "assistant", "content": "[answer] " + "3 " * 300}]
    path = tmp_path / "demos.jsonl"
    path.write_text("".join(json.dumps({"messages": m}) + "\n" for m in (short, long)))
    demos = file_demonstrations(path, chat)
    limit = len(demos[0].input_ids)
    assert len(demos[1].input_ids) > limit
    assert within_length(demos, limit, "sft.path") == demos[:1]
    assert "1 of 2 demonstrations from sft.path are longer than policy.max_model_len" in caplog.text
    with pytest.raises(ValueError, match=f"policy.max_model_len={limit - 1} tokens \\(the shortest has {limit}\\)"):
        within_length(demos, limit - 1, "sft.path")
