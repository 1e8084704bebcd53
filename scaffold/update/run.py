"""Run `copier update` and read back what it did."""

from __future__ import annotations

import subprocess
import tempfile
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import copier
import yaml
from copier.errors import CopierError, UnsafeTemplateError, UserMessageError

from ..errors import UserError
from ..template_source import dirty_template_files
from .conflicts import find_conflicts, git_status, require_clean_git, sample
from .package import ANSWERS_FILE, NO_SHA, UNMERGED, Package, git, read_package
from .trust import is_own_template
from .versions import check_package, require_ref


@dataclass
class UpdateResult:
    dest: Path
    old_commit: str
    new_commit: str
    changed: list[str] = field(default_factory=list)  # paths relative to dest, POSIX
    conflicts: list[str] = field(default_factory=list)  # markers, unmerged, `.rej`, kept
    kept: list[str] = field(default_factory=list)  # removed by the release, edited here: kept
    trusted: bool = False
    warnings: list[str] = field(default_factory=list)
    up_to_date: bool = False  # nothing to do: no newer release

    @property
    def ok(self) -> bool:
        return not self.conflicts


def prepare_update(dest: Path) -> Package:
    """The package at `dest`, checked for an update: read_package plus require_clean_git."""
    package = read_package(dest)
    require_clean_git(package.dest)
    return package


@contextmanager
def _copier_errors(package: Package) -> Iterator[None]:
    """copier's exceptions as one-line UserErrors (exit 2: refused as it stands; 1: failed)."""
    try:
        yield
    except UnsafeTemplateError as exc:
        first = str(exc).splitlines()[0]
        features = first.split(":", 1)[-1].strip().rstrip(".") or "unsafe features"
        raise UserError(
            f"the template at {package.src_path} needs trust to update ({features}) and is "
            "not this ascend-scaffold checkout; review its copier.yml, then rerun with --trust"
        ) from None
    except UserMessageError as exc:
        text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        code = 2 if "downgrad" in text.lower() or "dirty" in text.lower() else 1
        raise UserError(f"copier update failed: {text}", exit_code=code) from None
    except (CopierError, ValueError, OSError, subprocess.CalledProcessError) as exc:
        text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise UserError(f"copier update failed: {text}", exit_code=1) from None


def _keep_edited_removals(
    package: Package, status: list[tuple[str, str]], trusted: bool
) -> list[str]:
    """Restore every file the update deleted that you had edited, as an unmerged conflict.

    copier removes a file the new release no longer renders even when its committed content
    differs from what the old release rendered for it (your edit). Such a file is put back
    from HEAD, and recorded in the index as "deleted by them" (git status: UD; base = the
    old release's render, ours = HEAD), so it cannot be committed unnoticed: `git add` keeps
    it, `git rm` drops it. Unedited removed files stay deleted.
    """
    dest = package.dest
    removed = [path for code, path in status if code in (" D", "D ")]
    if not removed:
        return []
    top = Path(git(dest, "rev-parse", "--show-toplevel").strip())
    prefix = git(dest, "rev-parse", "--show-prefix").strip()
    kept: list[str] = []
    with tempfile.TemporaryDirectory(prefix="ascend-scaffold-base-") as tmp:
        base = Path(tmp) / "base"
        try:
            with _copier_errors(package), warnings.catch_warnings():
                warnings.simplefilter("ignore")
                copier.run_copy(
                    package.src_path,
                    base,
                    data=package.answers,
                    vcs_ref=package.commit,  # the release the package was rendered from
                    defaults=True,
                    overwrite=True,
                    quiet=True,
                    unsafe=trusted,
                    skip_tasks=True,
                )
        except UserError as error:
            raise UserError(
                f"updated, but cannot tell whether the {len(removed)} file(s) the update "
                f"removed ({sample(removed)}) held your edits ({error}); restore any you "
                "need with git checkout HEAD -- FILE",
                exit_code=1,
            ) from None
        index_info = []
        for path in removed:
            rendered = base / path
            if rendered.is_symlink() or not rendered.is_file():
                continue  # not rendered by the old release (e.g. removed by a migration)
            full = prefix + path
            entry = git(top, "ls-tree", "HEAD", "--", full).split()
            if len(entry) < 3 or entry[1] != "blob":
                continue
            mode, head_sha = entry[0], entry[2]
            base_sha = git(top, "hash-object", "-w", "--", str(rendered)).strip()
            if base_sha == head_sha:
                continue  # unedited: the removal stands
            git(top, "--literal-pathspecs", "checkout", "HEAD", "--", full)
            index_info += [
                f"0 {NO_SHA}\t{full}",
                f"{mode} {base_sha} 1\t{full}",
                f"{mode} {head_sha} 2\t{full}",
            ]
            kept.append(path)
        if index_info:
            git(top, "update-index", "--index-info", input="\n".join(index_info) + "\n")
    return kept


def run_update(
    package: Package | Path,
    data: dict[str, Any] | None = None,
    vcs_ref: str | None = None,
    trust: bool = False,
    prereleases: bool = False,
) -> UpdateResult:
    """Update the package to `vcs_ref` (default: the newest release tag).

    `package` is what prepare_update returned (checked once by the caller), or the
    package's directory (then checked here, and `vcs_ref` too). `data` answers new
    questions; every other question keeps its recorded answer (copier runs with
    defaults=True, so nothing is prompted here). Raises UserError: exit 2 for a package
    that cannot be updated as it stands, 1 when copier or git fails.
    """
    if not isinstance(package, Package):
        package = prepare_update(Path(package))
        if vcs_ref is not None:
            require_ref(package, vcs_ref)
    dest = package.dest
    if vcs_ref is None:
        check = check_package(package, prereleases)
        if not check.update_available:
            return UpdateResult(dest, package.commit, package.commit, up_to_date=True)
        vcs_ref = check.latest
    require_committed_template(package)
    trusted = trust or is_own_template(package)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with _copier_errors(package):
            copier.run_update(
                dest,
                data=data or {},
                answers_file=ANSWERS_FILE,
                vcs_ref=vcs_ref,
                defaults=True,  # recorded answers stay; new questions take data or defaults
                overwrite=True,
                conflict="inline",
                quiet=True,
                unsafe=trusted,
                use_prereleases=prereleases,
            )
    kept = _keep_edited_removals(package, git_status(dest), trusted)
    status = git_status(dest)
    changed = sorted({path for _, path in status})
    conflicts = set(find_conflicts(dest, [p for c, p in status if c != " D" and c != "D "]))
    conflicts |= {path for code, path in status if code in UNMERGED}
    return UpdateResult(
        dest=dest,
        old_commit=package.commit,
        new_commit=_recorded_commit(dest) or vcs_ref,
        changed=changed,
        conflicts=sorted(conflicts | set(kept)),
        kept=kept,
        trusted=trusted,
        warnings=sorted({str(w.message).splitlines()[0] for w in caught if str(w.message)}),
    )


def require_committed_template(package: Package) -> None:
    """Refuse (exit 2) an update from a local template checkout with uncommitted changes to
    copier.yml or templates/: copier would render them and record a commit for them that
    exists nowhere, and the package could never be updated again (`new model` warns about
    the same case)."""
    if package.is_url:
        return
    root = Path(package.src_path).expanduser()
    dirty = dirty_template_files(root)
    if dirty:
        listed = ", ".join(dirty[:3]) + (", ..." if len(dirty) > 3 else "")
        raise UserError(
            f"the template checkout {root} has uncommitted changes ({listed}): an update "
            "from it would record a template commit that exists nowhere; commit or stash "
            "them, then update again"
        )


def _recorded_commit(dest: Path) -> str | None:
    try:
        raw = yaml.safe_load((dest / ANSWERS_FILE).read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError):
        return None
    return str(raw["_commit"]) if isinstance(raw, dict) and raw.get("_commit") else None
