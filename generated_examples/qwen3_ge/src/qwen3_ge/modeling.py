"""Dense GQA decoder: prefill runs eager, only `decode` is compiled.

Everything that changes between decode steps (positions, cache write index, sequence
lengths, cos/sin) enters as an input, so one decode graph serves every step. The blocks
live in layers/: norm.py, rope.py, attention.py, mlp.py.
"""

from __future__ import annotations

from types import ModuleType

import torch
from torch import nn

from .architecture import ModelArgs
from .kv_cache import KVCache
from .layers.attention import Attention, AttentionMetadata
from .layers.mlp import MLP
from .layers.norm import RMSNorm
from .layers.rope import RotaryEmbedding
from .ops import Lengths


class DecoderLayer(nn.Module):
    def __init__(self, args: ModelArgs, ops: ModuleType):
        super().__init__()
        self.input_layernorm = RMSNorm(args.hidden_size, args.rms_norm_eps, ops)
        self.self_attn = Attention(args, ops)
        self.post_attention_layernorm = RMSNorm(args.hidden_size, args.rms_norm_eps, ops)
        self.mlp = MLP(args.hidden_size, args.intermediate_size)

    def forward(self, x: torch.Tensor, meta: AttentionMetadata) -> torch.Tensor:
        h = x + self.self_attn(self.input_layernorm(x), meta)
        return h + self.mlp(self.post_attention_layernorm(h))


class Transformer(nn.Module):
    # Tensors decode reads through the model that the host rewrites between steps (a paged
    # cache's block table): none here, the contiguous cache is written inside the graph.
    host_written_tensors: tuple[str, ...] = ()

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

    def setup_caches(
        self, batch_size: int, max_seq_len: int | None = None, kv_cache_tokens: None = None
    ) -> None:
        """Allocate every layer's KV cache once, on the weights' device and dtype; decode
        writes into it in place. (`kv_cache_tokens` is a paged cache's budget: every row
        here holds max_seq_len positions.)"""
        if kv_cache_tokens is not None:
            raise ValueError("kv_cache_tokens sets a paged cache's budget; this one is contiguous")
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

    def prepare_decode(self, kv_len: list[int], active: list[bool] | None = None) -> None:
        """Host side, before each decode call: nothing to prepare, the contiguous cache is
        written at kv_len inside the graph (a paged package reserves blocks here)."""

    kv_cache_tokens = None  # a paged cache's budget; every row here owns max_seq_len positions

    def start_request(self, tokens_per_row: list[int]) -> None:
        """Every row owns max_seq_len positions: nothing to reserve (generation checks the
        lengths against them)."""

    def release_row(self, row: int) -> None:
        """Nothing to release: a contiguous row's positions are its own."""

    def forward(self, input_ids: torch.Tensor, meta: AttentionMetadata) -> torch.Tensor:
        """Logits of the last position of each row: (batch, 1, vocab)."""
        h = self.embed_tokens(input_ids)
        for layer in self.layers:
            h = layer(h, meta)
        if meta.is_prefill:
            h = h[:, -1:]
        return self.lm_head(self.norm(h))

    def _step(
        self, input_ids, position_ids, kv_len, lengths_q, lengths_kv, is_prefill, cache_row=None
    ):
        if self.layers[0].self_attn.kv_cache is None:
            raise RuntimeError("no KV cache: call model.setup_caches(batch_size) first")
        cos, sin = self.rotary(position_ids)
        meta = AttentionMetadata(cos, sin, kv_len, lengths_q, lengths_kv, is_prefill, cache_row)
        return self(input_ids, meta)

    def prefill(
        self,
        input_ids: torch.Tensor,
        position_ids: torch.Tensor,
        kv_len: torch.Tensor,
        actual_seq_lengths_q: Lengths,
        actual_seq_lengths_kv: Lengths,
        cache_row: int | None = None,
    ) -> torch.Tensor:
        """Eager: prompt lengths vary, so prefill is never compiled. With `cache_row`, a
        batch-1 prompt fills that row of the KV cache only (a ragged batch, generation.py)."""
        return self._step(
            input_ids,
            position_ids,
            kv_len,
            actual_seq_lengths_q,
            actual_seq_lengths_kv,
            True,
            cache_row,
        )

    def decode(
        self,
        input_ids: torch.Tensor,
        position_ids: torch.Tensor,
        kv_len: torch.Tensor,
        actual_seq_lengths_q: Lengths,
        actual_seq_lengths_kv: Lengths,
    ) -> torch.Tensor:
        """One token per row with fixed shapes: the method `graph.compile_decode` compiles."""
        return self._step(
            input_ids, position_ids, kv_len, actual_seq_lengths_q, actual_seq_lengths_kv, False
        )
