"""The package's git state: clean tree, conflict markers, `.rej` files."""

from __future__ import annotations

from pathlib import Path

from ..errors import UserError
from .package import CONFLICT_MARKERS, UNMERGED, git


def git_status(dest: Path) -> list[tuple[str, str]]:
    """(XY, path relative to dest) for every changed, untracked or unmerged file under dest."""
    prefix = git(dest, "rev-parse", "--show-prefix").strip()
    out = git(dest, "status", "--porcelain=v1", "-z", "--untracked-files=all", "--", ".")
    entries, items = [], iter(out.split("\0"))
    for item in items:
        if not item:
            continue
        code, path = item[:2], item[3:]
        if code[0] in "RC":
            next(items, None)  # the rename's source path
        entries.append((code, path.removeprefix(prefix)))
    return entries


def _in_git(dest: Path) -> bool:
    return git(dest, "rev-parse", "--is-inside-work-tree", check=False).strip() == "true"


def _has_markers(path: Path) -> bool:
    try:
        with path.open("rb") as handle:
            return any(line.rstrip() in CONFLICT_MARKERS for line in handle)
    except OSError:
        return False


def _not_git_internal(dest: Path, path: Path) -> bool:
    return ".git" not in path.relative_to(dest).parts


def find_conflicts(dest: Path, paths: list[str] | None = None) -> list[str]:
    """Files (relative to dest) holding copier's conflict markers, plus any `.rej` files.

    `paths` limits the marker scan (e.g. to the files an update changed); by default it
    covers every file git tracks or would track (committed or not; every file outside git).
    `.rej` files are always searched for in the whole tree, ignored ones included.
    """
    dest = dest.resolve()
    if paths is not None:
        candidates = paths
    elif _in_git(dest):
        out = git(dest, "ls-files", "-z", "--cached", "--others", "--exclude-standard")
        candidates = sorted({p for p in out.split("\0") if p})
    else:
        candidates = [
            p.relative_to(dest).as_posix()
            for p in dest.rglob("*")
            if p.is_file() and _not_git_internal(dest, p)
        ]
    found = {p for p in candidates if _has_markers(dest / p)}
    found |= {
        p.relative_to(dest).as_posix() for p in dest.rglob("*.rej") if _not_git_internal(dest, p)
    }
    return sorted(found)


def unresolved_conflicts(dest: Path) -> list[str]:
    """What an earlier update left to resolve: files with conflict markers (committed or
    not), `.rej` files, and unmerged git entries (e.g. a removed file kept as a conflict)."""
    found = set(find_conflicts(dest))
    if _in_git(dest):
        found |= {path for code, path in git_status(dest) if code in UNMERGED}
    return sorted(found)


def require_clean_git(dest: Path) -> None:
    """Refuse (exit 2) a package outside git, with conflicts left, or with uncommitted changes."""
    if not _in_git(dest):
        raise UserError(
            f"{dest} is not in a git repository; copier update needs one "
            "(git init && git add -A && git commit -m 'generated package')"
        )
    leftover = unresolved_conflicts(dest)
    if leftover:
        raise UserError(
            f"{dest} has unresolved conflicts from an earlier update in {sample(leftover)}: "
            "remove the '<<<<<<< before updating' markers keeping what you need, merge and "
            "delete any .rej file, git add (or git rm) each file, and commit before updating"
        )
    dirty = git_status(dest)
    if dirty:
        raise UserError(
            f"{dest} has uncommitted changes ({len(dirty)} file(s): "
            f"{sample([path for _, path in dirty])}); "
            "commit or stash them first so the update can be reviewed and undone"
        )


def sample(paths: list[str], limit: int = 3) -> str:
    return ", ".join(paths[:limit]) + (", ..." if len(paths) > limit else "")
