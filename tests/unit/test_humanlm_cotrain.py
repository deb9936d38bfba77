"""Co-training rows: an agent's saved Intention conversations replayed against the scripted user."""

import json

from userrl.envs import load_tasks, make_env
from userrl.envs.intention.scripted import DETAIL_REPLY, NOT_SURE_REPLY
from userrl.humanlm.cotrain import agent_rows, main
from userrl.humanlm.data import SEED, load_rows, seed_of
from userrl.trajectory import Trajectory, TurnRecord, write_parquet


def _conversation(uid, item_key, moves, env_name="intention"):
    turns = [TurnRecord(executed=True, choice=choice, content=content) for choice, content in moves]
    return Trajectory(uid=uid, group_id="g", env_name=env_name, item_key=item_key, turns=turns)


def test_the_agents_questions_get_the_scripted_users_answers(tmp_path):
    task = load_tasks("intention", "train")[0]
    first, second = task.data["missing_details"][:2]
    question = first["inquiry"]
    moves = [("action", question), ("action", "What is your favourite colour, and why do you like it?"),
             ("action", second["inquiry"]), ("finish", ""), ("action", "never played: the agent had finished")]
    rows, counts = agent_rows([_conversation("a7", task.item_key, moves),
                               _conversation("b1", "no-such-task", moves),
                               _conversation("c2", "x", moves, env_name="persuade")])
    assert counts == {"conversations": 1, "left out: not a train task": 1, "left out: another gym": 1}
    # The oracle: the scripted user's hidden picks, drawn at reset from the conversation's seed.
    env = make_env("intention", backend="scripted", max_steps=5, seed=seed_of(SEED, "intention", f"{task.item_key}:a7"))
    env.reset(options={"task": task})
    picks = env._option_picks
    option = first["options"][picks[0]].strip()
    assert [r.ground_truth for r in rows] == [
        DETAIL_REPLY.format(description=first["description"].strip().lower(), option=option), NOT_SURE_REPLY,
        DETAIL_REPLY.format(description=second["description"].strip().lower(),
                            option=second["options"][picks[1]].strip())]
    assert rows[0].latent_states["stance"] == f"prefers {option} for {first['description'].lower()}"
    assert rows[1].latent_states["goal"] == "steer the assistant back to my request"
    # each row's context ends with the agent's own message, after the earlier exchanges
    assert rows[0].context[-1] == {"role": "assistant", "content": question}
    assert [m["content"] for m in rows[2].context[1:]] == [question, rows[0].ground_truth, moves[1][1],
                                                           NOT_SURE_REPLY, second["inquiry"]]
    assert {r.target_id for r in rows} == {f"intention:{task.item_key}:a7:{turn}" for turn in (1, 2, 3)}
    assert rows[0].data_source == "userrl_intention_agent" and rows[0].extra["source"] == "agent"


def test_rows_file_holds_the_shipped_rows_then_the_agents(tmp_path):
    task = load_tasks("intention", "train")[1]
    artifacts = tmp_path / "artifacts"
    moves = [("action", task.data["missing_details"][0]["inquiry"])]
    write_parquet([_conversation("u1", task.item_key, moves), _conversation("u2", task.item_key, [])],
                  artifacts / "samples_iter_000001.parquet")
    out = tmp_path / "rows.jsonl"
    assert main(["--samples", str(artifacts), "--out", str(out)]) == 0
    records = [json.loads(line) for line in out.read_text().splitlines()]
    shipped = load_rows("train", gyms=["intention"])
    assert len(records) == len(shipped) + 1
    assert [r["extra_info"]["target_id"] for r in records[:len(shipped)]] == [r.target_id for r in shipped]
    assert records[-1]["extra_info"]["target_id"] == f"intention:{task.item_key}:u1:1"
