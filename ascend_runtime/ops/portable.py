"""Portable ops: the NPU ops' maths in plain torch, for hosts without an NPU.

Attention is registered as a custom op with the torch_npu FIA's argument kinds
(List[int] lengths become SymInt[]; the torchair variant takes Tensor lengths), so
under torch.compile it is one opaque node exactly like the fused NPU op: the same
graph breaks, guards and recompiles show up on CPU as on the NPU.
"""

import functools
from contextlib import contextmanager

import torch
import torch.nn.functional as F

from ..layers.deepseek_router import route
from . import Lengths


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    x32 = x.float()
    x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)
    return weight * x32.to(x.dtype)


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary(q, k, cos, sin):
    """q, k: BSND; cos, sin: (B, S, 1, D), "half" rotary mode."""
    return q * cos + _rotate_half(q) * sin, k * cos + _rotate_half(k) * sin


def scatter_update_(cache: torch.Tensor, kv_len: torch.Tensor, update: torch.Tensor) -> None:
    """cache[b, :, kv_len[b], :] = update[b, :, 0, :], in place (scatter_update_ on axis -2).

    An index_put_, not a scatter_: under torch.compile the functionalised scatter_ on a
    buffer that the opaque attention op then reads makes inductor materialise a copy of the
    whole cache (and copy it back) in every layer of every step; index_put_ is written in
    place into the cache buffer.
    """
    rows = torch.arange(cache.shape[0], device=cache.device)
    cache[rows, :, kv_len] = update[:, :, 0]


def _cached_attention(query, key, value, lengths_kv: Lengths, scale):
    """BNSD query tokens of row b over the first lengths_kv[b] cached keys of row b.

    Branch-free on the lengths, so tracing it adds no guard on them: List[int] lengths
    (SymInts under torch.compile) read only the first max(lengths) cached keys; Tensor
    lengths keep static shapes and read the whole cache. Rows of different lengths are
    masked; the softmax runs in fp32. GQA needs no K/V repeat: each KV head's query heads
    are stacked on the query axis, (B, N, Q, D) -> (B, N_kv, N / N_kv x Q, D).
    """
    bsz, num_heads, q_len, head_dim = query.shape
    num_kv_heads = key.shape[1]
    if isinstance(lengths_kv, torch.Tensor):
        lengths = lengths_kv
        if not torch.compiler.is_compiling():  # run eagerly: only what the longest row holds
            longest = int(lengths.max())
            key, value = key.narrow(2, 0, longest), value.narrow(2, 0, longest)
    else:
        longest = functools.reduce(torch.sym_max, lengths_kv)  # max() would guard on order
        key, value = key.narrow(2, 0, longest), value.narrow(2, 0, longest)
        lengths = torch.tensor(lengths_kv, device=query.device)
    grouped = query.reshape(bsz, num_kv_heads, num_heads // num_kv_heads * q_len, head_dim)
    # the positions of the keys read; the lengths they are compared with are step inputs
    positions = torch.arange(key.shape[2], device=query.device)  # graph-ok: forward-shape
    visible = positions < lengths.view(-1, 1, 1, 1)
    out = F.scaled_dot_product_attention(grouped, key, value, attn_mask=visible, scale=scale)
    return out.view(bsz, num_heads, q_len, head_dim)


def _reference_attention(query, key, value, lengths_kv: Lengths, scale, causal):
    """BNSD attention: causal over the prompt itself (prefill), or over each row's cached
    keys (decode)."""
    if causal:
        return F.scaled_dot_product_attention(
            query, key, value, is_causal=True, scale=scale, enable_gqa=True
        )
    return _cached_attention(query, key, value, lengths_kv, scale)


@torch.library.custom_op(
    "ascend_runtime::fused_infer_attention",
    mutates_args=(),
)
def fused_infer_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    actual_seq_lengths: list[int],  # noqa: ARG001 (the NPU op's schema; queries are dense)
    actual_seq_lengths_kv: list[int],
    scale: float,
    causal: bool,
) -> torch.Tensor:
    return _reference_attention(query, key, value, actual_seq_lengths_kv, scale, causal)


@torch.library.custom_op(
    "ascend_runtime::fused_infer_attention_t",
    mutates_args=(),
)
def fused_infer_attention_t(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    actual_seq_lengths: torch.Tensor,  # noqa: ARG001 (as above)
    actual_seq_lengths_kv: torch.Tensor,
    scale: float,
    causal: bool,
) -> torch.Tensor:
    return _reference_attention(query, key, value, actual_seq_lengths_kv, scale, causal)


@fused_infer_attention.register_fake
@fused_infer_attention_t.register_fake
def _(query, *_schema_args):
    return torch.empty_like(query)


# How decode attention enters a compiled graph: as the opaque custom op (the default: one
# node with the NPU op's argument kinds, what the checking stand-in aot_eager must see), or
# traced as its plain maths, which graph.py asks for under the inductor perf stand-in: an
# opaque Python op costs a dispatcher round trip per layer that the NPU's C++ op does not.
_traced_attention = False


@contextmanager
def traced_attention():
    """Within this block, decode attention is traced as plain maths (read at trace time;
    dynamo guards on the flag, so a graph traced either way is never reused the other)."""
    global _traced_attention
    previous, _traced_attention = _traced_attention, True
    try:
        yield
    finally:
        _traced_attention = previous


def attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    actual_seq_lengths_q: Lengths,
    actual_seq_lengths_kv: Lengths,
    *,
    num_heads: int,  # noqa: ARG001 (ops/npu.py needs the head counts; here shapes carry them)
    num_kv_heads: int,  # noqa: ARG001
    scale: float,
    causal: bool,
) -> torch.Tensor:
    """BNSD in, BNSD out. Tensor lengths pick the torchair-style op, lists the torch_npu one."""
    if _traced_attention and not causal:
        return _cached_attention(query, key, value, actual_seq_lengths_kv, scale)
    op = (
        fused_infer_attention_t
        if isinstance(actual_seq_lengths_kv, torch.Tensor)
        else fused_infer_attention
    )
    return op(query, key, value, actual_seq_lengths_q, actual_seq_lengths_kv, scale, causal)


def moe_gating_top_k_softmax(logits: torch.Tensor, top_k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """npu_moe_gating_top_k_softmax's maths: softmax over the experts, then top-k.
    Returns (weights [T, k] in the logits' dtype, expert ids [T, k] int32)."""
    weights, expert_ids = torch.topk(torch.softmax(logits, dim=-1), top_k, dim=-1)
    return weights, expert_ids.to(torch.int32)


@torch.library.custom_op("ascend_runtime::grouped_matmul", mutates_args=())
def grouped_matmul(x: torch.Tensor, weight: torch.Tensor, group_list: torch.Tensor) -> torch.Tensor:
    """npu_grouped_matmul with group_type=0, group_list_type=1, split_item=3: x's rows come
    grouped by expert, group_list[e] rows for expert e, each group times weight[e] ([K, N]).
    Opaque to the compiler, like the NPU kernel: the per-expert split is data, not shape."""
    out = x.new_empty(x.shape[0], weight.shape[-1])
    start = 0
    for expert, count in enumerate(group_list.tolist()):
        if count:
            torch.mm(x[start : start + count], weight[expert], out=out[start : start + count])
            start += count
    return out


@grouped_matmul.register_fake
def _(x, weight, group_list):  # noqa: ARG001 (the output is [rows, N] whatever the groups)
    return x.new_empty(x.shape[0], weight.shape[-1])


def moe_experts(
    x: torch.Tensor,
    expert_ids: torch.Tensor,
    weights: torch.Tensor,
    w13: torch.Tensor,
    w2: torch.Tensor,
    shared: torch.Tensor | None,
) -> torch.Tensor:
    """The routed experts of tokens x [T, H]: out[t] = shared[t] + sum_k weights[t, k] *
    expert_{ids[t, k]}(x[t]). Sort-based dispatch (the order npu_moe_init_routing_v2
    produces), two grouped matmuls with SwiGLU between, weighted combine (as
    npu_moe_finalize_routing): every tensor is [T * k, ...] or [E], nothing data-sized."""
    num_tokens, top_k = expert_ids.shape
    flat = expert_ids.reshape(-1)
    order = torch.argsort(flat, stable=True)  # expanded row -> (token, k) slot
    expanded = x.index_select(0, order // top_k)
    counts = torch.zeros(w13.shape[0], dtype=torch.int64, device=x.device)
    counts.scatter_add_(0, flat.long(), torch.ones_like(flat, dtype=torch.int64))
    gate, up = grouped_matmul(expanded, w13, counts).chunk(2, dim=-1)
    y = grouped_matmul(F.silu(gate) * up, w2, counts)
    slots = torch.empty_like(y).index_copy_(0, order, y).view(num_tokens, top_k, -1)
    out = (slots * weights.to(y.dtype).unsqueeze(-1)).sum(dim=1)
    return out if shared is None else out + shared


def paged_scatter_update_(cache: torch.Tensor, slots: torch.Tensor, update: torch.Tensor) -> None:
    """cache.view(-1, N, D)[slots[t]] = update[t], in place (npu_scatter_nd_update_'s maths):
    cache is (num_blocks, block_size, N * D), slot = block_id * block_size + offset."""
    cache.view(-1, *update.shape[1:])[slots] = update


def _paged_reference(query, k_cache, v_cache, block_table, lengths_kv: Lengths, block_size, scale):
    """Gather each row's blocks through the block table, then the contiguous maths."""
    bsz, _, _, head_dim = query.shape
    longest = int(max(lengths_kv))
    blocks = block_table[:, : -(-longest // block_size)].long()

    def gathered(cache):
        rows = cache[blocks].view(bsz, blocks.shape[1] * block_size, -1, head_dim)
        return rows.transpose(1, 2)  # BNSD

    return _reference_attention(
        query, gathered(k_cache), gathered(v_cache), lengths_kv, scale, causal=False
    )


@torch.library.custom_op("ascend_runtime::paged_attention", mutates_args=())
def paged_attention_op(
    query: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_table: torch.Tensor,
    actual_seq_lengths_kv: list[int],
    block_size: int,
    scale: float,
) -> torch.Tensor:
    return _paged_reference(
        query, k_cache, v_cache, block_table, actual_seq_lengths_kv, block_size, scale
    )


@torch.library.custom_op("ascend_runtime::paged_attention_t", mutates_args=())
def paged_attention_op_t(
    query: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_table: torch.Tensor,
    actual_seq_lengths_kv: torch.Tensor,
    block_size: int,
    scale: float,
) -> torch.Tensor:
    return _paged_reference(
        query, k_cache, v_cache, block_table, actual_seq_lengths_kv, block_size, scale
    )


@paged_attention_op.register_fake
@paged_attention_op_t.register_fake
def _(query, *_schema_args):
    return torch.empty_like(query)


def paged_attention(
    query: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_table: torch.Tensor,
    actual_seq_lengths_q: Lengths,  # noqa: ARG001 (the NPU op's; one query token per row)
    actual_seq_lengths_kv: Lengths,
    *,
    num_heads: int,  # noqa: ARG001 (ops/npu.py needs the head counts; here shapes carry them)
    num_kv_heads: int,  # noqa: ARG001
    scale: float,
    block_size: int,
) -> torch.Tensor:
    """Decode attention over the paged cache: BNSD query in, BNSD out; Tensor lengths pick
    the torchair-style op, lists the torch_npu one (as `attention`). Under the inductor
    stand-in (`traced_attention`) the block gather and the masked attention are traced as
    maths, so the compiler fuses the gather into the attention instead of a Python op that
    gathers every row's blocks into new tensors each step."""
    if _traced_attention:
        bsz, _, _, head_dim = query.shape

        def rows(cache):  # (B, 1, S, N * D) -> BNSD
            gathered = gather_blocks(cache, block_table, actual_seq_lengths_kv, block_size)
            return gathered.view(bsz, gathered.shape[2], -1, head_dim).transpose(1, 2)

        return _cached_attention(query, rows(k_cache), rows(v_cache), actual_seq_lengths_kv, scale)
    op = (
        paged_attention_op_t
        if isinstance(actual_seq_lengths_kv, torch.Tensor)
        else paged_attention_op
    )
    return op(query, k_cache, v_cache, block_table, actual_seq_lengths_kv, block_size, scale)


# MLA (DeepSeek-V2/V3): decode attention of the absorbed query over the latent cache, one KV
# head (ascend_runtime/latent_cache.py). The maths is shared with ops/npu.py, which runs it
# where the fused attention's MLA mode does not fit.


def mla_maths(q_latent, q_pe, nope, rope, lengths_kv: Lengths, scale: float) -> torch.Tensor:
    """q_latent (B, N, Q, L) and q_pe (B, N, Q, R) over nope (B, 1, S, L) and rope
    (B, 1, S, R): scores q_latent.nope + q_pe.rope, row b masked past lengths_kv[b], fp32
    softmax, then the latent itself is the value: (B, N, Q, L) out. Branch-free on the
    lengths, as _cached_attention: List[int] lengths read the first max(lengths) tokens."""
    if isinstance(lengths_kv, torch.Tensor):
        lengths = lengths_kv
    else:
        longest = functools.reduce(torch.sym_max, lengths_kv)
        nope, rope = nope.narrow(2, 0, longest), rope.narrow(2, 0, longest)
        lengths = torch.tensor(lengths_kv, device=q_latent.device)
    scores = torch.matmul(q_latent, nope.transpose(-1, -2)) + torch.matmul(
        q_pe, rope.transpose(-1, -2)
    )
    positions = torch.arange(nope.shape[2], device=q_latent.device)  # graph-ok: forward-shape
    visible = positions < lengths.view(-1, 1, 1, 1)
    probs = (scores.float() * scale).masked_fill(~visible, float("-inf")).softmax(dim=-1)
    return torch.matmul(probs.to(nope.dtype), nope)


def gather_blocks(cache, block_table, lengths_kv: Lengths, block_size: int) -> torch.Tensor:
    """A paged (num_blocks, block_size, W) cache as each row's tokens in order, (B, 1, S, W):
    the block table's first ceil(max(lengths) / block_size) columns for List[int] lengths,
    all of them for Tensor lengths (static shapes)."""
    table = block_table
    if not isinstance(lengths_kv, torch.Tensor):
        longest = functools.reduce(torch.sym_max, lengths_kv)
        table = table[:, : (longest + block_size - 1) // block_size]
    rows = cache.index_select(0, table.reshape(-1).long())
    return rows.view(block_table.shape[0], 1, -1, cache.shape[-1])


def _paged_mla_maths(q_latent, q_pe, nope, rope, block_table, lengths_kv, block_size, scale):
    nope_rows = gather_blocks(nope, block_table, lengths_kv, block_size)
    rope_rows = gather_blocks(rope, block_table, lengths_kv, block_size)
    return mla_maths(q_latent, q_pe, nope_rows, rope_rows, lengths_kv, scale)


@torch.library.custom_op("ascend_runtime::mla_attention", mutates_args=())
def mla_attention_op(
    q_latent: torch.Tensor,
    q_pe: torch.Tensor,
    nope_cache: torch.Tensor,
    rope_cache: torch.Tensor,
    actual_seq_lengths_kv: list[int],
    scale: float,
) -> torch.Tensor:
    return mla_maths(q_latent, q_pe, nope_cache, rope_cache, actual_seq_lengths_kv, scale)


@torch.library.custom_op("ascend_runtime::mla_attention_t", mutates_args=())
def mla_attention_op_t(
    q_latent: torch.Tensor,
    q_pe: torch.Tensor,
    nope_cache: torch.Tensor,
    rope_cache: torch.Tensor,
    actual_seq_lengths_kv: torch.Tensor,
    scale: float,
) -> torch.Tensor:
    return mla_maths(q_latent, q_pe, nope_cache, rope_cache, actual_seq_lengths_kv, scale)


@torch.library.custom_op("ascend_runtime::paged_mla_attention", mutates_args=())
def paged_mla_attention_op(
    q_latent: torch.Tensor,
    q_pe: torch.Tensor,
    nope_cache: torch.Tensor,
    rope_cache: torch.Tensor,
    block_table: torch.Tensor,
    actual_seq_lengths_kv: list[int],
    block_size: int,
    scale: float,
) -> torch.Tensor:
    return _paged_mla_maths(
        q_latent, q_pe, nope_cache, rope_cache, block_table, actual_seq_lengths_kv,
        block_size, scale,
    )  # fmt: skip


@torch.library.custom_op("ascend_runtime::paged_mla_attention_t", mutates_args=())
def paged_mla_attention_op_t(
    q_latent: torch.Tensor,
    q_pe: torch.Tensor,
    nope_cache: torch.Tensor,
    rope_cache: torch.Tensor,
    block_table: torch.Tensor,
    actual_seq_lengths_kv: torch.Tensor,
    block_size: int,
    scale: float,
) -> torch.Tensor:
    return _paged_mla_maths(
        q_latent, q_pe, nope_cache, rope_cache, block_table, actual_seq_lengths_kv,
        block_size, scale,
    )  # fmt: skip


@mla_attention_op.register_fake
@mla_attention_op_t.register_fake
@paged_mla_attention_op.register_fake
@paged_mla_attention_op_t.register_fake
def _(q_latent, *_schema_args):
    return torch.empty_like(q_latent)


def mla_attention(
    q_latent: torch.Tensor,
    q_pe: torch.Tensor,
    nope_cache: torch.Tensor,
    rope_cache: torch.Tensor,
    actual_seq_lengths_q: Lengths,  # noqa: ARG001 (one query token per row)
    actual_seq_lengths_kv: Lengths,
    *,
    num_heads: int,  # noqa: ARG001 (ops/npu.py's; here shapes carry it)
    scale: float,
) -> torch.Tensor:
    """Absorbed MLA decode over the contiguous latent cache; one opaque node (Tensor
    lengths: the torchair-style op), traced as maths under the inductor stand-in."""
    args = (q_latent, q_pe, nope_cache, rope_cache, actual_seq_lengths_kv, scale)
    if _traced_attention:
        return mla_maths(*args)
    tensor = isinstance(actual_seq_lengths_kv, torch.Tensor)
    return (mla_attention_op_t if tensor else mla_attention_op)(*args)


def paged_mla_attention(
    q_latent: torch.Tensor,
    q_pe: torch.Tensor,
    nope_cache: torch.Tensor,
    rope_cache: torch.Tensor,
    block_table: torch.Tensor,
    actual_seq_lengths_q: Lengths,  # noqa: ARG001 (one query token per row)
    actual_seq_lengths_kv: Lengths,
    *,
    num_heads: int,  # noqa: ARG001
    scale: float,
    block_size: int,
) -> torch.Tensor:
    """Absorbed MLA decode over the paged latent cache (each row's blocks)."""
    args = (q_latent, q_pe, nope_cache, rope_cache, block_table, actual_seq_lengths_kv)
    if _traced_attention:
        return _paged_mla_maths(*args, block_size, scale)
    tensor = isinstance(actual_seq_lengths_kv, torch.Tensor)
    return (paged_mla_attention_op_t if tensor else paged_mla_attention_op)(
        *args, block_size, scale
    )


def deepseek_gating(logits: torch.Tensor, bias: torch.Tensor | None, routing):
    """DeepSeek's routing (layers/deepseek_router.py); ops/npu.py fuses noaux_tc."""
    return route(logits, bias, routing)
