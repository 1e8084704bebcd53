"""MLA's latent KV cache (DeepSeek-V2/V3): one KV head holding the compressed latent and the
rotated rope key of every token, preallocated once and written in place.

What an MLA layer caches is not K and V but `kv_a_layernorm(c_kv)` (kv_lora_rank wide) and
the RoPE'd shared key `k_pe` (qk_rope_head_dim wide), as cann-recipes-infer's
models/deepseek_r1/models/modeling_deepseek.py (`nope_cache`, `rope_cache`, one head each)
and vllm-ascend's attention/mla_v1.py keep them. Decode attends over it with the absorbed
query (layers/attention.py in the package); prefill expands it through kv_b_proj.

Contiguous: (batch, 1, max_seq_len + 1, width), the BNSD form of kv_cache.KVCache with its
spare position. Paged: (num_blocks, block_size, width) blocks of the shared pool, rows
finding theirs through the BlockAllocator, as paged_kv_cache.PagedKVCache.
"""

from __future__ import annotations

from types import ModuleType

import torch
from torch import nn

from .block_allocator import BlockAllocator
from .kv_cache import SPARE_POSITIONS


def _buffers(module: nn.Module, shapes: dict[str, tuple[int, ...]], dtype, device) -> None:
    for name, shape in shapes.items():
        module.register_buffer(
            name, torch.zeros(shape, dtype=dtype, device=device), persistent=False
        )


class LatentCache(nn.Module):
    def __init__(
        self,
        batch_size: int,
        max_seq_len: int,
        kv_lora_rank: int,
        rope_dim: int,
        ops: ModuleType,
        dtype: torch.dtype,
        device: torch.device | None = None,
    ):
        super().__init__()
        self.ops = ops
        positions = max_seq_len + SPARE_POSITIONS
        _buffers(
            self,
            {
                "nope_cache": (batch_size, 1, positions, kv_lora_rank),
                "rope_cache": (batch_size, 1, positions, rope_dim),
            },
            dtype,
            device,
        )

    @property
    def capacity(self) -> tuple[int, int]:
        """(rows, positions per row), from shapes (no device sync)."""
        return self.nope_cache.shape[0], self.nope_cache.shape[2] - SPARE_POSITIONS

    def write_prefix(self, latent: torch.Tensor, k_pe: torch.Tensor, row: int | None = None):
        """Prefill (eager): latent (B, 1, S, kv_lora_rank) and k_pe (B, 1, S, rope_dim) at
        positions [0, S) of every row, or of `row` only (a ragged batch's prompt)."""
        seq_len = latent.shape[2]
        rows = slice(None) if row is None else slice(row, row + 1)
        self.nope_cache[rows, :, :seq_len].copy_(latent)
        self.rope_cache[rows, :, :seq_len].copy_(k_pe)

    def update(self, kv_len: torch.Tensor, latent: torch.Tensor, k_pe: torch.Tensor) -> None:
        """Decode: row b's new token at position kv_len[b] (scatter_update_ on axis -2)."""
        self.ops.scatter_update_(self.nope_cache, kv_len, latent)
        self.ops.scatter_update_(self.rope_cache, kv_len, k_pe)

    def attend(self, q_latent, q_pe, meta, *, num_heads: int, scale: float) -> torch.Tensor:
        """Absorbed decode attention: q_latent (B, N, 1, kv_lora_rank), q_pe (B, N, 1,
        rope_dim) over each row's cached tokens; (B, N, 1, kv_lora_rank) out."""
        return self.ops.mla_attention(
            q_latent,
            q_pe,
            self.nope_cache,
            self.rope_cache,
            meta.actual_seq_lengths_q,
            meta.actual_seq_lengths_kv,
            num_heads=num_heads,
            scale=scale,
        )


class PagedLatentCache(nn.Module):
    def __init__(
        self,
        allocator: BlockAllocator,
        kv_lora_rank: int,
        rope_dim: int,
        ops: ModuleType,
        dtype: torch.dtype,
        device: torch.device | None = None,
    ):
        super().__init__()
        self.ops = ops
        self.allocator = allocator
        blocks = (allocator.num_blocks, allocator.block_size)
        _buffers(
            self,
            {"nope_cache": (*blocks, kv_lora_rank), "rope_cache": (*blocks, rope_dim)},
            dtype,
            device,
        )

    @property
    def capacity(self) -> tuple[int, int]:
        rows, blocks = self.allocator.block_table.shape
        return rows, blocks * self.allocator.block_size

    def _write(self, slots: torch.Tensor, latent: torch.Tensor, k_pe: torch.Tensor) -> None:
        """latent, k_pe: (B, 1, S, width) of the tokens at `slots` (row-major)."""
        self.ops.paged_scatter_update_(
            self.nope_cache, slots, latent.reshape(-1, 1, latent.shape[-1])
        )
        self.ops.paged_scatter_update_(self.rope_cache, slots, k_pe.reshape(-1, 1, k_pe.shape[-1]))

    def write_prefix(self, latent: torch.Tensor, k_pe: torch.Tensor, row: int | None = None):
        seq_len = latent.shape[2]
        rows = range(latent.shape[0]) if row is None else [row]
        slots = torch.cat([self.allocator.slots(r, 0, seq_len) for r in rows])
        self._write(slots.to(self.nope_cache.device), latent, k_pe)

    def update(self, kv_len: torch.Tensor, latent: torch.Tensor, k_pe: torch.Tensor) -> None:  # noqa: ARG002
        """Decode: each row's new token at its slot_mapping slot (kv_len unused, as in
        PagedKVCache.update)."""
        self._write(self.allocator.slot_mapping, latent, k_pe)

    def attend(self, q_latent, q_pe, meta, *, num_heads: int, scale: float) -> torch.Tensor:
        return self.ops.paged_mla_attention(
            q_latent,
            q_pe,
            self.nope_cache,
            self.rope_cache,
            self.allocator.block_table,
            meta.actual_seq_lengths_q,
            meta.actual_seq_lengths_kv,
            num_heads=num_heads,
            scale=scale,
            block_size=self.allocator.block_size,
        )
