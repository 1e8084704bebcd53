"""npu_emulated tier: the real NPU code path (torch_npu / torchair fused ops) on CPU.

Runs where torch-npu==2.13.0 is installed without CANN (see tests/npu_emulation.py):
the decode graph that calls the real npu:: ops is traced with fullgraph under aot_eager
(the seed's first triage step) and checked like the portable one.
"""

from pathlib import Path

import pytest
import torch
from conftest import TINY, compile_config, greedy, prompt, tiny_model

from llama_tiny import ops
from llama_tiny.graph import compile_decode, graph_break_count, graph_count
from llama_tiny.metadata import decode_inputs, prefill_inputs
from llama_tiny.modeling import Transformer

pytestmark = pytest.mark.npu_emulated
PACKAGE = Path(__file__).parents[1] / "src" / "llama_tiny"


def npu_path_model(seed: int = 0) -> Transformer:
    torch.manual_seed(seed)
    model = Transformer(TINY, ops.load("npu")).eval()
    model.setup_caches(2)
    return model


def test_npu_calls_match_the_installed_schemas(npu_emulation):
    from npu_schema_check import check_npu_calls

    sources = sorted(PACKAGE.rglob("*.py"))
    assert check_npu_calls(sources) == []


def test_host_list_decode_one_graph_no_recompiles(npu_emulation):
    """npugraph_ex's inputs: List[int] lengths, dynamic=True."""
    model = npu_path_model()
    decode = compile_decode(model, compile_config("npugraph_ex", tensor_lengths=False))
    greedy(model, decode, prompt(), steps=1, tensor_lengths=False)
    graphs, breaks = graph_count(), graph_break_count()
    greedy(model, decode, prompt(seed=2), steps=32, tensor_lengths=False)
    assert graph_count() == graphs, "decode recompiled after warm-up"
    assert graph_break_count() == breaks


@pytest.mark.parametrize("tensor_lengths", [False, True], ids=["torch_npu-fia", "torchair-fia"])
def test_decode_traces_as_one_graph(npu_emulation, tensor_lengths):
    model = npu_path_model()
    with torch.inference_mode():
        model.prefill(**prefill_inputs(prompt()).as_kwargs())
        step = decode_inputs(torch.zeros(2, 1, dtype=torch.long), [8, 8], tensor_lengths)
        explanation = torch._dynamo.explain(model.decode)(**step.as_kwargs())
    assert explanation.graph_break_count == 0, explanation.break_reasons
    assert explanation.graph_count == 1


@pytest.mark.parametrize("tensor_lengths", [False, True], ids=["torch_npu-fia", "torchair-fia"])
def test_npu_path_matches_portable_path(npu_emulation, tensor_lengths):
    npu_model, portable_model = npu_path_model(), tiny_model()
    decode = compile_decode(npu_model, compile_config("npugraph_ex", tensor_lengths))
    actual = greedy(npu_model, decode, prompt(), 8, tensor_lengths)
    expected = greedy(portable_model, portable_model.decode, prompt(), 8, tensor_lengths)
    for step, (a, e) in enumerate(zip(actual, expected, strict=True)):
        torch.testing.assert_close(a, e, rtol=1e-4, atol=1e-4, msg=f"step {step}")
