"""Checkpoint tensors into a vLLM model built by a package's vllm_model.py.

Hugging Face names are the contract (weight_map.py's CHECKPOINT_RENAMES maps other names
onto them first; Mixtral's `block_sparse_moe.experts.{e}.w1/w3/w2` become the
`mlp.experts.{e}.gate_proj/up_proj/down_proj` the package's weight map also reads).
vLLM fuses q/k/v into `qkv_proj` and gate/up into `gate_up_proj`, and
stacks each layer's routed experts; every such parameter carries a `weight_loader` that
takes one piece (a shard id, an expert id) and keeps only this rank's slice of it.
"""

import re
from collections.abc import Iterable, Iterator

import torch
from torch import nn

from .vllm_compat import default_weight_loader

# (fused parameter, checkpoint projection, shard id)
STACKED = (
    ("qkv_proj", "q_proj", "q"),
    ("qkv_proj", "k_proj", "k"),
    ("qkv_proj", "v_proj", "v"),
    ("gate_up_proj", "gate_proj", 0),
    ("gate_up_proj", "up_proj", 1),
)
# The fused modules and their parts, as vLLM's `packed_modules_mapping` (LoRA, quant).
PACKED_MODULES = {
    "qkv_proj": ["q_proj", "k_proj", "v_proj"],
    "gate_up_proj": ["gate_proj", "up_proj"],
}
# Mixtral's MoE names -> the Qwen-MoE names the model's modules have.
_MIXTRAL = (
    (re.compile(r"\.block_sparse_moe\."), ".mlp."),
    (re.compile(r"(\.experts\.\d+)\.w1\."), r"\1.gate_proj."),
    (re.compile(r"(\.experts\.\d+)\.w3\."), r"\1.up_proj."),
    (re.compile(r"(\.experts\.\d+)\.w2\."), r"\1.down_proj."),
)
# Buffers some checkpoints carry that vLLM recomputes.
SKIPPED_SUFFIXES = ("rotary_emb.inv_freq", "rotary_emb.cos_cached", "rotary_emb.sin_cached")


def load_weights(
    model: nn.Module,
    weights: Iterable[tuple[str, torch.Tensor]],
    renames: dict[str, str] | None = None,
    stacked=STACKED,
    expert_mapping=(),
    tied_embeddings: bool = False,
) -> set[str]:
    """Load (checkpoint name, tensor) pairs into `model`; return the parameter names
    loaded, which vLLM checks against all of the model's parameters.

    expert_mapping: vllm_compat.make_expert_mapping's tuples (none for a dense model).
    tied_embeddings: lm_head is embed_tokens, so a stored lm_head.weight is skipped.
    """
    params = dict(model.named_parameters())
    loaded: set[str] = set()
    for stored, tensor in weights:
        name = _hf_moe_name((renames or {}).get(stored, stored))
        if name.endswith(SKIPPED_SUFFIXES) or (tied_embeddings and name == "lm_head.weight"):
            continue
        for hf_name, piece in _per_expert(name, tensor):
            loaded.add(_load_one(params, hf_name, piece, stacked, expert_mapping))
    return loaded


def _load_one(params, name, tensor, stacked, expert_mapping) -> str:
    for param_prefix, ckpt_prefix, expert_id, shard_id in expert_mapping:
        if ckpt_prefix in name:
            target = name.replace(ckpt_prefix, param_prefix)
            param = _param(params, target, name)
            param.weight_loader(param, tensor, target, shard_id=shard_id, expert_id=expert_id)
            return target
    for fused, part, shard_id in stacked:
        if f".{part}." in name:
            target = name.replace(f".{part}.", f".{fused}.")
            param = _param(params, target, name)
            param.weight_loader(param, tensor, shard_id)
            return target
    param = _param(params, name, name)
    getattr(param, "weight_loader", default_weight_loader)(param, tensor)
    return name


def _hf_moe_name(name: str) -> str:
    if ".block_sparse_moe." not in name:
        return name
    for pattern, replacement in _MIXTRAL:
        name = pattern.sub(replacement, name)
    return name


def _param(params: dict[str, nn.Parameter], target: str, stored: str) -> nn.Parameter:
    try:
        return params[target]
    except KeyError:
        raise KeyError(f"checkpoint tensor {stored!r} has no parameter {target!r}") from None


def _per_expert(name: str, tensor: torch.Tensor) -> Iterator[tuple[str, torch.Tensor]]:
    """transformers 5's fused expert tensors (`experts.gate_up_proj` [E, 2I, H],
    `experts.down_proj` [E, H, I]) as the per-expert tensors save_pretrained writes."""
    base, _, leaf = name.rpartition(".experts.")
    if not base or leaf not in ("gate_up_proj", "down_proj") or tensor.dim() != 3:
        yield name, tensor
        return
    for e, expert in enumerate(tensor):
        if leaf == "down_proj":
            yield f"{base}.experts.{e}.down_proj.weight", expert
        else:
            gate, up = expert.chunk(2, dim=0)
            yield f"{base}.experts.{e}.gate_proj.weight", gate
            yield f"{base}.experts.{e}.up_proj.weight", up
