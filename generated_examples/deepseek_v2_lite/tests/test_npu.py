"""NPU tier: the same checks with torch_npu's fused ops and the real ge_graph backend."""

import pytest
import torch
from ascend_runtime import (
    ops,
)
from ascend_runtime.graph import (
    compile_decode,
    graph_break_count,
    graph_count,
)
from conftest import (
    NPU_DTYPE,
    RENDERED_CONFIG,
    TINY_NPU,
    greedy,
    prompt,
    setup_test_caches,
    tiny_model,
)

from deepseek_v2_lite.modeling import (
    Transformer,
)

pytestmark = [
    pytest.mark.npu,
    pytest.mark.skipif(
        not ops.npu_available(), reason="needs an Ascend NPU (torch_npu + CANN); none found"
    ),
]


def npu_model(seed: int = 0) -> Transformer:
    """Shapes and a dtype the device takes (conftest.TINY_NPU), on the NPU."""
    model = tiny_model(seed=seed, args=TINY_NPU, backend="npu", dtype=NPU_DTYPE).to("npu")
    setup_test_caches(model, 2)  # again, on the device
    return model


def test_npu_decode_matches_eager_without_recompiles():
    config = RENDERED_CONFIG
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
