"""Check a set of paths: walk directories, parse, analyse, apply suppressions and GM010."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from .analyzer import Hazard, analyze_source
from .suppress import is_suppressed, suppressions

SKIP_DIRS = {"__pycache__", "node_modules"}


@dataclass
class CheckResult:
    files: list[str] = field(default_factory=list)
    hazards: list[Hazard] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    suppressed: int = 0
    list_fa: list[str] = field(default_factory=list)
    uses_torchair: bool = False
    uses_npugraph_ex: bool = False


def collect_files(paths: Sequence[Path]) -> tuple[list[Path], list[str]]:
    """Python files under ``paths`` (directories walked recursively) and error lines."""
    files: list[Path] = []
    errors: list[str] = []
    for path in paths:
        if path.is_dir():
            for sub in sorted(path.rglob("*.py")):
                rel = sub.relative_to(path).parts[:-1]
                if not any(p.startswith(".") or p in SKIP_DIRS for p in rel):
                    files.append(sub)
        elif path.is_file():
            files.append(path)
        else:
            errors.append(f"{path}: no such file or directory")
    return files, errors


def check_paths(paths: Sequence[Path]) -> CheckResult:
    files, errors = collect_files(paths)
    result = CheckResult(errors=errors)
    static_compiles: list[Hazard] = []
    tables = {}
    for file in files:
        name = str(file)
        try:
            source = file.read_text(encoding="utf-8")
            hazards, facts = analyze_source(source, name)
        except SyntaxError as exc:
            result.errors.append(f"{name}:{exc.lineno or 0}: syntax error: {exc.msg}")
            continue
        except (OSError, UnicodeDecodeError, ValueError) as exc:
            result.errors.append(f"{name}: cannot read: {exc}")
            continue
        result.files.append(name)
        tables[name] = suppressions(source)
        result.hazards.extend(hazards)
        static_compiles.extend(facts.static_compiles)
        result.list_fa.extend(f"{name}:{line} ({desc})" for line, desc in facts.list_fa)
        result.uses_torchair |= facts.uses_torchair
        result.uses_npugraph_ex |= facts.uses_npugraph_ex
    if result.list_fa:
        for hazard in static_compiles:
            hazard.message += f"; actual_seq_lengths is passed as a list at {result.list_fa[0]}"
            result.hazards.append(hazard)
    kept = [h for h in result.hazards if not is_suppressed(tables[h.path], h.line, h.rule)]
    result.suppressed = len(result.hazards) - len(kept)
    result.hazards = sorted(kept, key=lambda h: (h.path, h.line, h.col, h.rule))
    return result
