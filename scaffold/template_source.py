"""What a render records as its template source, so that `copier update` can find it again.

copier records `_src_path` (where the template was read from) and `_commit` (`git describe`
of the template version) in the package's `.copier-answers.yml`. Two cases record
something `copier update` cannot use:

- a wheel-installed CLI renders from `scaffold/_template/` in site-packages: not git, so
  copier records that directory and no `_commit`. The package must instead point at the
  template's repository and the release the wheel was built from: `recorded_source()`
  returns those, `record_source()` writes them.
- a git checkout with uncommitted changes: copier renders the working tree on top of a
  throwaway commit and records *its* describe, which exists nowhere. When the changes lie
  outside the template (copier.yml and templates/), the render equals HEAD's, so
  `recorded_source()` returns HEAD's describe; `dirty_template_files()` lists the changes
  that make the render differ from every commit (warn or refuse on those).
"""

from __future__ import annotations

import os
import re
import subprocess
from importlib import metadata
from pathlib import Path

import yaml

import scaffold

from .errors import UserError
from .template import URL, is_git_template, template_root

TEMPLATE_URL_ENV = "ASCEND_SCAFFOLD_TEMPLATE_URL"
DISTRIBUTION = "ascend-scaffold"
TEMPLATE_PATHS = ("copier.yml", "templates")  # what copier renders from
_URL_LABELS = ("repository", "source", "sourcecode")  # Project-URL labels, in preference order


def _git(root: Path, *args: str) -> str | None:
    try:
        proc = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True)
    except OSError:
        return None
    return proc.stdout if proc.returncode == 0 else None


def repository_url() -> str | None:
    """The template repository for packages rendered by an installed (non-git) template:
    $ASCEND_SCAFFOLD_TEMPLATE_URL, else the distribution's Project-URL "Repository" (or
    "Source"), else None."""
    env = os.environ.get(TEMPLATE_URL_ENV, "").strip()
    if env:  # a local path is recorded absolute: copier needs that
        return env if URL.match(env) else str(Path(env).expanduser().resolve())
    try:
        urls = metadata.metadata(DISTRIBUTION).get_all("Project-URL") or []
    except metadata.PackageNotFoundError:
        return None
    found = {}
    for entry in urls:
        label, _, url = str(entry).partition(",")
        key = re.sub(r"[^a-z]", "", label.lower())
        if url.strip():
            found.setdefault(key, url.strip())
    return next((found[label] for label in _URL_LABELS if label in found), None)


def recorded_source() -> tuple[str, str] | None:
    """(`_src_path`, `_commit`) to record instead of copier's own values, or None to keep them.

    - template root not a git checkout (installed wheel): the repository URL (see
      repository_url) and the release tag `v{scaffold.__version__}`; None without a URL.
    - a git checkout with uncommitted changes anywhere: the checkout and `git describe
      --tags --always` of HEAD (copier would record a commit that exists nowhere).
    - a clean git checkout: None (copier records the right values).
    """
    root = template_root()
    if not is_git_template(root):
        url = repository_url()
        return (url, f"v{scaffold.__version__}") if url else None
    status = _git(root, "status", "--porcelain")
    if not status:
        return None
    describe = _git(root, "describe", "--tags", "--always")
    return (str(root), describe.strip()) if describe and describe.strip() else None


def _scalar_line(key: str, value: str) -> str:
    return yaml.safe_dump({key: value}, default_flow_style=False, width=1 << 20).rstrip("\n")


def record_source(answers_file: Path, src: str, commit: str) -> None:
    """Set `_src_path` and `_commit` in a rendered `.copier-answers.yml`, in place.

    Every other line (the comment header, the answers) stays as copier wrote it; the two
    keys are written together, in copier's sorted order, where the first of them was.
    """
    lines = answers_file.read_text(encoding="utf-8").splitlines(keepends=True)
    keys = ("_commit", "_src_path")
    kept: list[str] = []
    at = None
    dropping = False
    for line in lines:
        if dropping and line[:1] in (" ", "\t"):
            continue  # continuation of a dropped value (a long folded scalar)
        dropping = any(line.startswith(f"{key}:") for key in keys)
        if dropping:
            at = len(kept) if at is None else at
        else:
            kept.append(line)
    if at is None:  # neither key: after the comment header
        at = next((i for i, line in enumerate(kept) if not line.startswith("#")), len(kept))
    if kept[at - 1 : at] and not kept[at - 1].endswith("\n"):
        kept[at - 1] += "\n"
    values = {"_commit": commit, "_src_path": src}
    kept[at:at] = [_scalar_line(key, values[key]) + "\n" for key in keys]
    text = "".join(kept)
    data = yaml.safe_load(text)
    if not isinstance(data, dict) or (data.get("_src_path"), data.get("_commit")) != (src, commit):
        raise UserError(f"cannot record the template source in {answers_file}", exit_code=1)
    answers_file.write_text(text, encoding="utf-8")


def dirty_template_files(root: Path) -> list[str]:
    """Uncommitted changes (modified, added, deleted, untracked) to copier.yml and templates/
    of a template git checkout, as paths relative to `root`; [] when clean or not git.

    A render from such a checkout matches no commit: its `_commit` (or HEAD's) is a wrong
    base for `copier update`.
    """
    if not is_git_template(root):
        return []
    out = _git(
        root, "status", "--porcelain=v1", "-z", "--untracked-files=all", "--", *TEMPLATE_PATHS
    )
    if not out:
        return []
    found, items = set(), iter(out.split("\0"))
    for item in items:
        if not item:
            continue
        if item[0] in "RC":
            next(items, None)  # the rename's source path
        found.add(item[3:])
    return sorted(found)


def render_warnings(root: Path) -> list[str]:
    """What a render from the template at `root` leaves `update` unable to do: changes the
    recorded `_commit` does not hold, or no repository to record at all."""
    found = []
    if not is_git_template(root) and repository_url() is None:
        found.append(
            "this installation knows no template repository, so `update` cannot find this "
            f"package's template: set {TEMPLATE_URL_ENV} to its git URL and render again"
        )
    dirty = dirty_template_files(root)
    if dirty:
        listed = ", ".join(dirty[:3]) + (", ..." if len(dirty) > 3 else "")
        found.append(
            f"rendered from uncommitted template changes ({listed}); the recorded _commit "
            "does not hold them, so `update` would take them for your edits: commit the "
            "template and render again before you ship this package"
        )
    return found
