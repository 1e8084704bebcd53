"""Multi-head latent attention (MLA, DeepSeek-V2/V3) over the latent KV cache.

Each token's keys and values are compressed into one latent of kv_lora_rank (normed by
kv_a_layernorm) plus a shared rope key of qk_rope_head_dim; the cache holds those two
(ascend_runtime/latent_cache.py), written in place. The graph-mode contract this layer
keeps (docs/design.md):
- prefill (eager) expands the latent through kv_b_proj into per-head K and V and runs the
  fused attention causally, as cann-recipes-infer's models/deepseek_r1/models/
  modeling_deepseek.py (`forward_page_attention_normal`);
- decode is absorbed (`forward_page_attention_absorb`): W_UK, kv_b_proj's key rows, is
  folded into the query, attention runs over the latent itself with one KV head (key =
  value = the latent, plus the rope part), and W_UV is applied to the output. kv_b_proj's
  weight [N * (nope + v), kv_lora_rank] is split per head into W_UK [N, nope, kv_lora] and
  W_UV [N, v, kv_lora]: views of the one parameter, no copy.
Every per-step value (cos/sin, kv_len, actual_seq_lengths) arrives in `meta`.

Under attention TP this rank holds num_attention_heads / attn_tp_size heads: q_b_proj (or
q_proj) and kv_b_proj are column-parallel by head, o_proj row-parallel (a partial sum the
decoder layer all-reduces). The latent and its cache are whole on every rank, as
cann-recipes-infer keeps them: kv_a_proj_with_mqa is replicated.
"""

from __future__ import annotations

from types import ModuleType

import torch
from ascend_runtime.layers.linear import ColumnParallelLinear, RowParallelLinear
from ascend_runtime.layers.norm import RMSNorm
from ascend_runtime.layers.rope import rotate_interleaved
from ascend_runtime.layers.rope_scaling import softmax_mscale
from ascend_runtime.model import AttentionMetadata
from ascend_runtime.parallel import SINGLE, Parallel
from torch import nn
from torch.nn import functional as F

from ..architecture import ModelArgs


class Attention(nn.Module):
    def __init__(self, args: ModelArgs, ops: ModuleType, parallel: Parallel = SINGLE):
        super().__init__()
        self.ops = ops
        tp = parallel.attn_tp
        self.num_heads = args.num_attention_heads // tp.size  # this rank's heads
        self.nope_dim, self.rope_dim = args.qk_nope_head_dim, args.qk_rope_head_dim
        self.v_dim, self.kv_lora_rank = args.v_head_dim, args.kv_lora_rank
        self.qk_dim = self.nope_dim + self.rope_dim
        self.scale = self.qk_dim**-0.5 * softmax_mscale(args)
        self.rope_interleave = args.rope_interleave
        query_width = args.num_attention_heads * self.qk_dim
        if args.q_lora_rank:  # DeepSeek-V3: the query through its own low-rank latent
            self.q_a_proj = nn.Linear(args.hidden_size, args.q_lora_rank, bias=False)
            self.q_a_layernorm = RMSNorm(args.q_lora_rank, args.rms_norm_eps, ops)
            self.q_b_proj = ColumnParallelLinear.split(args.q_lora_rank, (query_width,), tp)
        else:  # DeepSeek-V2-Lite
            self.q_proj = ColumnParallelLinear.split(args.hidden_size, (query_width,), tp)
        self.kv_a_proj_with_mqa = nn.Linear(
            args.hidden_size, self.kv_lora_rank + self.rope_dim, bias=False
        )
        self.kv_a_layernorm = RMSNorm(self.kv_lora_rank, args.rms_norm_eps, ops)
        heads_kv = args.num_attention_heads * (self.nope_dim + self.v_dim)
        self.kv_b_proj = ColumnParallelLinear.split(self.kv_lora_rank, (heads_kv,), tp)
        self.o_proj = RowParallelLinear(args.num_attention_heads * self.v_dim, args.hidden_size, tp)
        self.latent_dims = (self.kv_lora_rank, self.rope_dim)  # the cache model.py allocates
        self.kv_cache = None  # LatentCache or PagedLatentCache: model.setup_caches fills it

    def _query(self, x: torch.Tensor) -> torch.Tensor:
        if hasattr(self, "q_proj"):
            return self.q_proj(x)
        return self.q_b_proj(self.q_a_layernorm(self.q_a_proj(x)))

    def _rotate(self, q_pe, k_pe, cos, sin):
        """q_pe (B, S, N, R), k_pe (B, S, 1, R)."""
        if self.rope_interleave:
            return rotate_interleaved(q_pe, cos, sin), rotate_interleaved(k_pe, cos, sin)
        return self.ops.apply_rotary(q_pe, k_pe, cos, sin)

    def forward(self, x: torch.Tensor, meta: AttentionMetadata) -> torch.Tensor:
        bsz, seq_len, _ = x.shape
        q = self._query(x).view(bsz, seq_len, self.num_heads, self.qk_dim)
        q_nope, q_pe = q.split([self.nope_dim, self.rope_dim], dim=-1)
        latent, k_pe = self.kv_a_proj_with_mqa(x).split([self.kv_lora_rank, self.rope_dim], -1)
        latent = self.kv_a_layernorm(latent).unsqueeze(1)  # (B, 1, S, kv_lora_rank)
        q_pe, k_pe = self._rotate(q_pe, k_pe.unsqueeze(2), meta.cos, meta.sin)
        k_pe = k_pe.transpose(1, 2)  # (B, 1, S, R)
        if meta.is_prefill:
            self.kv_cache.write_prefix(latent, k_pe, meta.cache_row)
            out = self._prefill_attention(q_nope, q_pe, latent, k_pe, meta)
        else:  # the new token into the cache, then the absorbed attention over it
            self.kv_cache.update(meta.kv_len, latent, k_pe)
            w_uk, w_uv = self.kv_b_proj.weight.view(self.num_heads, -1, self.kv_lora_rank).split(
                [self.nope_dim, self.v_dim], dim=1
            )
            q_latent = torch.matmul(q_nope.transpose(1, 2), w_uk)  # (B, N, 1, kv_lora_rank)
            out = self.kv_cache.attend(
                q_latent, q_pe.transpose(1, 2), meta, num_heads=self.num_heads, scale=self.scale
            )
            out = torch.matmul(out, w_uv.transpose(1, 2))  # (B, N, 1, v_head_dim)
        return self.o_proj(out.transpose(1, 2).reshape(bsz, seq_len, -1))

    def _prefill_attention(self, q_nope, q_pe, latent, k_pe, meta) -> torch.Tensor:
        """Per-head K and V from the latent, causal attention over the prompt: (B, N, S, v).
        The fused attention takes equal q/k/v head dims, so the narrower side is padded
        with zeros (they add nothing to q.k, and the padded output columns are dropped)."""
        bsz, seq_len = q_nope.shape[:2]
        kv = self.kv_b_proj(latent.squeeze(1)).view(bsz, seq_len, self.num_heads, -1)
        k_nope, v = kv.split([self.nope_dim, self.v_dim], dim=-1)
        k_pe = k_pe.transpose(1, 2).expand(-1, -1, self.num_heads, -1)
        q = torch.cat((q_nope, q_pe), dim=-1)
        k = torch.cat((k_nope, k_pe), dim=-1)
        width = max(self.qk_dim, self.v_dim)
        q, k = (F.pad(t, (0, width - self.qk_dim)) for t in (q, k))
        v = F.pad(v, (0, width - self.v_dim))
        out = self.ops.attention(
            q.transpose(1, 2),
            k.transpose(1, 2),
            v.transpose(1, 2),
            meta.actual_seq_lengths_q,
            meta.actual_seq_lengths_kv,
            num_heads=self.num_heads,
            num_kv_heads=self.num_heads,
            scale=self.scale,
            causal=True,
        )
        return out[..., : self.v_dim]
