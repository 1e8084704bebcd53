"""Run the real torch_npu / torchair Python code path on a CPU-only machine.

Part of :mod:`scaffold.npu_emulation` (the one versioned home of the emulation): generated
packages import it from their ``npu_emulation`` test fixture (a test-only dependency on
ascend-scaffold) and ``ascend-scaffold npu-emulate`` uses it. Standard library only at import
time (torch / torch_npu are imported by :func:`activate`), no CLI or copier imports.

How it works
------------
``import torch_npu`` needs the CANN runtime (``libascendcl.so``, ``libhccl.so``, ...). Its
``.so`` files are linked with BIND_NOW, so every undefined symbol must resolve at load time.
:func:`build_stubs` derives the list of missing symbols automatically from the installed wheel
(``nm -D --undefined-only`` of every torch_npu/torchair ``.so`` minus what torch, torch_npu,
the interpreter and the system libraries found by ``ldd`` define) and compiles stand-in
libraries with those sonames: one ``libascendcl.so`` that defines every missing symbol (each a
``long f(void) { return 0; }``; the Huawei secure-C string functions get real bodies), and one
empty library per other missing soname linked against it. :func:`activate` preloads them with
``ctypes.CDLL(..., RTLD_GLOBAL)`` (the loader then satisfies ``DT_NEEDED`` by soname, so
``LD_LIBRARY_PATH`` need not be set before the process starts), imports ``torch_npu`` and
``torchair`` and registers CPU reference kernels on the real ``npu::`` / ``air::`` ops.

Environment
-----------
* ``TORCH_DEVICE_BACKEND_AUTOLOAD=0`` must be set before ``import torch`` in an environment where
  torch-npu is installed, otherwise ``import torch`` itself tries to import torch_npu (and fails
  without CANN). Set it in ``conftest.py`` (``os.environ.setdefault(...)`` at the top, before any
  torch import) or in the shell. :func:`activate` sets it too (for child processes).
* ``ASCEND_SCAFFOLD_NPU_STUBS``: root directory of the stub cache (default
  ``~/.cache/ascend-scaffold/npu-stubs``); stubs go to ``<root>/<key>`` where the key is the
  torch_npu version plus a hash of the wheel's ``.so`` list.
* Strict by default: documented device limits the CPU kernels can see (FIA query
  float16/bfloat16, contiguous q/k/v, accepted ``input_layout`` / ``sparse_mode``; rotary
  D in {64, 128}, layout, mode; MoE chain dtypes, int32 expert ids, int64 group_list,
  split_item 2/3, k <= E, at most 1024 groups, InnerLimit 65536; PageAttention block_size,
  int32 block_table, actual_seq_lengths_kv, legal block ids; npu_scatter_nd_update_ indices in
  range; ...; the values are
  :mod:`scaffold.device_limits`'s) raise
  :class:`DeviceConstraintError`, as the device would refuse the call. They are also recorded
  in :data:`CONSTRAINT_VIOLATIONS`; ``ASCEND_SCAFFOLD_NPU_STRICT=0`` (debugging) only records.
* ``ASCEND_SCAFFOLD_NPU_PLATFORM`` (A2, A3, 950; default A3, or ``activate(platform=...)``):
  whose limits apply.
* ``ASCEND_SCAFFOLD_REQUIRE_NPU_EMULATION=1`` (CI): tests that need the emulation fail instead
  of skipping when it is missing (:func:`required`).

What cannot run: the ``npu`` / ``npugraph_ex`` dynamo backends and GE graph mode initialise the
device and fail cleanly; ``device="npu"`` tensors fail. Use ``backend="aot_eager"`` (or
``"eager"``) to trace the NPU ops on CPU.
"""

from __future__ import annotations

import ctypes
import hashlib
import importlib.metadata
import importlib.util
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from scaffold import device_limits

STUBS_ENV = "ASCEND_SCAFFOLD_NPU_STUBS"
STRICT_ENV = "ASCEND_SCAFFOLD_NPU_STRICT"  # "0": record device-limit violations only
PLATFORM_ENV = device_limits.PLATFORM_ENV
REQUIRE_ENV = "ASCEND_SCAFFOLD_REQUIRE_NPU_EMULATION"
ALIASING_ENV = "TORCHINDUCTOR_ERROR_ON_CUSTOM_OP_ALIASING"  # torch's own switch
AUTOLOAD_ENV = "TORCH_DEVICE_BACKEND_AUTOLOAD"
DEFAULT_CACHE_ROOT = Path("~/.cache/ascend-scaffold/npu-stubs")
PRIMARY_SONAME = "libascendcl.so"
# Optional add-on runtimes: torch_npu skips the plugin that needs them when they are absent, so
# they are not stubbed and the .so files that need them are not scanned (a soname list, not a
# symbol list).
OPTIONAL_SONAMES = frozenset({"libatb.so"})
_STUB_FORMAT = 1  # bump to invalidate caches when the generated C changes

# Huawei secure-C functions get real bodies: torchair formats strings with them at import time.
_SECUREC_BODIES = {
    "memcpy_s": (
        "int memcpy_s(void *d, size_t dmax, const void *s, size_t n)"
        "{ if (!d || !s || n > dmax) return 1; memcpy(d, s, n); return 0; }"
    ),
    "memmove_s": (
        "int memmove_s(void *d, size_t dmax, const void *s, size_t n)"
        "{ if (!d || !s || n > dmax) return 1; memmove(d, s, n); return 0; }"
    ),
    "memset_s": (
        "int memset_s(void *d, size_t dmax, int c, size_t n)"
        "{ if (!d || n > dmax) return 1; memset(d, c, n); return 0; }"
    ),
    "strcpy_s": (
        "int strcpy_s(char *d, size_t dmax, const char *s)"
        "{ size_t n; if (!d || !s || !dmax) return 1; n = strlen(s);"
        " if (n >= dmax) { d[0] = 0; return 1; } memcpy(d, s, n + 1); return 0; }"
    ),
    "strncpy_s": (
        "int strncpy_s(char *d, size_t dmax, const char *s, size_t c)"
        "{ size_t n; if (!d || !s || !dmax) return 1; n = strnlen(s, c);"
        " if (n >= dmax) { d[0] = 0; return 1; } memcpy(d, s, n); d[n] = 0; return 0; }"
    ),
    "strcat_s": (
        "int strcat_s(char *d, size_t dmax, const char *s)"
        "{ size_t a, b; if (!d || !s) return 1; a = strnlen(d, dmax); b = strlen(s);"
        " if (a + b >= dmax) return 1; memcpy(d + a, s, b + 1); return 0; }"
    ),
    "strncat_s": (
        "int strncat_s(char *d, size_t dmax, const char *s, size_t c)"
        "{ size_t a, b; if (!d || !s) return 1; a = strnlen(d, dmax); b = strnlen(s, c);"
        " if (a + b >= dmax) return 1; memcpy(d + a, s, b); d[a + b] = 0; return 0; }"
    ),
    "vsnprintf_s": (
        "int vsnprintf_s(char *d, size_t dmax, size_t c, const char *f, va_list ap)"
        "{ int r; size_t lim; if (!d || !dmax || !f) return -1; lim = c < dmax - 1 ? c + 1 : dmax;"
        " r = vsnprintf(d, lim, f, ap); if (r < 0 || (size_t)r >= lim) return -1; return r; }"
    ),
    "snprintf_s": (
        "int snprintf_s(char *d, size_t dmax, size_t c, const char *f, ...)"
        "{ int r; va_list ap; va_start(ap, f); r = vsnprintf_s(d, dmax, c, f, ap); va_end(ap);"
        " return r; }"
    ),
    "vsprintf_s": (
        "int vsprintf_s(char *d, size_t dmax, const char *f, va_list ap)"
        "{ int r; if (!d || !dmax || !f) return -1; r = vsnprintf(d, dmax, f, ap);"
        " if (r < 0 || (size_t)r >= dmax) { d[0] = 0; return -1; } return r; }"
    ),
    "sprintf_s": (
        "int sprintf_s(char *d, size_t dmax, const char *f, ...)"
        "{ int r; va_list ap; va_start(ap, f); r = vsprintf_s(d, dmax, f, ap); va_end(ap);"
        " return r; }"
    ),
}
_SECUREC_DEPS = {"snprintf_s": "vsnprintf_s", "sprintf_s": "vsprintf_s"}

# Documented device constraints the CPU kernels noticed ("[platform] message", unique);
# strict mode (the default) also raises.
CONSTRAINT_VIOLATIONS: list[str] = []

_STATE: dict[str, object] = {
    "active": False,
    "handles": [],
    "libs": [],
    "stub_dir": None,
    "platform": None,
}


class EmulationUnavailable(RuntimeError):
    """NPU emulation cannot be set up here; ``str(exc)`` is the reason."""


# --------------------------------------------------------------------------------------------
# stand-in libraries
# --------------------------------------------------------------------------------------------


def _pkg_dir(name: str) -> Path | None:
    """Directory of an installed package, without importing it."""
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    if spec is None:
        return None
    if spec.submodule_search_locations:
        return Path(next(iter(spec.submodule_search_locations)))
    return Path(spec.origin).parent if spec.origin else None


def _require_tools() -> None:
    hints = {"gcc": "gcc", "nm": "binutils", "ldd": "libc-bin"}
    for tool, pkg in hints.items():
        if shutil.which(tool) is None:
            raise EmulationUnavailable(
                f"NPU emulation needs `{tool}` on PATH to build stand-in CANN libraries "
                f"(install the `{pkg}` package)"
            )


def _torch_npu_version() -> str:
    try:
        return importlib.metadata.version("torch-npu")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def _so_files(npu_dir: Path) -> list[Path]:
    return sorted(
        p for p in npu_dir.rglob("*.so*") if p.is_file() and re.search(r"\.so(\.\d+)*$", p.name)
    )


def _stub_key(npu_dir: Path) -> str:
    h = hashlib.sha256(f"format={_STUB_FORMAT}\n".encode())
    for so in _so_files(npu_dir):
        h.update(f"{so.relative_to(npu_dir)}:{so.stat().st_size}\n".encode())
    return f"torch_npu-{_torch_npu_version()}-{h.hexdigest()[:16]}"


def _cache_root(cache_dir: Path | None) -> Path:
    if cache_dir is not None:
        return Path(cache_dir).expanduser()
    env = os.environ.get(STUBS_ENV)
    return Path(env).expanduser() if env else DEFAULT_CACHE_ROOT.expanduser()


def _run(cmd: list[str], env: dict[str, str] | None = None) -> str:
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if proc.returncode != 0 and cmd[0] != "ldd":
        raise RuntimeError(f"`{' '.join(cmd)}` failed ({proc.returncode}): {proc.stderr[-2000:]}")
    return proc.stdout


def _nm(path: Path, undefined: bool) -> set[str]:
    flag = "--undefined-only" if undefined else "--defined-only"
    out = set()
    for line in _run(["nm", "-D", flag, str(path)]).splitlines():
        parts = line.split()
        if not parts:
            continue
        if undefined and (len(parts) != 2 or parts[0] not in ("U", "u")):
            continue  # weak undefined (w/v) symbols need no definition
        out.add(parts[-1].split("@", 1)[0])  # strip symbol version suffixes
    return out


def _ldd(path: Path, env: dict[str, str]) -> tuple[set[Path], set[str]]:
    found: set[Path] = set()
    missing: set[str] = set()
    for line in _run(["ldd", str(path)], env=env).splitlines():
        line = line.strip()
        if "=>" in line:
            name, _, rest = line.partition("=>")
            rest = rest.strip()
            if rest.startswith("not found"):
                missing.add(name.strip())
            elif rest.startswith("/"):
                found.add(Path(rest.split()[0]))
        elif line.startswith("/"):
            # the dynamic loader line (no "=>"): it defines __tls_get_addr & co.
            found.add(Path(line.split()[0]))
    return found, missing


def _c_source(symbols: list[str]) -> str:
    lines = [
        "/* Stand-in CANN symbols generated by scaffold.npu_emulation; do not edit. */",
        "#include <stdarg.h>",
        "#include <stddef.h>",
        "#include <stdio.h>",
        "#include <string.h>",
    ]
    wanted = set(symbols)
    for name, dep in _SECUREC_DEPS.items():
        if name in wanted:
            wanted.add(dep)
    for name in ("memcpy_s", "memmove_s", "memset_s", "strcpy_s", "strncpy_s", "strcat_s"):
        if name in wanted:
            lines.append(_SECUREC_BODIES[name])
    for name in ("strncat_s", "vsnprintf_s", "snprintf_s", "vsprintf_s", "sprintf_s"):
        if name in wanted:
            lines.append(_SECUREC_BODIES[name])
    for i, sym in enumerate(sorted(set(symbols) - set(_SECUREC_BODIES))):
        if sym.startswith(("_ZTV", "_ZTI", "_ZTS")):  # vtable / typeinfo (name): data
            lines.append(
                f'char ascend_stub_d{i}[256] __asm__("{sym}") __attribute__((aligned(16)));'
            )
        else:
            lines.append(f'long ascend_stub_f{i}(void) __asm__("{sym}");')
            lines.append(f"long ascend_stub_f{i}(void) {{ return 0; }}")
    return "\n".join(lines) + "\n"


def _gcc(args: list[str]) -> None:
    _run(["gcc", "-shared", "-fPIC", "-O1", "-w", *args])


def _stub_dir_complete(path: Path) -> bool:
    manifest = path / "manifest.json"
    if not manifest.is_file():
        return False
    try:
        libs = json.loads(manifest.read_text())["libs"]
    except (ValueError, KeyError):
        return False
    return all((path / lib).is_file() for lib in libs)


def build_stubs(cache_dir: Path | None = None) -> Path:
    """Build (or reuse) the stand-in CANN libraries for the installed torch_npu.

    ``cache_dir`` (or ``$ASCEND_SCAFFOLD_NPU_STUBS``, default ``~/.cache/ascend-scaffold/
    npu-stubs``) is the cache root; the libraries go to ``<root>/<key>``, which is returned.
    torch_npu is located with ``importlib.util.find_spec`` and never imported here.
    """
    npu_dir = _pkg_dir("torch_npu")
    if npu_dir is None:
        raise EmulationUnavailable(
            "torch_npu is not installed in this interpreter "
            "(pip install torch==2.13.0 torch-npu==2.13.0 packaging protobuf)"
        )
    torch_dir = _pkg_dir("torch")
    if torch_dir is None:
        raise EmulationUnavailable("torch is not installed in this interpreter")
    final = _cache_root(cache_dir) / _stub_key(npu_dir)
    if _stub_dir_complete(final):
        return final
    _require_tools()

    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = os.pathsep.join(
        p for p in (str(torch_dir / "lib"), str(npu_dir / "lib"), env.get("LD_LIBRARY_PATH")) if p
    )
    undefined: set[str] = set()
    missing: set[str] = set()
    providers: set[Path] = set()
    scanned, skipped = [], []
    for so in _so_files(npu_dir):
        found, miss = _ldd(so, env)
        if miss & OPTIONAL_SONAMES:
            skipped.append(str(so.relative_to(npu_dir)))
            continue
        scanned.append(so)
        missing |= miss
        providers |= found
        undefined |= _nm(so, undefined=True)
    exe = Path(sys.executable).resolve()
    exe_found, _ = _ldd(exe, env)
    providers |= exe_found | set(scanned) | {exe}
    defined: set[str] = set()
    for lib in sorted(providers):
        if lib.is_file():
            defined |= _nm(lib, undefined=False)
    symbols = sorted(undefined - defined)
    missing -= OPTIONAL_SONAMES
    missing.add(PRIMARY_SONAME)

    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".build-", dir=final.parent))
    try:
        (tmp / "stubs.c").write_text(_c_source(symbols))
        (tmp / "empty.c").write_text("int ascend_scaffold_empty_stub;\n")
        (tmp / "symbols.txt").write_text("\n".join(symbols) + "\n")
        primary = tmp / PRIMARY_SONAME
        _gcc(["-o", str(primary), f"-Wl,-soname,{PRIMARY_SONAME}", str(tmp / "stubs.c")])
        for soname in sorted(missing - {PRIMARY_SONAME}):
            _gcc(
                [
                    "-o",
                    str(tmp / soname),
                    f"-Wl,-soname,{soname}",
                    str(tmp / "empty.c"),
                    "-Wl,--no-as-needed",
                    f"-L{tmp}",
                    "-l:" + PRIMARY_SONAME,
                    "-Wl,-rpath,$ORIGIN",
                ]
            )
        manifest = {
            "torch_npu_version": _torch_npu_version(),
            "torch_npu_dir": str(npu_dir),
            "key": final.name,
            "symbol_count": len(symbols),
            "libs": [PRIMARY_SONAME] + sorted(missing - {PRIMARY_SONAME}),
            "scanned": [str(p.relative_to(npu_dir)) for p in scanned],
            "skipped_optional": skipped,
        }
        (tmp / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
        try:
            os.rename(tmp, final)
        except OSError:
            if not _stub_dir_complete(final):  # lost a race with a broken winner: replace it
                shutil.rmtree(final, ignore_errors=True)
                os.rename(tmp, final)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return final


def stub_manifest(stub_dir: Path) -> dict:
    return json.loads((Path(stub_dir) / "manifest.json").read_text())


def _preload(stub_dir: Path) -> None:
    for lib in stub_manifest(stub_dir)["libs"]:  # primary first
        _STATE["handles"].append(ctypes.CDLL(str(stub_dir / lib), mode=ctypes.RTLD_GLOBAL))


def emulation_env(stub_dir: Path | None = None) -> dict[str, str]:
    """Env vars for a child process that should import torch_npu without calling activate()."""
    env = {AUTOLOAD_ENV: "0"}
    if stub_dir is not None:
        env["LD_LIBRARY_PATH"] = os.pathsep.join(
            p for p in (str(stub_dir), os.environ.get("LD_LIBRARY_PATH")) if p
        )
    return env


# --------------------------------------------------------------------------------------------
# activation
# --------------------------------------------------------------------------------------------


def activate(cache_dir: Path | None = None, platform: str | None = None) -> bool:
    """Make ``import torch_npu`` / ``import torchair`` work on CPU and register CPU kernels.

    Returns True; raises :class:`EmulationUnavailable` with the reason otherwise. Idempotent.
    Call it before anything imports torch_npu (conftest / test module level). ``platform``
    (A2, A3, 950; default ``$ASCEND_SCAFFOLD_NPU_PLATFORM`` or A3) picks the device limits
    the kernels enforce; it may be given again later (:func:`set_platform`).
    """
    if platform is not None:
        set_platform(platform)
    if _STATE["active"]:
        return True
    os.environ.setdefault(AUTOLOAD_ENV, "0")
    if "torch_npu" not in sys.modules:
        stub_dir = build_stubs(cache_dir)
        _STATE["stub_dir"] = stub_dir
        try:
            _preload(stub_dir)
        except OSError as exc:
            raise EmulationUnavailable(f"loading stand-in libraries failed: {exc}") from exc
    try:
        import torch  # noqa: F401
        import torch_npu  # noqa: F401
        import torchair  # noqa: F401
        import torchair.ops._npu_fused_infer_attention_score  # noqa: F401  (defines air:: op)
    except Exception as exc:  # noqa: BLE001 - any import failure is a skip reason
        raise EmulationUnavailable(
            f"import torch_npu/torchair failed: {type(exc).__name__}: {exc}"
        ) from exc
    _pin_custom_op_aliasing()
    _register_kernels()
    _STATE["active"] = True
    return True


def unavailable_reason(cache_dir: Path | None = None, platform: str | None = None) -> str | None:
    """None when :func:`activate` succeeds, else a one-line reason (for ``pytest.skip``)."""
    try:
        activate(cache_dir, platform)
    except EmulationUnavailable as exc:
        return str(exc)
    except Exception as exc:  # noqa: BLE001
        return f"NPU emulation failed: {type(exc).__name__}: {exc}"
    return None


def required() -> bool:
    """``ASCEND_SCAFFOLD_REQUIRE_NPU_EMULATION`` is set (CI): a missing emulation must fail
    the tests that need it instead of skipping them."""
    return os.environ.get(REQUIRE_ENV, "").strip().lower() not in ("", "0", "false", "no")


def reexec_with_env(argv: list[str] | None = None) -> None:
    """Fallback for hosts where ctypes preloading is not enough: re-exec this interpreter with
    ``LD_LIBRARY_PATH`` pointing at the stubs (no-op when it already does)."""
    stub_dir = build_stubs()
    if str(stub_dir) in os.environ.get("LD_LIBRARY_PATH", "").split(os.pathsep):
        return
    env = dict(os.environ, **emulation_env(stub_dir))
    os.execve(sys.executable, [sys.executable, *(argv or sys.argv)], env)


def _pin_custom_op_aliasing() -> None:
    """torch 2.13 checks, on the first call of an AOT-compiled graph, that no custom op returns
    an input (npu_apply_rotary_pos_emb does, as on the device) and raises where ``$CI`` is set,
    else warns. Pin the warning so the result does not depend on ``$CI``; the environment
    variable torch reads (TORCHINDUCTOR_ERROR_ON_CUSTOM_OP_ALIASING=1) still makes it an error."""
    if ALIASING_ENV in os.environ:
        return
    try:
        import torch._functorch.config as functorch_config
    except ImportError:  # pragma: no cover - older torch
        return
    functorch_config.error_on_custom_op_aliasing = False


# --------------------------------------------------------------------------------------------
# device limits and strictness
# --------------------------------------------------------------------------------------------


class DeviceConstraintError(ValueError):
    """The device would refuse this call (a documented limit of the op on the platform)."""


def strict() -> bool:
    """Strict unless ``ASCEND_SCAFFOLD_NPU_STRICT=0`` (then violations are only recorded)."""
    return os.environ.get(STRICT_ENV, "1").strip().lower() not in ("0", "false", "no", "off")


def set_platform(name: str | None) -> str:
    """Enforce the limits of `name` (A2, A3, 950); None: back to the environment / A3."""
    _STATE["platform"] = None if name is None else device_limits.resolve_platform(name)
    return current_platform()


def current_platform() -> str:
    return _STATE["platform"] or device_limits.resolve_platform()


def limits() -> device_limits.DeviceLimits:
    """The limits the kernels and the static checks enforce now."""
    return device_limits.LIMITS[current_platform()]


def _constraint(ok: bool, message: str, exc: type[Exception] = DeviceConstraintError) -> None:
    """A documented device constraint: raise (strict, the default) or record it."""
    if ok:
        return
    platform = current_platform()
    entry = f"[{platform}] {message}"
    if entry not in CONSTRAINT_VIOLATIONS:
        CONSTRAINT_VIOLATIONS.append(entry)
    if strict():
        raise exc(
            f"[npu emulation, {platform}] {message} "
            f"(device limits: scaffold/device_limits.py; {STRICT_ENV}=0 records instead)"
        )


def _dtype_name(dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _in_compiled_graph() -> bool:
    """Called from the code of a traced FX graph (what torch.compile runs), not eagerly."""
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_filename.startswith("<eval_with_key>"):
            return True
        frame = frame.f_back
    return False


# --------------------------------------------------------------------------------------------
# CPU reference kernels
# --------------------------------------------------------------------------------------------


def rms_norm_ref(x, gamma, epsilon=1e-6):
    """``npu_rms_norm``: y = x * rsqrt(mean(x^2) + eps) * gamma over gamma's trailing dims,
    fp32 accumulation; returns (y in x.dtype, rstd float32 shaped like x with those dims = 1)."""
    import torch

    lim = limits().rms_norm
    _constraint(
        _dtype_name(x.dtype) in lim.dtypes,
        f"npu_rms_norm: dtype {_dtype_name(x.dtype)} unsupported ({'/'.join(lim.dtypes)})",
    )
    _constraint(
        not lim.gamma_dtype_equals_input or gamma.dtype == x.dtype,
        f"npu_rms_norm: gamma dtype {_dtype_name(gamma.dtype)} must equal the input dtype "
        f"{_dtype_name(x.dtype)}",
    )
    _constraint(
        lim.min_rank <= x.dim() <= lim.max_rank,
        f"npu_rms_norm: input is {x.dim()}-D, the op takes {lim.min_rank}-{lim.max_rank} dims",
    )
    dims = tuple(range(x.dim() - gamma.dim(), x.dim()))
    xf = x.float()
    rstd = torch.rsqrt(xf.pow(2).mean(dim=dims, keepdim=True) + epsilon)
    return (xf * rstd * gamma.float()).to(x.dtype), rstd


def _rotate(x, mode):
    import torch

    if mode == "half":
        x1, x2 = x.chunk(2, dim=-1)
        return torch.cat((-x2, x1), dim=-1)
    if mode == "interleave":
        pairs = x.unflatten(-1, (-1, 2))
        return torch.stack((-pairs[..., 1], pairs[..., 0]), dim=-1).flatten(-2)
    if mode == "quarter":
        a, b = x.chunk(2, dim=-1)
        return torch.cat((_rotate(a, "half"), _rotate(b, "half")), dim=-1)
    raise ValueError(f"npu_apply_rotary_pos_emb: unknown rotary_mode {mode!r}")


def _check_rotary(query, key, cos, sin, layout, rotary_mode) -> None:
    lim = limits().rotary
    op = "npu_apply_rotary_pos_emb"
    _constraint(
        layout in lim.layouts,
        f"{op}: layout {layout!r} is not accepted (accepted: {', '.join(lim.layouts)})",
    )
    _constraint(
        rotary_mode in lim.rotary_modes,
        f"{op}: rotary_mode {rotary_mode!r} is not accepted "
        f"(accepted: {', '.join(lim.rotary_modes)})",
    )
    d = query.shape[-1]
    if lim.head_dims is not None:
        dims = " or ".join(str(v) for v in lim.head_dims)
        _constraint(d in lim.head_dims, f"{op}: head dim D={d}, the op takes D = {dims}")
    _constraint(d <= lim.max_head_dim, f"{op}: head dim D={d} > {lim.max_head_dim}")
    names = ("query", "key", "cos", "sin")
    tensors = (query, key, cos, sin)
    for name, t in zip(names, tensors, strict=True):
        _constraint(
            _dtype_name(t.dtype) in lim.dtypes,
            f"{op}: {name} dtype {_dtype_name(t.dtype)} ({'/'.join(lim.dtypes)} only)",
        )
        _constraint(t.numel() > 0, f"{op}: {name} is empty (the op takes no empty tensors)")
        rank = 3 if layout == "TND" else 4
        _constraint(t.dim() == rank, f"{op}: {name} is {t.dim()}-D, layout {layout} needs {rank}")
    _constraint(
        len({t.dtype for t in tensors}) == 1,
        f"{op}: query/key/cos/sin dtypes must be equal, got "
        f"{'/'.join(_dtype_name(t.dtype) for t in tensors)}",
    )
    _constraint(key.shape[-1] == d, f"{op}: query D={d} and key D={key.shape[-1]} differ")
    _constraint(cos.shape[-1] == sin.shape[-1], f"{op}: cos and sin D differ")
    if layout == "BSND" and all(t.dim() == 4 for t in tensors):
        _constraint(
            len({tuple(t.shape[:2]) for t in tensors}) == 1,
            f"{op}: layout BSND needs equal (B, S) in query/key/cos/sin, got "
            f"{[tuple(t.shape[:2]) for t in tensors]}",
        )
    n_axis = {"BSND": 2, "SBND": 2, "BNSD": 1, "TND": 1}.get(layout)
    if n_axis is not None and cos.dim() == query.dim():
        _constraint(
            cos.shape[n_axis] == lim.cos_heads and sin.shape[n_axis] == lim.cos_heads,
            f"{op}: cos/sin N must be {lim.cos_heads}, got {cos.shape[n_axis]}",
        )


def rotary_ref(query, key, cos, sin, layout="BSND", rotary_mode="half"):
    """``npu_apply_rotary_pos_emb`` maths (functional: returns new tensors): out = x * cos +
    rotate(x) * sin (rotate_half for "half", as in HF llama), fp32 maths, cos/sin broadcast
    against the layout (BSND: (B,S,1,D)). If cos has fewer channels than x (partial rotary)
    the rest passes through. The op itself (:func:`rotary_inplace`) writes into its inputs."""
    import torch

    _check_rotary(query, key, cos, sin, layout, rotary_mode)
    c, s = cos.float(), sin.float()
    rd = c.shape[-1]
    outs = []
    for x in (query, key):
        xf = x.float()
        rot, rest = xf[..., :rd], xf[..., rd:]
        y = rot * c + _rotate(rot, rotary_mode) * s
        outs.append(torch.cat((y, rest), dim=-1).to(x.dtype) if rest.shape[-1] else y.to(x.dtype))
    return outs[0], outs[1]


def rotary_inplace(query, key, cos, sin, layout="BSND", rotary_mode="half"):
    """What the device does: the result is written into ``query`` / ``key`` and those same
    tensors are returned (torch_npu's docs: "原地更新后的query张量"; op-plugin returns
    ``std::tie(query, key)``), although the schema declares new outputs."""
    import torch

    if _in_compiled_graph():
        # The graph was traced with the schema's new outputs (meta: empty_like, i.e. dense
        # strides); the device returns the inputs, with their own strides.
        for name, t in (("query", query), ("key", key)):
            traced = torch.empty_like(t).stride()
            _constraint(
                all(a == b for a, b, n in zip(t.stride(), traced, t.shape, strict=True) if n > 1),
                f"npu_apply_rotary_pos_emb: {name} is a strided view (shape {tuple(t.shape)}, "
                f"strides {t.stride()}); the op writes into it and returns it (not a new "
                f"tensor, whatever its schema says), but the graph was traced with a new "
                f"tensor of strides {traced}: the ops after it see other strides than traced "
                f"(e.g. a .contiguous() traced away). Pass contiguous q/k",
            )
    q_out, k_out = rotary_ref(query, key, cos, sin, layout, rotary_mode)
    with torch.no_grad():
        query.copy_(q_out)
        key.copy_(k_out)
    return query, key


def scatter_update_ref(data, indices, updates, axis):
    """``scatter_update``: functional reference (returns a new tensor).

    CANN ``Scatter`` semantics (hicann/ops-nn index/scatter): dim 0 is the batch.
    1-D indices (n,): ``data[i, ..., indices[i] : indices[i] + e, ...] = updates[i]`` along
    ``axis`` (e = updates.shape[axis]). 2-D indices (n, 2): row i writes batch
    ``indices[i][0]`` at offset ``indices[i][1]``. 0-D indices act like shape (1,).
    """
    out = data.clone()
    _scatter_into(out, indices, updates, axis)
    return out


def _check_scatter(data, indices, updates) -> None:
    lim = limits().scatter_update
    for name, t in (("data", data), ("updates", updates)):
        _constraint(
            _dtype_name(t.dtype) in lim.dtypes,
            f"scatter_update: {name} dtype {_dtype_name(t.dtype)} ({'/'.join(lim.dtypes)} only)",
        )
        _constraint(t.numel() > 0, f"scatter_update: {name} is empty")
    _constraint(
        _dtype_name(indices.dtype) in lim.index_dtypes,
        f"scatter_update: indices dtype {_dtype_name(indices.dtype)} "
        f"({'/'.join(lim.index_dtypes)} only)",
    )


def _scatter_into(data, indices, updates, axis):
    import torch

    _check_scatter(data, indices, updates)
    if not 2 <= data.dim() <= 8 or updates.dim() != data.dim():
        raise ValueError(
            f"scatter_update: data ({data.dim()}-D) and updates ({updates.dim()}-D) must have the "
            "same rank in 2..8"
        )
    if indices.dtype not in (torch.int32, torch.int64):
        raise ValueError(f"scatter_update: indices dtype {indices.dtype} (int32/int64 only)")
    ax = axis % data.dim()
    if ax == 0:
        raise ValueError("scatter_update: axis must not be the batch axis 0")
    idx = indices.reshape(1) if indices.dim() == 0 else indices
    if idx.dim() not in (1, 2) or (idx.dim() == 2 and idx.shape[1] != 2):
        raise ValueError(f"scatter_update: indices shape {tuple(indices.shape)} (n,) or (n, 2)")
    n, e = updates.shape[0], updates.shape[ax]
    if idx.shape[0] != n or n > data.shape[0]:
        raise ValueError("scatter_update: indices.shape[0] must equal updates.shape[0] <= batch")
    for d in range(1, data.dim()):
        if d != ax and updates.shape[d] != data.shape[d]:
            raise ValueError(f"scatter_update: updates dim {d} differs from data")
    rows = idx.tolist()
    for i, row in enumerate(rows):
        b, pos = (i, row) if idx.dim() == 1 else (row[0], row[1])
        if not (0 <= b < data.shape[0] and 0 <= pos and pos + e <= data.shape[ax]):
            raise IndexError(
                f"scatter_update: row {i} writes batch {b} at {pos}..{pos + e} outside "
                f"{tuple(data.shape)} along axis {axis} (the device does not check this)"
            )
        data[b].narrow(ax - 1, pos, e).copy_(updates[i])
    return data


def scatter_nd_update_ref(input, indices, updates):  # noqa: A002 (the schema's name)
    """``npu_scatter_nd_update``: functional reference (returns a new tensor); the in-place
    ``npu_scatter_nd_update_`` is :func:`_scatter_nd_into` on ``input`` itself."""
    out = input.clone()
    _scatter_nd_into(out, indices, updates)
    return out


def _scatter_nd_into(data, indices, updates):
    """CANN ``ScatterNdUpdate``: with a = indices.shape[-1], every index tuple ``idx`` (indices
    flattened over its leading dims, row i) writes ``data[idx[0], ..., idx[a-1]] = updates[i]``;
    updates.shape == indices.shape[:-1] + data.shape[a:]. The paged KV write: data =
    ``cache.view(-1, KV_N, D)``, indices = ``slot_mapping.view(-1, 1)`` (slot = block id *
    block_size + offset), updates ``(T, KV_N, D)``. Indices must be in range (the docs: "不支持
    越界"; the device does not check): strict mode refuses, non-strict skips those rows."""
    import torch

    op = "npu_scatter_nd_update"
    lim = limits().scatter_nd_update
    _check_dtype(op, "input", data, lim.dtypes)
    _constraint(
        updates.dtype == data.dtype,
        f"{op}: updates dtype {_dtype_name(updates.dtype)} differs from input dtype "
        f"{_dtype_name(data.dtype)}",
    )
    _check_dtype(op, "indices", indices, lim.index_dtypes)
    _constraint(
        lim.min_rank <= data.dim() <= lim.max_rank,
        f"{op}: input is {data.dim()}-D, the op takes {lim.min_rank}-{lim.max_rank} dims",
    )
    _constraint(
        indices.dim() >= lim.min_index_rank,
        f"{op}: indices is {indices.dim()}-D (shape {tuple(indices.shape)}); it must be at least "
        f"{lim.min_index_rank}-D, its last dim indexing input's leading dims (e.g. "
        f"slot_mapping.view(-1, 1))",
    )
    a = indices.shape[-1] if indices.dim() else 0
    if indices.dim() < 1 or not 1 <= a <= data.dim():
        raise ValueError(
            f"{op}: indices' last dim {a} must be in 1..{data.dim()} (input's rank): 'indices的"
            f"最后1维的大小不能超过input的维度大小'"
        )
    want = tuple(indices.shape[:-1]) + tuple(data.shape[a:])
    _constraint(
        tuple(updates.shape) == want,
        f"{op}: updates shape {tuple(updates.shape)} must be indices.shape[:-1] + "
        f"input.shape[{a}:] = {want}",
    )
    if tuple(updates.shape) != want:
        raise ValueError(f"{op}: updates shape {tuple(updates.shape)} != {want}")
    idx = indices.reshape(-1, a).long()
    upd = updates.reshape(idx.shape[0], *data.shape[a:])
    sizes = torch.tensor(data.shape[:a], dtype=torch.long)
    ok = ((idx >= 0) & (idx < sizes)).all(dim=1)
    if lim.index_in_range and not bool(ok.all()):
        row = int((~ok).nonzero()[0, 0])
        _constraint(
            False,
            f"{op}: indices row {row} = {idx[row].tolist()} is out of range for input's leading "
            f"dims {tuple(data.shape[:a])} ({int((~ok).sum())} of {idx.shape[0]} rows; the docs: "
            f"'indices中的索引数据不支持越界', not checked on the device: it writes elsewhere)",
        )
    idx, upd = idx[ok], upd[ok]
    if idx.shape[0]:
        data.index_put_(tuple(idx.t()), upd)
    return data


def _per_batch(lengths, batch, full, name):
    if lengths is None:
        return [full] * batch
    vals = [int(v) for v in (lengths.tolist() if hasattr(lengths, "tolist") else lengths)]
    if len(vals) == 1:
        vals = vals * batch
    elif len(vals) >= batch:
        vals = vals[:batch]
    else:
        raise ValueError(f"npu_fused_infer_attention_score: {name} has {len(vals)} < B={batch}")
    for b, v in enumerate(vals):
        if not 0 <= v <= full:
            raise ValueError(f"npu_fused_infer_attention_score: {name}[{b}]={v} not in 0..{full}")
    return vals


_UNSUPPORTED_FIA = (
    "dequant_scale1 quant_scale1 dequant_scale2 quant_scale2 quant_offset2 antiquant_scale "
    "antiquant_offset query_padding_size kv_padding_size key_antiquant_scale "
    "key_antiquant_offset value_antiquant_scale value_antiquant_offset key_shared_prefix "
    "value_shared_prefix actual_shared_prefix_len key_rope_antiquant_scale"
).split()
_CAUSAL_CACHE: dict[str, object] = {}


def _to_bnsd(t, layout, heads):
    if layout in ("BNSD", "BNSD_BSND"):
        return t
    if layout == "BSND":
        return t.transpose(1, 2)
    if layout == "BSH":
        b, s, h = t.shape
        if h % heads:
            raise ValueError(f"npu_fused_infer_attention_score: H={h} not divisible by N={heads}")
        return t.reshape(b, s, heads, h // heads).transpose(1, 2)
    raise NotImplementedError(f"npu emulation: input_layout {layout!r} is not emulated")


def _check_compressed_mask(mask, mode):
    import torch

    if mask is None:
        raise ValueError(f"npu_fused_infer_attention_score: sparse_mode={mode} needs atten_mask")
    if tuple(mask.shape[-2:]) != (2048, 2048) or any(d != 1 for d in mask.shape[:-2]):
        raise ValueError(
            f"npu_fused_infer_attention_score: sparse_mode={mode} needs the optimized 2048x2048 "
            f"atten_mask, got {tuple(mask.shape)}"
        )
    ref = _CAUSAL_CACHE.get("triu")
    if ref is None:
        ref = torch.ones(2048, 2048, dtype=torch.bool).triu(1)
        _CAUSAL_CACHE["triu"] = ref
    if not torch.equal(mask.reshape(2048, 2048).bool(), ref):
        raise ValueError(
            "npu_fused_infer_attention_score: the 2048x2048 atten_mask must be upper-triangular "
            "(torch.triu(ones, diagonal=1), True = masked)"
        )


def _check_fia_call(query, key, value, kw, layout, mode) -> None:
    """Documented limits that need no shapes in BNSD form."""
    lim = limits().attention
    op = "npu_fused_infer_attention_score"
    _constraint(
        layout in lim.input_layouts,
        f"{op}: input_layout {layout!r} is not accepted (accepted: {', '.join(lim.input_layouts)})",
    )
    modes = lim.sparse_modes + (lim.mla_sparse_modes if kw.get("query_rope") is not None else ())
    _constraint(
        mode in modes,
        f"{op}: sparse_mode {mode} is not accepted (accepted: {', '.join(map(str, modes))})",
    )
    _constraint(
        _dtype_name(query.dtype) in lim.dtypes,
        f"{op}: query dtype {_dtype_name(query.dtype)} (the device takes {'/'.join(lim.dtypes)})",
    )
    for name, t in (("key", key), ("value", value)):
        _constraint(
            t.dtype == query.dtype or query.dtype == _int8(),
            f"{op}: {name} dtype {_dtype_name(t.dtype)} differs from query dtype "
            f"{_dtype_name(query.dtype)}",
        )
    if lim.contiguous:
        tensors = {"query": query, "key": key, "value": value, **kw}
        for name in lim.contiguous_args:
            t = tensors.get(name)
            if t is not None and hasattr(t, "is_contiguous"):
                _constraint(
                    t.is_contiguous(),
                    f"{op}: {name} is not contiguous (shape {tuple(t.shape)}, strides "
                    f"{t.stride()}): the op takes no strided views and adds no .contiguous()",
                )
    _constraint(
        tuple(key.shape) == tuple(value.shape),
        f"{op}: key {tuple(key.shape)} and value {tuple(value.shape)} shapes must be equal",
    )


def _int8():
    import torch

    return torch.int8


def _check_fia_shapes(q, k, layout, n_heads, n_kv, kv_len=None, mla=False) -> None:
    """``kv_len``: the KV length the limits apply to (page attention: the longest
    actual_seq_lengths_kv; else key's S). ``mla``: the MLA mode, whose own limits
    (_check_mla_call) replace the GQA group bound (up to 128 query heads on one KV head)."""
    lim = limits().attention
    op = "npu_fused_infer_attention_score"
    bsz, _, sq, d = q.shape
    skv = k.shape[2] if kv_len is None else kv_len
    _constraint(
        mla or n_heads // n_kv <= lim.max_group,
        f"{op}: num_heads / num_key_value_heads = {n_heads // n_kv} > {lim.max_group}",
    )
    _constraint(n_heads <= lim.max_heads, f"{op}: num_heads {n_heads} > {lim.max_heads}")
    _constraint(bsz <= lim.max_batch, f"{op}: batch {bsz} > {lim.max_batch}")
    _constraint(d <= lim.max_head_dim, f"{op}: head dim D={d} > {lim.max_head_dim}")
    if sq == 1:
        _constraint(skv <= lim.max_kv_len, f"{op}: KV length {skv} > {lim.max_kv_len} (Q_S = 1)")
        _constraint(
            layout not in lim.prefill_only_layouts,
            f"{op}: input_layout {layout} needs Q_S > 1 (got Q_S = 1)",
        )
    else:
        _constraint(
            max(sq, skv) <= lim.max_prefill_seq_len,
            f"{op}: sequence length {max(sq, skv)} > {lim.max_prefill_seq_len} (Q_S > 1)",
        )
        if q.dtype != _int8():
            m = lim.prefill_head_dim_multiple
            _constraint(d % m == 0, f"{op}: head dim D={d} must be a multiple of {m} when Q_S > 1")


def _paged_kv(query, q, key, value, kw, layout, n_kv, mode):
    """PageAttention: check the documented limits, then gather each row's KV through
    ``block_table`` into BNSD ``(B, KV_N, W * block_size, D)`` (W = block_table.shape[1]);
    positions at or past ``actual_seq_lengths_kv[b]`` are zeros (blocks past a row's length,
    e.g. the null block its table is padded with, are never read). Returns (k, v, longest)."""
    import torch

    op = "npu_fused_infer_attention_score"
    lim = limits().paged_attention
    table = kw["block_table"]
    bs = int(kw.get("block_size", 0) or 0)
    bsz, _, sq, d = q.shape
    _constraint(
        layout in lim.query_layouts,
        f"{op}: input_layout {layout!r} with block_table (page attention takes query layouts "
        f"{', '.join(lim.query_layouts)})",
    )
    _constraint(
        lim.query_int8 or query.dtype != _int8(),
        f"{op}: page attention takes no int8 query",
    )
    for name, t in (("key", key), ("value", value)):
        _check_dtype(f"{op} (page attention)", name, t, lim.kv_dtypes)
    for name in ("query_padding_size", "kv_padding_size"):
        _constraint(
            kw.get(name) is None,
            f"{op}: {name} with block_table (page attention takes no left padding)",
        )
    _check_dtype(op, "block_table", table, lim.block_table_dtypes)
    _constraint(
        0 < bs <= lim.max_block_size,
        f"{op}: block_size {bs} with block_table (page attention needs 0 < block_size <= "
        f"{lim.max_block_size})",
    )
    if sq == 1:
        mult = lim.int8_block_size_multiple if key.dtype == _int8() else lim.block_size_multiple
        _constraint(
            bs % mult == 0,
            f"{op}: block_size {bs} must be a multiple of {mult} with {_dtype_name(key.dtype)} "
            f"KV (Q_S = 1; {lim.recommended_block_size} recommended)",
        )
    else:
        _constraint(
            bs >= lim.prefill_min_block_size and bs % lim.prefill_block_size_multiple == 0,
            f"{op}: block_size {bs} with Q_S > 1 must be a multiple of "
            f"{lim.prefill_block_size_multiple} in {lim.prefill_min_block_size}.."
            f"{lim.max_block_size}",
        )
    lens_arg = kw.get("actual_seq_lengths_kv")
    _constraint(
        not lim.needs_actual_seq_lengths_kv or lens_arg is not None,
        f"{op}: page attention (block_table given) needs actual_seq_lengths_kv, the per-row KV "
        f"lengths",
    )
    table_ok = table.dim() == lim.block_table_rank and table.shape[0] == bsz
    _constraint(
        table_ok,
        f"{op}: block_table shape {tuple(table.shape)} must be 2-D [B={bsz}, max_blocks_per_seq]",
    )
    if not table_ok:
        raise ValueError(f"{op}: block_table shape {tuple(table.shape)} for batch {bsz}")
    width = table.shape[1]
    if key.dim() == 3:  # (blocknum, block_size, H), H = KV_N * D
        nb, kbs, hidden = key.shape
        _constraint(
            hidden <= lim.max_kv_hidden,
            f"{op}: KV_N*D = {hidden} > {lim.max_kv_hidden} with the (blocknum, blocksize, H) "
            f"cache layout; use (blocknum, KV_N, blocksize, D) (query layout "
            f"{'/'.join(lim.split_head_query_layouts)}) or fewer KV heads",
        )
        if hidden % n_kv:
            raise ValueError(f"{op}: cache H={hidden} not divisible by num_key_value_heads={n_kv}")
        kd = hidden // n_kv
    elif key.dim() == 4:  # (blocknum, KV_N, block_size, D)
        _constraint(
            layout in lim.split_head_query_layouts,
            f"{op}: a (blocknum, KV_N, blocksize, D) cache needs query input_layout "
            f"{'/'.join(lim.split_head_query_layouts)}; {layout} takes (blocknum, blocksize, H) "
            f"only",
        )
        nb, kn, kbs, kd = key.shape
        if kn != n_kv:
            raise ValueError(f"{op}: cache KV_N={kn} != num_key_value_heads={n_kv}")
    elif key.dim() == 5:
        raise NotImplementedError(f"npu emulation: {op} NZ caches (5-D) are not emulated")
    else:
        raise ValueError(f"{op}: with block_table key/value must be 3-D or 4-D, got {key.dim()}-D")
    _constraint(
        kbs == bs,
        f"{op}: cache {tuple(key.shape)} has block size {kbs}, block_size={bs}",
    )
    if kd != d or kbs != bs:
        raise ValueError(f"{op}: cache {tuple(key.shape)} for query D={d}, block_size={bs}")
    _constraint(
        key.numel() <= lim.max_kv_numel,
        f"{op}: key/value have {key.numel()} elements (the product of their shape must fit int32)",
    )
    lens = (
        _per_batch(lens_arg, bsz, sys.maxsize, "actual_seq_lengths_kv")
        if lens_arg is not None
        else [width * bs] * bsz
    )
    need = [-(-n // bs) for n in lens]
    _constraint(
        max(need, default=0) <= width,
        f"{op}: block_table has {width} blocks per row; actual_seq_lengths_kv {max(lens)} needs "
        f"{max(need)} (block_size {bs}): its second dim must be >= maxBlockNumPerSeq",
    )
    _constraint(
        sum(need) <= nb,
        f"{op}: blocknum {nb} < {sum(need)}, the blocks actual_seq_lengths_kv {lens} need",
    )
    ids = table.long()
    bad = (ids < 0) | (ids >= nb)
    if lim.legal_block_ids and bool(bad.any()):
        r, c = (int(x) for x in bad.nonzero()[0])
        _constraint(
            False,
            f"{op}: block_table[{r}, {c}] = {int(ids[r, c])} is not a block id in 0..{nb - 1} "
            f"(the device does not check block ids; pad rows with a reserved null block, e.g. 0)",
        )
    ids = ids.clamp(0, nb - 1)
    full = width * bs
    mask, pse = kw.get("atten_mask"), kw.get("pse_shift")
    if mask is not None and mode not in (2, 3, 4):
        _constraint(
            mask.shape[-1] >= full,
            f"{op}: atten_mask's last dim {mask.shape[-1]} < block_table.shape[1] * block_size "
            f"= {full} (page attention)",
        )
    if pse is not None:
        _constraint(
            pse.shape[-1] >= full,
            f"{op}: pse_shift's last dim {pse.shape[-1]} < block_table.shape[1] * block_size "
            f"= {full} (page attention)",
        )
    valid = torch.arange(full).view(1, 1, full, 1) < torch.tensor(lens).view(bsz, 1, 1, 1)

    def gather(cache):
        rows = cache[ids]  # (B, W, bs, H) or (B, W, KV_N, bs, D)
        if cache.dim() == 3:
            out = rows.reshape(bsz, full, n_kv, kd).transpose(1, 2)
        else:
            out = rows.permute(0, 2, 1, 3, 4).reshape(bsz, n_kv, full, kd)
        return torch.where(valid, out, torch.zeros((), dtype=out.dtype))

    return gather(key), gather(value), max(lens, default=0)


def _check_mla_call(query, key, value, q_rope, k_rope, kw, n_heads, n_kv, mode) -> None:
    """The MLA mode's documented limits (query_rope/key_rope given; device_limits
    MlaAttentionLimits): one KV head, latent 512 and rope 64, 32/64/128 query heads, Q_S
    1..16, page attention with block size 16 or 128, sparse_mode 0 without a mask at Q_S 1."""
    op = "npu_fused_infer_attention_score (MLA: query_rope/key_rope)"
    lim = limits().mla_attention
    for name, t in (("query", query), ("query_rope", q_rope), ("key_rope", k_rope)):
        _check_dtype(op, name, t, lim.dtypes)
    _constraint(
        key is value or key.data_ptr() == value.data_ptr(),
        f"{op}: key and value must both be the latent (one tensor)",
    )
    _constraint(n_kv == 1, f"{op}: num_key_value_heads must be 1, got {n_kv}")
    _constraint(
        n_heads in lim.query_heads,
        f"{op}: num_heads {n_heads} (takes {'/'.join(map(str, lim.query_heads))})",
    )
    _constraint(
        query.shape[-1] == lim.latent_dim and key.shape[-1] == lim.latent_dim,
        f"{op}: query and key D must be {lim.latent_dim} (the latent), got "
        f"{query.shape[-1]} and {key.shape[-1]}",
    )
    _constraint(
        q_rope.shape[-1] == lim.rope_dim and k_rope.shape[-1] == lim.rope_dim,
        f"{op}: query_rope and key_rope D must be {lim.rope_dim}, got {q_rope.shape[-1]} and "
        f"{k_rope.shape[-1]}",
    )
    _constraint(
        tuple(q_rope.shape[:-1]) == tuple(query.shape[:-1]),
        f"{op}: query_rope {tuple(q_rope.shape)} must match query {tuple(query.shape)} but D",
    )
    _constraint(
        tuple(k_rope.shape[:-1]) == tuple(key.shape[:-1]),
        f"{op}: key_rope {tuple(k_rope.shape)} must match key {tuple(key.shape)} but D",
    )
    _constraint(
        kw.get("block_table") is not None, f"{op}: page attention (block_table) is mandatory"
    )
    block_size = int(kw.get("block_size", 0) or 0)
    _constraint(
        block_size in lim.block_sizes,
        f"{op}: block_size {block_size} (takes {'/'.join(map(str, lim.block_sizes))})",
    )
    layout = kw.get("input_layout", "BSH")
    q_len = query.shape[1] if layout in ("BSND", "BSH") else query.shape[2]
    _constraint(
        1 <= q_len <= lim.max_query_len, f"{op}: query S {q_len} not in 1..{lim.max_query_len}"
    )
    if q_len == 1:
        _constraint(
            mode in lim.decode_sparse_modes and kw.get("atten_mask") is None,
            f"{op}: Q_S = 1 takes sparse_mode 0 without a mask, got {mode}",
        )


def fused_infer_attention_ref(query, key, value, **kw):
    """``npu_fused_infer_attention_score`` reference (documented semantics, fp32 maths).

    Layouts BNSD / BSND / BSH / BNSD_BSND (output BSND). GQA: query head h uses KV head
    ``h // (N / Nkv)``. Per batch b only the first ``actual_seq_lengths[b]`` queries and
    ``actual_seq_lengths_kv[b]`` keys count (None = full; one value broadcasts); padded query
    rows get zeros, as do rows with no visible key. Masks (True = masked): Q_S == 1 ignores
    sparse_mode (an optional (B, KV_S)-style mask still applies); sparse_mode 0/1 use the given
    full mask (0 with None = no mask); 2 left-up causal (j <= i); 3 right-down causal
    (j <= i + KV_b - Q_b); 4 band around the right-down diagonal with pre/next_tokens; 2/3/4
    require the 2048x2048 upper-triangular mask. Returns (out, lse); lse is float32 (B,N,S,1)
    when softmax_lse_flag else an empty float32 tensor (as the meta kernel).
    PageAttention (``block_table`` given): key/value are the caches, (blocknum, block_size,
    KV_N*D) or (blocknum, KV_N, block_size, D); row b reads its first
    ``actual_seq_lengths_kv[b]`` tokens through ``block_table[b]`` (token t: block
    ``block_table[b, t // block_size]``, offset ``t % block_size``), then the same maths
    (:func:`_paged_kv`). The device limits (scaffold/device_limits.py) are checked first.
    """
    import torch

    layout = kw.get("input_layout", "BSH")
    mode = int(kw.get("sparse_mode", 0))
    _check_fia_call(query, key, value, kw, layout, mode)
    for name in _UNSUPPORTED_FIA:
        if kw.get(name) is not None:
            raise NotImplementedError(f"npu emulation: FIA argument {name} is not emulated")
    n_heads = int(kw.get("num_heads", 1))
    n_kv = int(kw.get("num_key_value_heads", 0)) or n_heads
    scale = float(kw.get("scale", 1.0))
    mask = kw.get("atten_mask")
    pse = kw.get("pse_shift")
    if n_heads <= 0 or n_heads % n_kv:
        raise ValueError(
            f"npu_fused_infer_attention_score: num_heads={n_heads} must be a multiple "
            f"of num_key_value_heads={n_kv}"
        )
    q = _to_bnsd(query, layout, n_heads)
    q_rope, k_rope = kw.get("query_rope"), kw.get("key_rope")
    if (q_rope is None) != (k_rope is None):
        raise ValueError(
            "npu_fused_infer_attention_score: query_rope and key_rope are given together or "
            "not at all (MLA)"
        )
    if q_rope is not None:
        _check_mla_call(query, key, value, q_rope, k_rope, kw, n_heads, n_kv, mode)
    paged_len = None
    if kw.get("block_table") is not None:
        k, v, paged_len = _paged_kv(query, q, key, value, kw, layout, n_kv, mode)
        if q_rope is not None:  # the rope key through the same block table
            qr = _to_bnsd(q_rope, layout, n_heads)
            kr, _, _ = _paged_kv(q_rope, qr, k_rope, k_rope, kw, layout, n_kv, mode)
    else:
        k = _to_bnsd(key, layout, n_kv)
        v = _to_bnsd(value, layout, n_kv)
    if q.shape[1] != n_heads or k.shape[1] != n_kv or v.shape[1] != n_kv:
        raise ValueError(
            f"npu_fused_infer_attention_score: num_heads={n_heads}/num_key_value_heads={n_kv} "
            f"do not match query N={q.shape[1]} / key N={k.shape[1]} ({layout})"
        )
    if k.shape[:3] != v.shape[:3] or k.shape[0] != q.shape[0] or k.shape[-1] != q.shape[-1]:
        raise ValueError("npu_fused_infer_attention_score: query/key/value shapes disagree")
    _check_fia_shapes(q, k, layout, n_heads, n_kv, paged_len, mla=q_rope is not None)
    bsz, _, sq, _ = q.shape
    skv = k.shape[2]
    lens_q = _per_batch(kw.get("actual_seq_lengths"), bsz, sq, "actual_seq_lengths")
    if sq == 1:
        lens_q = [1] * bsz  # documented: ignored when Q_S == 1
    lens_kv = _per_batch(kw.get("actual_seq_lengths_kv"), bsz, skv, "actual_seq_lengths_kv")

    i = torch.arange(sq).view(1, 1, sq, 1)
    j = torch.arange(skv).view(1, 1, 1, skv)
    lq = torch.tensor(lens_q).view(bsz, 1, 1, 1)
    lkv = torch.tensor(lens_kv).view(bsz, 1, 1, 1)
    allowed = (j < lkv) & (i < lq)
    if sq == 1:
        if mask is not None:
            m = mask.bool()
            m = m.view(bsz, 1, 1, -1) if m.dim() == 2 else m
            allowed = allowed & ~m[..., :sq, :skv]
    elif mode in (0, 1):
        if mask is None and mode == 1:
            raise ValueError("npu_fused_infer_attention_score: sparse_mode=1 needs atten_mask")
        if mask is not None:
            m = mask.bool()
            if m.dim() == 3:
                m = m.unsqueeze(1)
            allowed = allowed & ~m[..., :sq, :skv]
    elif mode in (2, 3, 4):
        _check_compressed_mask(mask, mode)
        if mode == 2:
            allowed = allowed & (j <= i)
        else:
            diag = i + (lkv - lq)
            allowed = allowed & (j <= diag)
            if mode == 4:
                pre, nxt = int(kw.get("pre_tokens", 2147483647)), int(kw.get("next_tokens", 0))
                allowed = (j < lkv) & (i < lq) & (j >= diag - pre) & (j <= diag + nxt)
    else:
        raise NotImplementedError(f"npu emulation: sparse_mode={mode} is not emulated")

    group = n_heads // n_kv
    kf = k.float().repeat_interleave(group, dim=1)
    vf = v.float().repeat_interleave(group, dim=1)
    scores = torch.matmul(q.float(), kf.transpose(-1, -2))
    if q_rope is not None:  # MLA: q.k over the latent plus the rope parts' q.k
        krf = kr.float().repeat_interleave(group, dim=1)
        scores = scores + torch.matmul(qr.float(), krf.transpose(-1, -2))
    scores = scores * scale
    if pse is not None:
        scores = scores + pse.float()[..., :sq, :skv]
    scores = scores.masked_fill(~allowed, float("-inf"))
    any_visible = allowed.any(dim=-1, keepdim=True)
    probs = torch.where(any_visible, torch.softmax(scores, dim=-1), torch.zeros(()))
    out = torch.matmul(probs, vf).to(query.dtype)
    if layout in ("BSND", "BNSD_BSND"):
        out = out.transpose(1, 2).contiguous()
    elif layout == "BSH":
        out = out.transpose(1, 2).reshape(bsz, sq, -1)
    if kw.get("softmax_lse_flag", False):
        lse = torch.where(any_visible, torch.logsumexp(scores, -1, keepdim=True), math.inf)
    else:
        lse = torch.empty(0, dtype=torch.float32)
    return out, lse.float()


# --------------------------------------------------------------------------------------------
# MoE: gating, routing, grouped matmul, SwiGLU, finalize (the fused chain of cann-recipes-infer)
# --------------------------------------------------------------------------------------------


def _check_dtype(op: str, name: str, t, allowed: tuple[str, ...]) -> None:
    _constraint(
        _dtype_name(t.dtype) in allowed,
        f"{op}: {name} dtype {_dtype_name(t.dtype)} ({'/'.join(allowed)} only)",
    )


def moe_gating_top_k_softmax_ref(x, finished=None, k=1):
    """``npu_moe_gating_top_k_softmax``: softmax over the last axis (fp32), then the k largest,
    highest first (ties: lower expert id first), not renormalised. Returns (y in x.dtype,
    expert_idx int32, row_idx int32), all shaped x[:-1] + (k,); row_idx[i, j] = j * rows + i
    (CANN: arange(rows * k).reshape(k, rows).T); a ``finished`` row gets expert id E."""
    import torch

    op = "npu_moe_gating_top_k_softmax"
    lim, moe = limits().moe_gating, limits().moe
    _check_dtype(op, "x", x, lim.dtypes)
    _constraint(
        lim.min_rank <= x.dim() <= lim.max_rank,
        f"{op}: x is {x.dim()}-D, the op takes {lim.min_rank}-{lim.max_rank} dims",
    )
    experts = x.shape[-1]
    _constraint(0 < k <= experts, f"{op}: k={k} must be in 1..{experts} (x's last axis)")
    _constraint(k <= moe.max_top_k, f"{op}: k={k} > {moe.max_top_k}")
    probs = torch.softmax(x.float(), dim=-1)
    kk = max(0, min(int(k), experts))
    y, idx = torch.sort(probs, dim=-1, descending=True, stable=True)
    y, idx = y[..., :kk], idx[..., :kk]
    if finished is not None:
        _check_dtype(op, "finished", finished, ("bool",))
        if tuple(finished.shape) != tuple(x.shape[:-1]):
            raise ValueError(f"{op}: finished shape {tuple(finished.shape)} must be x[:-1]")
        idx = torch.where(finished.unsqueeze(-1), torch.full_like(idx, experts), idx)
    rows = math.prod(x.shape[:-1])
    row_idx = torch.arange(rows * kk, dtype=torch.int32).view(kk, rows).t()
    return y.to(x.dtype), idx.to(torch.int32), row_idx.reshape(*x.shape[:-1], kk).contiguous()


def moe_gating_top_k_ref(
    x,
    k,
    *,
    bias=None,
    input_ids=None,
    tid2eid=None,
    k_group=1,
    group_count=1,
    group_select_mode=0,
    renorm=0,
    norm_type=0,
    out_flag=False,  # noqa: ARG001 (norm_out is always returned)
    routed_scaling_factor=1.0,
    eps=1e-20,
):
    """``npu_moe_gating_top_k`` (DeepSeek-V3's grouped routing): norm (1 sigmoid) over the
    experts in fp32; choice = norm + bias; experts in ``group_count`` groups scored by their
    best (group_select_mode 0) or the sum of their two best (1); the ``k_group`` best groups
    eligible; the k best eligible experts by choice, highest first. y = their norm scores
    renormalised by (sum + eps), times routed_scaling_factor (cann-recipes-infer's
    models/deepseek_r1 reads y as the final weights; device_limits.DOC_NOTES). Returns
    (y in x.dtype, expert_idx int32, norm_out float32). Softmax (norm_type 0), whose y the docs
    leave open, and the hash mode (input_ids, tid2eid) are not emulated."""
    import torch

    op = "npu_moe_gating_top_k"
    lim = limits().moe_gating_top_k
    _check_dtype(op, "x", x, lim.dtypes)
    _constraint(x.dim() == 2, f"{op}: x must be 2-D, got {x.dim()}-D")
    experts = x.shape[-1]
    _constraint(experts <= lim.max_experts, f"{op}: {experts} experts > {lim.max_experts}")
    groups = int(group_count)
    per_group = experts // groups if groups > 0 else 0
    _constraint(
        groups > 0 and experts % groups == 0 and per_group >= lim.min_group_size,
        f"{op}: group_count {groups} must divide the {experts} experts into groups of more than 2",
    )
    aligned = -(-per_group // lim.group_align) * lim.group_align
    _constraint(
        aligned * groups <= lim.max_experts,
        f"{op}: groups of {per_group} aligned to {lim.group_align} ({aligned}) x group_count "
        f"{groups} > {lim.max_experts}",
    )
    _constraint(1 <= k_group <= groups, f"{op}: k_group {k_group} not in 1..{groups}")
    _constraint(
        1 <= k <= per_group * k_group,
        f"{op}: k {k} not in 1..{per_group * k_group} (k_group x experts per group)",
    )
    _constraint(renorm in lim.renorms, f"{op}: renorm {renorm} (only {lim.renorms})")
    _constraint(norm_type in lim.norm_types, f"{op}: norm_type {norm_type}")
    _constraint(
        group_select_mode in lim.group_select_modes, f"{op}: group_select_mode {group_select_mode}"
    )
    if bias is not None:
        _constraint(
            bias.dim() == 1 and bias.shape[0] == experts,
            f"{op}: bias must be 1-D of {experts}, got {tuple(bias.shape)}",
        )
        _constraint(
            bias.dtype == x.dtype,
            f"{op}: bias dtype {_dtype_name(bias.dtype)} must be x's {_dtype_name(x.dtype)}",
        )
    if input_ids is not None or tid2eid is not None:
        raise NotImplementedError(f"npu emulation: {op}'s hash mode is not emulated")
    if norm_type != 1:
        raise NotImplementedError(f"npu emulation: {op} with softmax (norm_type 0) is not emulated")
    norm = torch.sigmoid(x.float())
    choice = norm if bias is None else norm + bias.float()
    grouped = choice.view(-1, groups, per_group)
    if group_select_mode == 1:
        group_scores = grouped.topk(2, dim=-1).values.sum(-1)
    else:
        group_scores = grouped.max(dim=-1).values
    best = torch.topk(group_scores, int(k_group), dim=-1).indices
    eligible = torch.zeros_like(group_scores, dtype=torch.bool).scatter_(1, best, True)
    eligible = eligible.unsqueeze(-1).expand(-1, groups, per_group).reshape(-1, experts)
    idx = torch.topk(choice.masked_fill(~eligible, float("-inf")), int(k), dim=-1).indices
    y = norm.gather(1, idx)
    y = y / (y.sum(dim=-1, keepdim=True) + eps) * routed_scaling_factor
    return y.to(x.dtype), idx.to(torch.int32), norm


def moe_init_routing_v2_ref(
    x,
    expert_idx,
    *,
    scale=None,
    offset=None,
    active_num=-1,
    expert_capacity=-1,
    expert_num=-1,
    drop_pad_mode=0,
    expert_tokens_num_type=0,
    expert_tokens_num_flag=False,
    quant_mode=-1,
    active_expert_range=(),
    row_idx_type=0,
    x_dtype=None,
):
    """``npu_moe_init_routing_v2`` (CANN MoeInitRoutingV3), dropless, unquantised.

    The flat index of (token t, slot j) is ``t * K + j`` (token-major). Entries whose expert is
    in ``active_expert_range`` [start, end) are sorted by expert id, stably (sortedRowIdx);
    ``expanded_x[i] = x[sortedRowIdx[i] // K]``: rows grouped by expert, the remaining rows
    zero. ``expanded_row_idx`` (int32, N*K): row_idx_type 0 (gather) ``[sortedRowIdx[i]] = i``,
    -1 for entries out of range; 1 (scatter) ``[i] = sortedRowIdx[i]``, the rest -1.
    ``expert_token_cumsum_or_count`` int64: type 1 counts per expert in range (end - start,),
    0 their cumsum, 2 (expert_num, 2) (expert, count) pairs of the non-zero ones then zeros.
    ``expanded_scale`` float32: ``scale[sortedRowIdx[i] // K]`` when given, else zeros.
    Shapes as the wheel's meta kernel.
    """
    import torch

    op = "npu_moe_init_routing_v2"
    lim = limits().moe_init_routing
    _check_dtype(op, "x", x, lim.dtypes)
    _check_dtype(op, "expert_idx", expert_idx, lim.index_dtypes)
    if x.dim() != 2 or expert_idx.dim() != 2 or x.shape[0] != expert_idx.shape[0]:
        raise ValueError(
            f"{op}: x (NUM_ROWS, H) and expert_idx (NUM_ROWS, K) must be 2-D with equal rows, "
            f"got {tuple(x.shape)} and {tuple(expert_idx.shape)}"
        )
    n, k = expert_idx.shape
    key_value = expert_tokens_num_type == 2
    max_e = lim.max_experts_key_value if key_value else lim.max_experts
    _constraint(0 < expert_num <= max_e, f"{op}: expert_num={expert_num} not in (0, {max_e}]")
    _constraint(
        drop_pad_mode in lim.drop_pad_modes,
        f"{op}: drop_pad_mode {drop_pad_mode} ({', '.join(map(str, lim.drop_pad_modes))} only)",
    )
    _constraint(
        expert_tokens_num_type in lim.expert_tokens_num_types,
        f"{op}: expert_tokens_num_type {expert_tokens_num_type} "
        f"({', '.join(map(str, lim.expert_tokens_num_types))} only)",
    )
    _constraint(
        expert_tokens_num_flag or not lim.expert_tokens_num_flag_required,
        f"{op}: expert_tokens_num_flag=False (the op supports True only)",
    )
    _constraint(
        quant_mode in lim.quant_modes,
        f"{op}: quant_mode {quant_mode} ({', '.join(map(str, lim.quant_modes))} only)",
    )
    _constraint(
        row_idx_type in lim.row_idx_types,
        f"{op}: row_idx_type {row_idx_type} ({', '.join(map(str, lim.row_idx_types))} only)",
    )
    if lim.active_num_is_rows_k:
        _constraint(
            active_num in (-1, n * k),
            f"{op}: active_num={active_num} must be -1 or NUM_ROWS*K = {n * k} (CANN checks it)",
        )
    else:
        _constraint(active_num >= -1, f"{op}: active_num={active_num} < -1")
    # An omitted range reaches GE as None (the traced node drops a schema-default [] and
    # torchair's npu_moe_init_routing_v2 converter defaults it to None: MoeInitRoutingV3
    # refuses it), and op-plugin revisions either refuse it ("active_expert_range is
    # required") or read [0]/[1] of it at expert_num 128: the strict kernel refuses it too.
    _constraint(
        bool(active_expert_range),
        f"{op}: active_expert_range is empty; pass [first, last) of the rank's experts "
        f"(every expert: [0, expert_num={expert_num}])",
    )
    rng = list(active_expert_range) if active_expert_range else [0, expert_num]
    _constraint(
        len(rng) == 2 and 0 <= rng[0] < rng[1] <= expert_num,
        f"{op}: active_expert_range {rng} must be [start, end) with 0 <= start < end <= "
        f"expert_num={expert_num}",
    )
    if quant_mode != -1 or offset is not None or x_dtype is not None:
        raise NotImplementedError(f"npu emulation: {op} quantisation is not emulated")
    if drop_pad_mode != 0:
        raise NotImplementedError(f"npu emulation: {op} drop_pad_mode={drop_pad_mode}")
    flat = expert_idx.reshape(-1).long()
    _constraint(
        bool(((flat >= 0) & (flat < expert_num)).all()),
        f"{op}: expert_idx has ids outside 0..{expert_num - 1} (专家id不能超过专家数)",
    )
    start, end = int(rng[0]), int(rng[1])
    valid = (flat >= start) & (flat < end)
    order = torch.sort(torch.where(valid, flat, end), stable=True).indices
    avail = int(valid.sum())
    rows = n * k if active_num <= 0 else min(active_num, n * k)
    src = order[: min(avail, rows)]
    expanded_x = x.new_zeros((rows, x.shape[1]))
    expanded_x[: src.numel()] = x[src // k]
    row_idx = torch.full((n * k,), -1, dtype=torch.int32)
    if row_idx_type == 0:
        row_idx[order[:avail]] = torch.arange(avail, dtype=torch.int32)
    else:
        row_idx[:avail] = order[:avail].to(torch.int32)
    counts = torch.bincount(flat[valid] - start, minlength=end - start).to(torch.int64)
    if not expert_tokens_num_flag:
        tokens = torch.zeros((), dtype=torch.int64)
    elif expert_tokens_num_type == 0:
        tokens = counts.cumsum(0)
    elif expert_tokens_num_type == 1:
        tokens = counts
    else:
        tokens = torch.zeros((expert_num, 2), dtype=torch.int64)
        nz = torch.nonzero(counts).flatten()
        tokens[: nz.numel(), 0] = nz + start
        tokens[: nz.numel(), 1] = counts[nz]
    expanded_scale = torch.zeros(rows, dtype=torch.float32)
    if scale is not None:
        if scale.dim() != 1 or scale.shape[0] != n:
            raise ValueError(f"{op}: scale must be (NUM_ROWS,) without quantisation")
        expanded_scale[: src.numel()] = scale.float()[src // k]
    return expanded_x, row_idx, tokens, expanded_scale


_GMM_UNEMULATED = (
    "bias scale offset antiquant_scale antiquant_offset per_token_scale activation_input "
    "activation_quant_scale activation_quant_offset x_dtype weight_dtype scale_dtype "
    "per_token_scale_dtype"
).split()
# torch_npu's dtype enum (op_plugin meta TORCH_DTYPE_MAP) for output_dtype: int?
_GMM_OUTPUT_DTYPES = {5: "float16", 15: "bfloat16", 6: "float32"}


def grouped_matmul_ref(x, weight, *, group_list=None, split_item=0, group_type=None, **kw):
    """``npu_grouped_matmul`` (default overload: group_list a Tensor), unquantised, group_type 0
    (split along M): one 2-D x [M, K]; one 3-D weight [E, K, N] (or E 2-D [K, N]); group e is
    rows ``offsets[e] : offsets[e] + counts[e]`` of x (group_list_type 1: counts, 0: cumsum),
    ``y[rows] = x[rows] @ weight[e]`` (fp32 maths). split_item 2/3: one [M, N] output (rows
    past the groups' total zero), as the meta kernel."""
    import torch

    op = "npu_grouped_matmul"
    lim, moe = limits().grouped_matmul, limits().moe
    group_list_type = kw.pop("group_list_type", 0)
    act_type = kw.pop("act_type", 0)
    output_dtype = kw.pop("output_dtype", None)
    kw.pop("tuning_config", None)
    for name in _GMM_UNEMULATED:
        if kw.pop(name, None) is not None:
            raise NotImplementedError(f"npu emulation: {op} argument {name} is not emulated")
    if kw:
        raise TypeError(f"{op}: unexpected arguments {sorted(kw)}")
    _constraint(
        group_type in lim.group_types,
        f"{op}: group_type {group_type} ({', '.join(map(str, lim.group_types))} only)",
    )
    _constraint(
        len(x) <= lim.max_list_len and len(weight) <= lim.max_list_len,
        f"{op}: x/weight lists longer than {lim.max_list_len}",
    )
    if group_type != 0:
        raise NotImplementedError(f"npu emulation: {op} group_type={group_type} is not emulated")
    _constraint(
        split_item in lim.split_items,
        f"{op}: split_item {split_item} with group_type 0 ("
        f"{'/'.join(map(str, lim.split_items))} only; 0/1 would size one output per group "
        f"from group_list's data)",
    )
    _constraint(group_list is not None, f"{op}: group_type 0 needs group_list")
    _check_dtype(op, "group_list", group_list, lim.group_list_dtypes)
    _constraint(
        group_list_type in lim.group_list_types,
        f"{op}: group_list_type {group_list_type} "
        f"({', '.join(map(str, lim.group_list_types))} only)",
    )
    _constraint(act_type in lim.act_types, f"{op}: act_type {act_type} needs per-token quant")
    if len(x) != 1:
        raise NotImplementedError(f"npu emulation: {op} with {len(x)} x tensors")
    xt = x[0]
    _check_dtype(op, "x", xt, lim.dtypes)
    single = len(weight) == 1 and weight[0].dim() == 3
    ws = list(weight[0].unbind(0)) if single else list(weight)
    for i, w in enumerate(ws):
        _constraint(
            w.dtype == xt.dtype,
            f"{op}: weight dtype {_dtype_name(w.dtype)} differs from x dtype "
            f"{_dtype_name(xt.dtype)} (unquantised)",
        )
        if w.dim() != 2 or w.shape[0] != xt.shape[-1] or w.shape[1] != ws[0].shape[1]:
            raise ValueError(
                f"{op}: weight {i} shape {tuple(w.shape)} must be [K={xt.shape[-1]}, N] with one N"
            )
    if xt.dim() != 2:
        raise ValueError(f"{op}: x is {xt.dim()}-D, split_item {split_item} takes 2-D x")
    groups = len(ws)
    _constraint(
        not single or groups <= moe.max_experts,
        f"{op}: {groups} groups > {moe.max_experts} (one 3-D weight)",
    )
    _constraint(
        xt.stride(0) != 1 or xt.shape[0] <= 1 or xt.shape[1] <= 1,
        f"{op}: x is transposed (strides {xt.stride()}); the op takes no transposed x",
    )
    for name, size in (("x", xt.shape[-1]), ("weight", weight[0].shape[-1])):
        _constraint(
            size < moe.inner_limit,
            f"{op}: {name}'s last dim {size} must be < InnerLimit {moe.inner_limit}",
        )
    out_dtype = xt.dtype
    if output_dtype is not None:
        want = _GMM_OUTPUT_DTYPES.get(int(output_dtype))
        _constraint(
            want == _dtype_name(xt.dtype),
            f"{op}: output_dtype {output_dtype} must be None or x's dtype (unquantised)",
        )
    m = xt.shape[0]
    gl = group_list.reshape(-1).long()
    _constraint(
        gl.numel() == groups,
        f"{op}: group_list has {gl.numel()} entries for {groups} groups",
    )
    _constraint(bool((gl >= 0).all()), f"{op}: group_list has negative entries")
    if group_list_type == 1:
        counts = gl
        _constraint(gl.numel() != 1, f"{op}: group_list_type 1 takes no length-1 group_list")
        _constraint(
            int(counts.sum()) == m,
            f"{op}: group_list (counts) sums to {int(counts.sum())}, x has {m} rows",
        )
    else:
        counts = torch.diff(gl, prepend=gl.new_zeros(1))
        _constraint(bool((counts >= 0).all()), f"{op}: group_list (cumsum) decreases")
        _constraint(
            gl.numel() > 0 and int(gl[-1]) == m,
            f"{op}: group_list (cumsum) ends at {int(gl[-1]) if gl.numel() else None}, x has {m} "
            f"rows",
        )
    out = torch.zeros((m, ws[0].shape[1]), dtype=out_dtype)
    start = 0
    for e, c in enumerate(counts.tolist()):
        c = max(0, min(int(c), m - start))
        if c:
            out[start : start + c] = (xt[start : start + c].float() @ ws[e].float()).to(out_dtype)
        start += c
    return [out]


def swiglu_ref(x, dim=-1):
    """``npu_swiglu``: A, B = x split in halves along ``dim``; silu(A) * B (fp32 maths)."""
    import torch

    op = "npu_swiglu"
    lim = limits().swiglu
    _check_dtype(op, "x", x, lim.dtypes)
    _constraint(
        lim.min_rank <= x.dim() <= lim.max_rank,
        f"{op}: x is {x.dim()}-D, the op takes {lim.min_rank}-{lim.max_rank} dims",
    )
    if x.shape[dim] % 2:
        raise ValueError(f"{op}: dim {dim} has odd size {x.shape[dim]}")
    a, b = x.float().chunk(2, dim=dim)
    return (torch.nn.functional.silu(a) * b).to(x.dtype)


def moe_finalize_routing_ref(
    expanded_permuted_rows,
    skip1,
    skip2,
    bias,
    scales,
    expanded_src_to_dst_row,
    export_for_source_row,
    drop_pad_mode=0,
    k=1,
):
    """``npu_moe_finalize_routing`` (CANN MoeFinalizeRoutingV2), dropless (drop_pad_mode 0 / 2):
    ``out[i] = skip1[i] + skip2[i] + sum_j scales[i, j] * (rows[r(i, j)] + bias[e(i, j)])``
    with ``r(i, j) = expanded_src_to_dst_row[j * N + i]`` (mode 0, column order: the v1
    init_routing's) or ``[i * K + j]`` (mode 2, row order: init_routing_v2's row_idx_type 0),
    ``e = export_for_source_row``; K = scales.shape[1] (else ``k``); fp32 maths."""
    import torch

    op = "npu_moe_finalize_routing"
    lim = limits().moe_finalize_routing
    rows = expanded_permuted_rows
    _check_dtype(op, "expanded_permuted_rows", rows, lim.dtypes)
    for name, t in (("skip1", skip1), ("skip2", skip2), ("bias", bias), ("scales", scales)):
        if t is not None:
            _constraint(
                t.dtype == rows.dtype,
                f"{op}: {name} dtype {_dtype_name(t.dtype)} differs from expanded_permuted_rows "
                f"dtype {_dtype_name(rows.dtype)}",
            )
    _check_dtype(op, "expanded_src_to_dst_row", expanded_src_to_dst_row, lim.index_dtypes)
    if export_for_source_row is not None:
        _check_dtype(op, "export_for_source_row", export_for_source_row, lim.index_dtypes)
    mode = 0 if drop_pad_mode is None else int(drop_pad_mode)
    _constraint(
        mode in lim.drop_pad_modes,
        f"{op}: drop_pad_mode {mode} ({', '.join(map(str, lim.drop_pad_modes))} only)",
    )
    _constraint(
        skip2 is None or skip1 is not None,
        f"{op}: skip2 given without skip1 (MoeFinalizeRoutingV2 refuses it)",
    )
    _constraint(
        bias is None or export_for_source_row is not None,
        f"{op}: bias needs export_for_source_row (the expert of each (row, k))",
    )
    if mode not in (0, 2):
        raise NotImplementedError(f"npu emulation: {op} drop_pad_mode={mode} is not emulated")
    idx = expanded_src_to_dst_row
    kk = scales.shape[1] if scales is not None else int(k or 1)
    if idx.dim() != 1 or rows.dim() != 2 or kk <= 0 or idx.numel() % kk:
        raise ValueError(
            f"{op}: expanded_src_to_dst_row ({tuple(idx.shape)}) must be 1-D of NUM_ROWS*K and "
            f"expanded_permuted_rows ({tuple(rows.shape)}) 2-D (dropless), K={kk}"
        )
    n = idx.numel() // kk
    pos = idx.long().view(kk, n).t() if mode == 0 else idx.long().view(n, kk)
    _constraint(
        bool(((pos >= 0) & (pos < rows.shape[0])).all()),
        f"{op}: expanded_src_to_dst_row has values outside 0..{rows.shape[0] - 1} (drop_pad_mode "
        f"{mode} takes [0, NUM_ROWS*K-1])",
    )
    gathered = rows.float()[pos.clamp(0, rows.shape[0] - 1)]  # [N, K, H]
    if bias is not None:
        gathered = gathered + bias.float()[export_for_source_row.long()]
    w = scales.float() if scales is not None else torch.ones(n, kk)
    out = (w.unsqueeze(-1) * gathered).sum(dim=1)
    for t in (skip1, skip2):
        if t is not None:
            if tuple(t.shape) != tuple(out.shape):
                raise ValueError(f"{op}: skip shape {tuple(t.shape)} must be {tuple(out.shape)}")
            out = out + t.float()
    return out.to(rows.dtype)


AIR_FIA_EAGER = (
    "torchair.ops.npu_fused_infer_attention_score (air::) runs only inside a GE graph "
    "(torch.compile with torchair's npu backend, the ge_graph decode): called eagerly it "
    "raises on the device (torchair: 'only support in max-autotune mode'). Eager code "
    "(prefill) must use torch_npu.npu_fused_infer_attention_score with List[int] lengths"
)


def _register_kernels() -> None:
    import torch

    if _STATE["libs"]:
        return
    npu_lib = torch.library.Library("npu", "IMPL")
    air_lib = torch.library.Library("air", "IMPL")
    _STATE["libs"] = [npu_lib, air_lib]  # keep the registrations alive

    def rms_norm(x, gamma, epsilon=1e-6):
        return rms_norm_ref(x, gamma, epsilon)

    def scatter_update_inplace(data, indices, updates, axis):
        return _scatter_into(data, indices, updates, axis)

    def scatter_nd_update_inplace(input, indices, updates):  # noqa: A002
        return _scatter_nd_into(input, indices, updates)

    def fia(query, key, value, *args, **kw):
        if args:
            raise TypeError("npu_fused_infer_attention_score: only 3 positional arguments")
        return fused_infer_attention_ref(query, key, value, **kw)

    def air_fia(query, key, value, *args, **kw):
        # torchair's own CPU kernel raises NotImplementedError by design (GE graph mode only);
        # this one runs inside a traced graph (aot_eager: the CPU stand-in for GE) and raises
        # like torchair's when called eagerly.
        _constraint(_in_compiled_graph(), AIR_FIA_EAGER, NotImplementedError)
        return fia(query, key, value, *args, **kw)

    npu_lib.impl("npu_rms_norm", rms_norm, "CPU")
    npu_lib.impl("npu_apply_rotary_pos_emb", rotary_inplace, "CPU")
    npu_lib.impl("scatter_update", scatter_update_ref, "CPU")
    npu_lib.impl("scatter_update_", scatter_update_inplace, "CPU")
    # the paged KV write; aot_eager functionalizes the in-place op into npu_scatter_nd_update
    npu_lib.impl("npu_scatter_nd_update", scatter_nd_update_ref, "CPU")
    npu_lib.impl("npu_scatter_nd_update_", scatter_nd_update_inplace, "CPU")
    npu_lib.impl("npu_fused_infer_attention_score", fia, "CPU")
    air_lib.impl("npu_fused_infer_attention_score", air_fia, "CPU")
    # MoE (the wheel has Meta kernels for all five; split_item 2/3 gives a static [sum M, N])
    npu_lib.impl("npu_moe_gating_top_k_softmax", moe_gating_top_k_softmax_ref, "CPU")
    npu_lib.impl("npu_moe_gating_top_k", moe_gating_top_k_ref, "CPU")
    npu_lib.impl("npu_moe_init_routing_v2", moe_init_routing_v2_ref, "CPU")
    npu_lib.impl("npu_grouped_matmul", grouped_matmul_ref, "CPU")
    npu_lib.impl("npu_swiglu", swiglu_ref, "CPU")
    npu_lib.impl("npu_moe_finalize_routing", moe_finalize_routing_ref, "CPU")


__all__ = [
    "CONSTRAINT_VIOLATIONS",
    "DeviceConstraintError",
    "EmulationUnavailable",
    "activate",
    "build_stubs",
    "current_platform",
    "emulation_env",
    "fused_infer_attention_ref",
    "grouped_matmul_ref",
    "limits",
    "moe_finalize_routing_ref",
    "moe_gating_top_k_ref",
    "moe_gating_top_k_softmax_ref",
    "moe_init_routing_v2_ref",
    "reexec_with_env",
    "required",
    "rms_norm_ref",
    "rotary_inplace",
    "rotary_ref",
    "scatter_nd_update_ref",
    "scatter_update_ref",
    "set_platform",
    "strict",
    "stub_manifest",
    "swiglu_ref",
    "unavailable_reason",
]
