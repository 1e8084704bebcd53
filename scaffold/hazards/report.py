"""Render a CheckResult as text (one line per hazard) or JSON (a list of objects)."""

from __future__ import annotations

import json
from collections import Counter

from .design import render_markdown
from .runner import CheckResult, shown

JSON_KEYS = (
    "rule",
    "name",
    "title",
    "effect",
    "path",
    "line",
    "col",
    "function",
    "message",
    "code",
    "why",
    "fix",
)


def rule_counts(result: CheckResult) -> str:
    counts = Counter(h.rule for h in result.hazards)
    return ", ".join(f"{rule} x{n}" for rule, n in sorted(counts.items()))


def summary(result: CheckResult) -> str:
    """One line. Claims a clean result only when files were checked and nothing failed."""
    nfiles, nerrors = len(result.files), len(result.errors)
    note = f" ({result.suppressed} suppressed)" if result.suppressed else ""
    failed = f"{nerrors} error(s), see stderr"
    if not nfiles:
        return f"Nothing checked: {failed}" if nerrors else "Nothing checked: no Python files"
    if result.hazards:
        hit = len({h.path for h in result.hazards})
        line = (
            f"Found {len(result.hazards)} graph-mode hazard(s) in {hit} of {nfiles} file(s): "
            f"{rule_counts(result)}{note}"
        )
        return f"{line}; incomplete: {failed}" if nerrors else line
    if nerrors:
        return f"Incomplete: {failed}; no graph-mode hazards in the {nfiles} file(s) checked{note}"
    return f"No graph-mode hazards found in {nfiles} file(s){note}"


def render_text(result: CheckResult) -> str:
    lines = [
        f"{shown(h.path)}:{h.line}:{h.col}: {h.rule} {h.info.effect}: {h.message}"
        for h in result.hazards
    ]
    lines.append(summary(result))
    return "\n".join(lines) + "\n"


def render_json(result: CheckResult) -> str:
    rows = []
    for hazard in result.hazards:
        data = hazard.to_dict()
        rows.append({key: data[key] for key in JSON_KEYS})
    return json.dumps(rows, indent=2, ensure_ascii=False) + "\n"


RENDERERS = {"text": render_text, "json": render_json, "markdown": render_markdown}


def render(result: CheckResult, fmt: str) -> str:
    return RENDERERS[fmt](result)
