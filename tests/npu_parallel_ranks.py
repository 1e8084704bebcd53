"""One rank of tests/test_npu_emulation_parallel.py, in the emulation interpreter: a tiny
model on the NPU ops split over gloo ranks, prefilled eagerly, and its ge_graph decode
handed to torchair's real FX -> GE conversion on CPU (scaffold.npu_emulation).

A module, not code in the test, because torch.multiprocessing's spawn imports the worker
by name in each rank.
"""

from __future__ import annotations

import importlib
import os


def ge_graph_on_rank(rank: int, package: str, sizes: dict[str, int]) -> dict:
    from scaffold.npu_emulation import emulation

    emulation.activate()  # stand-in CANN libraries before torch_npu
    import torch

    from ascend_runtime import graph, ops
    from ascend_runtime.config import ParallelConfig
    from ascend_runtime.hf_config import moe_layers
    from ascend_runtime.metadata import decode_inputs, prefill_inputs
    from ascend_runtime.parallel import init_parallel
    from ascend_runtime.testing.kit import NPU_DTYPE, ModelKit, compile_config
    from ascend_runtime.weights import assign_weights, shard_state
    from scaffold.npu_emulation import graph_conversion

    spec = importlib.import_module(package).MODEL
    kit = ModelKit(spec)
    parallel = init_parallel(ParallelConfig(world_size=int(os.environ["WORLD_SIZE"]), **sizes))
    full = kit.tiny_model(args=kit.tiny_npu, backend="npu", dtype=NPU_DTYPE)  # seed 0
    with torch.device("meta"):
        model = spec.model_class(kit.tiny_npu, ops.load("npu"), parallel)
    batch = 2
    cache_tokens = kit.test_cache_tokens(batch, kit.tiny_npu.max_seq_len)
    assign_weights(
        model, shard_state(model, full), torch.device("cpu"), NPU_DTYPE, batch, cache_tokens
    )
    with torch.inference_mode():
        model.prefill(**prefill_inputs(kit.prompt(batch)).as_kwargs())
    step = decode_inputs(torch.zeros(batch, 1, dtype=torch.long), [8] * batch, True)
    converted = graph_conversion.ge_graph(
        graph, model, compile_config("ge_graph", True), step.as_kwargs()
    )
    return {
        "counts": converted.counts,
        "scatter_inputs": converted.inputs_of("Scatter"),
        "layers": kit.tiny_npu.num_hidden_layers,
        "moe_layers": len(moe_layers(model.args)),
    }
