"""TauEnv (docs/spec/GYMS.md §5): actions, feedback, the τ reward, the scripted and llm customers, spaces."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import userrl.envs.tau  # noqa: F401  (registers userrl/Tau-v0 until the registry imports every gym)
from userrl.envs import Task
from userrl.envs.llm import RoleCall
from userrl.envs.tau import customer as tc
from userrl.envs.tau import env as tenv
from userrl.envs.tau.database import builtin_domain
from userrl.envs.tau.env import TauEnv
from userrl.envs.tau.parsing import INVALID_TOOL_FORMAT
from userrl.envs.tau.tasks import builtin_prompt, load_tau_tasks
from userrl.envs.tau.tools import catalogue_text

BASE = next(t for t in load_tau_tasks("test") if t.data["actions"][-1]["name"] == "cancel_pending_order")
CANCEL = BASE.data["actions"][-1]
ORDER_ID = CANCEL["kwargs"]["order_id"]
USER = builtin_domain().tables["users"][BASE.data["user_id"]]
INSTRUCTION = "Your name is Test Person. You want to cancel your order. You are in a hurry."


def make_task(**overrides: Any) -> Task:
    data = {**BASE.data, "instruction": INSTRUCTION, "outputs": [], **overrides}
    return Task("tau", data["id"], builtin_prompt(data["obs"]), data)


def started(task: Task | None = None, **kwargs: Any) -> TauEnv:
    env = TauEnv(task or make_task(), **kwargs)
    env.reset()
    return env


def step(env: TauEnv, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
    obs, reward, terminated, truncated, info = env.step(action)
    return obs["feedback"], reward, terminated, truncated, info


def tool(name: str, **arguments: Any) -> str:
    return "[answer] " + json.dumps({"name": name, "arguments": arguments})


CANCEL_CALL = tool("cancel_pending_order", **CANCEL["kwargs"])


# ---------------------------------------------------------------- reset, observation and info


def test_reset_observation_and_info() -> None:
    env = TauEnv(make_task())
    obs, info = env.reset()
    assert set(obs) == {"feedback", "instruction", "tools_info", "step_count", "episode_complete"}
    assert obs["instruction"] == INSTRUCTION and obs["tools_info"] == catalogue_text("retail")
    assert BASE.data["obs"] in obs["feedback"] and obs["step_count"] == 0
    assert (
        info["task_id"] == BASE.item_key and info["task_category"] == "retail" and info["tau_reward"] == 0.0
    )
    assert info["end_reason"] is None and info["db_match"] is None
    assert {"raw_action", "action_history", "total_reward", "error", "lm_calls"} <= set(info)


# ---------------------------------------------------------------- search


def test_search_tools_once_then_a_reminder() -> None:
    env = started()
    assert step(env, "[search] TOOLS ")[:4] == (catalogue_text("retail"), 0.0, False, False)
    assert step(env, "[search] tools")[0] == "The tool list was already provided above."


def test_search_help_and_others() -> None:
    env = started()
    help_text = step(env, "[search] help")[0]
    assert help_text == tenv.HELP_TEXT and "`action`" in help_text and "`answer`" in help_text
    for query in ("policy", "", "tool"):
        assert step(env, f"[search] {query}")[0] == "Only 'tools' and 'help' are supported for search."


def test_search_policy_when_exposed() -> None:
    env = started(expose_policy=True)
    assert (
        step(env, "[search] policy")[0] == builtin_domain().policy()
        and "Store policy" in builtin_domain().policy()
    )
    assert step(env, "[search] rules")[0] == "Only 'tools', 'help' and 'policy' are supported for search."


# ---------------------------------------------------------------- answer: tool calls


def test_tool_call_runs_on_the_episode_database() -> None:
    env = started()
    feedback, reward, terminated, _, info = step(env, tool("get_order_details", order_id=ORDER_ID))
    assert json.loads(feedback)["order_id"] == ORDER_ID and (reward, terminated) == (0.0, False)
    assert info["tool_calls"] == 1 and info["tool_errors"] == 0
    feedback = step(env, f"[answer] cancel_pending_order: {json.dumps(CANCEL['kwargs'])}")[0]
    assert json.loads(feedback)["status"] == "cancelled"
    assert env.db.get("orders", ORDER_ID)["status"] == "cancelled"
    assert (
        builtin_domain().tables["orders"][ORDER_ID]["status"] == "pending"
    )  # the pristine copy is untouched


def test_tool_call_errors_and_bad_formats() -> None:
    env = started()
    assert step(env, tool("get_order_details", order_id="#W0"))[0] == "Error: order not found"
    assert step(env, "[answer] get the order please")[0] == INVALID_TOOL_FORMAT
    assert INVALID_TOOL_FORMAT == 'Invalid tool call format. Use {"name": tool_name, "arguments": {...}}.'
    assert step(env, tool("launch_rocket"))[0] == "Unknown action launch_rocket"
    feedback, reward, terminated, _, info = step(env, tool("cancel_pending_order", order_id=ORDER_ID))
    assert feedback.startswith("Error: ") and "reason" in feedback and (reward, terminated) == (0.0, False)
    assert (info["tool_calls"], info["tool_errors"], info["invalid_tool_calls"]) == (2, 2, 2)


def test_transfer_ends_the_episode_and_is_scored() -> None:
    env = started()
    step(env, CANCEL_CALL)
    feedback, reward, terminated, truncated, info = step(
        env, tool("transfer_to_human_agents", summary="done")
    )
    assert (feedback, reward, terminated, truncated) == ("Transfer successful", 1.0, True, False)
    assert info["end_reason"] == "transfer" and info["db_match"] is True and info["tau_reward"] == 1.0
    # A transfer without the gold change is scored too: 0. Even a malformed transfer call ends the episode.
    env = started()
    feedback, reward, terminated, _, info = step(env, tool("transfer_to_human_agents"))
    assert (
        feedback.startswith("Error: ") and (reward, terminated) == (0.0, True) and info["db_match"] is False
    )


def test_gold_transfers_are_skipped_in_the_replay() -> None:
    transfer = {"name": "transfer_to_human_agents", "kwargs": {"summary": "x"}}
    env = started(make_task(actions=[*BASE.data["actions"], transfer]))
    step(env, CANCEL_CALL)
    assert step(env, tool("transfer_to_human_agents", summary="y"))[1] == 1.0


# ---------------------------------------------------------------- action: the scripted customer


def test_customer_stops_when_the_goal_is_reached() -> None:
    env = started()
    assert step(env, "[action] Would you like me to cancel it?")[0] == "Yes, please go ahead."
    step(env, CANCEL_CALL)
    feedback, reward, terminated, truncated, info = step(env, "[action] Your order is cancelled.")
    assert (feedback, reward, terminated, truncated) == (
        "Thank you, that's all I needed. ###STOP###",
        1.0,
        True,
        False,
    )
    assert info["end_reason"] == "stop" and info["db_match"] and info["outputs_match"]
    assert info["agent_hash"] == info["gold_hash"] == env.gold_hash()


def test_required_outputs_must_be_said_by_the_agent() -> None:
    env = started(make_task(outputs=["1093.34", "Visa"]))
    step(env, CANCEL_CALL)
    assert step(env, "[action] Done. The refund is 1093.34.")[2] is False  # "visa" is still missing
    feedback, reward, terminated, _, info = step(env, "[action] Total: $1,093.34 back to your VISA card.")
    assert (reward, terminated, info["missing_outputs"]) == (1.0, True, [])


def test_wrong_state_gives_no_reward_at_stop() -> None:
    env = started()
    for _ in range(10):
        assert step(env, "[action] Anything else?")[2] is False
    feedback, reward, terminated, _, info = step(env, "[action] Anything else?")
    assert (feedback, reward, terminated) == ("I'll stop here. ###STOP###", 0.0, True)
    assert info["db_match"] is False and info["tau_reward"] == 0.0


def test_outputs_alone_fail_when_the_database_differs() -> None:
    env = started(make_task(outputs=["42"]), max_steps=30)
    other = next(r for r in ("no longer needed", "ordered by mistake") if r != CANCEL["kwargs"]["reason"])
    step(env, tool("cancel_pending_order", order_id=ORDER_ID, reason=other))  # not the gold reason
    assert step(env, "[action] the answer is 42")[2] is False


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        ("Can you confirm the cancellation?", "Yes, please go ahead."),
        ("Shall I go ahead? yes or no", "Yes, please go ahead."),
        ("Please confirm your email", "Yes, please go ahead."),  # rule 2 comes before rule 3
        (
            "What is your name and zip code?",
            f"My name is {USER['name']['first_name']} {USER['name']['last_name']}. My zip code is {USER['address']['zip']}.",
        ),
        ("And your EMAIL?", f"My email is {USER['email']}."),
        ("What is your user id?", f"My user id is {BASE.data['user_id']}."),
        ("Which order is it about?", f"My order id is {ORDER_ID}."),
        ("Which reservation?", "Sorry, I don't have that information."),
        ("How are you today?", "My name is Test Person."),
    ],
)
def test_scripted_customer_reply_rules(message: str, expected: str) -> None:
    assert step(started(), f"[action] {message}")[0] == expected


def test_scripted_customer_walks_through_the_instruction() -> None:
    env = started()
    replies = [step(env, "[action] Hello!")[0] for _ in range(4)]
    assert replies == [
        "My name is Test Person.",
        "I want to cancel my order.",
        "I am in a hurry.",
        "I don't have anything else to add.",
    ]


@pytest.mark.parametrize(
    ("sentence", "expected"),
    [
        ("You are Yusuf Rossi in 19122.", "I am Yusuf Rossi in 19122."),
        (
            "Your name is Omar and you want a refund for yourself.",
            "My name is Omar and I want a refund for myself.",
        ),
        (
            "you're logical; you've ordered twice; you'd like it",
            "I'm logical; I've ordered twice; I'd like it",
        ),
        ("YOUR order, your call", "My order, my call"),
        ("Young yourselves", "Young yourselves"),
    ],
)
def test_to_first_person(sentence: str, expected: str) -> None:
    assert tc.to_first_person(sentence) == expected


def test_instruction_sentences_and_facts() -> None:
    assert tc.instruction_sentences("A b. C d.  E! ") == ["A b.", "C d.", "E!"]
    actions = [
        {
            "name": "book_reservation",
            "kwargs": {"payment_methods": [{"payment_id": "gift_card_1"}, {"payment_id": "cc_2"}]},
        },
        {
            "name": "update_reservation_baggages",
            "kwargs": {"reservation_id": "ABC123", "payment_id": "gift_card_1"},
        },
        {"name": "cancel_reservation", "kwargs": {"reservation_id": "XYZ999"}},
    ]
    facts = tc.CustomerFacts.from_task("mia", None, actions)
    assert facts.payment_ids == ("gift_card_1", "cc_2") and facts.reservation_ids == ("ABC123", "XYZ999")
    customer = tc.ScriptedCustomer("Hi.", facts)
    assert customer.reply("your reservation and payment method?", False) == (
        "My reservation ids are ABC123 and XYZ999. My payment method ids are gift_card_1 and cc_2."
    )
    assert customer.reply("What is your name?", False) == "Sorry, I don't have that information."


# ---------------------------------------------------------------- finish, invalid choices, limits


def test_finish_ends_without_reward() -> None:
    env = started()
    step(env, CANCEL_CALL)
    feedback, reward, terminated, truncated, info = step(env, "[finish]")
    assert (feedback, reward, terminated, truncated) == ("Episode finished.", 0.0, True, False)
    assert info["end_reason"] == "finish" and info["tau_reward"] == 0.0


@pytest.mark.parametrize("action", ["hello", "[Answer] {}", "[answer", ""])
def test_invalid_choice(action: str) -> None:
    assert step(started(), action)[:3] == (
        "Invalid action. Allowed choices: search, action, answer.",
        0.0,
        False,
    )


def test_truncation_gives_no_reward_even_in_the_gold_state() -> None:
    env = started(max_steps=2)
    step(env, CANCEL_CALL)
    feedback, reward, terminated, truncated, info = step(env, "[search] help")
    assert (reward, terminated, truncated) == (0.0, False, True) and info["tau_reward"] == 0.0
    assert step(env, "[action] hi")[:3] == ("The episode has already ended.", 0.0, True)


def test_reward_scale_applies() -> None:
    env = started(reward_scale=2.0)
    step(env, CANCEL_CALL)
    assert step(env, "[action] done")[1] == 2.0


def test_episodes_start_from_a_fresh_database() -> None:
    env = started()
    step(env, CANCEL_CALL)
    assert env.db.touched_records >= 1  # the order, plus the user when a gift card is refunded
    env.reset()
    assert env.db.touched_records == 0 and env.db.state_hash() == builtin_domain().fresh_hash()
    env.close()
    assert env.db is None


# ---------------------------------------------------------------- the llm customer (fake client)


class FakeCustomerClient:
    """A RoleClient double of the customer model: canned free-text replies, None = every attempt failed."""

    def __init__(self, replies: list[str | None]) -> None:
        self.replies = list(replies)
        self.calls: list[dict[str, Any]] = []

    async def complete_text(
        self,
        role: str,
        system: str,
        user: Any,
        *,
        max_tokens: int | None = None,
        temperature: float | None = None,
    ) -> tuple[str | None, RoleCall]:
        self.calls.append({"role": role, "system": system, "user": user, "temperature": temperature})
        reply = self.replies.pop(0)
        return reply, RoleCall(role, 1 if reply is not None else 3, reply is not None, 0.01)

    async def complete_json(self, *args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the customer role is free text")


def test_llm_customer_prompt_and_reply() -> None:
    client = FakeCustomerClient(["<think>they want a refund</think>  I'd like to cancel it, please. "])
    env = started(backend="openai", llm=client, user_temperature=0.7)
    feedback, reward, terminated, _, info = step(env, "[action] Hello, what can I do for you?")
    assert (feedback, reward, terminated) == ("I'd like to cancel it, please.", 0.0, False)
    call = client.calls[0]
    assert call["role"] == "customer" and call["temperature"] == 0.7
    assert call["system"] == tc.CUSTOMER_SYSTEM_PROMPT.format(instruction=INSTRUCTION)
    assert "###STOP###" in call["system"] and INSTRUCTION in call["system"]
    # The role-flipped chat of GYMS §5: the agent speaks as `user`, the customer's own words are `assistant`.
    assert call["user"] == [
        {"role": "user", "content": "Hi! How can I help you today?"},
        {"role": "assistant", "content": BASE.data["obs"]},
        {"role": "user", "content": "Hello, what can I do for you?"},
    ]
    assert info["lm_calls"] == [{"role": "customer", "attempts": 1, "ok": True, "latency_s": 0.01}]


def test_llm_customer_sees_only_messages_not_tool_traffic() -> None:
    client = FakeCustomerClient(["First.", "Second."])
    env = started(backend="openai", llm=client)
    step(env, "[action] one")
    step(env, tool("get_order_details", order_id=ORDER_ID))
    step(env, "[action] two")
    conversation = client.calls[1]["user"]
    assert [m["content"] for m in conversation[2:]] == ["one", "First.", "two"]
    assert [m["role"] for m in conversation[2:]] == ["user", "assistant", "user"]
    assert "get_order_details" not in str(conversation)


@pytest.mark.parametrize("reply", [None, "", "   ", "<think>only thoughts</think>"])
def test_llm_customer_fallback(reply: str | None) -> None:
    env = started(backend="openai", llm=FakeCustomerClient([reply]))
    feedback, reward, terminated, _, info = step(env, "[action] hi")
    assert (feedback, reward, terminated) == ("Sorry, could you say that again?", 0.0, False)
    assert len(info["lm_calls"]) == 1


def test_llm_customer_stop_is_scored() -> None:
    env = started(backend="openai", llm=FakeCustomerClient(["Great, thanks! ###STOP###"]))
    step(env, CANCEL_CALL)
    feedback, reward, terminated, _, info = step(env, "[action] It is cancelled.")
    assert (feedback, reward, terminated, info["end_reason"]) == (
        "Great, thanks! ###STOP###",
        1.0,
        True,
        "stop",
    )
    env = started(backend="openai", llm=FakeCustomerClient(["###STOP###"]))
    assert step(env, "[action] bye")[1:3] == (0.0, True)


# ---------------------------------------------------------------- configuration and task validation


def test_configuration_errors() -> None:
    with pytest.raises(TypeError):
        TauEnv(make_task(), user_temp=0.5)


@pytest.mark.parametrize(
    ("overrides", "match"),
    [
        ({"domain": "telecom"}, "domain"),
        ({"actions": [{"name": "fly", "kwargs": {}}]}, "tools it does not offer"),
        ({"actions": [{"kwargs": {}}]}, "malformed action"),
        ({"outputs": [1]}, "outputs"),
        ({"instruction": None}, "instruction"),
        ({"database": "tau-bench", "tau_data_root": None}, "needs the τ-bench retail database"),
    ],
)
def test_bad_task_data_is_refused(overrides: dict[str, Any], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        TauEnv(make_task(**overrides))


def test_missing_tau_bench_folder_is_reported(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="tau_data_root must point at the τ-bench data folder"):
        TauEnv(make_task(database="tau-bench", tau_data_root=str(tmp_path)))


def test_a_task_whose_gold_hash_its_actions_do_not_reach_is_refused_at_scoring() -> None:
    assert started(make_task()).gold_hash() == BASE.data["gold_hash"]  # the shipped hash, checked
    env = started(make_task(gold_hash="0" * 64))
    with pytest.raises(ValueError, match="gold_hash is not the state its gold actions reach"):
        env.goal_reached()
