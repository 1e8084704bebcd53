"""Which Hugging Face checkpoint tensors make each parameter of this package, and how.

q/k/v are fused into `qkv_proj` and gate/up into `gate_up_proj` (concatenated on dim 0).
"""

from __future__ import annotations

import torch
from ascend_runtime.weights import Source

from .architecture import ModelArgs

# Checkpoint tensor name -> the Hugging Face name `sources` expects, for checkpoints saved
# with other names, e.g. {"transformer.wte.weight": "model.embed_tokens.weight"}.
CHECKPOINT_RENAMES: dict[str, str] = {}


def _concat(pieces: list[torch.Tensor]) -> torch.Tensor:
    return pieces[0] if len(pieces) == 1 else torch.cat(pieces, dim=0)


def _fused(name: str, shape: tuple[int, ...], args: ModelArgs) -> Source:
    """A parameter from one HF tensor, or from q/k/v or gate/up concatenated on dim 0."""
    hf = name if name == "lm_head.weight" else f"model.{name}"
    rest = shape[1:]
    if ".self_attn.qkv_proj." in hf:
        q = args.num_attention_heads * args.head_dim
        kv = args.num_key_value_heads * args.head_dim
        keys = [hf.replace(".qkv_proj.", f".{p}_proj.") for p in ("q", "k", "v")]
        return Source(tuple(keys), ((q, *rest), (kv, *rest), (kv, *rest)), _concat)
    if ".gate_up_proj." in hf:  # a dense MLP
        keys = [hf.replace(".gate_up_proj.", f".{p}_proj.") for p in ("gate", "up")]
        return Source(tuple(keys), ((shape[0] // 2, *rest),) * 2, _concat)
    return Source((hf,), (shape,), _concat)


def sources(name: str, shape: tuple[int, ...], args: ModelArgs) -> list[Source]:
    """Where parameter `name` (of `shape`) can come from, in order of preference."""
    return [_fused(name, shape, args)]
