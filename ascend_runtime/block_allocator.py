"""Host-side block allocator of the paged KV cache.

As cann-recipes-infer's executor/core/kv_cache (cache_utils.py `prepare_block_tables`,
`prepare_slot_mapping`; docs/design/kv_cache_design.md): one pool of `num_blocks` blocks
of `block_size` tokens shared by every row, block 0 reserved as the null block (the fused
ops need legal block ids), a `block_table` int32 `[batch, max_blocks]` padded with the null
block, and a `slot_mapping` (`block_id * block_size + offset`) per written token. Everything
here runs on the host between steps; the decode graph only reads the two tensors, which
are allocated once and updated in place (fixed addresses for graph replay).
"""

from __future__ import annotations

import math

import torch

from .config import InputError

NULL_BLOCK = 0
BUDGET_KEY = "scheduler_config.kv_cache_tokens"


def pool_blocks(kv_cache_tokens: int, block_size: int) -> int:
    """Blocks for a token budget, the null block included."""
    return math.ceil(kv_cache_tokens / block_size) + 1


def request_blocks(tokens_per_row: list[int], block_size: int) -> int:
    """Blocks a request needs at most: each row's positions, in whole blocks."""
    return sum(math.ceil(tokens / block_size) for tokens in tokens_per_row)


class CacheBudgetError(InputError):
    """A request needs more KV blocks than the budget has left."""


class BlockAllocator:
    def __init__(
        self,
        batch_size: int,
        num_blocks: int,
        block_size: int,
        max_seq_len: int,
        device: torch.device | str | None = None,
    ):
        if num_blocks < 2:
            raise ValueError(f"num_blocks must be >= 2 (block 0 is null), got {num_blocks}")
        self.block_size = block_size
        self.num_blocks = num_blocks
        self.max_blocks = math.ceil(max_seq_len / block_size)
        self._free = list(range(num_blocks - 1, NULL_BLOCK, -1))  # pop() hands out 1, 2, ...
        self._rows: list[list[int]] = [[] for _ in range(batch_size)]
        self.block_table = torch.full(
            (batch_size, self.max_blocks), NULL_BLOCK, dtype=torch.int32, device=device
        )
        self.slot_mapping = torch.zeros(batch_size, dtype=torch.int64, device=device)

    @property
    def free_blocks(self) -> int:
        return len(self._free)

    def blocks_of(self, row: int) -> list[int]:
        return list(self._rows[row])

    def reserve(self, row: int, num_tokens: int) -> None:
        """Give `row` blocks for its first `num_tokens` positions; refuse, changing nothing,
        when the row would exceed max_seq_len or the pool has too few free blocks."""
        needed = math.ceil(num_tokens / self.block_size)
        blocks = self._rows[row]
        if needed > self.max_blocks:
            raise CacheBudgetError(
                f"row {row}: {num_tokens} tokens exceed max_seq_len "
                f"({self.max_blocks * self.block_size} positions in blocks of {self.block_size})"
            )
        missing = needed - len(blocks)
        if missing > len(self._free):
            held = self.num_blocks - 1 - len(self._free) - len(blocks)
            raise CacheBudgetError(
                f"row {row}: {num_tokens} tokens need {missing} more KV block(s) of "
                f"{self.block_size}; of the budget's {self.num_blocks - 1}, {len(self._free)} "
                f"are free, {len(blocks)} held by this row and {held} by the other rows "
                f"(raise {BUDGET_KEY} in the YAML, or shorten the batch)"
            )
        if missing <= 0:
            return
        new = [self._free.pop() for _ in range(missing)]
        self.block_table[row, len(blocks) : needed] = torch.tensor(new, dtype=torch.int32)
        blocks.extend(new)

    def check_request(self, tokens_per_row: list[int]) -> None:
        """Refuse, before anything is written, a request whose worst case (each row's
        positions, in whole blocks) does not fit the blocks free now."""
        need = request_blocks(tokens_per_row, self.block_size)
        if need > len(self._free):
            rows = ", ".join(str(math.ceil(t / self.block_size)) for t in tokens_per_row)
            held = self.num_blocks - 1 - len(self._free)
            raise CacheBudgetError(
                f"this request needs up to {need} KV blocks of {self.block_size} (per row: "
                f"{rows}); the budget has {self.num_blocks - 1}, {len(self._free)} free"
                + (f" and {held} held by rows of this batch" if held else "")
                + f" (raise {BUDGET_KEY} in the YAML, or shorten the batch)"
            )

    def release_all(self) -> None:
        for row in range(len(self._rows)):
            self.release(row)

    def release(self, row: int) -> None:
        """Return the row's blocks to the pool; its table row points at the null block."""
        self._free.extend(reversed(self._rows[row]))
        self._rows[row] = []
        self.block_table[row].fill_(NULL_BLOCK)

    def slots(self, row: int, start: int, stop: int) -> torch.Tensor:
        """Slots of positions [start, stop) of `row` (reserved first), for a prefill write."""
        self.reserve(row, stop)
        blocks = torch.tensor(self._rows[row], dtype=torch.int64)
        positions = torch.arange(start, stop)
        return blocks[positions // self.block_size] * self.block_size + positions % self.block_size

    def decode_slots(self, kv_len: list[int], active: list[bool]) -> torch.Tensor:
        """slot_mapping for one decode step, in place: an active row writes at position
        kv_len[b] (a block is reserved when it crosses into a new one); a finished or padded
        row writes into the null block."""
        slots = []
        for row, (length, alive) in enumerate(zip(kv_len, active, strict=True)):
            if not alive:
                slots.append(NULL_BLOCK * self.block_size)
                continue
            self.reserve(row, length + 1)
            block = self._rows[row][length // self.block_size]
            slots.append(block * self.block_size + length % self.block_size)
        self.slot_mapping.copy_(torch.tensor(slots, dtype=torch.int64))
        return self.slot_mapping
