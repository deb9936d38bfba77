"""Reliability scenario 3 (issue 15): the simulated user's OpenAI-compatible endpoint (our own loopback
server) fails 30 % of calls with 500s and timeouts for 3 training iterations. Training goes on; failed role
calls and aborted episodes are counted per gym in each iteration's metrics; every episode whose oracle call
failed is aborted and left out of the update and the means, never scored 0.

The policy must actually ask the oracle, which a random model does not: the test first teaches a copy of
tiny-random (plain torch, on contexts rendered as the rollout renders them) to write one question.
"""

from __future__ import annotations

import asyncio
import json

from aiohttp import web
from chat_server import LoopbackChatServer
from teach import teach_reply
from transformers import AutoTokenizer

from userrl.chat import ChatFormat
from userrl.envs import load_tasks
from userrl.trainer import TrainerConfig

QUESTION = "[action] Did the man die?"
ITERATIONS = 3


class FlakyOracle(LoopbackChatServer):
    """Answers the Turtle oracle's JSON; of every 10 calls, 2 get a 500 and 1 is held past the client's
    timeout (30 %), deterministically by arrival order."""

    cancel_abandoned = True

    def __init__(self, hold_s: float):
        self.calls = 0
        self.hold_s = hold_s
        super().__init__()

    async def handle(self, request: web.Request) -> web.StreamResponse:
        await request.json()
        self.calls += 1
        slot = self.calls % 10
        if slot in (3, 7):
            return web.json_response({"error": {"message": "scripted failure", "type": "server_error"}}, status=500)
        if slot == 5:
            await asyncio.sleep(self.hold_s)
        content = json.dumps({"thought": "the story says so", "response": "No"})
        return web.json_response({
            "id": f"c{self.calls}", "object": "chat.completion", "created": 0, "model": "oracle",
            "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": content}}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}})


def _teach_question(tiny_model: str, out: str) -> None:
    """A copy of tiny-random that answers every Turtle prompt with QUESTION (about 100 Adam steps)."""
    chat = ChatFormat(AutoTokenizer.from_pretrained(tiny_model), "bracket")
    answer = chat.tokenizer.encode(QUESTION, add_special_tokens=False) + [chat.stop_token_ids[0]]
    prompts = [[i for ids, _ in chat.encode_prompt(chat.initial_messages(task.prompt)) for i in ids]
               for task in load_tasks("turtle", split="train")[:8]]
    teach_reply(tiny_model, out, prompts, answer)


def test_training_goes_on_through_a_flaky_user_endpoint(ray_local, tiny_model, tmp_path, monkeypatch):
    model_dir = str(tmp_path / "asker")
    _teach_question(tiny_model, model_dir)
    server = FlakyOracle(hold_s=3.0)
    server.start()
    monkeypatch.setenv("OPENAI_API_KEY", "local")
    try:
        algo = (TrainerConfig()
                .experiment(name="flaky", seed=0, output_dir=str(tmp_path))
                .environment(gyms=[{"name": "turtle"}], protocol="bracket", max_turns=2, max_steps=2,
                             backend="openai",
                             llm={"base_url": server.base_url, "model": "oracle", "attempts": 1, "timeout_s": 1.0})
                .policy(model=model_dir, max_new_tokens=12, max_model_len=1024, temperature=0.0, num_threads=1)
                .env_runners(num_env_runners=2)
                .training(iterations=ITERATIONS, batch_size=4, group_size=3, lr=1e-5, micro_batch_tokens=2048)
                .learners(num_learners=0)
                .checkpointing(every=0)
                .tracking(experiment="flaky", mlflow_uri=f"sqlite:///{tmp_path}/mlflow.db")
                .build_trainer())
        try:
            results = algo.fit()
        finally:
            algo.stop()
    finally:
        server.stop()

    for r in results:  # the figures of bench/README.md (pytest -s shows them)
        print(f"iteration {r['iteration']}: role calls {r['rollout/role_calls/turtle']:.0f}, failed "
              f"{r['rollout/failed_role_calls/turtle']:.0f}, aborted episodes {r['rollout/aborted/turtle']:.0f} "
              f"of {r['rollout/episodes']:.0f}")
    assert [r["iteration"] for r in results] == list(range(1, ITERATIONS + 1))  # training went on
    calls = sum(r["rollout/role_calls/turtle"] for r in results)
    failed = sum(r["rollout/failed_role_calls/turtle"] for r in results)
    assert calls >= 12 * ITERATIONS // 2, calls  # the taught policy asks the oracle in most episodes
    assert failed >= 1, "the flaky endpoint failed no call"
    assert 0.1 <= failed / calls <= 0.5  # about 30 % of the server's calls failed
    for r in results:
        # attempts=1 and role_failure=abort: each failed call aborted its episode at that step.
        assert r["rollout/aborted/turtle"] == r["rollout/failed_role_calls/turtle"]
        assert r["rollout/aborted"] == r["rollout/aborted/turtle"]
        assert r["rollout/episodes"] == 12
