"""The compile-cache check of `validate` (the seed guide's 编译缓存验证): a cold and a warm
start, each in its own process, timed from building the model to the first decode step.

torch_npu's cache_compile (npugraph_ex) and torchair's (ge_graph) write the compiled decode
under `<output_path>/compile_cache`; a second process with the same cache should skip most
of the compile. `validate` runs itself twice with `--warmup-only --output-path <fresh dir>`,
so the first start is really cold and your own cache is left alone.
"""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from pathlib import Path

WARMUP_MARK = "WARMUP_S="


def warm_start_figures(command: Sequence[str], cache_dir: Path, timeout: float = 3600) -> dict:
    """Run `command` twice (it prints one `WARMUP_S=<seconds>` line): cold, then warm.

    Returns the figures; `error` names the first failure (a process that exits non-zero or
    prints no timing)."""
    starts: list[float] = []
    for attempt in ("cold", "warm"):
        proc = subprocess.run(list(command), capture_output=True, text=True, timeout=timeout)
        marks = [ln for ln in proc.stdout.splitlines() if ln.startswith(WARMUP_MARK)]
        if proc.returncode != 0 or not marks:
            lines = (proc.stderr or proc.stdout).strip().splitlines()
            reason = lines[-1] if lines else f"exit code {proc.returncode}"
            return {"error": f"{attempt} start failed: {reason}"}
        starts.append(float(marks[-1][len(WARMUP_MARK) :]))
    files = [p for p in cache_dir.rglob("*") if p.is_file()] if cache_dir.is_dir() else []
    return {
        "cold_start_s": round(starts[0], 3),
        "warm_start_s": round(starts[1], 3),
        "warm_over_cold": round(starts[1] / starts[0], 3) if starts[0] else None,
        "cache_dir": str(cache_dir),
        "cache_files": len(files),
    }


def cache_problem(figures: dict) -> str | None:
    """Why the figures fail the check: no cache written, or a warm start no faster."""
    if "error" in figures:
        return figures["error"]
    if not figures["cache_files"]:
        return f"no compile cache was written under {figures['cache_dir']}"
    if figures["warm_start_s"] >= figures["cold_start_s"]:
        return (
            f"the warm start ({figures['warm_start_s']} s) is no faster than the cold one "
            f"({figures['cold_start_s']} s): the cache was not used"
        )
    return None
