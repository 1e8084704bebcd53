"""What every command prints the same way: a user error as one line, a question asked."""

from __future__ import annotations

from typing import Any

import typer

from .errors import UserError
from .questions import Question


def fail(error: UserError) -> typer.Exit:
    """Print `error: <message>` on stderr; the Exit to raise carries its exit code."""
    typer.echo(f"error: {error}", err=True)
    return typer.Exit(error.exit_code)


def ask(question: Question, default: Any) -> Any:
    """Ask one question on the terminal until the answer has the question's type."""
    label = question.help
    if question.choices:
        label += f" [{'/'.join(question.choices)}]"
    if question.type == "bool":
        return typer.confirm(label, default=bool(default))
    while True:
        shown = None if default is None else str(default)
        raw = typer.prompt(label, default=shown, type=str)
        try:
            return question.coerce(raw)
        except UserError as exc:
            typer.echo(f"  {exc}", err=True)
