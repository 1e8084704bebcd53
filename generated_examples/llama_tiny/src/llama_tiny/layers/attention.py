"""Grouped-query attention over the preallocated KV cache.

The graph-mode contract this layer keeps (docs/design.md): decode writes its one new
token per row into the cache in place (`kv_cache.update`: torch_npu.scatter_update_, or
npu_scatter_nd_update_ for a paged cache) and attends with the fused
npu_fused_infer_attention_score (`kv_cache.attend`, ascend_runtime/ops/npu.py), every
per-step value (cos/sin, kv_len, actual_seq_lengths) arriving in `meta`.
"""

from __future__ import annotations

from types import ModuleType

import torch
from ascend_runtime.layers.norm import RMSNorm
from ascend_runtime.model import AttentionMetadata
from torch import nn

from ..architecture import ModelArgs


class Attention(nn.Module):
    def __init__(self, args: ModelArgs, ops: ModuleType):
        super().__init__()
        self.ops = ops
        self.num_heads = args.num_attention_heads
        self.num_kv_heads = args.num_key_value_heads
        self.head_dim = args.head_dim
        self.scale = args.head_dim**-0.5
        self.qkv_sizes = [
            n * args.head_dim for n in (self.num_heads, self.num_kv_heads, self.num_kv_heads)
        ]
        self.qkv_proj = nn.Linear(args.hidden_size, sum(self.qkv_sizes), bias=args.attention_bias)
        self.o_proj = nn.Linear(self.num_heads * args.head_dim, args.hidden_size, bias=False)
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
