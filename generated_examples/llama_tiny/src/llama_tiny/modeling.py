"""Dense GQA decoder: prefill runs eager, only `decode` is compiled.

Everything that changes between decode steps (positions, cache write index,
sequence lengths, cos/sin) enters `forward` as an input, so one decode graph
serves every step.
"""

from __future__ import annotations

from types import ModuleType

import torch
from torch import nn

from .configuration import ModelArgs
from .kv_cache import KVCache
from .ops import Lengths


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float, ops: ModuleType):
        super().__init__()
        self.eps = eps
        self.ops = ops
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.ops.rms_norm(x, self.weight, self.eps)


class RotaryEmbedding(nn.Module):
    """cos/sin for every position, computed once at init; prefill slices, decode gathers."""

    def __init__(self, args: ModelArgs):
        super().__init__()
        dim = args.head_dim
        inv_freq = 1.0 / args.rope_theta ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim)
        freqs = torch.outer(torch.arange(args.max_seq_len, dtype=torch.float32), inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)
        self.register_buffer("cos_cached", emb.cos(), persistent=False)
        self.register_buffer("sin_cached", emb.sin(), persistent=False)

    def prefill(self, bsz: int, seq_len: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Prompts start at position 0: slice. Shapes (batch, seq_len, 1, head_dim): BSND
        with N=1, as the fused rotary op takes."""
        shape = (bsz, -1, -1, -1)
        cos, sin = self.cos_cached[:seq_len], self.sin_cached[:seq_len]
        return cos[None, :, None].expand(shape), sin[None, :, None].expand(shape)

    def decode(self, position_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Gather each row's position; no host value enters the graph."""
        bsz, seq_len = position_ids.shape
        index = position_ids.view(-1)
        cos = torch.index_select(self.cos_cached, 0, index)
        sin = torch.index_select(self.sin_cached, 0, index)
        return cos.view(bsz, seq_len, 1, -1), sin.view(bsz, seq_len, 1, -1)


class Attention(nn.Module):
    def __init__(self, args: ModelArgs, ops: ModuleType):
        super().__init__()
        self.ops = ops
        self.num_heads = args.num_attention_heads
        self.num_kv_heads = args.num_key_value_heads
        self.head_dim = args.head_dim
        self.scale = args.head_dim**-0.5
        self.qkv_sizes = [
            d * args.head_dim for d in (self.num_heads, self.num_kv_heads, self.num_kv_heads)
        ]
        self.qkv_proj = nn.Linear(args.hidden_size, sum(self.qkv_sizes), bias=False)
        self.o_proj = nn.Linear(self.num_heads * args.head_dim, args.hidden_size, bias=False)
        self.kv_cache: KVCache | None = None

    def forward(
        self,
        x: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        kv_len: torch.Tensor,
        actual_seq_lengths_q: Lengths,
        actual_seq_lengths_kv: Lengths,
        is_prefill: bool,
    ) -> torch.Tensor:
        bsz, seq_len, _ = x.shape
        q, k, v = self.qkv_proj(x).split(self.qkv_sizes, dim=-1)
        q = q.view(bsz, seq_len, self.num_heads, self.head_dim)
        k = k.view(bsz, seq_len, self.num_kv_heads, self.head_dim)
        v = v.view(bsz, seq_len, self.num_kv_heads, self.head_dim)
        q, k = self.ops.apply_rotary(q, k, cos, sin)
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)  # BNSD

        if is_prefill:
            self.kv_cache.write_prefix(k, v)
        else:
            self.kv_cache.update(kv_len, k, v)
            k, v = self.kv_cache.k_cache, self.kv_cache.v_cache
        out = self.ops.attention(
            q,
            k,
            v,
            actual_seq_lengths_q,
            actual_seq_lengths_kv,
            num_heads=self.num_heads,
            num_kv_heads=self.num_kv_heads,
            scale=self.scale,
            causal=is_prefill,
        )
        return self.o_proj(out.transpose(1, 2).reshape(bsz, seq_len, -1))


class MLP(nn.Module):
    """SwiGLU with gate and up fused into one matmul."""

    def __init__(self, args: ModelArgs):
        super().__init__()
        self.intermediate_size = args.intermediate_size
        self.gate_up_proj = nn.Linear(args.hidden_size, 2 * args.intermediate_size, bias=False)
        self.down_proj = nn.Linear(args.intermediate_size, args.hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = self.gate_up_proj(x).split(self.intermediate_size, dim=-1)
        return self.down_proj(nn.functional.silu(gate) * up)


class DecoderLayer(nn.Module):
    def __init__(self, args: ModelArgs, ops: ModuleType):
        super().__init__()
        self.input_layernorm = RMSNorm(args.hidden_size, args.rms_norm_eps, ops)
        self.self_attn = Attention(args, ops)
        self.post_attention_layernorm = RMSNorm(args.hidden_size, args.rms_norm_eps, ops)
        self.mlp = MLP(args)

    def forward(self, x: torch.Tensor, *attn_args) -> torch.Tensor:
        h = x + self.self_attn(self.input_layernorm(x), *attn_args)
        return h + self.mlp(self.post_attention_layernorm(h))


class Transformer(nn.Module):
    def __init__(self, args: ModelArgs, ops: ModuleType):
        super().__init__()
        self.args = args
        self.embed_tokens = nn.Embedding(args.vocab_size, args.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(args, ops) for _ in range(args.num_hidden_layers))
        self.norm = RMSNorm(args.hidden_size, args.rms_norm_eps, ops)
        self.lm_head = nn.Linear(args.hidden_size, args.vocab_size, bias=False)
        if args.tie_word_embeddings:
            self.lm_head.weight = self.embed_tokens.weight
        self.rotary = RotaryEmbedding(args)

    def setup_caches(self, batch_size: int, max_seq_len: int | None = None) -> None:
        """Allocate every layer's KV cache once; decode writes into it in place."""
        max_seq_len = max_seq_len or self.args.max_seq_len
        weight = self.embed_tokens.weight
        for layer in self.layers:
            attn = layer.self_attn
            attn.kv_cache = KVCache(
                batch_size,
                attn.num_kv_heads,
                max_seq_len,
                attn.head_dim,
                attn.ops,
                dtype=weight.dtype,
                device=weight.device,
            )

    def forward(
        self,
        input_ids: torch.Tensor,
        position_ids: torch.Tensor,
        kv_len: torch.Tensor,
        actual_seq_lengths_q: Lengths,
        actual_seq_lengths_kv: Lengths,
        cos: torch.Tensor,
        sin: torch.Tensor,
        is_prefill: bool,
    ) -> torch.Tensor:
        """Logits of the last position of each row: (batch, 1, vocab)."""
        h = self.embed_tokens(input_ids)
        for layer in self.layers:
            h = layer(h, cos, sin, kv_len, actual_seq_lengths_q, actual_seq_lengths_kv, is_prefill)
        if is_prefill:
            h = h[:, -1:]
        return self.lm_head(self.norm(h))

    def prefill(self, input_ids, position_ids, kv_len, actual_seq_lengths_q, actual_seq_lengths_kv):
        """Eager: prompt lengths vary, so prefill is never compiled."""
        cos, sin = self.rotary.prefill(*input_ids.shape)
        return self(
            input_ids,
            position_ids,
            kv_len,
            actual_seq_lengths_q,
            actual_seq_lengths_kv,
            cos,
            sin,
            is_prefill=True,
        )

    def decode(self, input_ids, position_ids, kv_len, actual_seq_lengths_q, actual_seq_lengths_kv):
        """One token per row with fixed shapes: the method `graph.compile_decode` compiles."""
        cos, sin = self.rotary.decode(position_ids)
        return self(
            input_ids,
            position_ids,
            kv_len,
            actual_seq_lengths_q,
            actual_seq_lengths_kv,
            cos,
            sin,
            is_prefill=False,
        )
