"""GRPO with `env.protocol: native_tools` on Tau (issue 18): the tiny model's messages are tool calls or speech to
the scripted customer; the run warm-starts on the solver's native demonstrations (sft), trains end to end and every
trajectory has the layout of docs/spec/ALGORITHMS.md §5.1.
The tiny random model rarely ends a message within its token limit, so the customer is hardly called in that run;
the second run teaches a copy to speak to the customer and plays against our loopback OpenAI-compatible customer
(env.backend=openai): replies come back as user messages, ###STOP### ends an episode, and an empty reply is a failed
call, counted per iteration and handled per env.role_failure (docs/spec/ALGORITHMS.md §5.1)."""

import pytest
from aiohttp import web
from chat_server import LoopbackChatServer
from mlflow import MlflowClient
from teach import teach_reply
from transformers import AutoTokenizer

from userrl.chat import ChatFormat
from userrl.envs import load_tasks, make_env
from userrl.trainer import TrainerConfig

pytestmark = pytest.mark.slow


def test_native_tools_on_tau_trains_end_to_end(ray_local, tiny_model, tmp_path):
    # max_turns=8: the solver finishes some Tau tasks within 8 messages, in demonstrations under 4096 tokens.
    algo = (TrainerConfig()
            .experiment(name="native", seed=0, output_dir=str(tmp_path))
            .environment(gyms=[{"name": "tau"}], protocol="native_tools", max_turns=8, max_steps=30,
                         backend="scripted")
            .policy(model="tiny-random", max_new_tokens=8, max_model_len=4096, max_response_len=512,
                    num_threads=1)
            .env_runners(num_env_runners=1)
            .training(iterations=2, batch_size=2, group_size=2, lr=1e-4, micro_batch_tokens=8192)
            .sft(enabled=True, episodes=2, epochs=1, batch_size=2, lr=1e-4)
            .learners(num_learners=0)
            .checkpointing(every=0)
            .tracking(experiment="native", mlflow_uri=f"sqlite:///{tmp_path}/mlflow.db", sample_trajectories=4)
            .build_trainer())
    try:
        seen = []
        results = algo.fit(on_result=seen.append)
    finally:
        algo.stop()

    # One warm-start step on the two native demonstrations, its weights synced before the first rollout.
    (sft,) = [r for r in seen if r["phase"] == "sft"]
    assert sft["sft/tokens"] > 0 and sft["sft/loss"] > 0
    assert 0.1 < sft["memory/learner_rss_gb"] < 20  # measured after the step's freed memory went back
    assert [r["policy_version"] for r in results] == [2, 3]
    assert [r["iteration"] for r in results] == [1, 2]
    for r in results:
        assert r["rollout/episodes"] == 4 and r["rollout/aborted"] == 0
        assert r["learner/trained_tokens"] > 0
        samples = r["samples"]
        assert samples
        for traj in samples:
            traj.check()
            assert traj.role_ids[: traj.prompt_len].count(1) > 0  # the customer's first message is in the prompt
        # Every member of a group starts from the same prompt (the recorded first customer message).
        by_group = {}
        for traj in samples:
            by_group.setdefault(traj.group_id, set()).add(tuple(traj.input_ids[: traj.prompt_len]))
        assert all(len(prompts) == 1 for prompts in by_group.values())
        # MUA-RL's metrics (issue 18 item 3), each iteration: two groups; customer messages counted again here
        assert r["rollout/mua/groups"] == 2 and len(samples) == 4
        assert sum(r[f"rollout/mua/groups_{kind}"] for kind in ("all_correct", "all_wrong", "mixed")) == pytest.approx(1)
        said = sum(turn.executed and turn.choice == "action" for traj in samples for turn in traj.turns)
        assert r["rollout/mua/customer_messages_mean"] == pytest.approx(said / 4)
    # ... and they reach MLflow (the tracker writes rollout/mua/x as rollout.mua.x)
    client = MlflowClient(f"sqlite:///{tmp_path}/mlflow.db")
    (run,) = client.search_runs([client.get_experiment_by_name("native").experiment_id])
    assert {"rollout.mua.groups_mixed", "rollout.mua.tool_calls_mean", "rollout.mua.customer_messages_mean"} <= set(
        run.data.metrics)


# ---------------------------------------------------------------- our loopback OpenAI-compatible customer

AGENT_TEXT = "Could you tell me more about your order?"
FIRST_REPLY = "I would like to cancel an order."
STOP_REPLY = "Thanks, that is all. ###STOP###"


class LoopbackCustomer(LoopbackChatServer):
    """The customer over HTTP (env.backend=openai): its first reply is FIRST_REPLY; its second ends the conversation
    with ###STOP### for the first task it hears of, and is empty (a failed call, §5.1) for any other task."""

    def __init__(self) -> None:
        self.tasks: list[str] = []  # the system prompts (one per task instruction), in the order first heard
        self.replies: list[str] = []
        super().__init__()

    async def handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        system, conversation = body["messages"][0]["content"], body["messages"][1:]
        if system not in self.tasks:
            self.tasks.append(system)
        # The customer's side of the dialogue (GYMS §5): the agent speaks as `user`, the first time to greet.
        assert [m["role"] for m in conversation[:2]] == ["user", "assistant"] and conversation[-1]["role"] == "user"
        agent_messages = sum(m["role"] == "user" for m in conversation) - 1  # the greeting
        content = FIRST_REPLY if agent_messages <= 1 else STOP_REPLY if self.tasks.index(system) == 0 else ""
        self.replies.append(content)
        return web.json_response({
            "id": f"c{len(self.replies)}", "object": "chat.completion", "created": 0, "model": body["model"],
            "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": content}}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}})


def _teach_speech(tiny_model: str, out: str) -> None:
    """A copy of tiny-random that says AGENT_TEXT (plain text: to the customer) on its first and second turn."""
    chat = ChatFormat(AutoTokenizer.from_pretrained(tiny_model), "native_tools")
    reply = chat.tokenizer.encode(AGENT_TEXT, add_special_tokens=False) + [chat.stop_token_ids[0]]
    after_first = chat.encode_after_assistant([{"role": "user", "content": FIRST_REPLY}]) + chat.header_ids
    contexts = []
    for task in load_tasks("tau", split="train")[:4]:
        prompt = [i for ids, _ in chat.encode_prompt(*chat.episode_opening(task, make_env("tau", task))) for i in ids]
        contexts += [prompt, prompt + reply + after_first]
    teach_reply(tiny_model, out, contexts, reply, steps=80)


def test_native_tools_trains_with_our_openai_compatible_customer(ray_local, tiny_model, tmp_path, monkeypatch):
    model_dir = str(tmp_path / "speaker")
    _teach_speech(tiny_model, model_dir)
    server = LoopbackCustomer()
    server.start()
    monkeypatch.setenv("OPENAI_API_KEY", "local")
    try:
        algo = (TrainerConfig()
                .experiment(name="native-llm", seed=0, output_dir=str(tmp_path))
                .environment(gyms=[{"name": "tau"}], protocol="native_tools", max_turns=4, max_steps=30,
                             backend="openai", llm={"base_url": server.base_url, "model": "customer", "attempts": 1})
                .policy(model=model_dir, max_new_tokens=16, max_model_len=4096, max_response_len=512,
                        temperature=0.0, num_threads=1)
                .env_runners(num_env_runners=1)
                .training(iterations=1, batch_size=2, group_size=2, lr=1e-4, micro_batch_tokens=8192)
                .learners(num_learners=0)
                .checkpointing(every=0)
                .tracking(experiment="native-llm", mlflow_uri=f"sqlite:///{tmp_path}/mlflow.db",
                          sample_trajectories=4)
                .build_trainer())
        try:
            (result,) = algo.fit()
        finally:
            algo.stop()
    finally:
        server.stop()

    # Every episode spoke twice; the customer answered each time: 4 first replies, then ###STOP### for one task's
    # group and an empty reply (a failed call under role_failure=abort: aborted, counted) for the other's.
    assert len(server.tasks) == 2 and sorted(server.replies) == sorted([FIRST_REPLY] * 4 + [STOP_REPLY] * 2 + [""] * 2)
    assert result["rollout/episodes"] == 4 and result["rollout/aborted"] == 2 == result["rollout/aborted/tau"]
    assert result["rollout/role_calls/tau"] == 8 and result["rollout/failed_role_calls/tau"] == 2
    assert result["learner/trained_tokens"] > 0
    played = result["samples"]  # the aborted episodes are left out (training.drop_aborted)
    assert len(played) == 2 and not any(t.aborted for t in played)
    for traj in played:  # ###STOP### ended the episode (§5.1); both replies are user messages, not trained
        traj.check()
        assert traj.stop_reason == "env_done" and traj.turns[-1].terminated
        replies = [m["content"] for m in traj.messages[2:] if m["role"] == "user"]
        assert replies == [FIRST_REPLY, STOP_REPLY]
        response_users = [i for i in range(traj.prompt_len, len(traj.input_ids)) if traj.role_ids[i] == 1]
        assert response_users and not any(traj.loss_mask[i] for i in response_users)
    client = MlflowClient(f"sqlite:///{tmp_path}/mlflow.db")
    (run,) = client.search_runs([client.get_experiment_by_name("native-llm").experiment_id])
    assert run.data.metrics["rollout.failed_role_calls.tau"] == 2 and run.data.metrics["rollout.aborted"] == 2
