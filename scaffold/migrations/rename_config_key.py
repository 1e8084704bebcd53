"""Rename a key of the package's YAML configs in place, keeping values and comments.

    python rename_config_key.py SECTION.OLD SECTION.NEW [GLOB ...]   (default GLOB: config/*.yaml)

Run by copier's `_migrations` (cwd: the generated package) when a template release renames
a config key: `config/<model>.yaml` is user-owned (`_skip_if_exists`), so copier never
rewrites it and only a migration can carry the rename. Line-based on purpose (PyYAML would
drop the user's comments); stdlib only. Idempotent: a file without the old key, or that
already has the new one, is left alone with a note on stderr. Always exits 0 except for bad
arguments (2), so a migration never aborts an update halfway.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

_SECTION = re.compile(r"^([A-Za-z_][\w-]*)\s*:")


def _split(dotted: str) -> tuple[str, str]:
    section, _, key = dotted.partition(".")
    if not section or not key or "." in key:
        raise ValueError(f"expected SECTION.KEY, got {dotted!r}")
    return section, key


def _key_line(line: str, key: str) -> re.Match[str] | None:
    return re.match(rf"^(\s+){re.escape(key)}(\s*:)", line)


def rename_key(text: str, old: str, new: str) -> tuple[str, str]:
    """Return (new text, what happened): 'renamed', 'missing' or 'exists'."""
    section, old_key = _split(old)
    new_section, new_key = _split(new)
    if new_section != section:
        raise ValueError(f"can only rename within a section: {old} -> {new}")
    lines = text.splitlines(keepends=True)
    current = None
    found = None
    for i, line in enumerate(lines):
        match = _SECTION.match(line)
        if match:
            current = match.group(1)
            continue
        if current != section:
            continue
        if _key_line(line, new_key):
            return text, "exists"
        if found is None and _key_line(line, old_key):
            found = i
    if found is None:
        return text, "missing"
    match = _key_line(lines[found], old_key)
    lines[found] = match.group(1) + new_key + lines[found][match.end(1) + len(old_key) :]
    return "".join(lines), "renamed"


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) < 2:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    old, new, patterns = args[0], args[1], args[2:] or ["config/*.yaml"]
    try:
        _split(old), _split(new)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    files = sorted({p for pattern in patterns for p in Path().glob(pattern) if p.is_file()})
    for path in files:
        try:
            text, what = rename_key(path.read_text(encoding="utf-8"), old, new)
        except ValueError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        if what == "renamed":
            path.write_text(text, encoding="utf-8")
            print(f"migrated {path}: {old} -> {new}", file=sys.stderr)
        elif what == "exists":
            print(f"note: {path} already has {new}; left as is", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
