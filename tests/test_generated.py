"""The generated packages' own test suites and runner, run for real (CPU tier)."""

import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest
from conftest import NPU_PYTHON, require_npu_emulation

from scaffold.examples import EXAMPLES_DIR, example_answers

# The examples' suites run side by side, one per core and one thread each: compiling (C++
# builds and tracing, single-threaded) is most of their time, so two at a time on the
# 2-core CI machine take about the wall time of one.
SUITE_WORKERS = max(1, min(2, os.cpu_count() or 1))


def run_in(package_dir, *args, python=sys.executable, timeout=900, env_extra=None):
    env = {**os.environ, "PYTHONPATH": str(package_dir / "src"), **(env_extra or {})}
    return subprocess.run(
        [python, *args],
        cwd=package_dir,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.fixture(scope="module")
def example_suites(request):
    """The suite run of every selected example, started together on SUITE_WORKERS workers
    when the first of them is asked for."""
    names = sorted(
        item.callspec.params["name"]
        for item in request.session.items
        if getattr(item, "originalname", None) == "test_example_test_suite_passes"
    )
    one_thread = {"OMP_NUM_THREADS": "1"} if SUITE_WORKERS > 1 else {}
    pool = ThreadPoolExecutor(max_workers=SUITE_WORKERS)
    args = ("-m", "pytest", "-q", "-p", "no:cacheprovider")
    yield {
        name: pool.submit(run_in, EXAMPLES_DIR / name, *args, env_extra=one_thread)
        for name in names
    }
    pool.shutdown(cancel_futures=True)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(example_answers()))
def test_example_test_suite_passes(name, example_suites):
    result = example_suites[name].result()
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


@pytest.mark.slow
def test_a_paged_package_with_a_small_budget_passes_its_own_suite(cli, tmp_path):
    """A valid paged answer set whose budget holds one row of the rendered model: the
    package's tests size their caches for their own shapes, and pass (issue: 6 failures)."""
    dest = tmp_path / "small_budget"
    result = cli("new", "model", "--defaults", "--kv-cache", "paged", "--max-seq-len", "128", dest)
    assert result.exit_code == 0, result.output
    assert "kv_cache_tokens: 128 " in (dest / "config" / "llama_tiny.yaml").read_text()
    proc = run_in(dest, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "not npu_emulated")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert " passed" in proc.stdout and " failed" not in proc.stdout
