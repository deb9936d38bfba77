"""A HumanLM-format local user (env.local_user_format=humanlm) playing Persuade and Intention: what it sees is
what the recorded training rows hold, its stance label is read from its <stance> block, a checkpoint trained
on user replies is refused as a plain user, and a reply with no text is a failed role call."""

from __future__ import annotations

import asyncio
import json

import pytest

from userrl.actors.policy_replica import PolicyReplica
from userrl.envs import load_tasks, make_env, tool_call_to_action
from userrl.envs.persuade.roles import FALLBACK_REPLY, stance_in_text
from userrl.humanlm.data import SEED, load_rows, seed_of
from userrl.humanlm.user import HumanLMUserClient
from userrl.users import resolve_user_model

CHOICE = {"persuade": "answer", "intention": "action"}


@pytest.mark.parametrize("gym", ["persuade", "intention"])
def test_the_gym_shows_a_humanlm_user_the_recorded_rows_persona_and_conversation(gym):
    """Replaying a recorded test conversation's agent messages: before each reply the gym's HumanLM view is
    the row's persona and context, and the scripted user's reply is the row's ground truth."""
    rows = [r for r in load_rows("test", (gym,))]
    task_id = rows[0].extra["task_id"]
    rows = [r for r in rows if r.extra["task_id"] == task_id]
    task = next(t for t in load_tasks(gym, "test") if t.item_key == task_id)
    env = make_env(gym, task, backend="scripted", seed=seed_of(SEED, gym, task_id), max_steps=8)
    env.reset()
    assert len(rows) >= 2
    for row in rows:
        latest = row.context[-1]["content"]
        persona, context = env.persona_view(latest)
        assert persona == row.persona and context == [dict(m) for m in row.context]
        observation, *_ = env.step(tool_call_to_action(CHOICE[gym], latest))
        assert observation["feedback"] == row.ground_truth


def test_the_stance_label_is_read_from_the_stance_block():
    assert stance_in_text('Partly Agree toward the claim "Cash must go"; moved from Agree') == "Partly Agree"
    assert stance_in_text("now strongly\n disagree") == "Strongly Disagree"  # any case and spacing
    assert stance_in_text("I STRONGLY DISAGREE with it") == "Strongly Disagree"
    assert stance_in_text("I disagree; I used to agree") == "Disagree"
    assert stance_in_text("Agreement is far away") is None and stance_in_text("") is None


def test_a_user_simulator_checkpoint_is_refused_as_a_plain_user(tmp_path, tiny_model):
    checkpoint = tmp_path / "iter_000001"
    (checkpoint / "model").mkdir(parents=True)
    (checkpoint / "model" / "config.json").write_text("{}")
    (checkpoint / "meta.json").write_text(json.dumps({"config": {"env": {"protocol": "user_reply"}}}))
    with pytest.raises(ValueError, match="set env.local_user_format=humanlm"):
        resolve_user_model(str(checkpoint))
    assert resolve_user_model(str(checkpoint), "humanlm") == str((checkpoint / "model").resolve())
    assert resolve_user_model(tiny_model) == tiny_model  # an ordinary model folder, either format


def test_a_reply_without_text_is_a_failed_role_call_and_the_gym_falls_back(tiny_model, tokenizer):
    """A real engine asked for no tokens writes nothing: each attempt fails (sampled, so each is asked), the
    call is counted as failed with its attempts, and the persuadee's fallback reply stands in with the stance
    unchanged."""
    client = HumanLMUserClient([PolicyReplica(tiny_model, num_threads=1)], tokenizer, max_tokens=0, attempts=2,
                               temperature=1.0)
    env = make_env("persuade", load_tasks("persuade", "test")[0], backend="local", llm=client)
    env.reset()
    observation, reward, terminated, _, info = env.step(tool_call_to_action("answer", "Cash is traceable."))
    assert observation["feedback"] == FALLBACK_REPLY and reward == 0.0 and not terminated
    assert info["lm_calls"][0]["ok"] is False and info["lm_calls"][0]["attempts"] == 2
    values, call = asyncio.run(client.complete_user("u", "A person.", [{"role": "user", "content": "Hi"},
                                                                       {"role": "assistant", "content": "Hello"}],
                                                    ("response",)))
    assert values is None and not call.ok
