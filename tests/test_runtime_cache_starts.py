"""validate's compile-cache check: cold and warm starts in two processes (cache_starts.py),
driven here by a stand-in start that caches like cache_compile does."""

import sys

from ascend_runtime.cache_starts import (
    cache_problem,
    warm_start_figures,
)

# A start that writes one cache file and is fast when it finds one (USE=0: ignores it).
START = """
import os, sys
from pathlib import Path
cache = Path(sys.argv[1])
hit = cache.is_dir() and any(cache.iterdir()) and os.environ.get("USE", "1") == "1"
if os.environ.get("WRITE", "1") == "1":
    cache.mkdir(exist_ok=True)
    (cache / "decode.graph").write_text("compiled")
print("WARMUP_S=" + ("0.5" if hit else "2.0"))
"""


def starts(tmp_path, monkeypatch, **env):
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    cache = tmp_path / "compile_cache"
    return warm_start_figures([sys.executable, "-c", START, str(cache)], cache)


def test_a_warm_start_that_uses_the_cache_passes(tmp_path, monkeypatch):
    figures = starts(tmp_path, monkeypatch)
    assert figures["cold_start_s"] == 2.0 and figures["warm_start_s"] == 0.5
    assert figures["warm_over_cold"] == 0.25 and figures["cache_files"] == 1
    assert cache_problem(figures) is None


def test_a_cache_the_second_start_does_not_use_fails(tmp_path, monkeypatch):
    figures = starts(tmp_path, monkeypatch, USE="0")
    assert "no faster than the cold one" in cache_problem(figures)


def test_no_cache_written_fails(tmp_path, monkeypatch):
    figures = starts(tmp_path, monkeypatch, WRITE="0")
    assert "no compile cache was written" in cache_problem(figures)


def test_a_start_that_fails_is_named(tmp_path):
    cache = tmp_path / "compile_cache"
    command = [sys.executable, "-c", "import sys; sys.exit('backend refused the graph')"]
    figures = warm_start_figures(command, cache)
    assert cache_problem(figures) == "cold start failed: backend refused the graph"
