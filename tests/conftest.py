import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from scaffold.cli import app

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def cli():
    runner = CliRunner(env={"COLUMNS": "200", "TERMINAL_WIDTH": "200"})

    def invoke(*args: str, input: str | None = None):
        return runner.invoke(app, [str(a) for a in args], input=input)

    return invoke


def tree_state(root: Path) -> dict[str, str]:
    """Every entry under `root` (links not followed): file hashes, link targets, dirs."""
    import hashlib
    import os

    state = {}
    for path in sorted(root.rglob("*")):
        key = path.relative_to(root).as_posix()
        if path.is_symlink():
            state[key] = "link:" + os.readlink(path)
        elif path.is_dir():
            state[key] = "dir"
        else:
            state[key] = hashlib.sha256(path.read_bytes()).hexdigest()
    return state


NPU_PYTHON = os.environ.get("ASCEND_SCAFFOLD_NPU_PYTHON")
NO_NPU_PYTHON = (
    "ASCEND_SCAFFOLD_NPU_PYTHON unset: no python with torch-npu==2.13.0 and its stand-in CANN "
    "libraries (.ci/npu_emulation.sh creates one)"
)


def require_npu_emulation() -> None:
    """Skip without the emulation interpreter; fail instead where CI requires the tier
    (ASCEND_SCAFFOLD_REQUIRE_NPU_EMULATION=1, exported by .ci/run)."""
    from scaffold.npu_emulation import required

    if NPU_PYTHON:
        return
    if required():
        pytest.fail(f"{NO_NPU_PYTHON}; ASCEND_SCAFFOLD_REQUIRE_NPU_EMULATION=1 requires it")
    pytest.skip(NO_NPU_PYTHON)


def run_npu_code(
    code: str,
    stub_root: str,
    *args: str,
    timeout: int = 600,
    env_extra: dict | None = None,
) -> dict:
    """Run ``code`` in the emulation interpreter (``emu`` is scaffold.npu_emulation's
    emulation module, ``json``/``sys`` imported); it prints one ``RESULT=<json>`` line.
    The platform is the emulation's default unless ``env_extra`` names one."""
    import json
    import subprocess
    import textwrap

    drop = (
        "TORCH_DEVICE_BACKEND_AUTOLOAD",
        "ASCEND_SCAFFOLD_NPU_STRICT",
        "ASCEND_SCAFFOLD_NPU_PLATFORM",
    )
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env.update(env_extra or {})
    env["ASCEND_SCAFFOLD_NPU_STUBS"] = stub_root
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[1])  # this checkout's scaffold
    prelude = "import json, sys\nfrom scaffold.npu_emulation import emulation as emu\n"
    proc = subprocess.run(
        [NPU_PYTHON, "-c", prelude + textwrap.dedent(code), *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
    )
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT=")]
    assert proc.returncode == 0 and lines, f"rc={proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return json.loads(lines[-1][len("RESULT=") :])


@pytest.fixture(scope="module")
def stub_root(tmp_path_factory) -> str:
    """Where the emulation's stand-in CANN libraries are built (once, then cached)."""
    return os.environ.get("ASCEND_SCAFFOLD_NPU_STUBS") or str(tmp_path_factory.mktemp("stubs"))


def pytest_pycollect_makemodule(module_path, parent):
    """tests/runtime_suite/suite_*.py (pyproject's python_files): once per example package
    (runtime_suite/loader.py)."""
    if module_path.parent.name == "runtime_suite":
        from runtime_suite.loader import collect

        return collect(module_path, parent)
    return None
