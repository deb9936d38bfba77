import json
import multiprocessing
import os
from pathlib import Path

import pytest

from userrl.models import cache_dir, resolve_model


def test_unknown_model_is_a_clear_error():
    with pytest.raises(FileNotFoundError, match="neither a known model"):
        resolve_model("no-such-model")


def test_local_folder_passes_through(tiny_model):
    assert resolve_model(tiny_model) == tiny_model


def _resolve(cache: str, queue) -> None:
    os.environ["USERRL_CACHE"] = cache
    queue.put(resolve_model("tiny-random"))


def test_concurrent_starts_build_once(tiny_model, tmp_path):
    """Several actors resolving the same model at once get one complete folder."""
    (tmp_path / "smollm2-135m").symlink_to(Path(cache_dir()) / "smollm2-135m")  # reuse the converted tokenizer
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    workers = [ctx.Process(target=_resolve, args=(str(tmp_path), queue)) for _ in range(3)]
    for w in workers:
        w.start()
    paths = {queue.get(timeout=300) for _ in workers}
    for w in workers:
        w.join(timeout=60)
    assert paths == {str(tmp_path / "tiny-random")}
    assert json.loads((tmp_path / "tiny-random" / "config.json").read_text())["num_hidden_layers"] == 2
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".tiny-random")] == []


def test_a_relative_folder_becomes_absolute(tiny_model, monkeypatch):
    """Learners run in folders of their own (Ray Train), so a relative model folder is resolved first."""
    folder = Path(tiny_model)
    monkeypatch.chdir(folder.parent)
    assert resolve_model(folder.name) == str(folder.resolve())
