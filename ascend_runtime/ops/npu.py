"""NPU ops: the real torch_npu / torchair fused ops, called with their schemas' keywords."""

from functools import cache

import torch
import torch_npu
import torchair  # bundled with torch_npu; importable only after it

from ..layers.deepseek_router import route
from . import Lengths
from .portable import gather_blocks, mla_maths

_MASK_SIZE = 2048  # FIA sparse_mode=3 takes a fixed 2048x2048 causal mask
FUSED_ROTARY_HEAD_DIMS = (64, 128)  # npu_apply_rotary_pos_emb's head dims on A2/A3


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    return torch_npu.npu_rms_norm(x, weight, epsilon=eps)[0]


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary(q, k, cos, sin):
    """q, k: BSND; cos, sin: (B, S, 1, D). The fused npu_apply_rotary_pos_emb takes head_dim
    64 or 128 on A2/A3 (torch_npu/_op_plugin_docs.py) and rotates q and k in place, so they
    must be whole tensors, not the strided views the q/k/v split leaves. Other head dims
    take plain torch maths ("half" mode). head_dim is a static shape: no graph break."""
    if q.shape[-1] in FUSED_ROTARY_HEAD_DIMS:
        q, k = q.contiguous(), k.contiguous()
        return torch_npu.npu_apply_rotary_pos_emb(q, k, cos, sin, layout="BSND")
    return q * cos + _rotate_half(q) * sin, k * cos + _rotate_half(k) * sin


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


# MoE: the fused chain of cann-recipes-infer's models/qwen3_moe/models/modeling_qwen3_moe.py
# (`_forward_gate`, `moe_infer_tp`) and module/fuse_moe_gmm.py; shapes from T * k and E only.


def moe_gating_top_k_softmax(logits: torch.Tensor, top_k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Softmax over the experts, then top-k: (weights [T, k], expert ids [T, k] int32)."""
    weights, expert_ids, _ = torch_npu.npu_moe_gating_top_k_softmax(logits, None, k=top_k)
    return weights, expert_ids


def moe_experts(
    x: torch.Tensor,
    expert_ids: torch.Tensor,
    weights: torch.Tensor,
    w13: torch.Tensor,
    w2: torch.Tensor,
    shared: torch.Tensor | None,
) -> torch.Tensor:
    """Dispatch (init_routing_v2, counts per expert), gate|up grouped matmul, SwiGLU, down
    grouped matmul, weighted combine with the shared expert as skip1 (finalize_routing).
    split_item=3 returns one [T * k, N] tensor; split_item 1 would size outputs from data."""
    num_tokens, top_k = expert_ids.shape
    num_experts = w13.shape[0]
    expanded_x, expanded_row_idx, tokens_per_expert, _ = torch_npu.npu_moe_init_routing_v2(
        x,
        expert_ids,
        active_num=num_tokens * top_k,
        expert_num=num_experts,
        expert_tokens_num_type=1,  # counts per expert, the group_list of group_list_type=1
        expert_tokens_num_flag=True,
        quant_mode=-1,
        # The rank's experts, [first, last): every expert on one device. Always passed, as
        # cann-recipes-infer's models/qwen3_moe does: an omitted range reaches GE as None
        # (torchair's npu_moe_init_routing_v2 converter), which MoeInitRoutingV3 refuses.
        active_expert_range=[0, num_experts],
    )
    h = torch_npu.npu_grouped_matmul(
        [expanded_x],
        [w13],
        group_list=tokens_per_expert,
        group_type=0,
        group_list_type=1,
        split_item=3,
    )[0]
    h = torch_npu.npu_swiglu(h, dim=-1)
    y = torch_npu.npu_grouped_matmul(
        [h],
        [w2],
        group_list=tokens_per_expert,
        group_type=0,
        group_list_type=1,
        split_item=3,
    )[0]
    return torch_npu.npu_moe_finalize_routing(
        y,
        skip1=shared,
        skip2=None,
        bias=None,
        scales=weights.to(y.dtype),
        expanded_src_to_dst_row=expanded_row_idx,
        export_for_source_row=None,
        drop_pad_mode=2,
    )


# Paged KV (cann-recipes-infer models/qwen3_moe `kv_cache_update`, `exec_qkv`): the cache of a
# layer is (num_blocks, block_size, kv_heads * head_dim); slot = block_id * block_size + offset.


def paged_scatter_update_(cache: torch.Tensor, slots: torch.Tensor, update: torch.Tensor) -> None:
    """update [T, N, D] into the (num_blocks, block_size, N * D) cache at slots [T], in place
    (the op does not check bounds: the block allocator hands out legal slots only, the null
    block's for idle rows). Written into the cache itself, indexed by (block, offset) pairs:
    through a view of it, npugraph_ex's input in-place pass and torchair leave a functional
    npu_scatter_nd_update that copies the whole cache every step (the GE-conversion tests
    check this)."""
    block_size = cache.shape[1]
    indices = torch.stack((slots // block_size, slots % block_size), dim=-1)
    torch_npu.npu_scatter_nd_update_(cache, indices, update.reshape(update.shape[0], -1))


def paged_attention(
    query: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_table: torch.Tensor,
    actual_seq_lengths_q: Lengths,  # noqa: ARG001 (one query token per row)
    actual_seq_lengths_kv: Lengths,
    *,
    num_heads: int,
    num_kv_heads: int,
    scale: float,
    block_size: int,
) -> torch.Tensor:
    """Decode: BNSD query in, BNSD out. The fused attention reads each row's blocks through
    block_table (int32 [B, max_blocks]); its page-attention mode takes the (blocknum,
    blocksize, H) cache with a BSH query and per-row actual_seq_lengths_kv, no mask."""
    if isinstance(actual_seq_lengths_kv, torch.Tensor):
        fia = torchair.ops.npu_fused_infer_attention_score
    else:
        fia = torch_npu.npu_fused_infer_attention_score
    bsz, _, q_len, head_dim = query.shape
    out, _ = fia(
        query.transpose(1, 2).reshape(bsz, q_len, num_heads * head_dim),
        k_cache,
        v_cache,
        block_table=block_table,
        block_size=block_size,
        actual_seq_lengths_kv=actual_seq_lengths_kv,
        num_heads=num_heads,
        num_key_value_heads=num_kv_heads,
        scale=scale,
        input_layout="BSH",
        sparse_mode=0,
    )
    return out.view(bsz, q_len, num_heads, head_dim).transpose(1, 2)


# MLA decode (ascend_runtime/latent_cache.py). The fused attention's MLA mode (query_rope /
# key_rope over the latent; torch_npu/_op_plugin_docs.py, copier.yml's mla_attention) takes
# only kv_lora_rank 512 with rope 64, 32/64/128 query heads and a paged cache of block size
# 16 or 128, in float16/bfloat16; everything else runs the absorbed attention as plain torch
# maths (matmul, masked fp32 softmax, matmul), which every compiler converts.
FUSED_MLA_LATENT_DIM = 512
FUSED_MLA_ROPE_DIM = 64
FUSED_MLA_QUERY_HEADS = (32, 64, 128)
FUSED_MLA_BLOCK_SIZES = (16, 128)


def fused_mla_fits(latent_dim: int, rope_dim: int, heads: int, block_size: int, dtype) -> bool:
    """Whether the fused attention's MLA mode takes these shapes (static: no graph break)."""
    return (
        (latent_dim, rope_dim) == (FUSED_MLA_LATENT_DIM, FUSED_MLA_ROPE_DIM)
        and heads in FUSED_MLA_QUERY_HEADS
        and block_size in FUSED_MLA_BLOCK_SIZES
        and dtype in (torch.float16, torch.bfloat16)
    )


def mla_attention(
    q_latent: torch.Tensor,
    q_pe: torch.Tensor,
    nope_cache: torch.Tensor,
    rope_cache: torch.Tensor,
    actual_seq_lengths_q: Lengths,  # noqa: ARG001 (one query token per row)
    actual_seq_lengths_kv: Lengths,
    *,
    num_heads: int,  # noqa: ARG001 (the fused mode's; it needs a paged cache)
    scale: float,
) -> torch.Tensor:
    """Contiguous latent cache: the fused MLA mode requires page attention, so plain maths."""
    return mla_maths(q_latent, q_pe, nope_cache, rope_cache, actual_seq_lengths_kv, scale)


def paged_mla_attention(
    q_latent: torch.Tensor,
    q_pe: torch.Tensor,
    nope_cache: torch.Tensor,
    rope_cache: torch.Tensor,
    block_table: torch.Tensor,
    actual_seq_lengths_q: Lengths,  # noqa: ARG001
    actual_seq_lengths_kv: Lengths,
    *,
    num_heads: int,
    scale: float,
    block_size: int,
) -> torch.Tensor:
    """(B, N, 1, kv_lora_rank) out. Fused: key = value = the latent cache (blocknum,
    blocksize, 512), key_rope the rope cache, one KV head, BSND query and query_rope, as
    cann-recipes-infer's models/deepseek_r1 `forward_page_attention_absorb` calls it."""
    if fused_mla_fits(q_latent.shape[-1], q_pe.shape[-1], num_heads, block_size, q_latent.dtype):
        if isinstance(actual_seq_lengths_kv, torch.Tensor):
            fia = torchair.ops.npu_fused_infer_attention_score
        else:
            fia = torch_npu.npu_fused_infer_attention_score
        out, _ = fia(
            q_latent.transpose(1, 2).contiguous(),
            nope_cache,
            nope_cache,
            query_rope=q_pe.transpose(1, 2).contiguous(),
            key_rope=rope_cache,
            block_table=block_table,
            block_size=block_size,
            actual_seq_lengths_kv=actual_seq_lengths_kv,
            num_heads=num_heads,
            num_key_value_heads=1,
            scale=scale,
            input_layout="BSND",
            sparse_mode=0,
        )
        return out.transpose(1, 2)
    nope = gather_blocks(nope_cache, block_table, actual_seq_lengths_kv, block_size)
    rope = gather_blocks(rope_cache, block_table, actual_seq_lengths_kv, block_size)
    return mla_maths(q_latent, q_pe, nope, rope, actual_seq_lengths_kv, scale)


# DeepSeek-V3's grouped sigmoid routing on npu_moe_gating_top_k (copier.yml's
# moe_gating_top_k), as cann-recipes-infer's models/deepseek_r1 `_forward_gate` calls it:
# noaux_tc with renormalised weights only; every other routing is the torch maths.
GATING_TOP_K_MAX_EXPERTS = 2048
GATING_TOP_K_MIN_GROUP = 3
GATING_TOP_K_ALIGN = 32


def gating_top_k_fits(routing, experts: int) -> bool:
    per_group = experts // routing.n_group
    aligned = -(-per_group // GATING_TOP_K_ALIGN) * GATING_TOP_K_ALIGN
    return (
        routing.method == "noaux_tc"
        and routing.norm_topk_prob
        and experts <= GATING_TOP_K_MAX_EXPERTS
        and per_group >= GATING_TOP_K_MIN_GROUP
        and aligned * routing.n_group <= GATING_TOP_K_MAX_EXPERTS
    )


def deepseek_gating(logits: torch.Tensor, bias: torch.Tensor | None, routing):
    """(weights float32 [T, k], expert ids int32 [T, k]) from router logits float32 [T, E]."""
    if bias is None or not gating_top_k_fits(routing, logits.shape[-1]):
        return route(logits, bias, routing)
    weights, expert_ids, _ = torch_npu.npu_moe_gating_top_k(
        logits,
        routing.top_k,
        bias=bias.float(),
        k_group=routing.topk_group,
        group_count=routing.n_group,
        group_select_mode=1,  # a group scores the sum of its two best
        renorm=0,
        norm_type=1,  # sigmoid
        routed_scaling_factor=routing.routed_scaling_factor,
        eps=1e-20,
    )
    return weights, expert_ids
