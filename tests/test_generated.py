"""The generated packages' own test suites and runner, run for real (CPU tier)."""

import os
import subprocess
import sys

import pytest
from conftest import NPU_PYTHON, require_npu_emulation

from scaffold.examples import EXAMPLES_DIR, example_answers


def run_in(package_dir, *args, python=sys.executable, timeout=900):
    env = {**os.environ, "PYTHONPATH": str(package_dir / "src")}
    return subprocess.run(
        [python, *args],
        cwd=package_dir,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(example_answers()))
def test_example_test_suite_passes(name):
    result = run_in(EXAMPLES_DIR / name, "-m", "pytest", "-q", "-p", "no:cacheprovider")
    tail = result.stdout[-3000:] + result.stderr[-2000:]
    assert result.returncode == 0, tail
    assert " passed" in result.stdout and " failed" not in result.stdout


@pytest.mark.slow
def test_runner_reports_timings_and_no_recompiles():
    package = EXAMPLES_DIR / "llama_tiny"
    result = run_in(
        package,
        "-m",
        "llama_tiny.runner",
        "--config",
        "config/llama_tiny.yaml",
        "--steps",
        "6",
        "--prompt-len",
        "16",
    )
    assert result.returncode == 0, result.stderr[-3000:]
    out = result.stdout
    assert "portable aot_eager backend on CPU, not an NPU graph" in out
    assert "recompiles after warm-up 0, graph breaks 0" in out
    assert "decode median" in out and "prefill" in out


@pytest.mark.slow
def test_runner_rejects_a_bad_config(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("model_config:\n  exe_mode: turbo\n")
    result = run_in(EXAMPLES_DIR / "llama_tiny", "-m", "llama_tiny.runner", "--config", str(bad))
    assert result.returncode == 2
    assert "exe_mode" in result.stderr


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(example_answers()))
def test_example_npu_emulated_tier(name):
    """The examples' NPU code path on CPU, under the real torch_npu wheel; none may skip
    (and in CI, where ASCEND_SCAFFOLD_REQUIRE_NPU_EMULATION=1, the tier may not be absent)."""
    require_npu_emulation()
    result = run_in(
        EXAMPLES_DIR / name,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        "-m",
        "npu_emulated",
        python=NPU_PYTHON,
    )
    tail = result.stdout[-3000:] + result.stderr[-2000:]
    assert result.returncode == 0, tail
    assert " passed" in result.stdout and "skipped" not in result.stdout, tail
