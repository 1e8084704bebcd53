"""One seam for the fused ops.

`npu` calls torch_npu / torchair with their real schemas; `portable` computes the
same maths in plain torch, with attention as a custom op of the same signature so
dynamo sees the same graph (one node taking SymInt[] or Tensor lengths).

Every backend module provides: rms_norm, apply_rotary, scatter_update_, attention, the MoE
pair moe_gating_top_k_softmax and moe_experts, the paged pair paged_scatter_update_ and
paged_attention, and for MLA (DeepSeek) mla_attention, paged_mla_attention and
deepseek_gating. A model takes the module and calls them; to replace one op, a porter
edits the call in their layer (or passes a module of their own with the same functions).
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Union

import torch

# Per-row sequence lengths: host List[int] (torch_npu FIA, npugraph_ex decode and every
# eager prefill) or an int64 Tensor (torchair FIA, ge_graph decode).
Lengths = Union[list[int], torch.Tensor]  # noqa: UP007 (also read at runtime on py3.10)

BACKENDS = ("npu", "portable")


def load(backend: str) -> ModuleType:
    """Import a backend; `npu` needs torch_npu and is imported only when asked for."""
    if backend not in BACKENDS:
        raise ValueError(f"ops backend must be one of {BACKENDS}, got {backend!r}")
    return importlib.import_module(f"{__name__}.{backend}")


def npu_available() -> bool:
    try:
        import torch_npu  # noqa: F401
    except (ImportError, OSError, RuntimeError):  # no torch_npu, or no CANN beneath it
        return False
    return torch.npu.is_available()
