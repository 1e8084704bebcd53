"""Keep a generated package current: wrap `copier update`, then report what it did.

copier 9 exits 0 even when it leaves conflict markers (or `.rej` files) behind, and it
trusts nothing by default. This module checks the package first (answers file, git, clean
tree), passes trust only for this project's own template (or on request), runs copier with
inline conflicts, and then reads the result back from git: which files changed and which
hold conflicts.
"""

from __future__ import annotations

import re
import subprocess
import tempfile
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import copier
import jinja2
import yaml
from copier.errors import CopierError, UnsafeTemplateError, UserMessageError
from packaging.version import InvalidVersion, Version

from .errors import UserError
from .questions import Question
from .template import is_git_template, template_root

ANSWERS_FILE = ".copier-answers.yml"
CONFLICT_MARKERS = (b"<<<<<<< before updating", b">>>>>>> after updating")
_UNMERGED = {"DD", "AU", "UD", "UA", "DU", "AA", "UU"}
_DESCRIBE = re.compile(r"^(?P<base>.+)-(?P<count>\d+)-g(?P<hash>[0-9a-f]+)$")
_URL = re.compile(r"^([a-z][a-z0-9+.-]*://|git@|gh:|gl:)", re.IGNORECASE)


# --- the generated package -------------------------------------------------------------------


@dataclass(frozen=True)
class Package:
    dest: Path
    src_path: str  # `_src_path`: absolute path or URL of the template repository
    commit: str  # `_commit`: the template version it was rendered from (a tag, or describe)
    answers: dict[str, Any]  # recorded answers, `_` keys excluded

    @property
    def is_url(self) -> bool:
        return bool(_URL.match(self.src_path))


def _git(cwd: Path | str, *args: str, check: bool = True) -> str:
    try:
        proc = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=False)
    except OSError as exc:
        raise UserError(f"cannot run git: {exc.strerror}", exit_code=1) from None
    if check and proc.returncode:
        detail = (proc.stderr.strip() or proc.stdout.strip()).splitlines()
        raise UserError(
            f"git {args[0]} failed: {detail[-1] if detail else proc.returncode}", exit_code=1
        )
    return proc.stdout


def read_package(dest: Path) -> Package:
    """The package's answers file, checked for what `copier update` needs (else exit 2)."""
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
            "git (e.g. an installed wheel) and cannot be updated; render it again from a git "
            "clone of ascend-scaffold, or use `copier recopy`"
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
        match = _DESCRIBE.match(package.commit)
        ref = match["hash"] if match else package.commit
        if _git(path, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}", check=False) == "":
            raise UserError(
                f"_commit {package.commit} is not in the template repository {path}: the package "
                "was rendered from uncommitted template changes, so its base cannot be rebuilt; "
                "render it again from a committed release (or use `copier recopy`)"
            )
    return package


# --- template versions ------------------------------------------------------------------------


def _version_of(ref: str) -> Version | None:
    """PEP 440 version of a tag or a `git describe` string (as copier computes it)."""
    match = _DESCRIBE.match(ref)
    try:
        if match:
            return Version(f"{match['base']}.post{match['count']}+{match['hash']}")
        return Version(ref)
    except InvalidVersion:
        return None


def _ls_remote(src: str, *args: str) -> list[tuple[str, str]]:
    out = _git(Path.cwd(), "ls-remote", *args, "--", src)
    return [tuple(line.split("\t", 1)) for line in out.splitlines() if "\t" in line]


def latest_tag(src: str, prereleases: bool = False) -> str | None:
    """Newest PEP 440 tag of the template repository (what copier updates to), or None."""
    tags = []
    for _sha, ref in _ls_remote(src, "--tags", "--refs"):
        name = ref.removeprefix("refs/tags/")
        version = _version_of(name)
        if version is not None and (prereleases or not version.is_prerelease):
            tags.append((version, name))
    return max(tags)[1] if tags else None


@dataclass(frozen=True)
class UpdateCheck:
    current: str  # `_commit` of the package
    latest: str  # newest release tag, or "HEAD" when the template has no tags
    update_available: bool
    new_questions: tuple[str, ...] = ()  # questions of `latest` the package never answered


def _head_matches(src: str, commit: str) -> bool:
    match = _DESCRIBE.match(commit)
    short = match["hash"] if match else commit
    heads = [sha for sha, ref in _ls_remote(src) if ref == "HEAD"]
    return bool(heads) and heads[0].startswith(short)


def check_update(dest: Path, prereleases: bool = False) -> UpdateCheck:
    package = read_package(dest)
    tag = latest_tag(package.src_path, prereleases)
    if tag is None:  # no release tags: compare commits
        available = not _head_matches(package.src_path, package.commit)
        latest = "HEAD"
    else:
        current_v, latest_v = _version_of(package.commit), _version_of(tag)
        available = current_v is None or latest_v > current_v
        latest = tag
    new = tuple(q.name for q in asked_on_update(package, latest)) if available else ()
    return UpdateCheck(package.commit, latest, available, new)


# --- questions added since the package was rendered -----------------------------------------


@dataclass(frozen=True)
class NewQuestion:
    question: Question

    @property
    def name(self) -> str:
        return self.question.name

    def applies(self, answers: dict[str, Any]) -> bool:
        try:
            return self.question.applies(answers)
        except jinja2.TemplateError:
            return True  # depends on something the answers lack: let copier decide

    def default_for(self, answers: dict[str, Any]) -> Any:
        """Rendered default, or None when it needs more than the answers to render."""
        try:
            return self.question.default_for(answers)
        except (jinja2.TemplateError, UserError):
            return None


def template_file(src: str, ref: str, path: str) -> str:
    """Text of `path` at `ref` of the template repository (local: git show; URL: a clone)."""
    if not _URL.match(src):
        return _git(Path(src).expanduser(), "show", f"{ref}:{path}")
    with tempfile.TemporaryDirectory(prefix="ascend-scaffold-template-") as tmp:
        branch = [] if ref == "HEAD" else ["--branch", ref]
        _git(tmp, "clone", "--quiet", "--depth", "1", *branch, "--", src, "repo")
        return (Path(tmp) / "repo" / path).read_text(encoding="utf-8")


def new_questions(package: Package, ref: str) -> list[NewQuestion]:
    """Questions of the template at `ref` that the package's answers file lacks, in order.

    Only these are asked on update; every earlier answer is kept as recorded. Questions
    with `when: false` (computed values) and types the CLI cannot prompt for are left to
    copier's defaults.
    """
    config = yaml.safe_load(template_file(package.src_path, ref, "copier.yml")) or {}
    found = []
    for name, spec in config.items():
        if str(name).startswith("_") or name in package.answers:
            continue
        spec = spec if isinstance(spec, dict) else {"default": spec}
        kind = spec.get("type", "str")
        when = spec.get("when", True)
        if when is False or kind not in ("str", "int", "float", "bool"):
            continue
        question = Question(
            name=name,
            type=kind,
            help=str(spec.get("help", name)),
            default=spec.get("default"),
            choices=tuple(str(c) for c in spec.get("choices", ()) if not isinstance(c, dict)),
            when=when,
        )
        found.append(NewQuestion(question))
    return found


def asked_on_update(package: Package, ref: str) -> list[NewQuestion]:
    """The new questions that apply when earlier new ones take their defaults (a question
    whose `when` is false for these answers is not asked, as copier would not ask it)."""
    known = dict(package.answers)
    asked = []
    for new in new_questions(package, ref):
        if new.applies(known):
            asked.append(new)
            known[new.name] = new.default_for(known)
    return asked


# --- trust ------------------------------------------------------------------------------------


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


# --- the update -------------------------------------------------------------------------------


@dataclass
class UpdateResult:
    dest: Path
    old_commit: str
    new_commit: str
    changed: list[str] = field(default_factory=list)  # paths relative to dest, POSIX
    conflicts: list[str] = field(default_factory=list)  # files with markers, and `.rej` files
    trusted: bool = False
    warnings: list[str] = field(default_factory=list)
    up_to_date: bool = False  # nothing to do: no newer release

    @property
    def ok(self) -> bool:
        return not self.conflicts


def _git_status(dest: Path) -> list[tuple[str, str]]:
    """(XY, path relative to dest) for every changed, untracked or unmerged file under dest."""
    prefix = _git(dest, "rev-parse", "--show-prefix").strip()
    out = _git(dest, "status", "--porcelain=v1", "-z", "--untracked-files=all", "--", ".")
    entries, items = [], iter(out.split("\0"))
    for item in items:
        if not item:
            continue
        code, path = item[:2], item[3:]
        if code[0] in "RC":
            next(items, None)  # the rename's source path
        entries.append((code, path.removeprefix(prefix)))
    return entries


def require_clean_git(dest: Path) -> None:
    if _git(dest, "rev-parse", "--is-inside-work-tree", check=False).strip() != "true":
        raise UserError(
            f"{dest} is not in a git repository; copier update needs one "
            "(git init && git add -A && git commit -m 'generated package')"
        )
    dirty = _git_status(dest)
    if dirty:
        sample = ", ".join(path for _, path in dirty[:3]) + (", ..." if len(dirty) > 3 else "")
        raise UserError(
            f"{dest} has uncommitted changes ({len(dirty)} file(s): {sample}); "
            "commit or stash them first so the update can be reviewed and undone"
        )


def _has_markers(path: Path) -> bool:
    try:
        with path.open("rb") as handle:
            return any(line.rstrip() in CONFLICT_MARKERS for line in handle)
    except OSError:
        return False


def find_conflicts(dest: Path, paths: list[str] | None = None) -> list[str]:
    """Files (relative to dest) holding copier's conflict markers, plus any `.rej` files.

    `paths` limits the marker scan (e.g. to the files an update changed); `.rej` files are
    always searched for in the whole tree, ignored ones included.
    """
    dest = dest.resolve()
    if paths is None:
        candidates = [
            p.relative_to(dest).as_posix()
            for p in dest.rglob("*")
            if p.is_file() and ".git" not in p.relative_to(dest).parts
        ]
    else:
        candidates = paths
    found = {p for p in candidates if _has_markers(dest / p)}
    found |= {
        p.relative_to(dest).as_posix()
        for p in dest.rglob("*.rej")
        if ".git" not in p.relative_to(dest).parts
    }
    return sorted(found)


def run_update(
    dest: Path,
    data: dict[str, Any] | None = None,
    vcs_ref: str | None = None,
    trust: bool = False,
    prereleases: bool = False,
) -> UpdateResult:
    """Update the package at `dest` to `vcs_ref` (default: the newest release tag).

    `data` answers new questions; every other question keeps its recorded answer (copier
    runs with defaults=True, so nothing is prompted here). Raises UserError: exit 2 for a
    package that cannot be updated as it stands, 1 when copier or git fails.
    """
    package = read_package(dest)
    dest = package.dest
    require_clean_git(dest)
    if vcs_ref is None:
        check = check_update(dest, prereleases)
        if not check.update_available:
            return UpdateResult(dest, package.commit, package.commit, up_to_date=True)
        vcs_ref = check.latest
    trusted = trust or is_own_template(package)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
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
    after = read_package(dest)
    status = _git_status(dest)
    changed = sorted({path for _, path in status})
    conflicts = set(find_conflicts(dest, [p for c, p in status if c != " D" and c != "D "]))
    conflicts |= {path for code, path in status if code in _UNMERGED}
    return UpdateResult(
        dest=dest,
        old_commit=package.commit,
        new_commit=after.commit,
        changed=changed,
        conflicts=sorted(conflicts),
        trusted=trusted,
        warnings=sorted({str(w.message).splitlines()[0] for w in caught if str(w.message)}),
    )
