"""load_tokenizer: AutoTokenizer's result, without importing torch for the folders userrl writes."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

from transformers import AutoTokenizer

from userrl.tokenizer import load_tokenizer

CHAT = [{"role": "user", "content": "Find f(3)."}, {"role": "assistant", "content": "[answer] 7"}]


def _same(a, b) -> None:
    assert type(a) is type(b)
    text = a.apply_chat_template(CHAT, tokenize=False)
    assert text == b.apply_chat_template(CHAT, tokenize=False)
    assert a(text)["input_ids"] == b(text)["input_ids"]
    assert (a.pad_token_id, a.eos_token_id, a.bos_token_id) == (b.pad_token_id, b.eos_token_id, b.bos_token_id)


def test_a_plain_tokenizer_folder_loads_what_auto_tokenizer_loads(tiny_model):
    config = json.loads(Path(tiny_model, "tokenizer_config.json").read_text())
    assert config["tokenizer_class"] == "TokenizersBackend"  # as every folder userrl writes
    _same(load_tokenizer(tiny_model), AutoTokenizer.from_pretrained(tiny_model))


def test_another_tokenizer_class_goes_through_auto_tokenizer(tiny_model, tmp_path):
    folder = shutil.copytree(tiny_model, tmp_path / "model")
    config = json.loads((folder / "tokenizer_config.json").read_text())
    (folder / "tokenizer_config.json").write_text(json.dumps({**config, "tokenizer_class": "GPT2Tokenizer"}))
    loaded = load_tokenizer(folder)
    assert type(loaded).__name__ == "GPT2Tokenizer"
    _same(loaded, AutoTokenizer.from_pretrained(folder))


def test_loading_a_plain_tokenizer_imports_no_torch(tiny_model):
    code = ("import sys; from userrl.tokenizer import load_tokenizer; t = load_tokenizer(sys.argv[1]); "
            "assert t.apply_chat_template([{'role': 'user', 'content': 'hi'}]); "
            "print(sorted(m for m in ('torch', 'sklearn') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code, tiny_model], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
