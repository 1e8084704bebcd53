"""Preallocated KV cache, written in place.

Layout BNSD: (batch, kv_heads, max_seq_len + 1, head_dim). The buffers are allocated
once, never reallocated or returned from the decode graph, so their addresses
stay fixed across steps (graph capture replays on fixed addresses).

The last position is a spare that nothing writes: decode attention reads the first
max(lengths) positions, and with a read that can span the whole buffer torch.compile
guards on the two being equal, a recompile on the step that fills the cache.
"""

from __future__ import annotations

from types import ModuleType

import torch
from torch import nn

SPARE_POSITIONS = 1  # per row, past max_seq_len (see above)


class KVCache(nn.Module):
    def __init__(
        self,
        batch_size: int,
        num_kv_heads: int,
        max_seq_len: int,
        head_dim: int,
        ops: ModuleType,
        dtype: torch.dtype,
        device: torch.device | None = None,
    ):
        super().__init__()
        self.ops = ops
        shape = (batch_size, num_kv_heads, max_seq_len + SPARE_POSITIONS, head_dim)
        self.register_buffer(
            "k_cache", torch.zeros(shape, dtype=dtype, device=device), persistent=False
        )
        self.register_buffer(
            "v_cache", torch.zeros(shape, dtype=dtype, device=device), persistent=False
        )

    def write_prefix(self, k: torch.Tensor, v: torch.Tensor, row: int | None = None) -> None:
        """Prefill (eager): positions [0, seq_len) of every row, or, with `row`, of that one
        cache row only (k, v of batch 1: one prompt of a ragged batch, generation.py)."""
        seq_len = k.shape[2]
        rows = slice(None) if row is None else slice(row, row + 1)
        self.k_cache[rows, :, :seq_len].copy_(k)
        self.v_cache[rows, :, :seq_len].copy_(v)

    @property
    def capacity(self) -> tuple[int, int]:
        """(rows, positions per row), from shapes (no device sync)."""
        return self.k_cache.shape[0], self.k_cache.shape[2] - SPARE_POSITIONS

    def update(self, kv_len: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
        """Decode: row b's single new token goes to position kv_len[b]."""
        self.ops.scatter_update_(self.k_cache, kv_len, k)
        self.ops.scatter_update_(self.v_cache, kv_len, v)

    def attend(self, query: torch.Tensor, meta, *, num_heads: int, scale: float) -> torch.Tensor:
        """Decode attention of query (BNSD, one token per row) over each row's cached keys."""
        return self.ops.attention(
            query,
            self.k_cache,
            self.v_cache,
            meta.actual_seq_lengths_q,
            meta.actual_seq_lengths_kv,
            num_heads=num_heads,
            num_kv_heads=self.k_cache.shape[1],
            scale=scale,
            causal=False,
        )
