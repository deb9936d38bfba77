"""`userrl export`: a training checkpoint -> a plain Hugging Face folder that transformers and vLLM load as is.

The folder holds safetensors weights, config, generation config (the chat end-of-turn token as a stop token),
the tokenizer, and a chat template that renders OpenAI-style `tools` and assistant `tool_calls` exactly as
training rendered the checkpoint's action protocol (userrl.chat_template; docs/spec/ALGORITHMS.md §1.2): a
client that passes `tools=[TOOL_SCHEMA]` (tool_call) or the gym's tool schemas (native_tools) to
`apply_chat_template`, or to vLLM's chat endpoint, sees the prompts the policy was trained on. `userrl.json`
records the action protocol and where the weights came from.
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
from pathlib import Path

from rich.console import Console

from userrl.chat_template import tool_chat_template
from userrl.checkpoint import Checkpoint, replace_folder

USERRL_META = "userrl.json"


def export_checkpoint(checkpoint: str | Path, out: str | Path, *, force: bool = False) -> Path:
    """Write the checkpoint's model as a Hugging Face folder at `out` (staged, then renamed into place)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from userrl.chat import ChatFormat
    from userrl.protocols import get_protocol

    source, out = Checkpoint.open(checkpoint, "--checkpoint"), Path(out).expanduser().resolve()
    if out.exists() and any(out.iterdir()) and not force:
        raise FileExistsError(f"--out {out} exists and is not empty; choose a new folder or pass --force")
    meta, protocol = source.meta, source.protocol

    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent))
    try:
        model = AutoModelForCausalLM.from_pretrained(source.model_dir)
        tokenizer = AutoTokenizer.from_pretrained(source.model_dir)
        stop_ids = ChatFormat(tokenizer, "bracket").stop_token_ids
        tokenizer.chat_template = tool_chat_template(tokenizer.chat_template, protocol)
        model.generation_config.eos_token_id = stop_ids if len(stop_ids) > 1 else stop_ids[0]
        model.generation_config.pad_token_id = tokenizer.pad_token_id
        model.save_pretrained(staging, safe_serialization=True)
        tokenizer.save_pretrained(staging)
        (staging / USERRL_META).write_text(json.dumps({
            "protocol": protocol, "iteration": meta.get("iteration"), "policy_version": meta.get("policy_version"),
            "checkpoint": str(source.path),
            "base_model": ((meta.get("config") or {}).get("policy") or {}).get("model"),
            # A user simulator's reply ends after a field's closing tag (training cut it there): ask with these.
            **({"stop_strings": list(stops)} if (stops := get_protocol(protocol).stop_strings) else {}),
        }, indent=2))
        replace_folder(staging, out)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return out


def cli_export(args: argparse.Namespace, console: Console) -> int:
    """`userrl export --checkpoint PATH --out DIR`; exit 2 on a missing or incomplete checkpoint."""
    try:
        out = export_checkpoint(args.checkpoint, args.out, force=getattr(args, "force", False))
    except (FileNotFoundError, FileExistsError) as error:
        console.print(f"[red]error:[/] {error}")
        return 2
    protocol = json.loads((out / USERRL_META).read_text())["protocol"]
    console.print(f"[green]exported[/] {out}  (protocol {protocol}; load with "
                  f"AutoModelForCausalLM.from_pretrained('{out}') or `userrl serve --model {out}`)")
    return 0
