"""Per-line suppression comments: ``# graph-ok: GM001, kv-cat`` (ids or slugs).

A bare ``# graph-ok`` (no colon) suppresses every rule on that line, like a bare ``# noqa``.
With a colon, only the listed rules are suppressed; unknown names are ignored, so free text may
follow the rule list (``# graph-ok: GM008 host-only fallback``).
"""

from __future__ import annotations

import io
import re
import tokenize

from .rules import resolve

ALL = None
_RE = re.compile(r"#\s*graph-ok\b(?P<colon>\s*:(?P<rules>.*))?", re.IGNORECASE)


def _comments(source: str) -> list[tuple[int, str]]:
    try:
        tokens = tokenize.generate_tokens(io.StringIO(source).readline)
        return [(t.start[0], t.string) for t in tokens if t.type == tokenize.COMMENT]
    except (tokenize.TokenError, SyntaxError):
        lines = source.splitlines()
        return [(i, line[line.index("#") :]) for i, line in enumerate(lines, 1) if "#" in line]


def suppressions(source: str) -> dict[int, set[str] | None]:
    """line -> suppressed rule ids (``None`` means all rules)."""
    out: dict[int, set[str] | None] = {}
    for line, text in _comments(source):
        match = _RE.search(text)
        if not match:
            continue
        if not match.group("colon"):
            out[line] = ALL
            continue
        ids = {resolve(tok) for tok in re.split(r"[\s,]+", match.group("rules")) if tok}
        out[line] = {i for i in ids if i}
    return out


def is_suppressed(table: dict[int, set[str] | None], line: int, rule: str) -> bool:
    if line not in table:
        return False
    rules = table[line]
    return rules is ALL or rule in rules
