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
