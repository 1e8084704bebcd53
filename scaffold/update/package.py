"""The generated package: its answers file, checked for what `copier update` needs."""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from ..errors import UserError
from ..template import URL

ANSWERS_FILE = ".copier-answers.yml"
CONFLICT_MARKERS = (b"<<<<<<< before updating", b">>>>>>> after updating")
UNMERGED = {"DD", "AU", "UD", "UA", "DU", "AA", "UU"}
DESCRIBE = re.compile(r"^(?P<base>.+)-(?P<count>\d+)-g(?P<hash>[0-9a-f]+)$")
HEX = re.compile(r"^[0-9a-f]{7,40}$")
NO_SHA = "0" * 40


@dataclass(frozen=True)
class Package:
    dest: Path
    src_path: str  # `_src_path`: absolute path or URL of the template repository
    commit: str  # `_commit`: the template version it was rendered from (a tag, or describe)
    answers: dict[str, Any]  # recorded answers, `_` keys excluded

    @property
    def is_url(self) -> bool:
        return bool(URL.match(self.src_path))


def git(cwd: Path | str, *args: str, check: bool = True, input: str | None = None) -> str:
    try:
        proc = subprocess.run(
            ["git", *args], cwd=cwd, capture_output=True, text=True, check=False, input=input
        )
    except OSError as exc:
        raise UserError(f"cannot run git: {exc.strerror}", exit_code=1) from None
    if check and proc.returncode:
        detail = (proc.stderr.strip() or proc.stdout.strip()).splitlines()
        raise UserError(
            f"git {args[0]} failed: {detail[-1] if detail else proc.returncode}", exit_code=1
        )
    return proc.stdout


def _repo_kind(path: Path) -> str | None:
    """ "worktree" for the top of a git work tree, "bare" for a bare repository, else None
    (not in git, or only a subdirectory of some other repository)."""
    git_dir = git(path, "rev-parse", "--absolute-git-dir", check=False).strip()
    if not git_dir:
        return None
    if git(path, "rev-parse", "--is-bare-repository", check=False).strip() == "true":
        return "bare" if Path(git_dir).resolve() == path.resolve() else None
    top = git(path, "rev-parse", "--show-toplevel", check=False).strip()
    return "worktree" if top and Path(top).resolve() == path.resolve() else None


def has_commit(repo: Path, ref: str) -> bool:
    if not ref or ref.startswith("-"):
        return False
    return git(repo, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}", check=False) != ""


def _require_commit(repo: Path, commit: str, answers_path: Path) -> None:
    match = DESCRIBE.match(commit)
    if has_commit(repo, match["hash"] if match else commit):
        return
    if match:
        raise UserError(
            f"_commit {commit} in {answers_path} is unknown in the template repository {repo}: "
            f"commit {match['hash']} is not there (rendered from uncommitted template changes, "
            "or the repository was re-cloned or its history rewritten); fetch the template's "
            f"history (git -C {repo} fetch --tags), or render the package again from a release"
        )
    raise UserError(
        f"_commit {commit} in {answers_path} is unknown in the template repository {repo}: no "
        "such tag or commit there (a clone without that tag, or rewritten history?); fetch the "
        f"template's tags (git -C {repo} fetch --tags), or render the package again from a release"
    )


def read_package(dest: Path) -> Package:
    """The package's answers file, checked for what `copier update` needs (else exit 2).

    A local `_src_path` must be the top of a git work tree, or a bare repository whose path
    ends in `.git` (copier reads it as a remote), and must hold `_commit`. A URL is not
    checked here: that would need the network.
    """
    dest = dest.resolve()
    if not dest.is_dir():
        raise UserError(f"{dest} is not a directory")
    answers_path = dest / ANSWERS_FILE
    if not answers_path.is_file():
        raise UserError(f"{dest} is not a generated package: no {ANSWERS_FILE}")
    try:
        raw = yaml.safe_load(answers_path.read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise UserError(f"cannot read {answers_path}: {exc}".splitlines()[0]) from None
    if not isinstance(raw, dict):
        raise UserError(f"{answers_path} must hold a mapping")
    src, commit = raw.get("_src_path"), raw.get("_commit")
    if not src:
        raise UserError(f"{answers_path} has no _src_path: cannot find the template")
    if not commit:
        raise UserError(
            f"{answers_path} has no _commit: the package was rendered from a template outside "
            "git (e.g. an installed wheel without a recorded repository); set _src_path to the "
            "template repository's URL and _commit to the release it was rendered from (e.g. "
            "v0.2.0), or render it again"
        )
    package = Package(dest, str(src), str(commit), {k: v for k, v in raw.items() if k[:1] != "_"})
    if not package.is_url:
        path = Path(package.src_path).expanduser()
        if not path.is_absolute():
            raise UserError(
                f"_src_path {package.src_path!r} in {answers_path} is relative; copier needs an "
                "absolute path or URL to the template repository"
            )
        if not path.is_dir():
            raise UserError(f"template repository {path} (from _src_path) does not exist")
        kind = _repo_kind(path)
        if kind is None:
            raise UserError(
                f"template source {path} (from _src_path) is not a git repository, so template "
                f"version {package.commit} cannot be checked out (an installed copy of the "
                f"template?); point _src_path in {answers_path} at a git clone or URL of it"
            )
        if kind == "bare" and path.suffix != ".git":
            raise UserError(
                f"template repository {path} (from _src_path) is a bare repository whose path "
                f"does not end in .git, which copier cannot read; rename it to {path.name}.git "
                "and update _src_path"
            )
        _require_commit(path, package.commit, answers_path)
    return package
