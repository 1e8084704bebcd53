"""NPU ops: the real torch_npu / torchair fused ops, called with their schemas' keywords."""

from functools import cache

import torch
import torch_npu
import torchair  # bundled with torch_npu; importable only after it

from . import Lengths

_MASK_SIZE = 2048  # FIA sparse_mode=3 takes a fixed 2048x2048 causal mask


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    return torch_npu.npu_rms_norm(x, weight, epsilon=eps)[0]


def apply_rotary(q, k, cos, sin):
    """q, k: BSND; cos, sin: (B, S, 1, D). The fused op takes head_dim 64 or 128 on
    A3 (torch_npu/_op_plugin_docs.py) and rotates q and k in place, so they
    must be whole tensors, not the strided views the q/k/v split leaves."""
    q, k = q.contiguous(), k.contiguous()
    return torch_npu.npu_apply_rotary_pos_emb(q, k, cos, sin, layout="BSND")


def scatter_update_(cache: torch.Tensor, kv_len: torch.Tensor, update: torch.Tensor) -> None:
    torch_npu.scatter_update_(cache, kv_len, update, -2)


@cache
def _causal_mask(device: torch.device) -> torch.Tensor:
    """Built once, outside any graph (prefill is eager)."""
    ones = torch.ones(_MASK_SIZE, _MASK_SIZE, dtype=torch.bool, device=device)
    return torch.triu(ones, diagonal=1)


def attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    actual_seq_lengths_q: Lengths,
    actual_seq_lengths_kv: Lengths,
    *,
    num_heads: int,
    num_kv_heads: int,
    scale: float,
    causal: bool,
) -> torch.Tensor:
    """BNSD in, BNSD out.

    Tensor lengths use torchair's FIA (GE graph only, dynamic=False); host lists use
    torch_npu's FIA, whose SymInt[] lengths need dynamic=True under npugraph_ex.
    """
    if isinstance(actual_seq_lengths_kv, torch.Tensor):
        fia = torchair.ops.npu_fused_infer_attention_score
    else:
        fia = torch_npu.npu_fused_infer_attention_score
    # The op takes no strided views and its wrapper adds no .contiguous() (torch_npu's
    # npu_fused_infer_attention_score docs): q/k/v arrive transposed to BNSD.
    out, _ = fia(
        query.contiguous(),
        key.contiguous(),
        value.contiguous(),
        atten_mask=_causal_mask(query.device) if causal else None,
        actual_seq_lengths=actual_seq_lengths_q,
        actual_seq_lengths_kv=actual_seq_lengths_kv,
        num_heads=num_heads,
        num_key_value_heads=num_kv_heads,
        scale=scale,
        input_layout="BNSD",
        sparse_mode=3 if causal else 0,  # 3: right-down causal over the fixed mask
    )
    return out
