"""ascend_runtime, the library rendered packages run on: what it imports, which version a
package asks for, and that its tables agree with the scaffold's."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import yaml

import ascend_runtime
from scaffold.device_limits import LIMITS

REPO = Path(__file__).resolve().parents[1]
RUNTIME = REPO / "ascend_runtime"


def imported_roots(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    roots = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            roots |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            roots.add(node.module.split(".")[0])
    return roots


def test_the_runtime_imports_no_scaffold_machinery():
    """The runtime is what a device host runs: no copier, typer, jinja2, nor the scaffold."""
    for path in RUNTIME.rglob("*.py"):
        banned = imported_roots(path) & {"copier", "typer", "jinja2", "scaffold"}
        assert not banned, (path.relative_to(REPO), banned)


def test_importing_the_runtime_and_its_config_reader_needs_no_torch():
    """The scaffold reads config.json with ascend_runtime.hf_config on a host without torch."""
    code = (
        "import sys; sys.modules['torch'] = None; import ascend_runtime.hf_config; "
        "import ascend_runtime.parallel_sizes, scaffold.hf_config, scaffold.spec"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_packages_ask_for_the_runtime_api_they_were_rendered_for():
    copier_yml = yaml.safe_load((REPO / "copier.yml").read_text())
    api = copier_yml["runtime_api"]["default"]
    assert api == ascend_runtime.RUNTIME_API
    assert ascend_runtime.__version__.startswith(api + ".")
    major, minor = map(int, api.split("."))
    assert copier_yml["runtime_next"]["default"] == f"{major}.{minor + 1}"
    pyproject = (REPO / "pyproject.toml").read_text()
    assert f'version = "{ascend_runtime.__version__}"' in pyproject
    template = (REPO / "templates/model/pyproject.toml.jinja").read_text()
    assert '"ascend-scaffold>={{ runtime_api }},<{{ runtime_next }}"' in template


def _npu_constants() -> dict:
    """ops/npu.py's module-level constants (it imports torch_npu: read, not run)."""
    tree = ast.parse((RUNTIME / "ops/npu.py").read_text())
    return {
        node.targets[0].id: ast.literal_eval(node.value)
        for node in tree.body
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name)
        and node.targets[0].id.isupper()
    }  # fmt: skip


def test_the_fused_rotary_head_dims_are_the_device_tables():
    """ops/npu.py picks the fused rotary by head_dim."""
    for platform in ("A2", "A3"):
        assert LIMITS[platform].rotary.head_dims == _npu_constants()["FUSED_ROTARY_HEAD_DIMS"]


def test_the_fused_mla_and_gating_limits_are_the_device_tables():
    """ops/npu.py picks the MLA mode of the fused attention and npu_moe_gating_top_k from the
    shapes; the emulation and copier.yml's computed fused_* values read the device tables."""
    constants = _npu_constants()
    for platform in ("A2", "A3"):
        mla, gating = LIMITS[platform].mla_attention, LIMITS[platform].moe_gating_top_k
        assert constants["FUSED_MLA_LATENT_DIM"] == mla.latent_dim
        assert constants["FUSED_MLA_ROPE_DIM"] == mla.rope_dim
        assert constants["FUSED_MLA_QUERY_HEADS"] == mla.query_heads
        assert constants["FUSED_MLA_BLOCK_SIZES"] == mla.block_sizes
        assert constants["GATING_TOP_K_MAX_EXPERTS"] == gating.max_experts
        assert constants["GATING_TOP_K_MIN_GROUP"] == gating.min_group_size
        assert constants["GATING_TOP_K_ALIGN"] == gating.group_align
