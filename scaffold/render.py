"""Render a validated spec with copier, all-or-nothing into the destination."""

from __future__ import annotations

import shutil
import tempfile
import warnings
from pathlib import Path

import copier

from .errors import UserError
from .spec import ModelSpec
from .template import template_root


def check_destination(dest: Path, force: bool) -> None:
    if dest.exists() and not dest.is_dir():
        raise UserError(f"destination {dest} exists and is not a directory")
    if dest.is_dir() and any(dest.iterdir()) and not force:
        raise UserError(f"destination {dest} is not empty; pass --force to render into it")


def render(spec: ModelSpec, dest: Path, force: bool = False) -> list[Path]:
    """Render into a scratch directory beside `dest`, then move the result in.

    A failed render leaves `dest` exactly as it was. Returns the written files,
    relative to `dest`.
    """
    dest = dest.resolve()
    check_destination(dest, force)
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f".{dest.name}-", dir=dest.parent) as scratch:
        out = Path(scratch) / "out"
        with warnings.catch_warnings():
            # A dirty development checkout renders its working tree; that is intended.
            warnings.simplefilter("ignore")
            copier.run_copy(
                str(template_root()),
                out,
                data=spec.answers(),
                vcs_ref="HEAD",  # this checkout, not the newest release tag
                defaults=True,
                overwrite=True,
                quiet=True,
                unsafe=False,
            )
        written = sorted(p.relative_to(out) for p in out.rglob("*") if p.is_file())
        if not dest.exists():
            out.rename(dest)
        else:
            shutil.copytree(out, dest, dirs_exist_ok=True)
    return written
