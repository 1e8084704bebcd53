"""`scaffold.npu_emulation` is the one home of the NPU emulation: light to import, not copied
into generated packages, and the generated npu_emulated tier skips with a reason without it.

Runs without torch-npu (tests/test_npu_emulation.py covers the emulation itself).
"""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from scaffold.hazards.astutil import import_aliases
from scaffold.npu_emulation.schema_check import _target

REPO = Path(__file__).resolve().parents[1]
MISSING = "ascend-scaffold's NPU emulation is not installed (pip install ascend-scaffold)"


def test_import_is_light_and_reports_why_unavailable(tmp_path):
    """A test-time dependency: no torch, torch_npu, CLI or copier on import; without torch_npu
    `unavailable_reason()` says so instead of raising."""
    code = """
import json, sys
import scaffold.npu_emulation as emu
loaded = sorted(m for m in ("torch", "torch_npu", "torchair", "typer", "copier", "jinja2",
                            "scaffold.cli", "scaffold.hazards") if m in sys.modules)
import scaffold
print("RESULT=" + json.dumps(dict(loaded=loaded, version=emu.__version__ == scaffold.__version__,
                                  reason=emu.unavailable_reason(), api=sorted(emu.__all__))))
"""
    env = {**os.environ, "PYTHONPATH": str(REPO), "ASCEND_SCAFFOLD_NPU_STUBS": str(tmp_path)}
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=tmp_path
    )
    assert proc.returncode == 0, proc.stderr
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT="))
    result = json.loads(line[len("RESULT=") :])
    assert result["loaded"] == [], result
    assert result["version"]
    assert {"activate", "unavailable_reason", "check_npu_calls", "build_stubs"} <= set(
        result["api"]
    )
    if importlib.util.find_spec("torch_npu") is None:
        assert "torch_npu is not installed" in result["reason"]


def test_schema_check_aliases_resolve_through_astutil():
    """The call finder uses `ascend-scaffold check`'s alias rules (scaffold.hazards.astutil)."""
    tree = ast.parse(
        """
import torch
import torch_npu as tn
import torchair
from torch import ops
from torch_npu import npu_rms_norm as rms
import torch.ops.npu as npu_ops

tn.npu_rms_norm(x, w)
rms(x, w)
torch_npu.scatter_update_(c, i, u, -2)
torch.ops.npu.npu_rms_norm.default(x, w)
ops.air.npu_fused_infer_attention_score(q, k, v)
npu_ops.scatter_update(c, i, u, -2)
torchair.ops.npu_fused_infer_attention_score(q, k, v)
torch.matmul(a, b)
F.linear(x, w)
other.npu_rms_norm(x, w)
"""
    )
    aliases = import_aliases(tree)
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call)]
    found = {t for t in (_target(c.func, aliases) for c in calls) if t}
    assert found == {
        ("npu", "npu_rms_norm", "torch_npu.npu_rms_norm"),
        ("npu", "scatter_update_", "torch_npu.scatter_update_"),
        ("npu!", "npu_rms_norm", "torch.ops.npu.npu_rms_norm"),
        (
            "air!",
            "npu_fused_infer_attention_score",
            "torch.ops.air.npu_fused_infer_attention_score",
        ),
        ("npu!", "scatter_update", "torch.ops.npu.scatter_update"),
        ("air", "npu_fused_infer_attention_score", "torchair.ops.npu_fused_infer_attention_score"),
    }
    assert sum(1 for c in calls if _target(c.func, aliases)) == 7  # not torch.matmul, F, other


def test_template_ships_no_copy_of_the_emulation():
    tests_dir = REPO / "templates" / "model" / "tests"
    assert not (tests_dir / "npu_emulation.py").exists()
    assert not (tests_dir / "npu_schema_check.py").exists()
    for path in tests_dir.iterdir():
        text = path.read_text()
        assert "def build_stubs" not in text and "def check_npu_calls" not in text, path
        assert "import npu_emulation" not in text and "npu_schema_check" not in text, path
    assert "scaffold.npu_emulation" in (tests_dir / "conftest.py.jinja").read_text()


@pytest.mark.slow
def test_rendered_tier_skips_with_a_reason_without_the_emulation(cli, tmp_path):
    """Where ascend-scaffold is not installed (here: another top-level `scaffold` package
    shadows it), the generated npu_emulated tier skips, naming what to install."""
    pytest.importorskip("torch")
    dest = tmp_path / "pkg"
    result = cli("new", "model", "--defaults", "--yes", str(dest))
    assert result.exit_code == 0, result.output
    shadow = tmp_path / "shadow" / "scaffold"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text('"""An unrelated package named scaffold."""\n')
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(shadow.parent), str(dest / "src")])}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-rs",
            "-p",
            "no:cacheprovider",
            "-m",
            "npu_emulated",
        ],
        cwd=dest,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert " passed" not in out and " skipped" in out, out
    assert MISSING in out and "it provides the npu_emulated tier" in out, out
