"""Grouped-query attention over the preallocated KV cache.

The graph-mode contract this layer keeps (docs/design.md): decode writes its one new
token per row into the cache in place (`kv_cache.update`: torch_npu.scatter_update_, or
npu_scatter_nd_update_ for a paged cache) and attends with the fused
npu_fused_infer_attention_score (`kv_cache.attend`, ascend_runtime/ops/npu.py), every
per-step value (cos/sin, kv_len, actual_seq_lengths) arriving in `meta`.

Under attention TP this rank holds num_attention_heads / attn_tp_size query heads and its
KV heads (one, replicated, when there are fewer KV heads than ranks), and caches only
those; o_proj is row-parallel, so the output is a partial sum the decoder layer
all-reduces (ascend_runtime/layers/linear.py).
"""

from __future__ import annotations

from types import ModuleType

import torch
from ascend_runtime.layers.linear import RowParallelLinear, qkv_linear
from ascend_runtime.layers.norm import RMSNorm
from ascend_runtime.model import AttentionMetadata
from ascend_runtime.parallel import SINGLE, Parallel
from torch import nn

from ..architecture import ModelArgs


class Attention(nn.Module):
    def __init__(self, args: ModelArgs, ops: ModuleType, parallel: Parallel = SINGLE):
        super().__init__()
        self.ops = ops
        tp = parallel.attn_tp
        self.head_dim = args.head_dim
        self.scale = args.head_dim**-0.5
        self.qkv_proj = qkv_linear(
            args.hidden_size,
            args.head_dim,
            args.num_attention_heads,
            args.num_key_value_heads,
            tp,
            bias=args.attention_bias,
        )
        self.qkv_sizes = self.qkv_proj.local_sizes  # this rank's q, k, v widths
        self.num_heads, self.num_kv_heads = (n // args.head_dim for n in self.qkv_sizes[:2])
        self.o_proj = RowParallelLinear(
            args.num_attention_heads * args.head_dim, args.hidden_size, tp
        )
        self.qk_norm = args.qk_norm  # Qwen3: RMSNorm over each head's q and k
        if self.qk_norm:
            self.q_norm = RMSNorm(args.head_dim, args.rms_norm_eps, ops)
            self.k_norm = RMSNorm(args.head_dim, args.rms_norm_eps, ops)
        self.kv_cache = None  # KVCache or PagedKVCache: model.setup_caches fills it

    def forward(self, x: torch.Tensor, meta: AttentionMetadata) -> torch.Tensor:
        bsz, seq_len, _ = x.shape
        q, k, v = self.qkv_proj(x).split(self.qkv_sizes, dim=-1)
        q = q.view(bsz, seq_len, self.num_heads, self.head_dim)
        k = k.view(bsz, seq_len, self.num_kv_heads, self.head_dim)
        v = v.view(bsz, seq_len, self.num_kv_heads, self.head_dim)
        if self.qk_norm:
            q, k = self.q_norm(q), self.k_norm(k)
        q, k = self.ops.apply_rotary(q, k, meta.cos, meta.sin)
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)  # BNSD

        if meta.is_prefill:  # causal attention over the prompt itself, then cache it
            self.kv_cache.write_prefix(k, v, meta.cache_row)
            out = self.ops.attention(
                q,
                k,
                v,
                meta.actual_seq_lengths_q,
                meta.actual_seq_lengths_kv,
                num_heads=self.num_heads,
                num_kv_heads=self.num_kv_heads,
                scale=self.scale,
                causal=True,
            )
        else:  # the new token into the cache, then attention over the row's cached keys
            self.kv_cache.update(meta.kv_len, k, v)
            out = self.kv_cache.attend(q, meta, num_heads=self.num_heads, scale=self.scale)
        return self.o_proj(out.transpose(1, 2).reshape(bsz, seq_len, -1))
