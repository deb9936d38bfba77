"""A model folder's tokenizer, loaded without importing torch where the folder allows it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

#: Tokenizer classes that are a plain `tokenizer.json` (transformers 5 names both; 4.x the second).
PLAIN_TOKENIZER_CLASSES = ("TokenizersBackend", "PreTrainedTokenizerFast")


def load_tokenizer(path: str | Path) -> Any:
    """The tokenizer `AutoTokenizer.from_pretrained(path)` returns.

    A folder whose tokenizer_config.json names a plain class (the folders userrl writes do) is loaded with
    that class, which is what AutoTokenizer would pick: importing AutoTokenizer imports torch, scikit-learn
    and transformers' generation code (about 5 CPU-seconds), which the env runners and Serve's gateway, the
    processes that only tokenize, never use. Any other folder goes through AutoTokenizer.
    """
    import transformers

    config = Path(path) / "tokenizer_config.json"
    name = json.loads(config.read_text()).get("tokenizer_class") if config.is_file() else None
    if name in PLAIN_TOKENIZER_CLASSES and hasattr(transformers, name):
        return getattr(transformers, name).from_pretrained(str(path))
    return transformers.AutoTokenizer.from_pretrained(str(path))
