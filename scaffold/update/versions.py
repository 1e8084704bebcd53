"""Template versions: release tags, the newest one, and whether a package is behind."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

from packaging.version import InvalidVersion, Version

from ..errors import UserError
from .new_questions import NewQuestion, asked_among, new_questions
from .package import DESCRIBE, HEX, Package, git, has_commit, read_package


def _version_of(ref: str) -> Version | None:
    """PEP 440 version of a tag or a `git describe` string (as copier computes it)."""
    match = DESCRIBE.match(ref)
    try:
        if match:
            return Version(f"{match['base']}.post{match['count']}+{match['hash']}")
        return Version(ref)
    except InvalidVersion:
        return None


def _ls_remote(src: str, *args: str) -> list[tuple[str, str]]:
    out = git(Path.cwd(), "ls-remote", *args, "--", src)
    return [tuple(line.split("\t", 1)) for line in out.splitlines() if "\t" in line]


def _tags(refs: list[tuple[str, str]]) -> list[str]:
    """Release tags (PEP 440 names) among `git ls-remote` refs, oldest first."""
    found = {}
    for _sha, ref in refs:
        name = ref.removeprefix("refs/tags/")
        if name != ref and not name.endswith("^{}"):
            version = _version_of(name)
            if version is not None:
                found[name] = version
    return sorted(found, key=found.__getitem__)


def _newest_tag(refs: list[tuple[str, str]], prereleases: bool) -> str | None:
    tags = [t for t in _tags(refs) if prereleases or not _version_of(t).is_prerelease]
    return tags[-1] if tags else None


def latest_tag(src: str, prereleases: bool = False) -> str | None:
    """Newest PEP 440 tag of the template repository (what copier updates to), or None."""
    return _newest_tag(_ls_remote(src, "--tags", "--refs"), prereleases)


@dataclass(frozen=True)
class UpdateCheck:
    current: str  # `_commit` of the package
    latest: str  # newest release tag, or "HEAD" when the template has no tags
    update_available: bool
    new_questions: tuple[str, ...] = ()  # asked on update (applicable to the recorded answers)
    pending: tuple[NewQuestion, ...] = ()  # every question of `latest` the package lacks


def _head_matches(refs: list[tuple[str, str]], commit: str) -> bool:
    match = DESCRIBE.match(commit)
    short = match["hash"] if match else commit
    heads = [sha for sha, ref in refs if ref == "HEAD"]
    return bool(heads) and heads[0].startswith(short)


def check_package(package: Package, prereleases: bool = False) -> UpdateCheck:
    """Compare the package's `_commit` with the template's newest release: one `git
    ls-remote`, plus one read of the new release's copier.yml when it is newer."""
    refs = _ls_remote(package.src_path)
    tag = _newest_tag(refs, prereleases)
    if tag is None:  # no release tags: compare commits
        available = not _head_matches(refs, package.commit)
        latest = "HEAD"
    else:
        current_v, latest_v = _version_of(package.commit), _version_of(tag)
        available = current_v is None or latest_v > current_v
        if available and current_v is None and _contains(package, tag):
            available = False  # a bare commit already past the newest release: no downgrade
        latest = tag
    pending = tuple(new_questions(package, latest)) if available else ()
    asked = tuple(q.name for q in asked_among(package.answers, pending))
    return UpdateCheck(package.commit, latest, available, asked, pending)


def _contains(package: Package, tag: str) -> bool:
    """Whether the package's `_commit` (a bare commit id, no version in it) already holds
    release `tag` in a local template repository: updating "to" the tag would go back."""
    if package.is_url:
        return False
    repo = Path(package.src_path).expanduser()
    if not (has_commit(repo, tag) and has_commit(repo, package.commit)):
        return False
    ancestor = subprocess.run(
        ["git", "merge-base", "--is-ancestor", tag, package.commit],
        cwd=repo,
        capture_output=True,
        check=False,
    )
    return ancestor.returncode == 0


def check_update(dest: Path, prereleases: bool = False) -> UpdateCheck:
    return check_package(read_package(dest), prereleases)


def require_ref(package: Package, ref: str) -> None:
    """Refuse (exit 2) a `--vcs-ref` that the template repository does not have."""
    if not package.is_url:
        if has_commit(Path(package.src_path).expanduser(), ref):
            return
        refs = _ls_remote(package.src_path, "--tags")
    else:
        refs = _ls_remote(package.src_path)
        names = {"HEAD"} | {
            name.removeprefix("refs/heads/").removeprefix("refs/tags/").removesuffix("^{}")
            for _sha, name in refs
        }
        if ref in names or HEX.match(ref) or DESCRIBE.match(ref):
            return  # a commit: only a clone can tell, copier will
    tags = _tags(refs)
    listing = ", ".join((["..."] if len(tags) > 10 else []) + tags[-10:]) or "none"
    raise UserError(f"template ref {ref!r} not found in {package.src_path} (tags: {listing})")
