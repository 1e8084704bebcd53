"""``ascend-scaffold update`` / ``check-update``: keep a generated package current."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from ..console import ask, fail
from ..errors import UserError

if TYPE_CHECKING:
    from . import NewQuestion, Package


def _interactive() -> bool:
    """Whether a terminal is attached to ask new questions on."""
    isatty = getattr(sys.stdin, "isatty", None)
    return bool(isatty and isatty())


def _answer_new_questions(package: Package, pending: list[NewQuestion], ref: str) -> dict:
    """Ask the new questions that apply (in order, each against the answers so far).

    Without a terminal nothing can be asked: refuse (exit 2) naming the questions, before
    anything changed.
    """
    from . import asked_among

    asked = asked_among(package.answers, pending)
    if not asked:
        return {}
    names = ", ".join(q.name for q in asked)
    if not _interactive():
        raise UserError(
            f"template {ref} asks new question(s) {names}, and no terminal is attached to ask "
            "them; pass --defaults to answer them with their defaults, or run in a terminal"
        )
    typer.echo(f"template {ref} asks {len(asked)} new question(s); earlier answers are kept")
    data: dict[str, Any] = {}
    try:
        for new in pending:
            known = {**package.answers, **data}
            if new.applies(known):
                data[new.name] = _ask_valid(new, known)
    except typer.Abort:
        raise UserError(
            f"no answer for new question(s) {names}; answer them or pass --defaults"
        ) from None
    return data


def _ask_valid(new: NewQuestion, known: dict[str, Any]) -> Any:
    """Ask until the new question's copier.yml validator accepts the answer, as `new model`
    does: a refusal at the end of the update would leave nothing applied and nothing said
    until then."""
    while True:
        value = ask(new.question, new.default_for(known))
        message = new.question.problem({**known, new.name: value})
        if not message:
            return value
        typer.echo(f"  {message}", err=True)


def _changed_answers(package: Package, changes: list[str], data: dict) -> dict[str, Any]:
    """`--set KEY=VALUE` answers, refused (exit 2) unless the whole answer set they make is
    valid: the question must exist, the value have its type, and every rule hold, with the
    questions the change makes apply (a switch to family moe: the expert sizes) at their
    defaults. Returns the changed answers and the defaults they bring in."""
    if not changes:
        return {}
    from ..interview import collect_answers
    from ..questions import asked_questions, question
    from ..spec import validate

    known = {q.name for q in asked_questions()}
    given: dict[str, Any] = {}
    for change in changes:
        key, sep, value = change.partition("=")
        key = key.strip()
        if not sep or not key:
            raise UserError(f"--set takes KEY=VALUE, got {change!r}")
        if key not in known:
            raise UserError(f"--set {key}: no such question (questions: see copier.yml)")
        given[key] = question(key).coerce(value)
    answers = {k: v for k, v in {**package.answers, **data}.items() if k in known}
    answers = {k: v for k, v in answers.items() if k not in given}
    spec = validate(collect_answers(given, defaults=True, derived=answers, ignored=[]))
    new = spec.copier_data()
    return {k: v for k, v in new.items() if k in given or k not in package.answers}


def update(
    dest: Annotated[
        Path, typer.Argument(help="The generated package (holds .copier-answers.yml).")
    ] = Path("."),
    defaults: Annotated[
        bool,
        typer.Option("--defaults", help="Answer new questions with their defaults; ask nothing."),
    ] = False,
    vcs_ref: Annotated[
        str | None,
        typer.Option(
            "--vcs-ref", help="Template tag or commit to update to (default: newest release)."
        ),
    ] = None,
    changes: Annotated[
        list[str] | None,
        typer.Option(
            "--set",
            "-d",
            help="Change a recorded answer, KEY=VALUE (repeatable), e.g. --set kv_cache=paged; "
            "checked with every other answer first, as `new model` checks them.",
        ),
    ] = None,
    trust: Annotated[
        bool,
        typer.Option(
            "--trust",
            help="Run the template's migrations even if it is not this ascend-scaffold checkout.",
        ),
    ] = False,
    prereleases: Annotated[
        bool, typer.Option("--prereleases", help="Consider pre-release tags (e.g. v0.3.0rc1).")
    ] = False,
) -> None:
    """Update a generated package to a newer template release (copier update).

    Needs a clean git tree with no conflicts left from an earlier update. Your edits to
    template-owned files are merged; where they overlap the template's change, the file
    gets inline conflict markers; a file the release removed but you edited is kept, as a
    conflict. The user-owned config (config/<model>.yaml) is never touched, except by
    migrations. Only questions added since the last render, and that
    apply to your answers, are asked (without a terminal: pass --defaults).

    Exit code: 0 updated cleanly, or already up to date; 1 conflicts left to resolve, or
    copier/git failed; 2 cannot update as it stands (not a generated package, template
    repository or _commit unreadable, not in git, uncommitted changes, conflicts left from an
    earlier update, unknown --vcs-ref, new questions and no terminal to ask them, untrusted
    migrations, downgrade).
    """
    from . import check_package, new_questions, prepare_update, require_ref, run_update

    try:
        package = prepare_update(dest)  # read_package + require_clean_git, once
        if vcs_ref is None:
            check = check_package(package, prereleases)  # one git ls-remote
            if not check.update_available and not changes:
                typer.echo(f"{dest} is up to date (template {package.commit})")
                raise typer.Exit(0)
            if check.update_available:
                target, pending = check.latest, list(check.pending)
            else:  # only --set: the same template, the changed answers
                target, pending = package.commit, []
        else:
            require_ref(package, vcs_ref)
            target, pending = vcs_ref, new_questions(package, vcs_ref)
        data = {} if defaults else _answer_new_questions(package, pending, target)
        data.update(_changed_answers(package, changes or [], data))
        result = run_update(
            package, data=data, vcs_ref=target, trust=trust, prereleases=prereleases
        )
    except UserError as error:
        raise fail(error) from None
    for warning in result.warnings:
        typer.echo(f"warning: {warning}", err=True)
    conflicts, kept = set(result.conflicts), set(result.kept)
    typer.echo(
        f"updated {dest}: template {result.old_commit} -> {result.new_commit}, "
        f"{len(result.changed)} file(s) changed, {len(conflicts)} conflict(s)"
    )
    for path in sorted(set(result.changed) | conflicts):
        if path in kept:
            typer.echo(f"  conflict  {path}  (removed upstream, edited here: kept)")
        else:
            typer.echo(f"  {'conflict' if path in conflicts else 'changed':<8}  {path}")
    if conflicts:
        steps = []
        if conflicts - kept:
            steps.append(
                "keep what you need between '<<<<<<< before updating' and '>>>>>>> after "
                "updating' (merge any .rej by hand and delete it), then git add"
            )
        if kept:
            steps.append(
                f"{len(kept)} file(s) removed upstream but edited here were kept: git add to "
                "keep, or git rm to drop"
            )
        typer.echo(
            f"error: {len(conflicts)} file(s) have conflicts: {'; '.join(steps)}; then commit",
            err=True,
        )
        raise typer.Exit(1)
    typer.echo("review with `git diff`, run the tests, then commit")


def check_update(
    dest: Annotated[
        Path, typer.Argument(help="The generated package (holds .copier-answers.yml).")
    ] = Path("."),
    prereleases: Annotated[
        bool, typer.Option("--prereleases", help="Consider pre-release tags (e.g. v0.3.0rc1).")
    ] = False,
) -> None:
    """Say whether a newer template release exists for a generated package; change nothing.

    Exit code: 0 up to date; 3 an update is available; 1 conflicts left from an earlier
    update (conflict markers in files, committed or not, `.rej` files, unmerged entries;
    reported even when an update is available), or the template cannot be read; 2 not a
    generated package, or its template repository or _commit is unusable.
    """
    from . import check_package, read_package, unresolved_conflicts

    try:
        package = read_package(dest)
        leftover = unresolved_conflicts(package.dest)
        check = check_package(package, prereleases)
    except UserError as error:
        raise fail(error) from None
    if not check.update_available:
        typer.echo(f"{dest} is up to date (template {check.current})")
    else:
        typer.echo(f"update available for {dest}: template {check.current} -> {check.latest}")
        if check.new_questions:
            typer.echo(f"  new questions: {', '.join(check.new_questions)}")
        typer.echo(f"  run: ascend-scaffold update {dest}")
    if leftover:
        typer.echo(
            f"error: unresolved update conflicts in {', '.join(leftover)}: resolve them "
            "(remove the markers, merge and delete any .rej file, git add or git rm each "
            "file) and commit",
            err=True,
        )
        raise typer.Exit(1)
    raise typer.Exit(3 if check.update_available else 0)
