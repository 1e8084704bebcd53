"""Where the copier template lives: this git checkout, or the copy packed into the wheel."""

from __future__ import annotations

from pathlib import Path

_PACKAGE_DIR = Path(__file__).resolve().parent


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
