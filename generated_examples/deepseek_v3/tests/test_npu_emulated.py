"""npu_emulated tier: the real NPU code path (torch_npu / torchair fused ops) on CPU.

Runs where torch-npu==2.13.0 is installed without CANN, with ascend-scaffold's
`scaffold.npu_emulation` (the `npu_emulation` fixture in conftest.py; skipped without them):
the decode graph that calls the real npu:: ops is traced with fullgraph under aot_eager
(the first step of torch_npu's graph-mode triage: aot_eager, then the real backend) and
checked like the portable one, on shapes and a dtype the device takes (conftest.TINY_NPU).

The graph-conversion tests then run the compilers a device run uses, on CPU, up to the first
step that needs the device: torchair's FX -> GE conversion (every op's converter) and
npugraph_ex's FX passes before capture (`scaffold.npu_emulation.graph_conversion`).
"""

from pathlib import Path

import pytest
import torch
from ascend_runtime import graph, ops
from ascend_runtime.graph import (
    compile_decode,
    graph_break_count,
    graph_count,
)
from ascend_runtime.metadata import (
    decode_inputs,
    prefill_inputs,
)
from conftest import NPU_DTYPE, TINY_NPU, compile_config, greedy, prompt, tiny_model

from deepseek_v3.modeling import (
    Transformer,
)

# every test needs the emulation active (it skips, with the reason, where it is unavailable)
pytestmark = [pytest.mark.npu_emulated, pytest.mark.usefixtures("npu_emulation")]
SOURCES = Path(__file__).parents[1] / "src"
PACKAGE = SOURCES / "deepseek_v3"
KV_WRITES = 2 * TINY_NPU.num_hidden_layers  # K and V of every layer, written in place
# GE op types decode must hold (torchair's converters under ge_converter/custom/).
GE_OPS = {
    "RmsNorm",
    "BatchMatMul",  # W_UK folded into the query, W_UV applied to the output
    "FusedInferAttentionScore",  # its MLA mode: TINY_NPU has latent 512, rope 64, 32 heads
    "MoeGatingTopK",  # noaux_tc routing (npu_moe_gating_top_k)
    "ScatterNdUpdate",
    "MoeInitRoutingV3",
    "GroupedMatmul",
    "SwiGlu",
    "MoeFinalizeRoutingV2",
}
KV_WRITE_OP, KV_WRITE_GE = "npu.npu_scatter_nd_update_.default", "ScatterNdUpdate"


def npu_path_model(seed: int = 0) -> Transformer:
    return tiny_model(seed=seed, args=TINY_NPU, backend="npu", dtype=NPU_DTYPE)


def test_npu_calls_match_the_installed_schemas(npu_emulation):
    """The package's own calls and the runtime's NPU ops (ascend_runtime/ops/npu.py)."""
    sources = [*sorted(PACKAGE.rglob("*.py")), Path(ops.__file__).parent / "npu.py"]
    assert npu_emulation.check_npu_calls(sources) == []


def test_compile_seam_matches_the_installed_wheel(npu_emulation):
    """graph.py's NPU branches against the real torch_npu / torchair compile APIs on CPU:
    npugraph_ex option keys, torchair CompilerConfig attributes and values, get_npu_backend
    and torch.compile keywords, and keywords cache_compile would silently drop."""
    from ascend_runtime import graph

    assert npu_emulation.check_compile_seam(graph) == []


def test_host_list_decode_one_graph_no_recompiles():
    """npugraph_ex's inputs: List[int] lengths, dynamic=True."""
    model = npu_path_model()
    decode = compile_decode(model, compile_config("npugraph_ex", tensor_lengths=False))
    greedy(model, decode, prompt(), steps=1, tensor_lengths=False)
    graphs, breaks = graph_count(), graph_break_count()
    greedy(model, decode, prompt(seed=2), steps=32, tensor_lengths=False)
    assert graph_count() == graphs, "decode recompiled after warm-up"
    assert graph_break_count() == breaks


@pytest.mark.parametrize("tensor_lengths", [False, True], ids=["torch_npu-fia", "torchair-fia"])
def test_decode_traces_as_one_graph(tensor_lengths):
    model = npu_path_model()
    with torch.inference_mode():
        model.prefill(**prefill_inputs(prompt()).as_kwargs())
        step = decode_inputs(torch.zeros(2, 1, dtype=torch.long), [8, 8], tensor_lengths)
        explanation = torch._dynamo.explain(model.decode)(**step.as_kwargs())
    assert explanation.graph_break_count == 0, explanation.break_reasons
    assert explanation.graph_count == 1


@pytest.mark.parametrize("tensor_lengths", [False, True], ids=["torch_npu-fia", "torchair-fia"])
def test_npu_path_matches_portable_path(tensor_lengths):
    npu_model = npu_path_model()
    portable_model = tiny_model(args=TINY_NPU, dtype=NPU_DTYPE)
    decode = compile_decode(npu_model, compile_config("npugraph_ex", tensor_lengths))
    expected = greedy(portable_model, portable_model.decode, prompt(), 8, tensor_lengths)
    actual = greedy(npu_model, decode, prompt(), 8, tensor_lengths, forced=expected)
    for step, (a, e) in enumerate(zip(actual, expected, strict=True)):
        # bf16: within 1% of the logits' scale (one bf16 step at that scale is ~0.4%)
        scale = e.abs().max().item()
        torch.testing.assert_close(a, e, rtol=2e-2, atol=1e-2 * scale, msg=f"step {step}")


def prefilled_step(tensor_lengths: bool) -> tuple[Transformer, dict]:
    """A model on the NPU ops after an eager prefill, and one decode step's inputs."""
    model = npu_path_model()
    with torch.inference_mode():
        model.prefill(**prefill_inputs(prompt()).as_kwargs())
    step = decode_inputs(torch.zeros(2, 1, dtype=torch.long), [8, 8], tensor_lengths)
    return model, step.as_kwargs()


def test_decode_converts_to_a_ge_graph(npu_emulation):
    """torchair's real FX -> GE conversion of the ge_graph decode (Tensor lengths), on CPU:
    every converter runs; the graph engine, CANN's op registry and the device are stubbed."""
    model, step = prefilled_step(tensor_lengths=True)
    ge = npu_emulation.ge_graph(graph, model, compile_config("ge_graph", True), step)
    assert GE_OPS <= set(ge.ops), f"missing {sorted(GE_OPS - set(ge.ops))}; {ge.summary()}"
    assert ge.counts["FusedInferAttentionScore"] == TINY_NPU.num_hidden_layers, ge.summary()
    # in place: each cache write takes the cache (a graph input, Data) itself, not a copy
    writes = ge.inputs_of(KV_WRITE_GE)
    assert len(writes) == KV_WRITES and all(w[0] == "Data" for w in writes), writes


def test_npugraph_ex_passes_keep_the_cache_write_in_place(npu_emulation):
    """npugraph_ex's FX passes (graph.NPUGRAPH_EX_OPTIONS: in-place, input in-place, pattern
    fusion, no-op removal) over the npugraph_ex decode (host-list lengths), up to capture: the
    graph it would capture writes each cache in place, with no functional copy of a cache."""
    model, step = prefilled_step(tensor_lengths=False)
    fx = npu_emulation.npugraph_ex_graph(graph, model, compile_config("npugraph_ex", False), step)
    assert fx.counts.get(KV_WRITE_OP, 0) == KV_WRITES, fx.summary()
    assert all(w[0] == "placeholder" for w in fx.inputs_of(KV_WRITE_OP)), fx.inputs_of(KV_WRITE_OP)
    functional = KV_WRITE_OP.replace("_.default", ".default")
    assert functional not in fx.counts, fx.summary()
    assert fx.counts.get("npu.npu_fused_infer_attention_score.out", 0) == KV_WRITES // 2, (
        fx.summary()
    )
