"""GQA decoder with mixture-of-experts layers: prefill runs eager, only `decode` is compiled.

Everything that changes between decode steps (positions, cache write index, sequence
lengths, cos/sin) enters as an input, so one decode graph serves every step. The blocks
live in layers/: norm.py, rope.py, attention.py, mlp.py, moe.py.
"""

from __future__ import annotations

from types import ModuleType

import torch
from torch import nn

from .architecture import ModelArgs
from .block_allocator import BLOCK_SIZE, KV_CACHE_TOKENS, BlockAllocator, pool_blocks
from .layers.attention import Attention, AttentionMetadata
from .layers.mlp import MLP
from .layers.moe import SparseMoeBlock
from .layers.norm import RMSNorm
from .layers.rope import RotaryEmbedding
from .ops import Lengths
from .paged_kv_cache import PagedKVCache


class DecoderLayer(nn.Module):
    def __init__(self, args: ModelArgs, ops: ModuleType, layer_idx: int):
        super().__init__()
        self.input_layernorm = RMSNorm(args.hidden_size, args.rms_norm_eps, ops)
        self.self_attn = Attention(args, ops)
        self.post_attention_layernorm = RMSNorm(args.hidden_size, args.rms_norm_eps, ops)
        if layer_idx in args.moe_layers:
            self.mlp = SparseMoeBlock(args, ops)
        else:
            self.mlp = MLP(args.hidden_size, args.intermediate_size)

    def forward(self, x: torch.Tensor, meta: AttentionMetadata) -> torch.Tensor:
        h = x + self.self_attn(self.input_layernorm(x), meta)
        return h + self.mlp(self.post_attention_layernorm(h))


class Transformer(nn.Module):
    # Tensors decode reads through the model that the host rewrites between steps: they
    # must stay graph inputs (graph.py's inductor stand-in freezes nothing for them).
    host_written_tensors = ("block_allocator.block_table", "block_allocator.slot_mapping")

    def __init__(self, args: ModelArgs, ops: ModuleType):
        super().__init__()
        self.args = args
        self.embed_tokens = nn.Embedding(args.vocab_size, args.hidden_size)
        self.layers = nn.ModuleList(
            DecoderLayer(args, ops, i) for i in range(args.num_hidden_layers)
        )
        self.norm = RMSNorm(args.hidden_size, args.rms_norm_eps, ops)
        self.lm_head = nn.Linear(args.hidden_size, args.vocab_size, bias=False)
        if args.tie_word_embeddings:
            self.lm_head.weight = self.embed_tokens.weight
        self.rotary = RotaryEmbedding(args)

    def setup_caches(
        self,
        batch_size: int,
        max_seq_len: int | None = None,
        kv_cache_tokens: int | None = None,
        block_size: int = BLOCK_SIZE,
    ) -> None:
        """Allocate one pool of KV blocks for a budget of `kv_cache_tokens` (all rows
        together; None: the rendered KV_CACHE_TOKENS) and every layer's paged cache in it,
        once, on the weights' device and dtype; rows take blocks as they grow
        (block_allocator.py)."""
        max_seq_len = max_seq_len or self.args.max_seq_len
        kv_cache_tokens = kv_cache_tokens or KV_CACHE_TOKENS
        weight = self.embed_tokens.weight
        self.block_allocator = BlockAllocator(
            batch_size,
            pool_blocks(kv_cache_tokens, block_size),
            block_size,
            max_seq_len,
            device=weight.device,
        )
        for layer in self.layers:
            attn = layer.self_attn
            attn.kv_cache = PagedKVCache(
                self.block_allocator,
                attn.num_kv_heads,
                attn.head_dim,
                attn.ops,
                dtype=weight.dtype,
                device=weight.device,
            )

    def prepare_decode(self, kv_len: list[int], active: list[bool] | None = None) -> None:
        """Host side, before each decode call: reserve a block for a row entering a new one
        and fill the slot_mapping (an inactive row, finished or padding, writes the null
        block). Raises CacheBudgetError when the pool is exhausted."""
        self.block_allocator.decode_slots(kv_len, active or [True] * len(kv_len))

    @property
    def kv_cache_tokens(self) -> int:
        """The token budget the block pool was allocated for (whole blocks, null excluded)."""
        return (self.block_allocator.num_blocks - 1) * self.block_allocator.block_size

    def start_request(self, tokens_per_row: list[int]) -> None:
        """Before a new request's prefill: every row's blocks go back to the pool, and the
        request's worst case (`tokens_per_row` cache positions each) must fit the budget,
        else CacheBudgetError before anything runs."""
        self.block_allocator.release_all()
        self.block_allocator.check_request(tokens_per_row)

    def release_row(self, row: int) -> None:
        """A finished row's blocks go back to the pool (it writes the null block from now)."""
        self.block_allocator.release(row)

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
        # A new prompt per row: its old blocks go back to the pool, then the prompt's are
        # reserved once for every layer (CacheBudgetError, nothing written, when they do
        # not fit the budget).
        rows = range(input_ids.shape[0]) if cache_row is None else [cache_row]
        for row in rows:
            self.block_allocator.release(row)
        for row in rows:
            self.block_allocator.reserve(row, input_ids.shape[1])
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
