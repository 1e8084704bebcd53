"""Paged KV cache of one layer: K and V in blocks from the shared pool, written in place.

Layout per layer (num_blocks, block_size, kv_heads * head_dim), the (blocknum, blocksize, H)
form torch_npu's npu_fused_infer_attention_score reads with a block_table (and
cann-recipes-infer's models/qwen3_moe k_cache.view(block_num, block_size, -1)). Rows find
their blocks through the BlockAllocator's block_table; each written token goes to its
slot, block_id * block_size + offset (slot_mapping). The tensors are allocated once, so
their addresses stay fixed across steps, and block 0 (the null block) takes the writes of
finished or padded rows.
"""

from __future__ import annotations

from types import ModuleType

import torch
from torch import nn

from .block_allocator import BlockAllocator


class PagedKVCache(nn.Module):
    def __init__(
        self,
        allocator: BlockAllocator,
        num_kv_heads: int,
        head_dim: int,
        ops: ModuleType,
        dtype: torch.dtype,
        device: torch.device | None = None,
    ):
        super().__init__()
        self.ops = ops
        self.allocator = allocator
        self.num_kv_heads, self.head_dim = num_kv_heads, head_dim
        shape = (allocator.num_blocks, allocator.block_size, num_kv_heads * head_dim)
        self.register_buffer(
            "k_cache", torch.zeros(shape, dtype=dtype, device=device), persistent=False
        )
        self.register_buffer(
            "v_cache", torch.zeros(shape, dtype=dtype, device=device), persistent=False
        )

    @property
    def capacity(self) -> tuple[int, int]:
        """(rows, positions per row): the block table's, from shapes (no device sync)."""
        rows, blocks = self.allocator.block_table.shape
        return rows, blocks * self.allocator.block_size

    def _write(self, slots: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
        """k, v: BNSD of the tokens at `slots` (row-major over batch and positions)."""
        tokens = k.transpose(1, 2).reshape(-1, self.num_kv_heads, self.head_dim)
        values = v.transpose(1, 2).reshape(-1, self.num_kv_heads, self.head_dim)
        self.ops.paged_scatter_update_(self.k_cache, slots, tokens)
        self.ops.paged_scatter_update_(self.v_cache, slots, values)

    def write_prefix(self, k: torch.Tensor, v: torch.Tensor, row: int | None = None) -> None:
        """Prefill (eager): positions [0, seq_len) of every row, or of `row` only; the
        allocator reserves the blocks (and refuses what the budget cannot hold)."""
        seq_len = k.shape[2]
        rows = range(k.shape[0]) if row is None else [row]
        slots = torch.cat([self.allocator.slots(r, 0, seq_len) for r in rows])
        self._write(slots.to(self.k_cache.device), k, v)

    def update(self, kv_len: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:  # noqa: ARG002
        """Decode: each row's new token goes to its slot in the allocator's slot_mapping,
        filled on the host for this step (`BlockAllocator.decode_slots`); kv_len is the
        contiguous cache's write index, unused here."""
        self._write(self.allocator.slot_mapping, k, v)

    def attend(self, query: torch.Tensor, meta, *, num_heads: int, scale: float) -> torch.Tensor:
        """Decode attention of query (BNSD, one token per row) over each row's blocks."""
        return self.ops.paged_attention(
            query,
            self.k_cache,
            self.v_cache,
            self.allocator.block_table,
            meta.actual_seq_lengths_q,
            meta.actual_seq_lengths_kv,
            num_heads=num_heads,
            num_kv_heads=self.num_kv_heads,
            scale=scale,
            block_size=self.allocator.block_size,
        )
