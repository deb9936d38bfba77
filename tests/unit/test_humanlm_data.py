"""HumanLM rows from our gyms: shipped files, determinism, disjoint splits, --check, the parquet loader."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest

from userrl.envs.persuade.roles import STANCES
from userrl.envs.registry import discover_gyms
from userrl.humanlm import data, generate
from userrl.humanlm.judge import ScriptedJudge, score_group
from userrl.humanlm.row import Row

discover_gyms()


@pytest.fixture(scope="module")
def fresh() -> dict[Path, str]:
    return generate.outputs(data.DATA_DIR)


def test_shipped_files_match_a_fresh_run(fresh: dict[Path, str], capsys: pytest.CaptureFixture[str]) -> None:
    assert generate.main(["--check"]) == 0
    assert "up to date" in capsys.readouterr().out
    assert sum(len(t) for t in fresh.values()) < 1_200_000  # small enough to ship


def test_generation_is_deterministic_and_check_catches_drift(tmp_path: Path) -> None:
    assert generate.main(["--out", str(tmp_path)]) == 0
    first = {p.name: p.read_text() for p in tmp_path.iterdir()}
    assert generate.main(["--out", str(tmp_path), "--check"]) == 0
    path = tmp_path / "intention_test.jsonl"
    path.write_text(path.read_text().replace("prefers", "likes", 1))
    assert generate.main(["--out", str(tmp_path), "--check"]) == 1
    assert generate.main(["--out", str(tmp_path), "--seed", "18"]) == 0
    assert {p.name: p.read_text() for p in tmp_path.iterdir()} != first  # the seed matters


def test_splits_are_disjoint_by_task_and_counts_match_the_manifest() -> None:
    manifest = json.loads((data.DATA_DIR / "manifest.json").read_text())
    for gym in data.GYMS:
        tasks = {}
        for split in data.SPLITS:
            rows = data.load_rows(split, [gym])
            assert len(rows) == manifest["gyms"][gym][split]["rows"] > 0
            tasks[split] = {r.extra["task_id"] for r in rows}
            assert all(r.extra["split"] == split and r.data_source == f"userrl_{gym}" for r in rows)
        assert not tasks["train"] & tasks["test"]


def test_rows_are_humanlm_records_with_the_conversation_before_the_reply() -> None:
    for row in data.load_rows("test"):
        record = row.to_record()
        assert set(record) == {"data_source", "prompt", "reward_model", "extra_info"}
        assert record["extra_info"]["hierarchy_name"] == "stance" and record["extra_info"]["persona"]
        roles = [m["role"] for m in row.prompt]
        # system, then HUMAN's opening message, then alternating agent / HUMAN, ending on the agent's turn.
        assert roles[:2] == ["system", "user"] and roles[-1] == "assistant"
        assert all(a != b for a, b in zip(roles[1:], roles[2:], strict=False))
        assert Row.from_record(record) == row


def test_persuade_states_follow_the_stance_ladder() -> None:
    rows = data.load_rows("train", ["persuade"])
    moved = 0
    for row in rows:
        stance = row.latent_states["stance"]
        label = stance.split(" toward the claim")[0]
        assert label in STANCES and row.extra["task_id"]
        if not stance.endswith("; unchanged"):
            moved += 1
            assert row.ground_truth.startswith("You make a fair point.")
            assert row.latent_states["goal"].startswith("acknowledge the point")
        else:
            assert row.ground_truth.startswith("I am not convinced yet.")
    assert 0 < moved < len(rows)  # the weaker turns make both kinds of reply


def test_intention_states_name_the_detail_answered() -> None:
    rows = data.load_rows("train", ["intention"])
    answered = [r for r in rows if "stance" in r.latent_states]
    assert 0 < len(answered) < len(rows)
    for row in answered:
        option = row.latent_states["stance"].removeprefix("prefers ").split(" for ")[0]
        assert option in row.ground_truth and option in row.persona
    for row in rows:
        assert "matter most" in row.latent_states["value"]


def test_scripted_judge_gives_the_real_reply_full_marks_on_shipped_rows() -> None:
    import asyncio

    row = data.load_rows("test", ["persuade"])[0]
    stance = f"<stance>{row.latent_states['stance']}</stance>"
    group = asyncio.run(score_group(ScriptedJudge(), row, [stance, "<stance>no idea</stance>"], "stance"))
    assert group.rewards[0] == 1.0 and group.rewards[1] < 0.5


# ---------------------------------------------------------------- the parquet loader


def write(path: Path, records: list[dict]) -> Path:
    pl.DataFrame(records).write_parquet(path)
    return path


def test_parquet_round_trip(tmp_path: Path) -> None:
    rows = data.load_rows("test", ["intention"])[:5]
    path = write(tmp_path / "rows.parquet", [r.to_record() for r in rows])
    loaded = data.load_parquet(path)
    assert [r.ground_truth for r in loaded] == [r.ground_truth for r in rows]
    assert [dict(r.latent_states) for r in loaded] == [dict(r.latent_states) for r in rows]


def test_parquet_missing_column_is_named(tmp_path: Path) -> None:
    record = data.load_rows("test", ["intention"])[0].to_record()
    del record["reward_model"]
    path = write(tmp_path / "bad.parquet", [record])
    with pytest.raises(ValueError, match=r"missing column\(s\) \['reward_model'\]"):
        data.load_parquet(path)
    with pytest.raises(FileNotFoundError):
        data.load_parquet(tmp_path / "nowhere.parquet")


def test_parquet_bad_rows_raise_or_are_skipped(tmp_path: Path) -> None:
    good = {"prompt": [{"role": "user", "content": "hi"}], "reward_model": {"ground_truth": "hello"},
            "extra_info": {"persona": "p"}}  # fmt: skip
    bad = {"prompt": [{"role": "user", "content": "hi"}], "reward_model": {"ground_truth": ""},
           "extra_info": {"persona": "p"}}  # fmt: skip
    path = write(tmp_path / "mixed.parquet", [good, bad])
    with pytest.raises(ValueError, match="row 1: reward_model.ground_truth must be a non-empty string"):
        data.load_parquet(path)
    skipped: list[str] = []
    rows = data.load_parquet(path, skip_bad_rows=True, on_skip=skipped.append)
    assert len(rows) == 1 and len(skipped) == 1
    assert rows[0].prompt[0] == {"role": "system", "content": ""}  # a system slot for the field prompt


def test_flip_roles() -> None:
    msgs = [
        {"role": "system", "content": "s"},
        {"role": "user", "content": "u"},
        {"role": "assistant", "content": "a"},
    ]
    assert [m["role"] for m in data.flip_roles(msgs)] == ["system", "assistant", "user"]
