"""Run the NPU graph compilers' host-side conversion on CPU, as far as it goes without a device.

The emulated tier (:mod:`.emulation`) traces decode under ``aot_eager``: it proves the graph,
the op schemas and the maths, but never runs the compilers a device run uses. This module
runs them, through the package's own compile seam (``graph.compile_decode``, with
``npu_available`` patched to say True), so their argument handling is exercised on CPU:

* :func:`ge_graph` — torchair's real FX -> GE conversion (``torchair.get_npu_backend``, every
  op's converter under ``torchair/_ge_concrete_graph/ge_converter/``). Four things need the
  device or CANN and are replaced while it runs: the graph engine start
  (``fx2ge_converter.initialize_graph_engine``, a no-op), CANN's op-registry probe
  (``compat_ir.is_cann_compat``: every IR taken as present), the device name that picks the
  platform (``torch_npu.npu.get_device_name``), and ``GeGraph.load``, the first step that needs
  the device: it records the built graph's op types and stops the run.
* :func:`npugraph_ex_graph` — npugraph_ex's FX passes (``npu_fx_compiler._optimize_fx``:
  remove_noop_ops, view/in-place pattern recovery, pattern fusion; then
  ``AclConcreteGraph.optimize_graph_without_runtime``: the in-place and input-in-place passes,
  dynamic-workspace replacement, ...), with the package's options. The current stream is
  replaced by a stand-in (``replace_stream_event_pass`` reads its id), and the run stops at
  ``AclGraph.__init__``, the first step that needs the device (``torch_npu.npu.current_device``,
  before capture): the FX graph it would capture is recorded.

A converter that fails names its op: :class:`GraphConversionError`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import types
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

from . import emulation

# What torch_npu.npu.get_device_name() answers per platform: torchair and npugraph_ex branch
# on it (check_platform.is_arch35: "Ascend910_95" / "Ascend950"; "Ascend910B" for A2).
DEVICE_NAMES = {"A2": "Ascend910B3", "A3": "Ascend910_9392", "950": "Ascend950"}


class GraphConversionError(AssertionError):
    """The compiler refused the graph; the message names the op whose conversion failed."""


@dataclasses.dataclass(frozen=True)
class ConvertedGraph:
    """What a compiler built from decode: GE op types, or the targets of npugraph_ex's FX nodes."""

    compiler: str
    ops: tuple[str, ...]
    # per node, what feeds it: GE op types of its inputs / npugraph_ex FX input targets
    inputs: tuple[tuple[str, ...], ...] = ()

    def inputs_of(self, op: str) -> list[tuple[str, ...]]:
        """What feeds each `op` node, in graph order (e.g. ``("Data", ...)``: a graph input)."""
        return [ins for name, ins in zip(self.ops, self.inputs, strict=True) if name == op]

    @property
    def counts(self) -> dict[str, int]:
        return dict(Counter(self.ops))

    def summary(self) -> str:
        common = ", ".join(f"{op} x{n}" for op, n in Counter(self.ops).most_common())
        return f"{self.compiler}: {len(self.ops)} nodes ({common})"


class _Stop(Exception):  # noqa: N818 (not an error: the run reached the device boundary)
    pass


@dataclasses.dataclass
class _Run:
    ops: tuple[str, ...] | None = None
    inputs: tuple[tuple[str, ...], ...] = ()
    failed_op: str | None = None
    failure: BaseException | None = None


def _first_line(exc: BaseException) -> str:
    lines = [ln for ln in str(exc).strip().splitlines() if ln.strip()]
    return f"{type(exc).__name__}: {lines[0] if lines else ''}"


@contextlib.contextmanager
def _patched(pairs: list[tuple[Any, str, Any]]) -> Iterator[None]:
    saved = [(obj, name, getattr(obj, name)) for obj, name, _ in pairs]
    try:
        for obj, name, value in pairs:
            setattr(obj, name, value)
        yield
    finally:
        for obj, name, value in reversed(saved):
            setattr(obj, name, value)


def _target_name(target) -> str:
    """``npu.npu_rms_norm.default`` for an op overload, ``getitem`` for a Python callable."""
    name = getattr(target, "__name__", None)
    return str(target) if hasattr(target, "_schema") or not name else name


def _ge_patches(run: _Run, platform: str) -> list[tuple[Any, str, Any]]:
    import torch_npu
    from torchair._ge_concrete_graph import compat_ir, fx2ge_converter
    from torchair.ge._ge_graph import GeGraph

    def load(graph, *args, **kwargs):
        ops = list(graph._proto.op)
        types_by_name = {op.name: op.type for op in ops}
        run.ops = tuple(op.type for op in ops)
        run.inputs = tuple(
            tuple(types_by_name.get(name.lstrip("^").split(":")[0], "?") for name in op.input)
            for op in ops
        )
        raise _Stop("GeGraph.load: the first step that needs the device")

    real_parse = fx2ge_converter.GeConcreteGraph.parse_node

    def parse_node(graph, target, *args, **kwargs):
        try:
            return real_parse(graph, target, *args, **kwargs)
        except Exception as exc:
            if run.failed_op is None:
                run.failed_op, run.failure = str(target), exc
            raise

    return [
        (fx2ge_converter, "initialize_graph_engine", lambda *a, **k: None),
        (compat_ir, "is_cann_compat", lambda *a, **k: ""),
        (torch_npu.npu, "get_device_name", lambda *a, **k: DEVICE_NAMES[platform]),
        (GeGraph, "load", load),
        (fx2ge_converter.GeConcreteGraph, "parse_node", parse_node),
    ]


def _npugraph_ex_patches(run: _Run, platform: str) -> list[tuple[Any, str, Any]]:
    import torch
    import torch_npu
    from npugraph_ex._acl_concrete_graph import fx2acl_converter

    def acl_graph(*args, fx_graph=None, **kwargs):
        nodes = [node for node in fx_graph.graph.nodes if node.op == "call_function"]
        run.ops = tuple(_target_name(node.target) for node in nodes)
        run.inputs = tuple(
            tuple(
                n.op if n.op != "call_function" else _target_name(n.target)
                for n in node.all_input_nodes
            )
            for node in nodes
        )
        raise _Stop("AclGraph: the first step that needs the device")

    stream = types.SimpleNamespace(stream_id=0, device_index=0, device_type=20)
    return [
        (torch.npu, "current_stream", lambda *a, **k: stream),
        (torch_npu.npu, "get_device_name", lambda *a, **k: DEVICE_NAMES[platform]),
        (fx2acl_converter, "AclGraph", acl_graph),
    ]


def _convert(
    compiler: str,
    patches: Callable[[_Run, str], list],
    graph_module,
    model,
    config,
    step_kwargs: dict,
    platform: str | None,
) -> ConvertedGraph:
    emulation.activate()
    import torch

    platform = platform or emulation.current_platform()
    run = _Run()
    noise = io.StringIO()  # the compilers print tracebacks of their own before they raise
    torch._dynamo.reset()
    with (
        _patched([(graph_module, "npu_available", lambda: True), *patches(run, platform)]),
        contextlib.redirect_stdout(noise),
        contextlib.redirect_stderr(noise),
        torch.inference_mode(),
    ):
        try:
            graph_module.compile_decode(model, config)(**step_kwargs)
        except Exception as exc:  # noqa: BLE001 - sorted out below
            error = exc
        else:
            error = None
    torch._dynamo.reset()
    if run.ops is not None:
        return ConvertedGraph(compiler, run.ops, run.inputs)
    if run.failed_op is not None:
        raise GraphConversionError(
            f"{compiler}: the converter of {run.failed_op} failed: {_first_line(run.failure)}"
        )
    if error is None:
        raise GraphConversionError(f"{compiler}: decode ran without reaching the compiler")
    raise GraphConversionError(f"{compiler}: {_first_line(error)}")


def ge_graph(graph_module, model, config, step_kwargs: dict, platform: str | None = None):
    """Convert ``model.decode``, compiled by ``graph_module.compile_decode(model, config)``
    (an ``exe_mode: ge_graph`` config), to a GE graph on CPU and return its op types.
    ``step_kwargs``: one decode step's inputs (Tensor lengths), after an eager prefill."""
    return _convert("torchair GE", _ge_patches, graph_module, model, config, step_kwargs, platform)


def npugraph_ex_graph(graph_module, model, config, step_kwargs: dict, platform: str | None = None):
    """Run npugraph_ex's FX passes over ``model.decode`` as ``graph_module.compile_decode``
    compiles it (an ``exe_mode: npugraph_ex`` config) and return the targets of the FX graph
    it would capture. ``step_kwargs``: one decode step's inputs (host-list lengths)."""
    return _convert(
        "npugraph_ex", _npugraph_ex_patches, graph_module, model, config, step_kwargs, platform
    )


__all__ = [
    "DEVICE_NAMES",
    "ConvertedGraph",
    "GraphConversionError",
    "ge_graph",
    "npugraph_ex_graph",
]
