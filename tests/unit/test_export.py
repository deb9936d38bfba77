"""`userrl export`: a checkpoint folder -> a Hugging Face folder that plain transformers loads and that
renders the tool schema exactly as training did."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from userrl.chat import ChatFormat
from userrl.cli import main
from userrl.config import UserRLConfig
from userrl.protocols.choices import TOOL_SCHEMA


@pytest.fixture(scope="module")
def checkpoint(tiny_model, tmp_path_factory) -> Path:
    """A checkpoint in the layout Learner.save_checkpoint writes, with weights moved off the tiny model's."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = tmp_path_factory.mktemp("run") / "iter_000003"
    model = AutoModelForCausalLM.from_pretrained(tiny_model)
    torch.manual_seed(1)
    with torch.no_grad():  # a "trained" model: distinct from the base weights
        for p in model.parameters():
            p.add_(0.5 * torch.randn_like(p))
    model.save_pretrained(path / "model")
    AutoTokenizer.from_pretrained(tiny_model).save_pretrained(path / "model")
    torch.save({}, path / "optimizer.pt")
    config = UserRLConfig().model_dump(mode="json")
    config["policy"]["model"] = "tiny-random"
    (path / "meta.json").write_text(json.dumps({"iteration": 3, "policy_version": 3, "config": config}))
    return path


def _greedy(folder: Path | str, prompt_ids: list[int]) -> list[int]:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(folder)
    out = model.generate(torch.tensor([prompt_ids]), max_new_tokens=20, do_sample=False, eos_token_id=None,
                         pad_token_id=0)
    return out[0, len(prompt_ids):].tolist()


def test_export_round_trip_same_greedy_tokens_and_training_prompt(checkpoint, tmp_path):
    from transformers import AutoTokenizer

    out = tmp_path / "exported"
    assert main(["export", "--checkpoint", str(checkpoint), "--out", str(out)]) == 0
    assert (out / "model.safetensors").is_file() and (out / "config.json").is_file()
    assert (out / "tokenizer.json").is_file() and (out / "generation_config.json").is_file()
    assert json.loads((out / "userrl.json").read_text())["protocol"] == "tool_call"
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]

    source_tok = AutoTokenizer.from_pretrained(checkpoint / "model")
    exported_tok = AutoTokenizer.from_pretrained(out)
    prompt = [{"role": "system", "content": "Find the rule."}, {"role": "user", "content": "Ask me."}]
    # The checkpoint's template has no tools: training appended the instructions to the system message.
    trained = ChatFormat(source_tok, "tool_call")
    assert not trained.template_tools
    trained_ids = [i for ids, _ in trained.encode_prompt(trained.initial_messages(prompt)) for i in ids]
    exported_ids = exported_tok.apply_chat_template(prompt, tools=[TOOL_SCHEMA], add_generation_prompt=True,
                                                    tokenize=True, return_dict=False)
    assert list(exported_ids) == trained_ids

    greedy_checkpoint = _greedy(checkpoint / "model", trained_ids)
    assert len(greedy_checkpoint) == 20
    assert _greedy(out, list(exported_ids)) == greedy_checkpoint
    # The weights really are the checkpoint's, not the base model's.
    assert _greedy(_tiny(), trained_ids) != greedy_checkpoint


def _tiny() -> str:
    from userrl.models import resolve_model

    return resolve_model("tiny-random")


def _printed(capsys) -> str:
    return " ".join(capsys.readouterr().out.split())  # rich wraps long lines


def test_export_missing_checkpoint_exits_2_and_writes_nothing(tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["export", "--checkpoint", str(tmp_path / "nope"), "--out", str(out)]) == 2
    assert "no such folder" in _printed(capsys)
    assert not out.exists() and list(tmp_path.iterdir()) == []


def test_export_incomplete_checkpoint_and_occupied_out(checkpoint, tmp_path, capsys):
    broken = tmp_path / "broken"
    shutil.copytree(checkpoint, broken)
    (broken / "meta.json").unlink()
    assert main(["export", "--checkpoint", str(broken), "--out", str(tmp_path / "a")]) == 2
    assert "meta.json" in _printed(capsys)
    occupied = tmp_path / "occupied"
    occupied.mkdir()
    (occupied / "keep.txt").write_text("mine")
    assert main(["export", "--checkpoint", str(checkpoint), "--out", str(occupied)]) == 2
    assert "--force" in _printed(capsys)
    assert [p.name for p in occupied.iterdir()] == ["keep.txt"]
