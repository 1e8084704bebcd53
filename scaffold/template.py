"""Where the copier template lives: this git checkout, or the copy packed into the wheel."""

from __future__ import annotations

import re
from pathlib import Path

_PACKAGE_DIR = Path(__file__).resolve().parent
# A template source copier reads as a remote (a URL or git's scp form), not a local path.
URL = re.compile(r"^([a-z][a-z0-9+.-]*://|git@|gh:|gl:)", re.IGNORECASE)


def template_root() -> Path:
    """Directory holding copier.yml.

    A source checkout (editable install) is preferred: copier can only `update` a
    package whose template sits at the root of a git repository.
    """
    checkout = _PACKAGE_DIR.parent
    if (checkout / "copier.yml").is_file():
        return checkout
    return _PACKAGE_DIR / "_template"


def is_git_template(root: Path) -> bool:
    return (root / ".git").exists()
