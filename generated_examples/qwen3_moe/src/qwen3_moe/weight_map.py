"""Which Hugging Face checkpoint tensors make each parameter of this package, and how.

Hugging Face's names, with q/k/v fused into `qkv_proj` and gate/up into `gate_up_proj`
(`ascend_runtime.weights.gqa_source`). Routed experts are stacked per layer in the grouped
matmul's [E, K, N] layout (layers/moe.py), from either checkpoint form: per-expert 2-D
tensors, the keys `save_pretrained` writes (`mlp.experts.{e}.{gate,up,down}_proj.weight`;
Mixtral's `block_sparse_moe.experts.{e}.{w1,w3,w2}.weight`, w1 gate, w3 up, w2 down), or the
fused 3-D tensors of transformers 5's in-memory layout (`mlp.experts.gate_up_proj`
[E, 2I, H], `mlp.experts.down_proj` [E, H, I]).
"""

from __future__ import annotations

from ascend_runtime.weights import (
    Source,
    concat,
    gqa_source,
    stack_down,
    stack_gate_up,
    transposed,
)

from .architecture import ModelArgs

# Checkpoint tensor name -> the Hugging Face name `sources` expects, for checkpoints saved
# with other names, e.g. {"transformer.wte.weight": "model.embed_tokens.weight"}.
CHECKPOINT_RENAMES: dict[str, str] = {}

# Per-expert checkpoint names: (block name, gate, up, down).
_EXPERT_NAMES = (
    ("mlp", "gate_proj", "up_proj", "down_proj"),
    ("block_sparse_moe", "w1", "w3", "w2"),
)


def _moe_sources(name: str, shape: tuple[int, ...]) -> list[Source]:
    """Candidate sources of a MoE parameter, in order of preference."""
    layer, _, leaf = name.partition(".mlp.")
    prefix = f"model.{layer}"
    if leaf == "gate.weight":
        return [
            Source((f"{prefix}.{block}.gate.weight",), (shape,), concat)
            for block, *_ in _EXPERT_NAMES
        ]
    experts, hidden, width = shape  # w13: [E, H, 2I]; w2: [E, I, H]
    candidates = []
    for block, gate, up, down in _EXPERT_NAMES:
        base = f"{prefix}.{block}.experts"
        if leaf == "experts.w13_weight":
            keys = [f"{base}.{e}.{p}.weight" for e in range(experts) for p in (gate, up)]
            shapes = ((width // 2, hidden),) * (2 * experts)
            candidates.append(Source(tuple(keys), shapes, stack_gate_up))
        else:
            keys = [f"{base}.{e}.{down}.weight" for e in range(experts)]
            candidates.append(Source(tuple(keys), ((width, hidden),) * experts, stack_down))
    fused = "gate_up_proj" if leaf == "experts.w13_weight" else "down_proj"
    fused_shape = (experts, width, hidden)
    candidates.append(Source((f"{prefix}.mlp.experts.{fused}",), (fused_shape,), transposed))
    return candidates


def sources(name: str, shape: tuple[int, ...], args: ModelArgs) -> list[Source]:
    """Where parameter `name` (of `shape`) can come from, in order of preference."""
    if ".mlp.experts." in name or name.endswith(".mlp.gate.weight"):
        return _moe_sources(name, shape)
    return [gqa_source(name, shape, args)]
