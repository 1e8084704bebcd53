"""The paged KV cache in the model: blocks from the budget as rows grow, one decode graph
across block boundaries, fixed buffer addresses, refusals that overwrite nothing."""

import pytest
import torch
from runtime_suite.current import (
    BATCH,
    TINY,
    compile_config,
    greedy,
    prompt,
    tiny_model,
)

from ascend_runtime.block_allocator import (
    NULL_BLOCK,
    CacheBudgetError,
)
from ascend_runtime.generation import (
    generate,
)
from ascend_runtime.graph import (
    compile_decode,
    graph_break_count,
    graph_count,
)
from ascend_runtime.kv_cache import (
    KVCache,
)

SUITE_KINDS = ("paged",)  # run against these examples (runtime_suite/loader.py)

BLOCK = 16  # small blocks: the tiny model's steps cross several boundaries
STEPS = 64


def paged_model(kv_cache_tokens: int = BATCH * TINY.max_seq_len, batch: int = BATCH):
    model = tiny_model(batch=batch)
    model.setup_caches(batch, kv_cache_tokens=kv_cache_tokens, block_size=BLOCK)
    return model


def contiguous_model(batch: int = BATCH):
    """The same weights (seed) over the contiguous cache, the reference: kv_cache.py's
    KVCache has the interface the attention layer uses (write_prefix, update, attend)."""
    model = tiny_model(batch=batch)
    for layer in model.layers:
        attn = layer.self_attn
        attn.kv_cache = KVCache(
            batch, attn.num_kv_heads, TINY.max_seq_len, attn.head_dim, attn.ops, torch.float32
        )
    return model


def buffers(model):
    caches = [layer.self_attn.kv_cache for layer in model.layers]
    allocator = model.block_allocator
    tensors = [t for c in caches for t in (c.k_cache, c.v_cache)]
    return [*tensors, allocator.block_table, allocator.slot_mapping]


@pytest.mark.parametrize("tensor_lengths", [False, True], ids=["host-lists", "tensor-lengths"])
def test_one_graph_across_block_boundaries_with_fixed_addresses(tensor_lengths):
    model = paged_model()
    before = [(id(t), t.data_ptr()) for t in buffers(model)]
    decode = compile_decode(model, compile_config("npugraph_ex", tensor_lengths))
    greedy(model, decode, prompt(), steps=1, tensor_lengths=tensor_lengths)  # warm-up
    graphs, breaks = graph_count(), graph_break_count()
    compiled = greedy(model, decode, prompt(), STEPS, tensor_lengths=tensor_lengths)
    assert graph_count() == graphs, "decode recompiled while blocks were allocated"
    assert graph_break_count() == breaks
    assert [(id(t), t.data_ptr()) for t in buffers(model)] == before
    blocks = [len(model.block_allocator.blocks_of(row)) for row in range(BATCH)]
    assert min(blocks) >= 4, blocks  # prompt 8 + 64 steps in blocks of 16: 5 blocks a row

    contiguous = contiguous_model()
    expected = greedy(contiguous, contiguous.decode, prompt(), STEPS, tensor_lengths)
    for step, (a, e) in enumerate(zip(compiled, expected, strict=True)):
        torch.testing.assert_close(a, e, rtol=1e-4, atol=1e-4, msg=f"step {step}")


def held_blocks(model, held: list):
    """An on_step watcher: the blocks each row holds at every decode step."""
    rows = model.block_allocator.block_table.shape[0]
    return lambda _step: held.append([len(model.block_allocator.blocks_of(r)) for r in range(rows)])


def test_ragged_paged_generation_equals_contiguous():
    prompts = [list(range(3, 8)), list(range(10, 40))]  # 5 and 30 tokens
    paged, contiguous = paged_model(), contiguous_model()
    held = []
    got = generate(
        paged, paged.decode, prompts, 40, keep_logits=True, on_step=held_blocks(paged, held)
    )
    want = generate(contiguous, contiguous.decode, prompts, 40, keep_logits=True)
    assert got.tokens == want.tokens
    for step, (a, e) in enumerate(zip(got.logits, want.logits, strict=True)):
        torch.testing.assert_close(a, e, rtol=1e-4, atol=1e-4, msg=f"step {step}")
    # a short row holds fewer blocks than a long one: memory follows the actual lengths
    assert held[-1][0] < held[-1][1], held[-1]


def test_a_finished_row_writes_the_null_block_and_gives_its_blocks_back():
    model = paged_model()
    prompts = [list(range(3, 8)), list(range(3, 8))]
    held = []
    generate(model, model.decode, prompts, [2, 20], on_step=held_blocks(model, held))
    # row 0 finishes after 2 tokens: 5 + 1 positions in its one block, never a second,
    # returned to the pool when it finished; row 1 goes on
    assert held[0][0] == 1 and all(h[0] == 0 for h in held[1:]), held
    assert model.block_allocator.slot_mapping[0].item() == NULL_BLOCK * BLOCK
    allocator = model.block_allocator
    assert allocator.free_blocks == allocator.num_blocks - 1  # and every block after the call


def test_blocks_do_not_leak_from_one_request_to_the_next():
    """A request that fits a fresh model fits after any other request on the same model."""
    model = paged_model(kv_cache_tokens=3 * BLOCK)  # 3 blocks for both rows
    long_prompt = list(range(1, 2 * BLOCK))  # 2 blocks with its new token
    for _ in range(3):
        result = generate(model, model.decode, [long_prompt, [1, 2]], 2)
        assert [len(t) for t in result.tokens] == [2, 2]
        assert model.block_allocator.free_blocks == 3


def test_a_request_past_the_budget_is_refused_before_anything_runs():
    model = paged_model(kv_cache_tokens=3 * BLOCK)  # 3 blocks for both rows
    long_prompt = list(range(1, 2 * BLOCK + 1))  # 2 blocks
    generate(model, model.decode, [long_prompt, [1, 2]], 1)
    kept = [layer.self_attn.kv_cache.k_cache.clone() for layer in model.layers]
    steps = []
    with pytest.raises(CacheBudgetError, match="needs up to 4 KV blocks of 16 .per row: 2, 2."):
        generate(model, model.decode, [long_prompt, long_prompt], 1)  # 4 blocks > 3
    # prompts that fit, a worst case that does not: refused before the prefill, not after
    # decode steps whose tokens would be thrown away
    short = list(range(1, BLOCK - 5))  # 10 tokens; + 20 new: 2 blocks a row
    with pytest.raises(CacheBudgetError, match="needs up to 4 KV blocks"):
        generate(model, model.decode, [short, short], 20, on_step=steps.append)
    assert steps == []
    for layer, before in zip(model.layers, kept, strict=True):
        assert torch.equal(layer.self_attn.kv_cache.k_cache, before)
