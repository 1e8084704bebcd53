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

# Runs in the emulation interpreter; the emulation is ascend-scaffold's `scaffold.npu_emulation`,
# which must be importable there (the generated packages' npu_emulated tier imports it too).
_PROBE = r"""
import json, sys
cache = sys.argv[1] or None
try:
    from scaffold.npu_emulation import emulation as mod
    stub_dir = mod.build_stubs(cache)
    mod.activate(cache)
    import torch, torch_npu, torchair
    info = dict(ok=True, stub_dir=str(stub_dir), npu_available=bool(torch.npu.is_available()),
                **{k: v for k, v in mod.stub_manifest(stub_dir).items() if k != "scanned"})
except Exception as exc:
    info = dict(ok=False, error=f"{type(exc).__name__}: {exc}")
print("NPU_EMULATE_JSON=" + json.dumps(info))
"""

_WHERE = (
    "import json, scaffold, scaffold.npu_emulation; "
    "print('NPU_EMULATE_WHERE=' + json.dumps([scaffold.__file__, scaffold.__version__]))"
)


def source_checkout() -> Path | None:
    """The ascend-scaffold checkout this CLI runs from, or None (installed from a wheel)."""
    import scaffold

    root = Path(scaffold.__file__).resolve().parents[1]
    pyproject = root / "pyproject.toml"
    if pyproject.is_file() and 'name = "ascend-scaffold"' in pyproject.read_text():
        return root
    return None


def _emulation_in(python: Path, cwd: Path) -> tuple[Path, str] | None:
    """(scaffold package dir, version) as ``python`` imports it (run in ``cwd``), else None."""
    proc = subprocess.run(
        [str(python), "-c", _WHERE],
        capture_output=True,
        text=True,
        cwd=cwd,
        env={**os.environ, "TORCH_DEVICE_BACKEND_AUTOLOAD": "0"},
    )
    line = next(
        (ln for ln in proc.stdout.splitlines() if ln.startswith("NPU_EMULATE_WHERE=")), None
    )
    if proc.returncode != 0 or line is None:
        return None
    file, version = json.loads(line.split("=", 1)[1])
    return Path(file).resolve().parent, version


def ensure_emulation(python: Path, venv: Path) -> None:
    """Make this ascend-scaffold's ``scaffold.npu_emulation`` importable in ``venv``: an editable
    install of the checkout (or ``ascend-scaffold==<version>`` for a wheel-installed CLI), with
    ``--no-deps`` so torch / torch-npu there are left alone."""
    import scaffold

    here = Path(scaffold.__file__).resolve().parent
    checkout = source_checkout()
    found = _emulation_in(python, venv)
    if found is not None and (found[0] == here if checkout else found[1] == scaffold.__version__):
        return
    spec = ["-e", str(checkout)] if checkout else [f"ascend-scaffold=={scaffold.__version__}"]
    typer.echo(f"installing {' '.join(spec)} (--no-deps) into {venv}: the NPU emulation")
    pip = [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-deps"]
    if subprocess.run([*pip, *spec], cwd=venv).returncode != 0:
        typer.echo("error: pip install of ascend-scaffold's NPU emulation failed", err=True)
        raise typer.Exit(1)


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
            "protobuf are pip-installed there when torch_npu is missing, and this "
            "ascend-scaffold (--no-deps: its scaffold.npu_emulation) when it is not importable. "
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
        ensure_emulation(python, venv)
    env_cache = str(cache_dir.expanduser().absolute()) if cache_dir else ""
    proc = subprocess.run(
        [str(python), "-c", _PROBE, env_cache],
        capture_output=True,
        text=True,
        cwd=venv,  # a venv is checked as a generated package sees it, not via this directory
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
