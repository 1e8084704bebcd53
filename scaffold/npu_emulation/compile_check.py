"""Check a generated package's compile seam (``graph.py``) against the installed torch_npu /
torchair compile APIs, on CPU.

The NPU branches of ``compile_decode`` never run on a host without an NPU, so a misspelt
option only fails on the device. :func:`check_compile_seam` runs them anyway, with the real
configuration classes and validators of the wheel and only the compilation itself stubbed:

* ``graph.npu_available`` is patched to say True, so ``compile_decode(model, config)`` takes
  its npugraph_ex / ge_graph branches (per config variant: cache_compile on/off, static kernel);
* ``torchair.CompilerConfig`` is the real class: an unknown attribute
  (``experimental_config.frozen_paramter``) or a value outside its list raises;
* ``torchair.get_npu_backend(compiler_config=...)`` is really called (keyword-only, no
  ``**kwargs``);
* ``torch.compile`` is replaced by a recorder: its arguments are bound to the real signature;
  ``backend="npugraph_ex"`` options go through npugraph_ex's own validator
  (``_process_kwargs_options`` on a fresh ``npugraph_ex.CompilerConfig``, what the backend does
  with them), a torchair backend must carry a torchair ``CompilerConfig``;
* both ``cache_compile`` wrappers (``torch.npu.npugraph_ex.inference.cache_compile``,
  ``torchair.inference.cache_compile``) run for real, down to the innermost
  ``inference._cache_compiler.cache_compile``, which is wrapped: every keyword that lands in
  its ``**kwargs`` is silently dropped by the wheel (e.g. ``cache_path=`` for ``cache_dir=``)
  and reported. It then really runs (it only builds a lazy model: nothing compiles).

``NPUGRAPH_EX_OPTIONS`` (a module-level dict, when present) is validated on its own too.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import inspect
import io
import tempfile
from collections.abc import Iterable, Iterator
from typing import Any

from . import emulation

PORTABLE_BACKENDS = ("aot_eager", "inductor", "eager")
_REAL: dict[str, Any] = {}  # unpatched npugraph_ex validator while the seam is patched


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"


def npugraph_ex_option_problems(options: Any) -> list[str]:
    """What npugraph_ex's own option validator says about ``options`` (a torch.compile
    ``options`` dict for ``backend="npugraph_ex"``)."""
    emulation.activate()
    import npugraph_ex
    from npugraph_ex.configs import compiler_config

    if not isinstance(options, dict):
        return [f"options must be a dict, got {type(options).__name__}"]
    problems = []
    for key, value in options.items():
        config = npugraph_ex.CompilerConfig()
        config.mode = "npugraph_ex"
        try:
            process = _REAL.get("process") or compiler_config._process_kwargs_options
            process(config, {"options": {key: value}})
        except Exception as exc:  # noqa: BLE001 - the validator's verdict
            message = _first_line(exc)
            if "Supported attributes are" in message:  # keep the key, drop the long list
                message = message.split(" Supported attributes are")[0]
            problems.append(f"npugraph_ex option {key!r}={value!r}: {message}")
    return problems


def _default_variants(graph_module, output_path: str) -> list[tuple[str, Any]]:
    config_cls = getattr(graph_module, "ModelConfig", None)
    if config_cls is None:
        return []
    npugraph_ex = {
        "exe_mode": "npugraph_ex",
        "fa_interface": "torch_npu",
        "enable_dynamic_graph": True,
    }
    ge = {"exe_mode": "ge_graph", "fa_interface": "torchair", "enable_dynamic_graph": False}
    wanted = [
        ("npugraph_ex", npugraph_ex),
        ("npugraph_ex+static_kernel", {**npugraph_ex, "enable_static_kernel": True}),
        ("npugraph_ex+cache_compile", {**npugraph_ex, "enable_cache_compile": True}),
        ("ge_graph", ge),
        ("ge_graph+cache_compile", {**ge, "enable_cache_compile": True}),
    ]
    names = (
        {f.name for f in dataclasses.fields(config_cls)}
        if dataclasses.is_dataclass(config_cls)
        else set(inspect.signature(config_cls).parameters)
    )
    out = []
    for label, values in wanted:
        values = {"output_path": output_path, **values}
        out.append((label, config_cls(**{k: v for k, v in values.items() if k in names})))
    return out


class _Recorder:
    def __init__(self) -> None:
        self.problems: list[str] = []
        self.calls: list[str] = []
        self.consumed: set[str] = set()

    # --- torch.compile ---------------------------------------------------------------------
    def compile(self, real):
        sig = inspect.signature(real)

        def fake_compile(*args, **kwargs):
            try:
                bound = sig.bind(*args, **kwargs)
            except TypeError as exc:
                self.problems.append(f"torch.compile: {exc}")
                return args[0] if args else None
            arguments = bound.arguments
            backend = arguments.get("backend", "inductor")
            options = arguments.get("options")
            self.calls.append(f"torch.compile(backend={backend!r})")
            if isinstance(backend, str):
                self._string_backend(backend, options)
            else:
                self._callable_backend(backend)
            return arguments.get("model")

        return fake_compile

    def _string_backend(self, backend: str, options) -> None:
        import torch

        if backend in PORTABLE_BACKENDS:
            self.problems.append(
                f"torch.compile(backend={backend!r}) on the NPU path: a portable CPU backend"
            )
            return
        if backend not in torch._dynamo.list_backends(exclude_tags=()):
            self.problems.append(f"torch.compile: backend {backend!r} is not registered")
            return
        if backend == "npugraph_ex" and options is not None:
            self.problems += npugraph_ex_option_problems(options)

    def _callable_backend(self, backend) -> None:
        import torchair

        if isinstance(backend, functools.partial) and "torchair" in getattr(
            backend.func, "__module__", ""
        ):
            config = backend.keywords.get("compiler_config")
            if not isinstance(config, torchair.CompilerConfig):
                self.problems.append(
                    "torchair backend without a torchair.CompilerConfig "
                    f"(compiler_config={config!r})"
                )

    # --- cache_compile -----------------------------------------------------------------------
    def inner_cache_compile(self, real, shown: str):
        sig = inspect.signature(real)
        var_kw = next((p.name for p in sig.parameters.values() if p.kind is p.VAR_KEYWORD), None)
        used = [n for n, p in sig.parameters.items() if p.kind is not p.VAR_KEYWORD]

        def recording(*args, **kwargs):
            bound = sig.bind(*args, **kwargs)
            self.calls.append(shown)
            dropped = sorted(set(bound.arguments.get(var_kw, {})) - self.consumed)
            for key in dropped:
                self.problems.append(
                    f"{shown}(..., {key}=...): swallowed by **kwargs and never used by the "
                    f"installed wheel (it takes: {', '.join(used[1:] + sorted(self.consumed))})"
                )
            return real(*args, **kwargs)

        return recording

    def process_options(self, real):
        def recording(config, kwargs):
            if "options" in kwargs:
                self.consumed.add("options")  # npugraph_ex reads kwargs["options"], nothing else
            return real(config, kwargs)

        return recording


@contextlib.contextmanager
def _patched(graph_module, recorder: _Recorder) -> Iterator[None]:
    import npugraph_ex
    import torch
    import torchair.inference
    from npugraph_ex.configs import compiler_config

    saved: list[tuple[Any, str, Any]] = []

    def patch(obj, name: str, value) -> None:
        if isinstance(obj, dict):
            saved.append((obj, name, obj[name]))
            obj[name] = value
        else:
            saved.append((obj, name, getattr(obj, name)))
            setattr(obj, name, value)

    try:
        patch(graph_module, "npu_available", lambda: True)
        patch(torch, "compile", recorder.compile(torch.compile))
        for public, shown in (
            (torchair.inference.cache_compile, "torchair.inference.cache_compile"),
            (npugraph_ex.inference.cache_compile, "npugraph_ex.inference.cache_compile"),
        ):
            namespace = public.__globals__
            patch(
                namespace,
                "_cache_compile",
                recorder.inner_cache_compile(namespace["_cache_compile"], shown),
            )
        real_process = _REAL["process"] = compiler_config._process_kwargs_options
        patch(compiler_config, "_process_kwargs_options", recorder.process_options(real_process))
        yield
    finally:
        _REAL.clear()
        for obj, name, value in reversed(saved):
            if isinstance(obj, dict):
                obj[name] = value
            else:
                setattr(obj, name, value)


def _seam_model():
    import torch

    class SeamModel(torch.nn.Module):
        """Stands in for the Transformer: cache_compile needs a bound nn.Module method."""

        def decode(self, *args, **kwargs):  # pragma: no cover - never called
            raise AssertionError("the compile seam check does not run decode")

    return SeamModel()


def check_compile_seam(
    graph_module, model=None, variants: Iterable[tuple[str, Any]] | None = None
) -> list[str]:
    """Problems (``"<variant>: <message>"``, each naming the bad key / attribute) of the NPU
    branches of ``graph_module.compile_decode`` against the installed wheel; [] when fine.

    ``graph_module``: the package's imported ``graph`` module (``compile_decode(model, config)``,
    ``npu_available``, ``ModelConfig``; ``NPUGRAPH_EX_OPTIONS`` if it has one). ``variants``:
    ``(label, ModelConfig)`` pairs; default: npugraph_ex (plain, static kernel, cache_compile)
    and ge_graph (plain, cache_compile).
    """
    emulation.activate()
    problems: list[str] = []
    options = getattr(graph_module, "NPUGRAPH_EX_OPTIONS", None)
    if options is not None:
        problems += [f"NPUGRAPH_EX_OPTIONS: {m}" for m in npugraph_ex_option_problems(options)]
    for name in ("compile_decode", "npu_available"):
        if not hasattr(graph_module, name):
            problems.append(f"{graph_module.__name__} has no {name}: the seam cannot be checked")
    if problems and not hasattr(graph_module, "compile_decode"):
        return problems
    model = model if model is not None else _seam_model()
    with tempfile.TemporaryDirectory(prefix="ascend-seam-") as out:
        pairs = list(variants) if variants is not None else _default_variants(graph_module, out)
        if not pairs:
            problems.append(f"{graph_module.__name__} has no ModelConfig: pass variants=")
        for label, config in pairs:
            recorder = _Recorder()
            noise = io.StringIO()  # torchair prints a traceback before it raises
            with (
                _patched(graph_module, recorder),
                contextlib.redirect_stdout(noise),
                contextlib.redirect_stderr(noise),
            ):
                try:
                    graph_module.compile_decode(model, config)
                except Exception as exc:  # noqa: BLE001 - each failure is a finding
                    recorder.problems.append(f"compile_decode raised {_first_line(exc)}")
            if not recorder.calls and not recorder.problems:
                recorder.problems.append("compile_decode reached no NPU compile API")
            problems += [f"{label}: {m}" for m in recorder.problems]
    return list(dict.fromkeys(problems))


__all__ = ["check_compile_seam", "npugraph_ex_option_problems"]
