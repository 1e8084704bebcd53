"""The compile seam: `compile_decode` per exe_mode. Prefill is never compiled.

On a host without an NPU, decode compiles with a portable torch backend instead
(aot_eager by default). That is a CPU stand-in for checking graph capture, graph
breaks and recompiles; it is labelled as such and never reported as npugraph_ex/GE.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

import torch
import torch._dynamo.config as dynamo_config
import torch._inductor.config as inductor_config
from torch import nn
from torch._dynamo.utils import counters

from .config import ModelConfig
from .cpu_linears import OneDnnLinears
from .ops import npu_available
from .ops.portable import traced_attention
from .stable_decode import StableDecode

log = logging.getLogger(__name__)

PORTABLE_BACKENDS = ("aot_eager", "inductor", "eager")

# Inductor's runtime checks of each fallback kernel's output (size/stride, alignment) are
# per-call host work in the generated wrapper, not maths: the CPU stand-in skips them, and
# runs the wrapper itself as C++ (cpp_wrapper) instead of one Python call per kernel, and
# its frozen linears on oneDNN (cpu_linears.py).
PORTABLE_INDUCTOR_OPTIONS = {
    "size_asserts": False,
    "alignment_asserts": False,
    "cpp_wrapper": True,
    "post_grad_custom_post_pass": OneDnnLinears(),
}

# npugraph_ex options for LLM decode: the option keys torch_npu's npugraph_ex config accepts
# (torch_npu/dynamo/npugraph_ex/), with frozen_parameter as cann-recipes-infer's model runners set.
NPUGRAPH_EX_OPTIONS = {
    "inplace_pass": True,
    "input_inplace_pass": True,
    "pattern_fusion_pass": True,
    "reuse_graph_pool_in_same_fx": True,
    "clone_input": True,
    "clone_output": False,
    "remove_noop_ops": True,
    "frozen_parameter": True,
}


def compile_decode(
    model: nn.Module, config: ModelConfig, portable_backend: str = "aot_eager"
) -> Callable:
    """Return `model.decode`, compiled as `config.exe_mode` asks (eager: not at all), with
    dynamo's guards skipped once warm-up has compiled its graph (stable_decode.py)."""
    if config.exe_mode == "eager":
        return model.decode
    return StableDecode(_compiled_decode(model, config, portable_backend), model, graph_count)


def _compiled_decode(model: nn.Module, config: ModelConfig, portable_backend: str) -> Callable:
    if not npu_available():
        if portable_backend not in PORTABLE_BACKENDS:
            raise ValueError(f"portable backend must be one of {PORTABLE_BACKENDS}")
        log.warning(
            "no NPU: decode compiles with the portable %r backend (dynamic=%s), "
            "a CPU stand-in for %s",
            portable_backend,
            config.dynamic,
            config.exe_mode,
        )
        compiled = torch.compile(  # graph-ok: npu-backend (CPU stand-in, never used on an NPU)
            model.decode,
            backend=portable_backend,
            fullgraph=True,
            **portable_compile_kwargs(config, portable_backend),
        )
        if portable_backend == "inductor":
            return with_trace_settings(
                compiled, perf_stand_in=True, freeze=not model.host_written_tensors
            )
        return with_trace_settings(compiled)
    cache_dir = str(Path(config.output_path or "output") / "compile_cache")
    if config.exe_mode == "npugraph_ex":
        return with_trace_settings(_compile_npugraph_ex(model, config, cache_dir))
    return _compile_ge(model, config, cache_dir)  # dynamic=False: floats are constants


def portable_compile_kwargs(config: ModelConfig, portable_backend: str = "inductor") -> dict:
    """`dynamic` (the exe_mode's: host-list lengths stay SymInts, one graph for every step)
    and, for inductor, its options; what `compile_decode` passes on a host without an NPU."""
    kwargs: dict = {"dynamic": config.dynamic}
    if portable_backend == "inductor":
        kwargs["options"] = dict(PORTABLE_INDUCTOR_OPTIONS)
        # Dynamo re-checks every parameter and buffer of the model before each call (about
        # 0.2 ms a step here); the weights and caches are never swapped under the compiled
        # decode (frozen, as npugraph_ex's frozen_parameter assumes), so the perf backend
        # drops those module guards, keeps the ones on the step inputs and the identity of
        # each frozen weight. aot_eager, the checking stand-in, keeps them all.
        kwargs["options"]["guard_filter_fn"] = skip_module_guards_but_frozen_identity
    return kwargs


def skip_module_guards_but_frozen_identity(guard_entries) -> list[bool]:
    """Dynamo's guard filter (torch.compiler.skip_guard_on_all_nn_modules_unsafe), keeping
    the ID_MATCH guards freezing puts on the weights it folds in. Compiled code is cached
    per code object, not per model: without them a second model's decode would run the
    first model's frozen weights. An identity check is a pointer compare per weight."""
    return [
        entry.guard_type == "ID_MATCH" or not entry.orig_guard.source.is_unspecialized_nn_module()
        for entry in guard_entries
    ]


def with_trace_settings(
    compiled: Callable, perf_stand_in: bool = False, freeze: bool = False
) -> Callable:
    """`compiled`, called with the settings dynamo and inductor read while they trace it
    (torch/_dynamo/variables/builder.py), so they are set around each call: given to
    torch.compile they would come too early, or, as inductor options, too late.

    - `specialize_float`: with dynamic=True dynamo makes every Python float it reads a graph
      input (a 0-d tensor built on the host each step): here each norm's eps, each layer's
      attention scale, the embedding's norm_type. They never change, so they are traced as
      constants: 3 x layers + 2 fewer step inputs. Lengths stay SymInts.
    - `perf_stand_in` (the inductor stand-in): decode attention traced as plain maths
      (ops/portable.py's `traced_attention`), which the compiler fuses with its neighbours
      instead of calling back into a Python op in every layer. aot_eager keeps the opaque
      op the NPU graph has.
    - `freeze`: inductor's `freezing`, the weights folded into the graph as npugraph_ex's
      frozen_parameter treats them, the linear weights packed once for oneDNN
      (torch/_inductor/fx_passes/mkldnn_fusion.py, then cpu_linears.py): a second, packed
      copy in host memory, and weights changed after the first compiled call are not seen
      (load them before, as the runner does). Freezing turns every tensor decode only
      reads into a constant, so a model whose decode reads tensors the host rewrites
      between steps (`Transformer.host_written_tensors`) is not frozen. The KV cache,
      written by the graph, stays an input.
    """

    def decode(*args, **kwargs):
        saved = dynamo_config.specialize_float, inductor_config.freezing
        dynamo_config.specialize_float, inductor_config.freezing = True, freeze
        try:
            if perf_stand_in:
                with traced_attention():
                    return compiled(*args, **kwargs)
            return compiled(*args, **kwargs)
        finally:
            dynamo_config.specialize_float, inductor_config.freezing = saved

    return decode


def _compile_npugraph_ex(model: nn.Module, config: ModelConfig, cache_dir: str) -> Callable:
    options = {**NPUGRAPH_EX_OPTIONS, "static_kernel_compile": config.enable_static_kernel}
    if config.enable_cache_compile:
        return torch.npu.npugraph_ex.inference.cache_compile(
            model.decode, cache_dir=cache_dir, dynamic=config.dynamic, options=options
        )
    return torch.compile(
        model.decode, backend="npugraph_ex", fullgraph=True, dynamic=config.dynamic, options=options
    )


def _compile_ge(model: nn.Module, config: ModelConfig, cache_dir: str) -> Callable:
    import torchair

    compiler_config = torchair.CompilerConfig()
    experimental = compiler_config.experimental_config
    experimental.frozen_parameter = True
    experimental.tiling_schedule_optimize = True
    experimental.topology_sorting_strategy = "StableRDFS"
    if config.enable_cache_compile:
        # The cache compiler always captures a full graph (torchair/inference/
        # _cache_compiler.py); a `fullgraph=` here would vanish into its **kwargs.
        return torchair.inference.cache_compile(
            model.decode,
            cache_dir=cache_dir,
            config=compiler_config,
            dynamic=False,
            ge_cache=True,
        )
    backend = torchair.get_npu_backend(compiler_config=compiler_config)
    # Static graph: ge_graph decode gets Tensor lengths (fa_interface=torchair, validated).
    return torch.compile(  # graph-ok: fa-list-static
        model.decode, backend=backend, fullgraph=True, dynamic=False
    )


def graph_count() -> int:
    """Graphs dynamo has compiled in this process; a rise after warm-up is a recompile."""
    return counters["stats"]["unique_graphs"]


def graph_break_count() -> int:
    return sum(counters["graph_break"].values())
