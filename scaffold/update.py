"""Keep a generated package current: wrap `copier update`, then report what it did.

copier 9 exits 0 even when it leaves conflict markers (or `.rej` files) behind, deletes a
template-owned file the new release removed even when you edited it, and trusts nothing by
default. This module checks the package first (answers file, template repository and
`_commit`, git, no conflicts left from an earlier update, clean tree), passes trust only for
this project's own template (or on request), runs copier with inline conflicts, keeps (as a
conflict) every removed file you had edited, and then reads the result back from git: which
files changed and which hold conflicts.
"""

from __future__ import annotations

import re
import subprocess
import tempfile
import warnings
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
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
_HEX = re.compile(r"^[0-9a-f]{7,40}$")
_NO_SHA = "0" * 40


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


def _git(cwd: Path | str, *args: str, check: bool = True, input: str | None = None) -> str:
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
    git_dir = _git(path, "rev-parse", "--absolute-git-dir", check=False).strip()
    if not git_dir:
        return None
    if _git(path, "rev-parse", "--is-bare-repository", check=False).strip() == "true":
        return "bare" if Path(git_dir).resolve() == path.resolve() else None
    top = _git(path, "rev-parse", "--show-toplevel", check=False).strip()
    return "worktree" if top and Path(top).resolve() == path.resolve() else None


def _has_commit(repo: Path, ref: str) -> bool:
    if not ref or ref.startswith("-"):
        return False
    return _git(repo, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}", check=False) != ""


def _require_commit(repo: Path, commit: str, answers_path: Path) -> None:
    match = _DESCRIBE.match(commit)
    if _has_commit(repo, match["hash"] if match else commit):
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
    match = _DESCRIBE.match(commit)
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
        latest = tag
    pending = tuple(new_questions(package, latest)) if available else ()
    asked = tuple(q.name for q in asked_among(package.answers, pending))
    return UpdateCheck(package.commit, latest, available, asked, pending)


def check_update(dest: Path, prereleases: bool = False) -> UpdateCheck:
    return check_package(read_package(dest), prereleases)


def require_ref(package: Package, ref: str) -> None:
    """Refuse (exit 2) a `--vcs-ref` that the template repository does not have."""
    if not package.is_url:
        if _has_commit(Path(package.src_path).expanduser(), ref):
            return
        refs = _ls_remote(package.src_path, "--tags")
    else:
        refs = _ls_remote(package.src_path)
        names = {"HEAD"} | {
            name.removeprefix("refs/heads/").removeprefix("refs/tags/").removesuffix("^{}")
            for _sha, name in refs
        }
        if ref in names or _HEX.match(ref) or _DESCRIBE.match(ref):
            return  # a commit: only a clone can tell, copier will
    tags = _tags(refs)
    listing = ", ".join((["..."] if len(tags) > 10 else []) + tags[-10:]) or "none"
    raise UserError(f"template ref {ref!r} not found in {package.src_path} (tags: {listing})")


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


def asked_among(answers: dict[str, Any], pending: Iterable[NewQuestion]) -> list[NewQuestion]:
    """The `pending` questions that apply when earlier new ones take their defaults (a
    question whose `when` is false for these answers is not asked, as copier would not ask
    it: e.g. the rope_* questions of a package with rope_scaling none)."""
    known = dict(answers)
    asked = []
    for new in pending:
        if new.applies(known):
            asked.append(new)
            known[new.name] = new.default_for(known)
    return asked


def asked_on_update(package: Package, ref: str) -> list[NewQuestion]:
    """The new questions of the template at `ref` that an update asks (see asked_among)."""
    return asked_among(package.answers, new_questions(package, ref))


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
    conflicts: list[str] = field(default_factory=list)  # markers, unmerged, `.rej`, kept
    kept: list[str] = field(default_factory=list)  # removed by the release, edited here: kept
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


def _in_git(dest: Path) -> bool:
    return _git(dest, "rev-parse", "--is-inside-work-tree", check=False).strip() == "true"


def _has_markers(path: Path) -> bool:
    try:
        with path.open("rb") as handle:
            return any(line.rstrip() in CONFLICT_MARKERS for line in handle)
    except OSError:
        return False


def _not_git_internal(dest: Path, path: Path) -> bool:
    return ".git" not in path.relative_to(dest).parts


def find_conflicts(dest: Path, paths: list[str] | None = None) -> list[str]:
    """Files (relative to dest) holding copier's conflict markers, plus any `.rej` files.

    `paths` limits the marker scan (e.g. to the files an update changed); by default it
    covers every file git tracks or would track (committed or not; every file outside git).
    `.rej` files are always searched for in the whole tree, ignored ones included.
    """
    dest = dest.resolve()
    if paths is not None:
        candidates = paths
    elif _in_git(dest):
        out = _git(dest, "ls-files", "-z", "--cached", "--others", "--exclude-standard")
        candidates = sorted({p for p in out.split("\0") if p})
    else:
        candidates = [
            p.relative_to(dest).as_posix()
            for p in dest.rglob("*")
            if p.is_file() and _not_git_internal(dest, p)
        ]
    found = {p for p in candidates if _has_markers(dest / p)}
    found |= {
        p.relative_to(dest).as_posix() for p in dest.rglob("*.rej") if _not_git_internal(dest, p)
    }
    return sorted(found)


def unresolved_conflicts(dest: Path) -> list[str]:
    """What an earlier update left to resolve: files with conflict markers (committed or
    not), `.rej` files, and unmerged git entries (e.g. a removed file kept as a conflict)."""
    found = set(find_conflicts(dest))
    if _in_git(dest):
        found |= {path for code, path in _git_status(dest) if code in _UNMERGED}
    return sorted(found)


def require_clean_git(dest: Path) -> None:
    """Refuse (exit 2) a package outside git, with conflicts left, or with uncommitted changes."""
    if not _in_git(dest):
        raise UserError(
            f"{dest} is not in a git repository; copier update needs one "
            "(git init && git add -A && git commit -m 'generated package')"
        )
    leftover = unresolved_conflicts(dest)
    if leftover:
        raise UserError(
            f"{dest} has unresolved conflicts from an earlier update in {_sample(leftover)}: "
            "remove the '<<<<<<< before updating' markers keeping what you need, merge and "
            "delete any .rej file, git add (or git rm) each file, and commit before updating"
        )
    dirty = _git_status(dest)
    if dirty:
        raise UserError(
            f"{dest} has uncommitted changes ({len(dirty)} file(s): "
            f"{_sample([path for _, path in dirty])}); "
            "commit or stash them first so the update can be reviewed and undone"
        )


def _sample(paths: list[str], limit: int = 3) -> str:
    return ", ".join(paths[:limit]) + (", ..." if len(paths) > limit else "")


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
    top = Path(_git(dest, "rev-parse", "--show-toplevel").strip())
    prefix = _git(dest, "rev-parse", "--show-prefix").strip()
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
                f"removed ({_sample(removed)}) held your edits ({error}); restore any you "
                "need with git checkout HEAD -- FILE",
                exit_code=1,
            ) from None
        index_info = []
        for path in removed:
            rendered = base / path
            if rendered.is_symlink() or not rendered.is_file():
                continue  # not rendered by the old release (e.g. removed by a migration)
            full = prefix + path
            entry = _git(top, "ls-tree", "HEAD", "--", full).split()
            if len(entry) < 3 or entry[1] != "blob":
                continue
            mode, head_sha = entry[0], entry[2]
            base_sha = _git(top, "hash-object", "-w", "--", str(rendered)).strip()
            if base_sha == head_sha:
                continue  # unedited: the removal stands
            _git(top, "--literal-pathspecs", "checkout", "HEAD", "--", full)
            index_info += [
                f"0 {_NO_SHA}\t{full}",
                f"{mode} {base_sha} 1\t{full}",
                f"{mode} {head_sha} 2\t{full}",
            ]
            kept.append(path)
        if index_info:
            _git(top, "update-index", "--index-info", input="\n".join(index_info) + "\n")
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
    kept = _keep_edited_removals(package, _git_status(dest), trusted)
    status = _git_status(dest)
    changed = sorted({path for _, path in status})
    conflicts = set(find_conflicts(dest, [p for c, p in status if c != " D" and c != "D "]))
    conflicts |= {path for code, path in status if code in _UNMERGED}
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


def _recorded_commit(dest: Path) -> str | None:
    try:
        raw = yaml.safe_load((dest / ANSWERS_FILE).read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError):
        return None
    return str(raw["_commit"]) if isinstance(raw, dict) and raw.get("_commit") else None
