"""The parallel decode through torchair's real FX -> GE conversion, on 2 gloo ranks on CPU.

tests/test_parallel.py proves the split maths on the portable ops; this tier proves what a
device run compiles: each rank's ge_graph decode, on the NPU ops (scaffold.npu_emulation),
must convert with every collective as an HCCL op (`_c10d_functional.all_reduce` ->
HcomAllReduce, `all_gather_into_tensor` -> HcomAllGather; torchair's
ge_converter/c10d_functional), as many as the sizes call for, and the KV cache written in
place on the rank's own cache (a graph input). Runs in the emulation interpreter
(ASCEND_SCAFFOLD_NPU_PYTHON); skipped without it, failed instead where
ASCEND_SCAFFOLD_REQUIRE_NPU_EMULATION=1 (CI).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import require_npu_emulation, run_npu_code

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "generated_examples"

CASES = {
    # dense, every split on: attention, MLP, embedding, lm_head
    "qwen3_ge-tp2": (
        "qwen3_ge",
        dict(attn_tp_size=2, dense_tp_size=2, embed_tp_size=2, lmhead_tp_size=2),
    ),
    # MoE, experts over 2 ranks (EP 2); attention and the dense layer replicated
    "mixtral_ge-ep2": ("mixtral_ge", dict(moe_tp_size=1)),
    # MoE, every expert's width over 2 ranks (MoE TP 2), attention TP 2
    "mixtral_ge-moe_tp2": ("mixtral_ge", dict(moe_tp_size=2, attn_tp_size=2)),
}


@pytest.fixture(scope="module", autouse=True)
def _needs_emulation():
    require_npu_emulation()


def expected_collectives(sizes: dict[str, int], layers: int, moe_layers: int) -> dict:
    """What the rendered model calls (its decoder layer, embedding and head): an all_reduce
    after attention and after each MLP whose group has more than one rank (MoE layers:
    every rank), one after the embedding, one gather after the lm_head."""
    split = {key: sizes.get(key, 1) > 1 for key in
             ("attn_tp_size", "dense_tp_size", "embed_tp_size", "lmhead_tp_size")}  # fmt: skip
    reduces = (
        layers * split["attn_tp_size"]
        + (layers - moe_layers) * split["dense_tp_size"]
        + moe_layers
        + split["embed_tp_size"]
    )
    return {"HcomAllReduce": reduces, "HcomAllGather": int(split["lmhead_tp_size"])}


@pytest.mark.parametrize("case", list(CASES))
def test_parallel_decode_converts_with_hccl_collectives(case, stub_root, tmp_path):
    package, sizes = CASES[case]
    code = f"""
emu.activate()  # before `import torch`; the ranks inherit its environment
sys.path[:0] = [{str(REPO / "tests")!r}, {str(EXAMPLES / package / "src")!r}]
from ascend_runtime.testing.distributed import run_ranks
from npu_parallel_ranks import ge_graph_on_rank
ranks = run_ranks(2, ge_graph_on_rank, {str(tmp_path)!r}, {package!r}, {sizes!r})
print("RESULT=" + json.dumps(ranks))
"""
    ranks = run_npu_code(code, stub_root, env_extra={"ASCEND_SCAFFOLD_NPU_PLATFORM": "A3"})
    for rank, result in enumerate(ranks):
        counts, layers = result["counts"], result["layers"]
        wanted = expected_collectives(sizes, layers, result["moe_layers"])
        got = {op: counts.get(op, 0) for op in wanted}
        assert got == wanted, f"rank {rank}: {got} != {wanted}; {counts}"
        assert counts.get("FusedInferAttentionScore") == layers, counts
        writes = result["scatter_inputs"]  # K and V of every layer, on the cache itself
        assert len(writes) == 2 * layers and all(w[0] == "Data" for w in writes), writes
