"""The CPU stand-in's frozen fp32 linears, run by oneDNN instead of MKL (inductor only).

With the weights frozen, inductor packs each fp32 linear for MKL (`mkl._mkl_linear`) when
its batch is static and for oneDNN (`mkldnn._linear_pointwise`) when it is symbolic
(`pack_linear` in torch/_inductor/fx_passes/mkldnn_fusion.py). Decode's batch is always
static (the lengths lists hold one entry per row), and MKL's fp32 GEMM over a handful of
rows is the slow one on the CPU measured (2-core AVX-512 x86: the linears of a 58M llama
decode step, benchmarks/bench_decode.py's model, took about as long through MKL as
through oneDNN at one row, within noise, and 2-2.6x as long at 2, 4 and 8 rows).
`OneDnnLinears`, an inductor post-grad pass (torch/_inductor/custom_graph_pass.py), runs
after freezing has packed and folded the weights and repacks each MKL linear's weight for
oneDNN: the same fp32 maths, still one packed copy per weight. The NPU paths never reach it.
"""

from __future__ import annotations

import torch
from torch._dynamo.utils import counters
from torch._inductor.custom_graph_pass import CustomGraphPass, get_hash_for_files

# the count of linears this pass moved to oneDNN, beside inductor's own counters
REPACKED = "onednn_repacked_linears"


def _mkl_linear_ops() -> tuple:
    if not (torch._C.has_mkl and torch.backends.mkldnn.is_available()):
        return ()
    return (torch.ops.mkl._mkl_linear, torch.ops.mkl._mkl_linear.default)


class OneDnnLinears(CustomGraphPass):
    """Every `mkl._mkl_linear(x, packed, weight, bias, batch)` of a frozen graph becomes
    `mkldnn._linear_pointwise(x, weight packed for oneDNN, bias, "none", [], "")`."""

    def __call__(self, graph: torch.fx.Graph) -> None:
        module, mkl_linears = graph.owning_module, _mkl_linear_ops()
        repacked: dict[tuple[str, int], torch.fx.Node] = {}  # (weight, batch): packed
        for node in [n for n in graph.nodes if n.target in mkl_linears]:
            x, mkl_packed, weight, bias, batch = node.args
            if not all(constant.op == "get_attr" for constant in (mkl_packed, weight)):
                continue  # not folded into constants: left to MKL
            key = (weight.target, batch)
            if key not in repacked:
                name = f"_onednn_packed_{len(repacked)}"
                value = torch.ops.mkldnn._reorder_linear_weight(
                    getattr(module, weight.target), batch
                )
                module.register_buffer(name, value)
                with graph.inserting_before(node):
                    repacked[key] = graph.get_attr(name)
            with graph.inserting_before(node):
                linear = graph.call_function(
                    torch.ops.mkldnn._linear_pointwise.default,
                    (x, repacked[key], bias, "none", [], ""),
                )
            linear.meta.update(node.meta)
            node.replace_all_uses_with(linear)
            graph.erase_node(node)
            for constant in (mkl_packed, weight):  # frees the MKL copy
                if not constant.users:
                    graph.erase_node(constant)
                    delattr(module, constant.target)
            counters["inductor"][REPACKED] += 1

    def uuid(self) -> bytes:
        return get_hash_for_files((__file__,))
