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


def test_schema_check_follows_local_aliases_and_conditional_values():
    """Calls through a local name (assignment, if/else, conditional expression, walrus) are
    checked against every op the name may hold; nested scopes see their parents' names."""
    from scaffold.npu_emulation.schema_check import _calls, _literal_values

    tree = ast.parse(
        """
import torch_npu
import torchair

fused = torch_npu.npu_rms_norm


def attention(q, k, v, lengths, causal):
    if isinstance(lengths, list):
        fia = torch_npu.npu_fused_infer_attention_score
    else:
        fia = torchair.ops.npu_fused_infer_attention_score
    both = torchair.ops.npu_fused_infer_attention_score if causal else fia
    other = len
    fia(q, k, v, sparse_mode=3 if causal else 0)
    both(q, k, v)
    other(q)

    def inner(x, w):
        return fused(x, w), fia(q, k, v)

    return (rope := torch_npu.npu_apply_rotary_pos_emb)(q, k, v, v)
"""
    )
    found = {
        (node.lineno, via): sorted(t[2] for t in targets)
        for node, targets, via, _ in _calls(tree, import_aliases(tree))
    }
    fia = [
        "torch_npu.npu_fused_infer_attention_score",
        "torchair.ops.npu_fused_infer_attention_score",
    ]
    assert found[(15, "fia")] == fia
    assert found[(16, "both")] == ["torchair.ops.npu_fused_infer_attention_score"]  # `fia` arm:
    # names are resolved one level (an alias of an alias is not followed)
    assert found[(20, "fused")] == ["torch_npu.npu_rms_norm"]
    assert found[(20, "fia")] == fia
    assert not any(via == "other" for _, via in found)
    call = next(n for n in ast.walk(tree) if isinstance(n, ast.Call) and n.lineno == 15)
    sparse = next(k.value for k in call.keywords if k.arg == "sparse_mode")
    assert _literal_values(sparse) == [3, 0]
    assert _literal_values(ast.parse("x if c else 1").body[0].value) is None


def test_device_limits_table_comes_from_copier_yml():
    """copier.yml's device_limits is the table; device_limits adds the documented limits it
    does not list, and refuses keys it does not know."""
    import yaml

    from scaffold import device_limits as dl

    table = yaml.safe_load((REPO / "copier.yml").read_text())["device_limits"]["default"]
    assert set(table) == set(dl.PLATFORMS)
    for platform in dl.PLATFORMS:
        limits = dl.LIMITS[platform]
        for op, values in table[platform].items():
            for key, value in values.items():
                got = getattr(getattr(limits, op), key)
                assert got == (tuple(value) if isinstance(value, list) else value), (op, key)
    a3 = dl.LIMITS["A3"]
    assert a3.attention.dtypes == ("float16", "bfloat16", "int8")
    assert a3.attention.max_group == 64 and a3.attention.max_kv_len == 262_144
    assert a3.attention.max_heads == 256 and a3.attention.max_head_dim == 512
    assert a3.attention.sparse_modes == (0, 1, 2, 3, 4) and a3.attention.contiguous
    assert set(a3.attention.input_layouts) == {"BSH", "BSND", "BNSD", "TND", "BNSD_BSND"}
    assert a3.rotary.head_dims == (64, 128) and a3.rotary.rotary_modes == ("half",)
    assert a3.rotary.layouts == ("BSND", "TND") and a3.rotary.in_place
    assert not dl.LIMITS["950"].attention.documented
    assert dl.DOC_DEFAULTS["950"].rotary.max_head_dim == 1024
    assert set(dl.DOC_DEFAULTS["950"].rotary.rotary_modes) == {"half", "interleave", "quarter"}
    with pytest.raises(ValueError, match="unknown limit"):
        dl._overlay(dl.RotaryLimits(), {"head_dim": [64]}, "A3.rotary")
    with pytest.raises(KeyError, match="unknown platform"):
        dl.LIMITS["A1"]


def test_device_limits_platform(monkeypatch):
    from scaffold import device_limits as dl

    monkeypatch.delenv(dl.PLATFORM_ENV, raising=False)
    assert dl.resolve_platform() == "A3" and dl.resolve_platform("A2") == "A2"
    monkeypatch.setenv(dl.PLATFORM_ENV, "950")
    assert dl.resolve_platform() == "950"
    with pytest.raises(ValueError, match="unknown Ascend platform 'A5'"):
        dl.resolve_platform("A5")


def test_required_env_and_ci_require_the_emulation(monkeypatch):
    from scaffold.npu_emulation import emulation

    for value, expected in (("", False), ("0", False), ("false", False), ("1", True)):
        monkeypatch.setenv(emulation.REQUIRE_ENV, value)
        assert emulation.required() is expected
    monkeypatch.delenv(emulation.STRICT_ENV, raising=False)
    assert emulation.strict()  # strict by default
    monkeypatch.setenv(emulation.STRICT_ENV, "0")
    assert not emulation.strict()
    ci = (REPO / ".ci" / "run").read_text()
    assert "export ASCEND_SCAFFOLD_REQUIRE_NPU_EMULATION=1" in ci
