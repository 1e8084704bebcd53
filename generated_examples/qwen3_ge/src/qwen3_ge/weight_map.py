"""Which Hugging Face checkpoint tensors make each parameter of this package, and how.

Hugging Face's names (LlamaForCausalLM and its kin), with q/k/v fused into `qkv_proj` and
gate/up into `gate_up_proj`, concatenated on dim 0 (`ascend_runtime.weights.gqa_source`).
A checkpoint with other names: list them in CHECKPOINT_RENAMES, or return other Sources
from `sources` for the parameters that differ.
"""

from __future__ import annotations

from ascend_runtime.weights import Source, gqa_source

from .architecture import ModelArgs

# Checkpoint tensor name -> the Hugging Face name `sources` expects, for checkpoints saved
# with other names, e.g. {"transformer.wte.weight": "model.embed_tokens.weight"}.
CHECKPOINT_RENAMES: dict[str, str] = {}


def sources(name: str, shape: tuple[int, ...], args: ModelArgs) -> list[Source]:
    """Where parameter `name` (of `shape`) can come from, in order of preference."""
    return [gqa_source(name, shape, args)]
