"""Write the HumanLM rows of our gyms; `python -m userrl.humanlm.generate` rewrites them, `--check` verifies.

The rows are played from the gyms' scripted users (userrl/humanlm/data.py), seeded, into
userrl/humanlm/data/<gym>_<split>.jsonl plus manifest.json (counts and the ground-truth fields per gym).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from userrl.envs.generate_cli import write_or_check
from userrl.envs.registry import discover_gyms
from userrl.humanlm.data import DATA_DIR, GYMS, SEED, SPLITS, data_path, gym_rows, render_jsonl
from userrl.humanlm.fields import LATENT_FIELDS


def outputs(root: Path = DATA_DIR, seed: int = SEED) -> dict[Path, str]:
    """Every file the generator writes, path -> text."""
    discover_gyms()
    files: dict[Path, str] = {}
    manifest: dict[str, dict] = {}
    for gym in GYMS:
        with_truth: Counter[str] = Counter()
        counts = {}
        for split in SPLITS:
            rows = gym_rows(gym, split, seed)
            files[data_path(gym, split, root)] = render_jsonl(rows)
            counts[split] = {"rows": len(rows), "tasks": len({r.extra["task_id"] for r in rows})}
            with_truth.update(k for r in rows for k in r.latent_states)
        counts["ground_truth_rows"] = {f: with_truth[f] for f in LATENT_FIELDS}
        manifest[gym] = counts
    doc = {"format": "userrl-humanlm-rows", "version": 1, "seed": seed,
           "generator": "python -m userrl.humanlm.generate", "gyms": manifest}  # fmt: skip
    files[root / "manifest.json"] = json.dumps(doc, indent=2) + "\n"
    return files


def main(argv: Sequence[str] | None = None) -> int:
    """Write the rows (exit 0), or with --check only report whether the files match a fresh run (1 if not)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DATA_DIR, help="folder to write (default: the package's)")
    parser.add_argument("--seed", type=int, default=SEED)
    parser.add_argument("--check", action="store_true", help="verify only; exit 1 if a file would change")
    args = parser.parse_args(argv)
    return write_or_check(outputs(args.out, args.seed), args.check)


if __name__ == "__main__":
    sys.exit(main())
