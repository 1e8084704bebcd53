"""A package rendered by the 0.3 template (machinery in the package) upgrades to today's
template (the model on ascend_runtime) with `ascend-scaffold update`, end to end: the
machinery files it no longer needs are deleted where unchanged, an edited one is kept and
listed, the model's own files merge, and the package's tests pass afterwards."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import copier
import pytest
from test_update import GIT_ENV, commit_package, git, make_invoke

from ascend_runtime import RUNTIME_API

REPO = Path(__file__).resolve().parents[1]
PREVIOUS = "94dd730"  # the last commit of the 0.3 template (machinery rendered per package)
PKG = "old"
MACHINERY = [
    f"src/{PKG}/{name}"
    for name in (
        "graph.py", "inference_config.py", "kv_cache.py", "metadata.py", "generation.py",
        "sampling.py", "hf_config.py", "weights.py", "cache_starts.py", "cpu_linears.py",
        "ops/__init__.py", "ops/npu.py", "ops/portable.py", "layers/norm.py", "layers/mlp.py",
        "layers/rope.py", "extensions.py",
    )
]  # fmt: skip
EDITED = f"src/{PKG}/tokenizer.py"  # machinery the user changed: kept, listed


def template_repo(root: Path) -> Path:
    """This repository's template at PREVIOUS (tagged v0.3.0) and as it is now (v0.4.0)."""
    tpl = root / "template"
    tpl.mkdir()
    paths = ["copier.yml", "templates", "scaffold/migrations"]
    archive = subprocess.run(
        ["git", "-C", str(REPO), "archive", PREVIOUS, *paths], capture_output=True, check=False
    )
    if archive.returncode:
        pytest.fail(f"commit {PREVIOUS} is not in this clone: {archive.stderr.decode()[:200]}")
    subprocess.run(["tar", "-x", "-C", str(tpl)], input=archive.stdout, check=True)
    git(tpl, "init", "-q")
    git(tpl, "add", "-A")
    git(tpl, "commit", "-qm", "0.3")
    git(tpl, "tag", "v0.3.0")
    for path in paths:
        shutil.rmtree(tpl / path) if (tpl / path).is_dir() else (tpl / path).unlink()
        source = REPO / path
        if source.is_dir():
            shutil.copytree(source, tpl / path, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy(source, tpl / path)
    git(tpl, "add", "-A")
    git(tpl, "commit", "-qm", "0.4")
    git(tpl, "tag", "v0.4.0")
    return tpl


@pytest.mark.slow
def test_a_03_package_updates_to_the_runtime_and_passes_its_tests(tmp_path, monkeypatch):
    for key, value in GIT_ENV.items():
        monkeypatch.setenv(key, value)
    tpl = template_repo(tmp_path)
    pkg = tmp_path / PKG
    data = {"model_name": PKG, "kv_cache": "contiguous"}
    copier.run_copy(str(tpl), pkg, data=data, vcs_ref="v0.3.0", defaults=True, quiet=True)
    commit_package(pkg)
    for path in [*MACHINERY, EDITED]:
        assert (pkg / path).is_file(), path  # what 0.3 rendered
    mine = (pkg / EDITED).read_text() + "\n\ndef my_prompt_tweak() -> None:\n    pass\n"
    (pkg / EDITED).write_text(mine)
    modeling = pkg / f"src/{PKG}/modeling.py"
    modeling.write_text(modeling.read_text() + "\n\nMY_CONSTANT = 1  # the porter's own line\n")
    git(pkg, "commit", "-qam", "my edits")

    monkeypatch.setattr("scaffold.update.trust.template_root", lambda: tpl)
    result = make_invoke()("update", pkg, "--defaults")
    assert result.exit_code == 1, result.output  # the kept file is left to resolve
    assert f"  conflict  {EDITED}  (removed upstream, edited here: kept)\n" in result.stdout
    assert (pkg / EDITED).read_text() == mine  # nothing lost
    for path in MACHINERY:
        assert not (pkg / path).exists(), f"{path} left behind"
    assert (pkg / f"src/{PKG}/layers/decoder.py").is_file()
    assert "MY_CONSTANT = 1" in modeling.read_text()  # merged, not overwritten
    assert "class Transformer(CausalLM)" in modeling.read_text()
    major, minor = map(int, RUNTIME_API.split("."))
    wanted = f"ascend-scaffold>={RUNTIME_API},<{major}.{minor + 1}"  # today's runtime
    assert wanted in (pkg / "pyproject.toml").read_text()

    git(pkg, "add", "-A")  # keep it
    git(pkg, "commit", "-qm", "update to 0.4")
    tests = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "not npu_emulated"],
        cwd=pkg,
        env={**os.environ, "PYTHONPATH": str(pkg / "src")},
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert tests.returncode == 0, tests.stdout[-3000:] + tests.stderr[-2000:]
