"""Which Hugging Face checkpoint tensors make each parameter of this package, and how.

q/k/v are fused into `qkv_proj` and gate/up into `gate_up_proj` (concatenated on dim 0).
Routed experts are stacked per layer in the grouped matmul's [E, K, N] layout
(layers/moe.py), from either checkpoint form: per-expert 2-D tensors, the keys
`save_pretrained` writes (`mlp.experts.{e}.{gate,up,down}_proj.weight`; Mixtral's
`block_sparse_moe.experts.{e}.{w1,w3,w2}.weight`, w1 gate, w3 up, w2 down), or the fused
3-D tensors of transformers 5's in-memory layout (`mlp.experts.gate_up_proj` [E, 2I, H],
`mlp.experts.down_proj` [E, H, I]).
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


# Per-expert checkpoint names: (block name, gate, up, down).
_EXPERT_NAMES = (
    ("mlp", "gate_proj", "up_proj", "down_proj"),
    ("block_sparse_moe", "w1", "w3", "w2"),
)


def _stack_gate_up(pieces: list[torch.Tensor]) -> torch.Tensor:
    """[gate_0, up_0, gate_1, ...] of [I, H] each -> [E, H, 2I] (gate | up per expert)."""
    pairs = zip(pieces[::2], pieces[1::2], strict=True)
    return torch.stack([torch.cat(pair, dim=0).t() for pair in pairs])


def _stack_down(pieces: list[torch.Tensor]) -> torch.Tensor:
    """[down_0, down_1, ...] of [H, I] each -> [E, I, H]."""
    return torch.stack([piece.t() for piece in pieces])


def _transposed(pieces: list[torch.Tensor]) -> torch.Tensor:
    """A fused HF [E, N, K] expert tensor -> [E, K, N]."""
    return pieces[0].transpose(1, 2).contiguous()


def _moe_sources(name: str, shape: tuple[int, ...]) -> list[Source]:
    """Candidate sources of a MoE parameter, in order of preference."""
    layer, _, leaf = name.partition(".mlp.")
    prefix = f"model.{layer}"
    if leaf == "gate.weight":
        return [
            Source((f"{prefix}.{block}.gate.weight",), (shape,), _concat)
            for block, *_ in _EXPERT_NAMES
        ]
    experts, hidden, width = shape  # w13: [E, H, 2I]; w2: [E, I, H]
    candidates = []
    for block, gate, up, down in _EXPERT_NAMES:
        base = f"{prefix}.{block}.experts"
        if leaf == "experts.w13_weight":
            keys = [f"{base}.{e}.{p}.weight" for e in range(experts) for p in (gate, up)]
            shapes = ((width // 2, hidden),) * (2 * experts)
            candidates.append(Source(tuple(keys), shapes, _stack_gate_up))
        else:
            keys = [f"{base}.{e}.{down}.weight" for e in range(experts)]
            candidates.append(Source(tuple(keys), ((width, hidden),) * experts, _stack_down))
    fused = "gate_up_proj" if leaf == "experts.w13_weight" else "down_proj"
    fused_shape = (experts, width, hidden)
    candidates.append(Source((f"{prefix}.mlp.experts.{fused}",), (fused_shape,), _transposed))
    return candidates


def sources(name: str, shape: tuple[int, ...], args: ModelArgs) -> list[Source]:
    """Where parameter `name` (of `shape`) can come from, in order of preference."""
    if ".mlp.experts." in name or name.endswith(".mlp.gate.weight"):
        return _moe_sources(name, shape)
    return [_fused(name, shape, args)]
