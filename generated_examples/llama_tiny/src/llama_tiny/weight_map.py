"""Which Hugging Face checkpoint tensors make each parameter of this package, and how.

q/k/v are fused into `qkv_proj` and gate/up into `gate_up_proj` (concatenated on dim 0).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from .architecture import ModelArgs


@dataclass(frozen=True)
class Source:
    """The HF keys of one parameter, the shape each must have, and how they combine."""

    keys: tuple[str, ...]
    shapes: tuple[tuple[int, ...], ...]
    assemble: Callable[[list[torch.Tensor]], torch.Tensor]


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
