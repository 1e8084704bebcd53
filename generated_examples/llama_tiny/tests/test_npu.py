"""NPU tier: the same checks with torch_npu's fused ops and the real npugraph_ex backend."""

from dataclasses import replace

import pytest
import torch
from conftest import CONFIG_PATH, TINY, greedy, prompt

from llama_tiny import ops
from llama_tiny.config import load_config
from llama_tiny.graph import compile_decode, graph_break_count, graph_count
from llama_tiny.modeling import Transformer

pytestmark = [
    pytest.mark.npu,
    pytest.mark.skipif(
        not ops.npu_available(), reason="needs an Ascend NPU (torch_npu + CANN); none found"
    ),
]


# The fused rotary op takes head_dim 64 or 128; FIA runs in fp16/bf16 on the device.
NPU_ARGS = replace(TINY, head_dim=64)


def npu_model(seed: int = 0) -> Transformer:
    torch.manual_seed(seed)
    model = Transformer(NPU_ARGS, ops.load("npu")).to("npu", torch.bfloat16).eval()
    model.setup_caches(2)
    return model


def test_npu_decode_matches_eager_without_recompiles():
    config = load_config(CONFIG_PATH).model_config
    tensor_lengths = config.tensor_lengths
    eager_model, graph_model = npu_model(), npu_model()
    decode = compile_decode(graph_model, config)
    tokens = prompt().to("npu")
    greedy(graph_model, decode, tokens, steps=1, tensor_lengths=tensor_lengths)
    graphs, breaks = graph_count(), graph_break_count()
    actual = greedy(graph_model, decode, tokens, steps=32, tensor_lengths=tensor_lengths)
    assert graph_count() == graphs, "decode recompiled after warm-up"
    assert graph_break_count() == breaks
    expected = greedy(eager_model, eager_model.decode, tokens, 32, tensor_lengths=False)
    for a, e in zip(actual, expected, strict=True):
        assert torch.equal(a.argmax(-1), e.argmax(-1))
        torch.testing.assert_close(a.float().cpu(), e.float().cpu(), rtol=2e-2, atol=2e-2)
