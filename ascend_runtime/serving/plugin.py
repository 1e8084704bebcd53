"""What every package's vLLM plugin (`<pkg>/vllm_plugin.py`) shares.

vLLM picks the model class from config.json's "architectures". A checkpoint saved by
transformers says e.g. LlamaForCausalLM, which vLLM serves with its own model class, so
each package registers a name of its own and `mark` writes that name into the checkpoint
(or vLLM is given `hf_overrides={"architectures": [name]}`). Nothing here imports vLLM
until `register_model` runs inside vLLM.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from pathlib import Path

from ..hf_config import HFConfigError, load_json
from ..model import ModelSpec
from ..weights import CheckpointError, model_args_from_hf


def register_model(architecture: str, target: str) -> None:
    """Register `target` ("module:Class", imported only when vLLM builds the model) as
    `architecture`; vLLM runs plugins in every process it starts, so once is enough."""
    from vllm import ModelRegistry

    if architecture not in ModelRegistry.get_supported_archs():
        ModelRegistry.register_model(architecture, target)


def checkpoint_args(spec: ModelSpec, path: str | Path):
    """The package's ModelArgs for the checkpoint vLLM serves, read by the package's own
    loader (ascend_runtime.weights.model_args_from_hf): a model_type, variant flag or RoPE
    kind this package cannot run is refused in one line before vLLM builds anything."""
    if not Path(path).is_dir():
        raise CheckpointError(
            f"{path}: not a local checkpoint directory (download it first; the package "
            "reads its config.json as its own loader does)"
        )
    return model_args_from_hf(spec, path)


def mark_checkpoint(spec: ModelSpec, path: str | Path, architecture: str) -> bool:
    """Set config.json's "architectures" to [architecture] and nothing else, once the
    package has checked it can run the checkpoint; the first change keeps the original
    as config.json.orig. Returns False when it was already set."""
    checkpoint_args(spec, path)
    config, file = load_json(path)
    if config.get("architectures") == [architecture]:
        return False
    backup = file.with_name("config.json.orig")
    if not backup.exists():
        shutil.copy2(file, backup)
    config["architectures"] = [architecture]
    partial = file.with_name("config.json.partial")
    partial.write_text(json.dumps(config, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    os.replace(partial, file)  # a whole file or the old one, never half of it
    return True


def main(spec: ModelSpec, architecture: str, argv: list[str] | None = None) -> int:
    """`python -m <pkg>.vllm_plugin mark CHECKPOINT_DIR`; 2 and one line on bad input."""
    parser = argparse.ArgumentParser(
        prog=f"python -m {spec.name}.vllm_plugin",
        description=f"serve a checkpoint on vLLM as {architecture}",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    mark = commands.add_parser("mark", help="write the architecture into config.json")
    mark.add_argument("checkpoint", help="checkpoint directory (config.json + safetensors)")
    options = parser.parse_args(argv)
    try:
        changed = mark_checkpoint(spec, options.checkpoint, architecture)
    except (CheckpointError, HFConfigError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    state = "marked" if changed else "already marked"
    print(f"{options.checkpoint}: {state} as {architecture}")
    return 0
