"""Tau task data: the shipped retail database and tasks, their generator, the solver, and the loaders."""

from __future__ import annotations

import gc
import json
import random
import tracemalloc
import warnings
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pytest

import userrl.envs.tau  # noqa: F401  (registers the tau gym until the registry imports every gym)
from userrl.envs import load_tasks, make_env, solve_episode
from userrl.envs.solving import UngroundedTask
from userrl.envs.tau.database import BUILTIN_RETAIL_DB, EpisodeDB, builtin_domain
from userrl.envs.tau.generate import GENERATOR_SEED, generate, main, render_database, render_tasks
from userrl.envs.tau.tasks import (
    BUILTIN_TASKS_PATH,
    TAU_SYSTEM_PROMPT,
    TAU_USER_TEMPLATE,
    load_tau_tasks,
)
from userrl.envs.tau.tools import ERROR_PREFIX, domain_tools, replay_actions


def shipped_tasks() -> list[dict[str, Any]]:
    return json.loads(BUILTIN_TASKS_PATH.read_text(encoding="utf-8"))["tasks"]


def shipped_db() -> dict[str, Any]:
    return json.loads(BUILTIN_RETAIL_DB.read_text(encoding="utf-8"))


# ---------------------------------------------------------------- the shipped database


def test_shipped_files_are_small_and_regenerate_identically() -> None:
    assert BUILTIN_RETAIL_DB.stat().st_size < 1_000_000 and BUILTIN_TASKS_PATH.stat().st_size < 1_000_000
    db, records = generate(GENERATOR_SEED)
    assert render_database(db) == BUILTIN_RETAIL_DB.read_text(encoding="utf-8")
    assert render_tasks(records, GENERATOR_SEED) == BUILTIN_TASKS_PATH.read_text(encoding="utf-8")
    assert main(["--check"]) == 0


def test_shipped_database_follows_the_retail_schema() -> None:
    db = shipped_db()
    assert list(db) == ["orders", "products", "users"]
    users, orders, products = db["users"], db["orders"], db["products"]
    assert len(users) == 100 and len(products) >= 20 and len(orders) >= 200
    assert len({u["email"] for u in users.values()}) == len(users)
    assert len(
        {(u["name"]["first_name"], u["name"]["last_name"], u["address"]["zip"]) for u in users.values()}
    ) == len(users)
    item_ids = [vid for p in products.values() for vid in p["variants"]]
    assert len(set(item_ids)) == len(item_ids) and not set(item_ids) & set(products)
    for user_id, user in users.items():
        assert list(user) == ["name", "address", "email", "payment_methods", "orders"]
        assert list(user["address"]) == ["address1", "address2", "city", "country", "state", "zip"]
        for method_id, method in user["payment_methods"].items():
            assert method["id"] == method_id and method_id.startswith(method["source"])
            assert isinstance(method.get("balance", 0), int)
        assert all(orders[o]["user_id"] == user_id for o in user["orders"])
    for order_id, order in orders.items():
        assert list(order) == [
            "order_id",
            "user_id",
            "address",
            "items",
            "fulfillments",
            "status",
            "payment_history",
        ]
        assert order["order_id"] == order_id and order_id.startswith("#W")
        for item in order["items"]:
            variant = products[item["product_id"]]["variants"][item["item_id"]]
            assert item["price"] == variant["price"] and item["options"] == variant["options"]
            assert isinstance(item["price"], float)
        assert order["payment_history"][0]["amount"] == round(sum(i["price"] for i in order["items"]), 2)
        assert (order["status"] == "pending") == (order["fulfillments"] == [])
        assert len(order["payment_history"]) == (2 if order["status"] == "cancelled" else 1)
    assert set(Counter(o["status"] for o in orders.values())) == {
        "pending",
        "processed",
        "delivered",
        "cancelled",
    }


# ---------------------------------------------------------------- the shipped tasks


def test_shipped_task_counts_splits_and_ids() -> None:
    tasks = shipped_tasks()
    assert len(tasks) >= 50 and len({t["id"] for t in tasks}) == len(tasks)
    splits = Counter(t["split"] for t in tasks)
    assert splits["test"] >= 12 and splits["train"] >= 40 and set(splits) == {"train", "test"}
    kinds = Counter(t["kind"] for t in tasks)
    assert len(kinds) >= 8 and all(any(t["kind"] == k and t["split"] == "test" for t in tasks) for k in kinds)
    assert sum(bool(t["outputs"]) for t in tasks) >= 10
    assert all(t["id"].startswith("tau-retail-") and t["domain"] == "retail" for t in tasks)
    # No two tasks are the same request.
    assert len({json.dumps(t["actions"], sort_keys=True) for t in tasks}) == len(tasks)


def test_shipped_gold_actions_succeed_and_change_the_database() -> None:
    tools = domain_tools("retail")
    for task in shipped_tasks():
        db = EpisodeDB(builtin_domain())
        assert not [o for o in replay_actions(db, task["actions"]) if o.startswith(ERROR_PREFIX)], task["id"]
        writes = any(tools[a["name"]].writes for a in task["actions"])
        assert (db.state_hash() != builtin_domain().fresh_hash()) == writes, task["id"]
        assert task["actions"][0]["name"] in ("find_user_id_by_email", "find_user_id_by_name_zip")
        assert task["user_id"] in builtin_domain().tables["users"]
        assert ". " in task["instruction"] and task["instruction"].startswith("Your ")


def test_generation_is_seeded() -> None:
    db_a, tasks_a = generate(7)
    db_b, tasks_b = generate(7)
    assert db_a == db_b and tasks_a == tasks_b
    assert generate(8)[1] != tasks_a


# ---------------------------------------------------------------- loaders (builtin)


def test_builtin_loader() -> None:
    train, test = load_tau_tasks("train"), load_tau_tasks("test")
    assert len(train) + len(test) == len(shipped_tasks())
    assert {t.split for t in train} == {"train"} and {t.split for t in test} == {"test"}
    assert not {t.item_key for t in train} & {t.item_key for t in test}
    task = test[0]
    assert task.gym == "tau" and task.source == "builtin" and task.data["database"] == "builtin"
    assert task.prompt == [
        {"role": "system", "content": TAU_SYSTEM_PROMPT},
        {"role": "user", "content": TAU_USER_TEMPLATE.format(obs=task.data["obs"])},
    ]
    assert task.prompt[1]["content"].startswith("Here is my request: ")
    assert load_tau_tasks("test", domain="airline") == [] and load_tau_tasks("test", domain="retail") == test
    assert [t.item_key for t in load_tasks("tau", "test")] == [t.item_key for t in test]


def test_builtin_loader_errors() -> None:
    with pytest.raises(ValueError, match="splits"):
        load_tau_tasks("alltest")
    with pytest.raises(ValueError, match="source"):
        load_tau_tasks(source="hf")
    with pytest.raises(ValueError, match="data_root"):
        load_tau_tasks(source="userrl")
    with pytest.raises(ValueError, match="unknown tau domain"):
        load_tau_tasks(domain="telecom")


def test_system_prompt_is_short_and_protocol_free() -> None:
    assert len(TAU_SYSTEM_PROMPT.split()) < 150
    for word in ("search", "action", "answer", "tools", "help"):
        assert word in TAU_SYSTEM_PROMPT
    for protocol_word in ("[action]", "[answer]", "interact_with_env"):
        assert protocol_word not in TAU_SYSTEM_PROMPT


# ---------------------------------------------------------------- solver


def test_solver_solves_every_builtin_task() -> None:
    env = make_env("tau")
    for task in load_tau_tasks("test") + load_tau_tasks("train"):
        steps = solve_episode(env, task, np.random.default_rng(0))
        assert steps[-1][3] == 1.0 and steps[-1][2].endswith("###STOP###"), (task.item_key, steps[-3:])
        assert sum(s[3] for s in steps) == 1.0 and len(steps) <= 16
        assert steps[0][:2] == ("search", "tools")  # the tool names come from the catalogue
        calls = [json.loads(content) for choice, content, _, _ in steps if choice == "answer"]
        writes = [a for a in task.data["actions"] if domain_tools("retail")[a["name"]].writes]
        made = [{"name": c["name"], "kwargs": c["arguments"]} for c in calls if domain_tools("retail")[c["name"]].writes]
        assert made == writes, task.item_key


def _first_write(steps: list[tuple[str, str, str, float]]) -> int:
    return next(
        i
        for i, (c, content, _, _) in enumerate(steps)
        if c == "answer" and domain_tools("retail")[json.loads(content)["name"]].writes
    )


def test_solver_plan_shape_and_determinism() -> None:
    task = next(t for t in load_tau_tasks("test") if t.data["outputs"])
    env = make_env("tau")
    plans = [solve_episode(env, task, np.random.default_rng(3)) for _ in range(2)]
    assert plans[0] == plans[1]
    steps = plans[0]
    first_write = _first_write(steps)
    assert "proceed" in steps[first_write - 1][1]  # a confirmation right before the first change
    # The customer is heard out before anything changes, and the closing tells what was asked for.
    told = [fb for c, _, fb, _ in steps[:first_write] if c == "action"]
    assert len(told) >= len(task.data["instruction"].split(". "))
    assert all(o in steps[-1][1] for o in task.data["outputs"])
    variants = {tuple(s[1] for s in solve_episode(env, task, np.random.default_rng(s))) for s in range(10)}
    assert len(variants) > 1  # the rng varies the phrasing


def test_solver_never_demonstrates_a_failure_whatever_the_step_budget() -> None:
    # Fewer steps trim the optional moves; too few leave no grounded demonstration (UngroundedTask),
    # never a truncated or failed one.
    task = next(t for t in load_tau_tasks("train") if "items" in t.item_key)
    outcomes = []
    for max_steps in range(16, 3, -1):
        try:
            steps = solve_episode(make_env("tau", max_steps=max_steps), task, np.random.default_rng(0))
        except UngroundedTask:
            outcomes.append(None)
            continue
        assert steps[-1][3] == 1.0 and len(steps) <= max_steps, max_steps
        outcomes.append(len(steps))
    assert outcomes[0] is not None and outcomes[-1] is None
    assert outcomes.index(None) > 1 and all(o is None for o in outcomes[outcomes.index(None) :])


def test_memory_stays_bounded_over_many_episodes() -> None:
    env, tasks = make_env("tau"), load_tau_tasks("test")[:8]
    # Count only memory allocated by the Tau gym's own code (event loops and JSON internals are not ours).
    ours = [tracemalloc.Filter(True, str(Path(userrl.envs.tau.__file__).parent / "*"))]

    def run_all() -> None:
        for task in tasks:
            solve_episode(env, task, np.random.default_rng(0))

    run_all()  # fills the per-process caches (gold hashes, tool catalogue)
    tracemalloc.start()
    try:
        run_all()
        gc.collect()
        before = tracemalloc.take_snapshot().filter_traces(ours)
        for _ in range(3):
            run_all()
        gc.collect()
        after = tracemalloc.take_snapshot().filter_traces(ours)
    finally:
        tracemalloc.stop()
    grown = sum(stat.size_diff for stat in after.compare_to(before, "filename"))
    assert grown < 10_000, grown  # 24 more episodes keep nothing behind
    assert env.db.touched_records <= 3 and len(env.dialogue) <= 2 * 16 + 2


def test_solver_touches_no_global_rng() -> None:
    random.seed(7)
    np.random.seed(7)
    py_state, np_state = random.getstate(), np.random.get_state()[1].copy()
    solve_episode(make_env("tau"), load_tau_tasks("test")[3], np.random.default_rng(1))
    assert random.getstate() == py_state and np.array_equal(np.random.get_state()[1], np_state)


# ---------------------------------------------------------------- loaders (userrl): fake folders


def _fake_item(task: dict[str, Any], item_id: str) -> dict[str, Any]:
    return {
        "id": item_id,
        "obs": task["obs"],
        "info": {
            "task": {k: task[k] for k in ("user_id", "actions", "instruction", "outputs")},
            "source": "user",
            "user_cost": None,
            "reward_info": None,
        },
    }


def _fake_root(tmp_path: Path, ids: list[str], with_tau_bench: bool = True) -> Path:
    """A UserRL folder whose tau items are builtin tasks, and a τ-bench folder holding our database."""
    root = tmp_path / "userrl-data"
    data = root / "gyms/TauGym/taugym/data"
    data.mkdir(parents=True)
    task = shipped_tasks()[0]
    (data / "tau_train.json").write_text(json.dumps([_fake_item(task, "retail-train-000")]), encoding="utf-8")
    (data / "tau_test.json").write_text(json.dumps([_fake_item(task, "retail-000")]), encoding="utf-8")
    rows = [
        {
            "data_source": "interact_taugym",
            "prompt": [
                {"content": "sys", "role": "system"},
                {"content": "Here is my request: hi", "role": "user"},
            ],
            "extra_info": {
                "split": "train",
                "index": i,
                "tools_kwargs": {
                    "interact_with_env": {"create_kwargs": {"env_name": "TauGym", "id": item_id}}
                },
            },
        }
        for i, item_id in enumerate(ids)
    ]
    parquet = root / "data/tau_multiturn/train.parquet"
    parquet.parent.mkdir(parents=True)
    pl.DataFrame(rows).write_parquet(parquet)
    if with_tau_bench:
        retail = tmp_path / "tau-bench-data" / "retail"
        retail.mkdir(parents=True)
        for name, table in shipped_db().items():
            (retail / f"{name}.json").write_text(json.dumps(table), encoding="utf-8")
    return root


def test_userrl_loader_on_a_fake_folder_finds_tau_bench_beside_data_root(tmp_path: Path) -> None:
    root = _fake_root(tmp_path, ["retail-train-000"])
    (task,) = load_tasks("tau", "train", source="userrl", data_root=root)
    assert task.item_key == "retail-train-000" and task.source == "userrl"
    assert task.prompt == [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "Here is my request: hi"},
    ]
    assert task.data["database"] == "tau-bench" and task.data["domain"] == "retail"
    assert task.data["tau_data_root"] == str((tmp_path / "tau-bench-data").resolve())
    steps = solve_episode(make_env("tau"), task, np.random.default_rng(0))
    assert steps[-1][3] == 1.0


def test_userrl_loader_skips_rows_without_tau_bench_data(tmp_path: Path) -> None:
    root = _fake_root(tmp_path, ["retail-train-000"], with_tau_bench=False)
    with pytest.warns(
        RuntimeWarning, match=r"1 tau rows of .*train\.parquet skipped: the τ-bench domain data"
    ):
        assert load_tau_tasks("train", "userrl", root) == []
    with pytest.raises(FileNotFoundError, match="skipped"):
        load_tau_tasks("train", "userrl", root, strict=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert load_tau_tasks("train", "userrl", root, domain="airline") == []


def test_userrl_loader_errors(tmp_path: Path) -> None:
    root = _fake_root(tmp_path, ["retail-train-000", "retail-train-999"])
    with pytest.raises(ValueError, match=r"train\.parquet: row 1 has tau id 'retail-train-999'"):
        load_tau_tasks("train", "userrl", root)
    with pytest.raises(FileNotFoundError, match=r"test\.parquet not found"):
        load_tau_tasks("test", "userrl", root)
    with pytest.raises(
        FileNotFoundError, match=r"tau_train\.json not found: data_root must point at a UserRL"
    ):
        load_tau_tasks("train", "userrl", tmp_path / "nowhere")
    with pytest.raises(ValueError, match="splits"):
        load_tau_tasks("validation", "userrl", root)
    (root / "gyms/TauGym/taugym/data/tau_test.json").write_text("[{oops", encoding="utf-8")
    with pytest.raises(ValueError, match=r"tau_test\.json: not valid JSON"):
        load_tau_tasks("train", "userrl", root)


# ---------------------------------------------------------------- gold hashes and the easy tier


def test_every_builtin_task_replays_to_its_gold_hash() -> None:
    """Each shipped task carries its gold end state's hash: replaying its gold actions on a fresh copy of the
    database reaches it (the reference hash procedure, not the cached fast path), and tasks differ in it."""
    from userrl.envs.tau.hashing import state_hash

    tasks = shipped_tasks()
    for task in tasks:
        db = EpisodeDB(builtin_domain())
        replay_actions(db, task["actions"])
        assert db.state_hash() == task["gold_hash"], task["id"]
    for task in tasks[:: len(tasks) // 4]:  # the fast path against the reference procedure on a few
        db = EpisodeDB(builtin_domain())
        replay_actions(db, task["actions"])
        assert state_hash(db.to_dict()) == task["gold_hash"], task["id"]
    assert len({t["gold_hash"] for t in tasks if t["kind"] != "info"}) == sum(t["kind"] != "info" for t in tasks)


def test_easy_tier_is_one_or_two_look_ups_and_one_change_with_its_tools_named() -> None:
    from userrl.envs.tau.generate_tasks import EASY_TOOLS

    tools = domain_tools("retail")
    easy = [t for t in shipped_tasks() if t["difficulty"] == 0]
    splits = Counter(t["split"] for t in easy)
    assert splits["test"] >= 20 and splits["train"] >= 48
    assert {t["kind"] for t in easy if t["split"] == "test"} == {t["kind"] for t in easy} == {"cancel", "user_address"}
    for task in easy:
        assert task["id"].startswith("tau-retail-easy-") and task["domain"] == "retail", task["id"]
        assert task["tools"] == list(EASY_TOOLS) and {a["name"] for a in task["actions"]} <= set(EASY_TOOLS)
        reads = [a for a in task["actions"] if not tools[a["name"]].writes]
        assert 1 <= len(reads) <= 2 and len(task["actions"]) - len(reads) == 1, task["id"]
        assert task["actions"][0]["name"] == "find_user_id_by_email" and not task["outputs"]
    full = [t for t in shipped_tasks() if t["difficulty"] == 1]
    assert len(full) == 80 and all("tools" not in t for t in full)  # every retail tool, as before the tier


def test_loader_keeps_the_levels_asked_for() -> None:
    easy, full = load_tau_tasks("train", difficulty=[0]), load_tau_tasks("train", difficulty=1)
    assert {t.difficulty for t in easy} == {0} and {t.difficulty for t in full} == {1}
    assert len(easy) + len(full) == len(load_tau_tasks("train"))
    assert all(t.data["tools"] for t in easy) and not any(t.data["tools"] for t in full)
    with pytest.raises(ValueError, match="unknown tau difficulty levels"):
        load_tau_tasks("train", difficulty=[2])
