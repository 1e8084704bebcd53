"""The paged cache's host-side allocator: blocks from a budget, the null block, refusals."""

import pytest
import torch

from ascend_runtime.block_allocator import (
    NULL_BLOCK,
    BlockAllocator,
    CacheBudgetError,
)


def allocator(num_blocks: int = 6, batch: int = 3) -> BlockAllocator:
    return BlockAllocator(batch, num_blocks=num_blocks, block_size=4, max_seq_len=16)


def test_rows_get_disjoint_blocks_and_the_table_is_padded_with_the_null_block():
    pool = allocator()
    pool.reserve(0, 5)  # 2 blocks
    pool.reserve(1, 4)  # 1 block
    first, second = pool.blocks_of(0), pool.blocks_of(1)
    assert len(first) == 2 and len(second) == 1
    assert not set(first) & set(second) and NULL_BLOCK not in first + second
    assert pool.block_table.dtype == torch.int32
    assert pool.block_table[0].tolist() == [*first, NULL_BLOCK, NULL_BLOCK]
    assert pool.block_table[2].tolist() == [NULL_BLOCK] * 4


def test_slots_are_block_times_size_plus_offset():
    pool = allocator()
    slots = pool.slots(0, 0, 6)
    blocks = pool.blocks_of(0)
    expected = [blocks[p // 4] * 4 + p % 4 for p in range(6)]
    assert slots.tolist() == expected


def test_decode_crosses_block_boundaries_and_finished_rows_write_the_null_block():
    pool = allocator()
    pool.reserve(0, 3)
    pool.reserve(1, 3)
    table = pool.block_table
    slot_mapping = pool.slot_mapping
    for length in range(3, 10):  # row 0 grows into a 2nd and 3rd block
        slots = pool.decode_slots([length, 3, 0], [True, False, False])
        assert slots is slot_mapping and pool.block_table is table  # updated in place
        block = pool.blocks_of(0)[length // 4]
        assert slots.tolist() == [block * 4 + length % 4, NULL_BLOCK * 4, NULL_BLOCK * 4]
    assert len(pool.blocks_of(0)) == 3 and len(pool.blocks_of(1)) == 1


def test_a_request_past_the_budget_is_refused_without_touching_other_rows():
    pool = allocator(num_blocks=4)  # 3 usable blocks
    pool.reserve(0, 8)  # 2 blocks
    before = pool.block_table.clone()
    held = "of the budget's 3, 1 are free, 0 held by this row and 2 by the other rows"
    with pytest.raises(CacheBudgetError, match=f"need 2 more KV block.*{held}"):
        pool.reserve(1, 8)
    assert torch.equal(pool.block_table, before)
    assert pool.blocks_of(1) == [] and pool.free_blocks == 1
    with pytest.raises(CacheBudgetError, match="exceed max_seq_len"):
        pool.reserve(2, 17)


def test_released_blocks_are_reused():
    pool = allocator(num_blocks=3)  # 2 usable blocks
    pool.reserve(0, 8)
    blocks = pool.blocks_of(0)
    pool.release(0)
    assert pool.block_table[0].tolist() == [NULL_BLOCK] * 4 and pool.free_blocks == 2
    pool.reserve(1, 8)
    assert sorted(pool.blocks_of(1)) == sorted(blocks)
