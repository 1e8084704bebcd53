"""Which templates may run their migrations without --trust."""

from __future__ import annotations

from pathlib import Path

from ..template import is_git_template, template_root
from .package import Package


def is_own_template(package: Package) -> bool:
    """True when `_src_path` is this ascend-scaffold checkout (the one running now).

    Only then are the template's `_migrations` run without asking: their commands are this
    repository's own `scaffold/migrations/` scripts. A URL, another clone or any other
    template needs an explicit `--trust` (copier's `unsafe=True`).
    """
    root = template_root()
    if package.is_url or not is_git_template(root):
        return False
    try:
        return Path(package.src_path).expanduser().resolve() == root.resolve()
    except OSError:
        return False
