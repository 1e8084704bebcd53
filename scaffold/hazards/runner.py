"""Check paths: walk directories, read, decode, parse, analyse, apply suppressions and GM010.

Nothing a user can put on the command line or in a file raises out of ``check_paths``: every path
that cannot be checked becomes one line in ``CheckResult.errors`` and the other paths are still
checked. Only regular files are opened (a FIFO, socket or device named ``*.py`` is reported, never
read, so nothing blocks), directory walks do not follow symbolic links to directories (no loops),
and sources are decoded the way Python does (PEP 263 coding cookie, BOM, UTF-8 by default).
"""

from __future__ import annotations

import io
import os
import stat
import tokenize
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from .analyzer import AnalysisError, Facts, Hazard, analyze_source, normalize_newlines
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


class SourceError(Exception):
    """A file that cannot be checked: the reason (one line) and, for syntax errors, the line."""

    def __init__(self, reason: str, line: int | None = None) -> None:
        super().__init__(reason)
        self.reason, self.line = reason, line

    def format(self, path: Path) -> str:
        where = f":{self.line}" if self.line else ""
        return f"{shown(path)}{where}: {self.reason}"


def shown(path: Path | str) -> str:
    """``path`` for a one-line message: as is if printable, else quoted with escapes (a newline
    or an undecodable byte in a file name must not break the line)."""
    text = os.fspath(path)
    return text if text.isprintable() else ascii(text)


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _reason(exc: BaseException) -> str:
    """``Permission denied`` for an OSError (no errno/path noise), else the message, one line."""
    text = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
    return _one_line(text) or type(exc).__name__


def _stat(path: Path) -> tuple[os.stat_result | None, str]:
    """(stat following symlinks, "") or (None, why the path cannot be used)."""
    try:
        return path.stat(), ""
    except (FileNotFoundError, NotADirectoryError):
        try:
            broken = path.is_symlink()
        except (OSError, ValueError):
            broken = False
        return None, "broken symbolic link" if broken else "no such file or directory"
    except (OSError, ValueError) as exc:  # EACCES, ELOOP, ENAMETOOLONG, embedded null byte
        return None, f"cannot access: {_reason(exc)}"


def _walk(top: Path) -> tuple[list[tuple[Path, os.stat_result | None, str]], list[str]]:
    """Every ``*.py`` entry under ``top`` with its stat (or why not), and directory errors.

    Hidden directories and SKIP_DIRS are pruned; symbolic links to directories are listed by
    ``os.walk`` but not descended into (``followlinks=False``), so a link loop cannot recurse.
    """
    found: list[tuple[Path, os.stat_result | None, str]] = []
    errors: list[str] = []

    def onerror(exc: OSError) -> None:
        errors.append(f"{shown(exc.filename or top)}: cannot read directory: {_reason(exc)}")

    for dirpath, dirnames, filenames in os.walk(top, onerror=onerror, followlinks=False):
        dirnames[:] = [d for d in dirnames if not (d.startswith(".") or d in SKIP_DIRS)]
        for name in filenames:
            if name.endswith(".py"):
                sub = Path(dirpath, name)
                found.append((sub, *_stat(sub)))
    return sorted(found, key=lambda item: item[0]), errors


def collect_files(paths: Sequence[Path]) -> tuple[list[Path], list[str]]:
    """Regular Python files under ``paths`` (directories walked recursively) and error lines.

    A file reached twice (listed twice, or through a directory and by name) is checked once.
    """
    files: list[Path] = []
    errors: list[str] = []
    seen: set[tuple[int, int]] = set()

    def add(path: Path, st: os.stat_result | None, why: str) -> None:
        if st is None:
            errors.append(f"{shown(path)}: {why}")
        elif not stat.S_ISREG(st.st_mode):
            errors.append(f"{shown(path)}: not a regular file")
        elif (st.st_dev, st.st_ino) not in seen:
            seen.add((st.st_dev, st.st_ino))
            files.append(path)

    for path in map(Path, paths):
        st, why = _stat(path)
        if st is None or not stat.S_ISDIR(st.st_mode):
            add(path, st, why)
            continue
        found, walk_errors = _walk(path)
        errors.extend(walk_errors)
        for entry in found:
            add(*entry)
        if not found and not walk_errors:
            errors.append(f"error: no Python files found under {shown(path)}")
    return files, errors


def decode_source(data: bytes) -> str:
    """Source text as Python reads it: BOM or PEP 263 coding cookie, else UTF-8; newlines as
    LF. Raises SourceError (one line) when the bytes are not text in that encoding."""
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    except SyntaxError as exc:  # unknown encoding, BOM + other cookie, non-UTF-8 first lines
        if "invalid or missing encoding declaration" not in str(exc):
            raise SourceError(f"cannot decode: {_reason(exc)}") from None
        encoding = "utf-8"  # not UTF-8 in the first two lines: the decode below says where
    try:
        text = data.decode(encoding)
    except UnicodeDecodeError as exc:
        why = f"invalid {exc.encoding} data at byte {exc.start}"
        raise SourceError(f"cannot decode: {why} (not text, or a wrong coding cookie?)") from None
    except (LookupError, ValueError) as exc:  # a cookie naming a non-text codec (rot13, hex)
        raise SourceError(f"cannot decode with {encoding!r}: {_reason(exc)}") from None
    return normalize_newlines(text)


def read_source(path: Path) -> str:
    """The decoded text of a regular file; raises SourceError (one line).

    Opened non-blocking and checked with fstat before reading, so a path that became a FIFO or
    device after it was listed is refused rather than waited on.
    """
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0)
    try:
        fd = os.open(path, flags)
    except (OSError, ValueError) as exc:
        raise SourceError(f"cannot read: {_reason(exc)}") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise SourceError("not a regular file")
        with os.fdopen(fd, "rb", closefd=False) as stream:
            data = stream.read()
    except OSError as exc:
        raise SourceError(f"cannot read: {_reason(exc)}") from None
    except MemoryError:
        raise SourceError("cannot read: file too large") from None
    finally:
        os.close(fd)
    return decode_source(data)


def _check_file(path: Path) -> tuple[str, list[Hazard], Facts]:
    """(source, hazards, facts) of one file; raises SourceError."""
    source = read_source(path)
    try:
        hazards, facts = analyze_source(source, str(path))
    except SyntaxError as exc:
        why = _one_line(str(exc.msg)) if exc.msg else _reason(exc)
        raise SourceError(f"syntax error: {why}", exc.lineno) from None
    except AnalysisError as exc:
        raise SourceError(f"cannot analyse: {exc}") from None
    return source, hazards, facts


def check_paths(paths: Sequence[Path]) -> CheckResult:
    files, errors = collect_files(paths)
    result = CheckResult(errors=errors)
    static_compiles: list[Hazard] = []
    tables = {}
    for file in files:
        name = str(file)
        try:
            source, hazards, facts = _check_file(file)
        except SourceError as exc:
            result.errors.append(exc.format(file))
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
