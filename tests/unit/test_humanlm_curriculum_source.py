"""The sequential mode's task source (docs/spec/ALGORITHMS.md §5.2 "Optional curriculum") without Ray: what
each step draws, how scored samples promote rows after the refresh step, the map's round trip through a
checkpoint folder, the fixed mixture left as it was for every other gym, and the config's refusals."""

from __future__ import annotations

import json

import pytest

from userrl.actors.env_runner import EpisodeSpec
from userrl.config import ConfigError, parse_config
from userrl.coordinator import (
    TASK_SOURCE_FILE,
    TaskMixture,
    make_task_source,
    restore_task_source,
    task_source_documents,
)
from userrl.humanlm.data import render_jsonl
from userrl.humanlm.row import Row
from userrl.humanlm.trainer_config import merge_defaults
from userrl.rollout import new_trajectory
from userrl.trajectory import TurnRecord


def _row(i: int) -> Row:
    return Row(prompt=({"role": "system", "content": f"persona {i}"}, {"role": "user", "content": f"post number {i}"}),
               ground_truth=f"real reply {i}", persona=f"persona {i}", target_id=f"t{i}", data_source="test")


def _config(tmp_path, rows: int = 4, batch_size: int = 2, **humanlm):
    path = tmp_path / f"train{rows}.jsonl"
    path.write_text(render_jsonl(_row(i) for i in range(rows)))
    section = {"mode": "sequential", "curriculum": True, "data_files": {"train": str(path)}, **humanlm}
    return parse_config(merge_defaults({"humanlm": section, "policy": {"model": "tiny-random"},
                                        "training": {"batch_size": batch_size, "group_size": 2}}))


def _scored(tasks, replies: dict[str, tuple[str, float]], iteration: int):
    """Specs and played trajectories of `tasks` (2 samples each): the sample replies[target_id] first, then a
    0-reward empty reply; an aborted sample for target 'abort'."""
    specs, trajs = [], []
    for g, task in enumerate(tasks):
        text, reward = replies.get(task.data["row"]["extra_info"]["target_id"], ("", 0.0))
        for s, (t, r) in enumerate(((text, reward), ("", 0.0))):
            spec = EpisodeSpec(task, f"it{iteration}-g{g}-s{s}", f"it{iteration}-g{g}")
            traj = new_trajectory(task, spec.uid, spec.group_id)
            traj.messages = [*task.data["messages"], {"role": "assistant", "content": t}]
            traj.turns = [TurnRecord(reward=r, executed=True)]
            specs.append(spec)
            trajs.append(traj)
    return specs, trajs


def test_rows_promoted_at_the_threshold_join_level_one_at_the_refresh_step_not_before(tmp_path):
    source = make_task_source(_config(tmp_path))
    # Before any promotion only level 0 holds a batch: every step trains stance on 2 distinct rows, no prefix,
    # each rollout capped at stance's 48 tokens.
    first = source.next_tasks(2, 0)
    assert [t.data["field"] for t in first] == ["stance", "stance"]
    assert len({t.data["row_index"] for t in first}) == 2
    assert all(t.data["prefix_blocks"] == [] and t.max_new_tokens == 48 for t in first)
    assert "<stance>" not in first[0].data["messages"][-1]["content"]

    rows = {t.data["row"]["extra_info"]["target_id"]: t for t in first}
    (a, b) = sorted(rows)
    # a: 0.95 with a value (promotes); b: 0.95 but an empty block (does not); the other samples score 0.
    specs, trajs = _scored(first, {a: ("<stance> agree toward cash </stance>", 0.95), b: ("<stance> </stance>", 0.95)}, 0)
    metrics = source.observe(0, specs, trajs)
    assert metrics["curriculum/proposed"] == 1 and metrics["curriculum/pending"] == 1
    assert metrics["curriculum/level"] == 0 and metrics["curriculum/refreshed"] == 0

    # Step 2: another row at 0.9 exactly (the threshold) also waits; 0.89 does not count.
    second = source.next_tasks(2, 1)
    assert {t.data["field"] for t in second} == {"stance"}
    others = [t for t in second if t.data["row"]["extra_info"]["target_id"] != a]
    c = others[0].data["row"]["extra_info"]["target_id"]
    d = others[1].data["row"]["extra_info"]["target_id"] if len(others) > 1 else None
    replies = {c: ("<stance>disagree toward taxes</stance>", 0.9)}
    if d:
        replies[d] = ("<stance>neutral toward rent</stance>", 0.89)
    source.observe(1, *_scored(second, replies, 1))
    assert source.map.pools == {} and source.map.levels(2) == [0]
    assert {t.data["field"] for it in range(2, 40) for t in source.next_tasks(2, it)} == {"stance"}

    # Step 3 refreshes: rows a and c now hold level-1 (emotion) prompts ending in their stance blocks.
    third = source.next_tasks(2, 2)
    metrics = source.observe(2, *_scored(third, {}, 2))
    assert metrics["curriculum/refreshed"] == 1 and metrics["curriculum/pool/emotion"] == 2
    assert source.map.levels(2) == [0, 1]
    draws = [source.next_tasks(2, it) for it in range(3, 203)]
    emotion = [batch for batch in draws if batch[0].data["field"] == "emotion"]
    assert all(len({t.data["field"] for t in batch}) == 1 for batch in draws)  # one level per step
    # A level drawn uniformly among the two ready ones.
    assert 0.35 < len(emotion) / len(draws) < 0.65
    expected = {a: "<stance>agree toward cash</stance>", c: "<stance>disagree toward taxes</stance>"}
    for batch in emotion:
        assert {t.data["row"]["extra_info"]["target_id"] for t in batch} == {a, c}
        for task in batch:
            target = task.data["row"]["extra_info"]["target_id"]
            prompt = task.data["messages"]
            assert prompt[-1]["content"].endswith("\n\n" + expected[target])
            assert "<emotion>...</emotion>" in prompt[0]["content"] and task.max_new_tokens == 48
            assert task.data["prefix_blocks"] == [["stance", expected[target][8:-9]]]


def test_aborted_and_unparsable_samples_never_promote(tmp_path):
    source = make_task_source(_config(tmp_path))
    tasks = source.next_tasks(2, 0)
    target = tasks[0].data["row"]["extra_info"]["target_id"]
    specs, trajs = _scored(tasks, {target: ("<stance>agree</stance> and more", 1.0)}, 0)  # strictly invalid
    assert source.observe(0, specs, trajs)["curriculum/proposed"] == 0
    specs, trajs = _scored(tasks, {target: ("<stance>agree</stance>", 1.0)}, 0)
    trajs[0].aborted = True
    assert source.observe(0, specs, trajs)["curriculum/proposed"] == 0


def test_the_map_round_trips_through_a_checkpoint_folder(tmp_path):
    config = _config(tmp_path)
    source = make_task_source(config)
    for it in range(3):
        tasks = source.next_tasks(2, it)
        source.observe(it, *_scored(tasks, {t.data["row"]["extra_info"]["target_id"]: ("<stance>yes</stance>", 0.97)
                                            for t in tasks}, it))
    assert source.map.pools  # something to restore
    folder = tmp_path / "iter_000003"
    folder.mkdir()
    documents = task_source_documents(source)
    assert list(documents) == [TASK_SOURCE_FILE]
    for name, document in documents.items():  # as Learner.save_checkpoint writes them
        (folder / name).write_text(json.dumps(document))

    resumed = make_task_source(config)
    assert restore_task_source(resumed, folder)
    assert resumed.map.state_dict() == source.map.state_dict()
    for it in range(3, 12):  # the resumed run draws what the first one would have
        assert [t.data["messages"] for t in resumed.next_tasks(2, it)] == \
            [t.data["messages"] for t in source.next_tasks(2, it)]
    # A checkpoint without a map (an SFT warm start) leaves a fresh map; a map over other rows is refused.
    fresh = make_task_source(config)
    assert not restore_task_source(fresh, tmp_path) and fresh.map.pools == {}
    with pytest.raises(ValueError, match="resume with the same humanlm.data_files"):
        restore_task_source(make_task_source(_config(tmp_path, rows=5)), folder)


def test_other_gyms_keep_the_fixed_mixture_with_nothing_to_checkpoint(tmp_path):
    config = parse_config({"policy": {"model": "tiny-random"}, "env": {"gyms": [{"name": "function"}]}})
    source = make_task_source(config)
    assert isinstance(source, TaskMixture)
    assert [t.item_key for t in source.next_tasks(5, 3)] == [t.item_key for t in source.sample(5, 3)]
    assert source.observe(3, [], []) == {} and task_source_documents(source) == {}
    assert not restore_task_source(source, tmp_path)


def test_config_refusals_name_the_key(tmp_path):
    with pytest.raises(ConfigError, match="humanlm.curriculum=true needs humanlm.mode=sequential.*"
                       "not humanlm.mode=separate_system_prompt"):
        parse_config(merge_defaults({"humanlm": {"curriculum": True}}))
    with pytest.raises(ConfigError, match="humanlm.mode=sequential .*set humanlm.curriculum=true"):
        parse_config(merge_defaults({"humanlm": {"mode": "sequential"}}))
    with pytest.raises(ConfigError, match="env.gyms must be the humanlm gym alone"):
        parse_config(merge_defaults({"humanlm": {"mode": "sequential", "curriculum": True},
                                     "env": {"gyms": [{"name": "humanlm"}, {"name": "humanlm", "split": "test"}]}}))
    with pytest.raises(ValueError, match="training.batch_size=8 distinct rows a step, but the train split keeps 4"):
        make_task_source(_config(tmp_path, batch_size=8))


def test_train_user_prints_the_steps_level_and_the_pools():
    from userrl.humanlm.commands import _field_line

    result = {"humanlm/emotion/score": 0.5, "humanlm/emotion/valid_rate": 1.0, "curriculum/level": 1.0,
              "curriculum/proposed": 2.0, "curriculum/pending": 2.0, "curriculum/pool/emotion": 3.0}
    assert _field_line(result).splitlines() == [
        "  judge: emotion 0.500 (valid 1.00)",
        "  curriculum: level 1 (emotion), proposed 2, pending 2, pools: emotion 3"]
    assert "curriculum" not in _field_line(result, "eval/humanlm")


def test_evaluation_in_sequential_mode_is_the_response_field_with_no_prefix(tmp_path):
    """The spec's validation scores the response alone: what evaluate-user loads in sequential mode
    (task_options without evaluation) and what training's evaluation loads (response_only) are the same items."""
    from userrl.envs import load_tasks

    config = _config(tmp_path)
    for evaluation in (False, True):
        tasks = load_tasks("humanlm", "train", **config.task_options("humanlm", evaluation=evaluation))
        assert [t.data["row"]["extra_info"]["target_id"] for t in tasks] == ["t0", "t1", "t2", "t3"]
        assert all(t.data["field"] == "response" and t.data["prefix_blocks"] == [] and t.max_new_tokens == 512
                   for t in tasks)
        assert tasks[0].data["messages"][-1]["content"] == "post number 0"
