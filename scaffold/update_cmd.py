"""``ascend-scaffold update`` / ``check-update``: keep a generated package current."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from .errors import UserError
from .update import (
    NewQuestion,
    find_conflicts,
    new_questions,
    read_package,
    require_clean_git,
    run_update,
)
from .update import (
    check_update as check_for_update,
)


def _fail(error: UserError) -> typer.Exit:
    typer.echo(f"error: {error}", err=True)
    return typer.Exit(error.exit_code)


def _ask(new: NewQuestion, default: Any) -> Any:
    question = new.question
    label = question.help
    if question.choices:
        label += f" [{'/'.join(question.choices)}]"
    if question.type == "bool":
        return typer.confirm(label, default=bool(default))
    while True:
        raw = typer.prompt(label, default=None if default is None else str(default), type=str)
        try:
            return question.coerce(raw)
        except UserError as exc:
            typer.echo(f"  {exc}", err=True)


def _answer_new_questions(pending: list[NewQuestion], answers: dict[str, Any], ref: str) -> dict:
    data: dict[str, Any] = {}
    asked = [q for q in pending if q.applies({**answers, **data})]
    if asked:
        typer.echo(f"template {ref} asks {len(asked)} new question(s); earlier answers are kept")
    for new in pending:
        known = {**answers, **data}
        if new.applies(known):
            data[new.name] = _ask(new, new.default_for(known))
    return data


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

    Needs a clean git tree. Your edits to template-owned files are merged; where they
    overlap the template's change, the file gets inline conflict markers. User-owned files
    (config/<model>.yaml, src/<model>/extensions.py) are never touched, except by migrations.
    Only questions added since the last render are asked.

    Exit code: 0 updated cleanly, or already up to date; 1 conflicts left to resolve, or
    copier/git failed; 2 cannot update as it stands (not a generated package, not in git,
    uncommitted changes, untrusted migrations, downgrade).
    """
    try:
        package = read_package(dest)
        require_clean_git(package.dest)
        target = vcs_ref
        if target is None:
            check = check_for_update(package.dest, prereleases)
            if not check.update_available:
                typer.echo(f"{dest} is up to date (template {package.commit})")
                raise typer.Exit(0)
            target = check.latest
        data: dict[str, Any] = {}
        if not defaults:
            pending = new_questions(package, target)
            try:
                data = _answer_new_questions(pending, package.answers, target)
            except typer.Abort:
                names = ", ".join(q.name for q in pending)
                raise UserError(
                    f"no answer for new question(s) {names}; answer them or pass --defaults",
                    exit_code=1,
                ) from None
        result = run_update(
            package.dest, data=data, vcs_ref=target, trust=trust, prereleases=prereleases
        )
    except UserError as error:
        raise _fail(error) from None
    for warning in result.warnings:
        typer.echo(f"warning: {warning}", err=True)
    conflicts = set(result.conflicts)
    typer.echo(
        f"updated {dest}: template {result.old_commit} -> {result.new_commit}, "
        f"{len(result.changed)} file(s) changed, {len(conflicts)} conflict(s)"
    )
    for path in sorted(set(result.changed) | conflicts):
        typer.echo(f"  {'conflict' if path in conflicts else 'changed':<8}  {path}")
    if conflicts:
        typer.echo(
            f"error: {len(conflicts)} file(s) have conflicts: keep what you need between "
            "'<<<<<<< before updating' and '>>>>>>> after updating' (merge any .rej by hand "
            "and delete it), then git add and commit",
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

    Exit code: 0 up to date; 3 an update is available; 1 the template cannot be read;
    2 not a generated package.
    """
    try:
        check = check_for_update(dest, prereleases)
        leftover = find_conflicts(dest)
    except UserError as error:
        raise _fail(error) from None
    if leftover:
        typer.echo(f"warning: unresolved update conflicts in {', '.join(leftover)}", err=True)
    if not check.update_available:
        typer.echo(f"{dest} is up to date (template {check.current})")
        raise typer.Exit(0)
    typer.echo(f"update available for {dest}: template {check.current} -> {check.latest}")
    if check.new_questions:
        typer.echo(f"  new questions: {', '.join(check.new_questions)}")
    typer.echo(f"  run: ascend-scaffold update {dest}")
    raise typer.Exit(3)
