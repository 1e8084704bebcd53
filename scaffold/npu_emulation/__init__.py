"""NPU emulation on CPU: the real torch_npu / torchair with stand-in CANN libraries and CPU
reference kernels on the real ``npu::`` / ``air::`` ops (see docs/npu-emulation.md).

The one versioned home of the emulation (``__version__`` is ascend-scaffold's): generated
packages list ascend-scaffold as a test dependency and take it through their ``npu_emulation``
fixture; ``ascend-scaffold npu-emulate`` and this project's tests use it too.

Light on purpose, it is a test-time dependency: importing this package needs only the standard
library (no torch, torch_npu, CLI or copier); :func:`activate` imports torch_npu / torchair, and
:func:`unavailable_reason` reports why it cannot (e.g. torch_npu not installed) without raising.
:func:`check_npu_calls` (:mod:`.schema_check`), :func:`check_compile_seam`
(:mod:`.compile_check`) and the compilers' CPU conversion, :func:`ge_graph` and
:func:`npugraph_ex_graph` (:mod:`.graph_conversion`), are loaded on first use. The kernels
are strict by default: a call the device would refuse (:mod:`scaffold.device_limits`, per
platform) raises :class:`DeviceConstraintError`.
"""

from __future__ import annotations

from scaffold import __version__

from . import emulation
from .emulation import *  # noqa: F403 (its __all__ is the public API)

_GRAPH_CONVERSION = ("ConvertedGraph", "GraphConversionError", "ge_graph", "npugraph_ex_graph")


def __getattr__(name: str):
    # The schema check pulls in the AST helpers of `ascend-scaffold check`: load it on first use.
    if name == "check_npu_calls":
        from .schema_check import check_npu_calls

        return check_npu_calls
    if name == "check_compile_seam":
        from .compile_check import check_compile_seam

        return check_compile_seam
    if name in _GRAPH_CONVERSION:
        from . import graph_conversion

        return getattr(graph_conversion, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# the lazy names (__getattr__) after the emulation's own
__all__ = [  # noqa: F405
    *emulation.__all__,
    *_GRAPH_CONVERSION,
    "__version__",
    "check_compile_seam",
    "check_npu_calls",
]
