"""`ascend-scaffold npu-emulate`: set up CPU emulation of torch_npu (see docs/npu-emulation.md)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import venv as venv_mod
from pathlib import Path
from typing import Annotated

import typer

PACKAGES = ["torch==2.13.0", "torch-npu==2.13.0", "packaging", "protobuf"]
_HELPER = Path("templates/model/tests/npu_emulation.py")

_PROBE = r"""
import json, sys, importlib.util
spec = importlib.util.spec_from_file_location("npu_emulation", sys.argv[1])
mod = importlib.util.module_from_spec(spec)
sys.modules["npu_emulation"] = mod
spec.loader.exec_module(mod)
cache = sys.argv[2] or None
try:
    stub_dir = mod.build_stubs(cache)
    mod.activate(cache)
    import torch, torch_npu, torchair
    info = dict(ok=True, stub_dir=str(stub_dir), npu_available=bool(torch.npu.is_available()),
                **{k: v for k, v in mod.stub_manifest(stub_dir).items() if k != "scanned"})
except Exception as exc:
    info = dict(ok=False, error=f"{type(exc).__name__}: {exc}")
print("NPU_EMULATE_JSON=" + json.dumps(info))
"""


def helper_path() -> Path:
    """The npu_emulation.py helper: repo checkout or the copy packaged into the wheel."""
    import scaffold

    pkg = Path(scaffold.__file__).resolve().parent
    for candidate in (pkg.parent / _HELPER, pkg / "_template" / _HELPER):
        if candidate.is_file():
            return candidate
    raise FileNotFoundError(f"{_HELPER} not found next to {pkg}")


def _venv_python(venv_dir: Path) -> Path:
    return venv_dir / "bin" / "python"


def _has_torch_npu(python: Path) -> bool:
    code = "import importlib.util as u, sys; sys.exit(u.find_spec('torch_npu') is None)"
    return subprocess.run([str(python), "-c", code]).returncode == 0


def npu_emulate(
    venv: Annotated[
        Path | None,
        typer.Option(
            "--venv",
            help="Virtual environment to create/use; torch==2.13.0 torch-npu==2.13.0 packaging "
            "protobuf are pip-installed there when torch_npu is missing. "
            "Default: this interpreter.",
        ),
    ] = None,
    cache_dir: Annotated[
        Path | None,
        typer.Option(
            "--cache-dir",
            help="Stub cache root (default $ASCEND_SCAFFOLD_NPU_STUBS or "
            "~/.cache/ascend-scaffold/npu-stubs).",
        ),
    ] = None,
) -> None:
    """Build stand-in CANN libraries so `import torch_npu, torchair` works on CPU."""
    python = Path(sys.executable)
    if venv is not None:
        venv = venv.expanduser().absolute()
        if venv.exists() and not (venv / "pyvenv.cfg").is_file():
            typer.echo(f"error: {venv} exists and is not a virtual environment", err=True)
            raise typer.Exit(2)
        if not venv.exists():
            typer.echo(f"creating venv {venv}")
            venv_mod.create(venv, with_pip=True)
        python = _venv_python(venv)
        if not _has_torch_npu(python):
            typer.echo(f"installing {' '.join(PACKAGES)} into {venv}")
            pip = [str(python), "-m", "pip", "install", "--disable-pip-version-check"]
            if subprocess.run([*pip, *PACKAGES]).returncode != 0:
                typer.echo("error: pip install failed", err=True)
                raise typer.Exit(1)
    try:
        helper = helper_path()
    except FileNotFoundError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from exc
    env_cache = str(cache_dir.expanduser().absolute()) if cache_dir else ""
    proc = subprocess.run(
        [str(python), "-c", _PROBE, str(helper), env_cache],
        capture_output=True,
        text=True,
        env={**os.environ, "TORCH_DEVICE_BACKEND_AUTOLOAD": "0"},
    )
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("NPU_EMULATE_JSON=")), None)
    if line is None:
        typer.echo(
            f"error: emulation probe crashed ({proc.returncode}): {proc.stderr[-800:]}", err=True
        )
        raise typer.Exit(1)
    info = json.loads(line.split("=", 1)[1])
    if not info["ok"]:
        typer.echo(f"error: NPU emulation unavailable: {info['error']}", err=True)
        raise typer.Exit(1)
    stub_dir = Path(info["stub_dir"])
    typer.echo(
        f"torch_npu {info['torch_npu_version']} imports on CPU "
        f"(torch.npu.is_available() = {info['npu_available']}); "
        f"{info['symbol_count']} stand-in symbols in {stub_dir}"
    )
    typer.echo("export TORCH_DEVICE_BACKEND_AUTOLOAD=0")
    typer.echo(f"export ASCEND_SCAFFOLD_NPU_STUBS={stub_dir.parent}")
    typer.echo(f"export ASCEND_SCAFFOLD_NPU_PYTHON={python}")
