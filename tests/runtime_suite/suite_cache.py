"""The contiguous KV cache: preallocated once, fixed addresses under compiled decode."""

import torch
from runtime_suite.current import (
    BATCH,
    PROMPT_LEN,
    TINY,
    compile_config,
    greedy,
    prompt,
    tiny_model,
)

from ascend_runtime.graph import (
    compile_decode,
)

SUITE_KINDS = ("contiguous",)  # run against these examples (runtime_suite/loader.py)


def cache_buffers(model):
    return [
        buffer
        for layer in model.layers
        for buffer in (layer.self_attn.kv_cache.k_cache, layer.self_attn.kv_cache.v_cache)
    ]


def test_cache_shape_is_preallocated():
    model = tiny_model()
    spare = 1  # kv_cache.py: a position past max_seq_len that decode never writes
    shape = (BATCH, TINY.num_key_value_heads, TINY.max_seq_len + spare, TINY.head_dim)
    for buffer in cache_buffers(model):
        assert buffer.shape == shape
    assert model.layers[0].self_attn.kv_cache.capacity == (BATCH, TINY.max_seq_len)


def test_cache_addresses_stable_across_compiled_decode():
    model = tiny_model()
    before = [(id(b), b.data_ptr()) for b in cache_buffers(model)]
    decode = compile_decode(model, compile_config("npugraph_ex", tensor_lengths=False))
    greedy(model, decode, prompt(), steps=6, tensor_lengths=False)
    assert [(id(b), b.data_ptr()) for b in cache_buffers(model)] == before


def test_decode_writes_each_row_at_its_own_position():
    model = tiny_model()
    cache = model.layers[0].self_attn.kv_cache
    k_new = torch.randn(BATCH, TINY.num_key_value_heads, 1, TINY.head_dim)
    v_new = torch.randn_like(k_new)
    k_before = cache.k_cache.clone()
    kv_len = torch.tensor([3, 7])
    cache.update(kv_len, k_new, v_new)
    for row, position in enumerate(kv_len.tolist()):
        assert torch.equal(cache.k_cache[row, :, position], k_new[row, :, 0])
        assert torch.equal(cache.v_cache[row, :, position], v_new[row, :, 0])
    changed = (cache.k_cache != k_before).any(dim=(1, 3))
    assert changed.nonzero().tolist() == [[0, 3], [1, 7]]


def test_decode_graph_does_not_return_the_cache():
    graphs = []

    def capture(gm, _example_inputs):
        graphs.append(gm)
        return gm.forward

    model = tiny_model()
    decode = torch.compile(model.decode, backend=capture, fullgraph=True, dynamic=True)
    greedy(model, decode, prompt(), steps=1, tensor_lengths=False)
    (graph,) = graphs
    (output_node,) = [n for n in graph.graph.nodes if n.op == "output"]
    outputs = output_node.args[0]
    assert len(outputs) == 1  # logits only
    assert outputs[0].meta["example_value"].shape == (BATCH, 1, TINY.vocab_size)
    assert PROMPT_LEN < TINY.max_seq_len
