"""Render a validated spec with copier into a scratch directory, then place it, all or
nothing, into the destination.

Placing never writes outside the destination or through a symbolic link, never touches a
user-owned file that exists (copier's `_skip_if_exists`), and moves every existing file it
would change into a backup directory first. A failure (or Ctrl-C) while placing undoes
every step, so the destination is left exactly as it was.
"""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
import time
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from .errors import UserError
from .questions import user_owned_files
from .spec import ModelSpec
from .template import template_root
from .template_source import record_source, recorded_source

BACKUP_DIR = ".ascend-scaffold-backup"


@dataclass
class Placement:
    """What placing a scratch render into `dest` will do; paths relative, POSIX."""

    dest: Path
    source: Path  # the scratch render
    new: list[str] = field(default_factory=list)
    replaced: list[str] = field(default_factory=list)  # existing and different: backed up
    kept: list[str] = field(default_factory=list)  # user-owned and existing: not touched
    unchanged: list[str] = field(default_factory=list)
    backup: Path | None = None  # set once placed, when something was backed up

    @property
    def files(self) -> list[str]:
        return sorted(self.new + self.replaced + self.kept + self.unchanged)


def check_destination(dest: Path, force: bool) -> None:
    if dest.is_symlink() and not dest.exists():
        raise UserError(f"destination {dest} is a broken symbolic link")
    if dest.exists() and not dest.is_dir():
        raise UserError(f"destination {dest} exists and is not a directory")
    if dest.is_dir() and any(dest.iterdir()) and not force:
        raise UserError(f"destination {dest} is not empty; pass --force to render into it")


def _existing_ancestor(path: Path) -> Path:
    while not path.exists():
        path = path.parent
    return path


@contextmanager
def scratch_render(spec: ModelSpec, dest: Path) -> Iterator[Path]:
    """Render with copier into a scratch directory beside `dest` (same file system, so
    placing is a rename); removed on exit, whatever happens."""
    import copier  # heavy: imported only when rendering

    parent = _existing_ancestor(dest.parent)
    try:
        scratch = tempfile.TemporaryDirectory(prefix=f".{dest.name}-", dir=parent)
    except OSError as exc:
        raise UserError(f"cannot create files in {parent}: {exc.strerror}") from None
    with scratch as tmp:
        out = Path(tmp) / "out"
        with warnings.catch_warnings():
            # A dirty development checkout renders its working tree; cli.py warns about it.
            warnings.simplefilter("ignore")
            try:
                copier.run_copy(
                    str(template_root()),
                    out,
                    data=spec.copier_data(),
                    vcs_ref="HEAD",  # this checkout, not the newest release tag
                    defaults=True,
                    overwrite=True,
                    quiet=True,
                    unsafe=False,
                )
            except OSError as exc:
                raise UserError(f"cannot render into {parent}: {exc}") from None
            except ValueError as exc:  # copier's own check of an answer: one line, no traceback
                if not str(exc).startswith("Validation error for question"):
                    raise
                raise UserError(str(exc).split(": ", 1)[-1]) from None
        source = recorded_source()  # a template copier cannot find again (see the module)
        if source is not None:
            record_source(out / ".copier-answers.yml", *source)
        yield out


def _refuse_links(dest: Path, relative: str) -> None:
    """Every existing component of dest/relative must be a real directory (the last one a
    regular file): never write through a link or over something of another kind."""
    parts = Path(relative).parts
    current = dest
    for index, part in enumerate(parts):
        current = current / part
        try:
            mode = os.lstat(current).st_mode
        except FileNotFoundError:
            return
        shown = Path(dest.name, *parts[: index + 1])
        if stat.S_ISLNK(mode):
            raise UserError(
                f"{shown} is a symbolic link; refusing to write through it (remove the link "
                "or render elsewhere)"
            )
        last = index == len(parts) - 1
        if not last and not stat.S_ISDIR(mode):
            raise UserError(f"{shown} exists and is not a directory; the package needs one there")
        if last and not stat.S_ISREG(mode):
            raise UserError(f"{shown} exists and is not a regular file; refusing to replace it")


def plan_placement(source: Path, dest: Path, user_owned: list[str]) -> Placement:
    """Decide, before anything is written, what placing `source` into `dest` does (the
    caller has passed `dest` through `check_destination` before rendering)."""
    placement = Placement(dest=dest, source=source)
    rendered = sorted(p.relative_to(source).as_posix() for p in source.rglob("*") if p.is_file())
    for relative in rendered:
        _refuse_links(dest, relative)
        target = dest / relative
        if not target.exists():
            placement.new.append(relative)
        elif relative in user_owned:
            placement.kept.append(relative)
        elif _same_bytes(target, source / relative):
            placement.unchanged.append(relative)
        else:
            placement.replaced.append(relative)
    return placement


def _same_bytes(a: Path, b: Path) -> bool:
    try:
        return a.stat().st_size == b.stat().st_size and a.read_bytes() == b.read_bytes()
    except OSError as exc:
        raise UserError(f"cannot read {a}: {exc.strerror}") from None


def _backup_dir(dest: Path) -> Path:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    candidate, n = dest / BACKUP_DIR / stamp, 1
    while candidate.exists():
        n += 1
        candidate = dest / BACKUP_DIR / f"{stamp}-{n}"
    return candidate


class _Undo:
    """Steps taken so far, undone in reverse on failure."""

    def __init__(self) -> None:
        self.steps: list[tuple[str, Path, Path | None]] = []

    def mkdirs(self, path: Path) -> None:
        missing = []
        while not path.exists():
            missing.append(path)
            path = path.parent
        for directory in reversed(missing):
            directory.mkdir()
            self.steps.append(("mkdir", directory, None))

    def move(self, source: Path, target: Path) -> None:
        shutil.move(source, target)
        self.steps.append(("move", source, target))

    def rollback(self) -> None:
        for kind, path, target in reversed(self.steps):
            try:
                if kind == "mkdir":
                    path.rmdir()
                else:
                    shutil.move(target, path)
            except OSError:
                pass


def place(placement: Placement) -> None:
    """Carry out `placement`; on any failure undo every step and raise (UserError for I/O)."""
    dest, undo = placement.dest, _Undo()
    try:
        if not dest.exists():
            undo.mkdirs(dest.parent)
            undo.move(placement.source, dest)
            return
        if placement.replaced:
            placement.backup = _backup_dir(dest)
            for relative in placement.replaced:
                undo.mkdirs((placement.backup / relative).parent)
                undo.move(dest / relative, placement.backup / relative)
        for relative in placement.new + placement.replaced:
            undo.mkdirs((dest / relative).parent)
            undo.move(placement.source / relative, dest / relative)
    except OSError as exc:
        undo.rollback()
        placement.backup = None
        where = exc.filename or dest
        raise UserError(
            f"cannot write {where}: {exc.strerror or exc}; {dest} was left as it was",
            exit_code=1,
        ) from None
    except BaseException:
        undo.rollback()
        placement.backup = None
        raise


def render(spec: ModelSpec, dest: Path, force: bool = False) -> list[Path]:
    """Render `spec` into `dest` without asking; returns the rendered files, relative."""
    dest = dest.absolute()
    check_destination(dest, force)
    with scratch_render(spec, dest) as out:
        placement = plan_placement(out, dest, user_owned_files(spec.answers()))
        place(placement)
    return [Path(p) for p in placement.files]
