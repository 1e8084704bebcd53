"""``ascend-scaffold check``: find graph-mode hazards in model code, write the design doc."""

import os
from enum import Enum
from pathlib import Path
from typing import Annotated

import typer

from scaffold.hazards import check_paths, render
from scaffold.hazards.runner import shown


class OutputFormat(str, Enum):
    text = "text"
    json = "json"
    markdown = "markdown"


def check(
    paths: Annotated[
        list[Path],
        typer.Argument(metavar="PATH", help="Python files or directories (walked for *.py)."),
    ],
    format: Annotated[
        OutputFormat, typer.Option("--format", help="text | json | markdown (design document).")
    ] = OutputFormat.text,
    output: Annotated[
        Path | None, typer.Option("--output", "-o", help="Write the report to FILE, not stdout.")
    ] = None,
) -> None:
    """Statically find graph-mode hazards (AST only, nothing imported or run).

    Exit code: 0 = at least one file checked, no hazards, no errors; 1 = hazards found (and no
    errors); 2 = usage error, or any path could not be checked (missing, not a regular file,
    unreadable, undecodable, syntax error, nested too deeply, no *.py in a directory), or
    nothing was checked, or the report could not be written. Each problem is one line on stderr;
    the other files are still checked and reported.
    Suppress one line with a trailing `# graph-ok: GM00N` comment.
    """
    try:
        fmt = OutputFormat(format).value
    except ValueError:
        typer.echo(f"error: unknown format {format!r} (text, json, markdown)", err=True)
        raise typer.Exit(2) from None
    result = check_paths(paths)
    for error in result.errors:
        typer.echo(error, err=True)
    report = render(result, fmt)
    if output is not None:
        write_report(output, report, result.files)
    else:
        typer.echo(report, nl=False)
    if result.errors or not result.files:
        raise typer.Exit(2)
    raise typer.Exit(1 if result.hazards else 0)


def write_report(output: Path, report: str, checked: list[str]) -> None:
    """Write ``report`` to ``output`` or exit 2 with one line (never overwrite a checked file)."""
    where = shown(output)
    try:
        if output.exists() and any(os.path.samefile(output, f) for f in checked):
            typer.echo(f"error: --output {where} is one of the checked files", err=True)
            raise typer.Exit(2)
        output.write_text(report, encoding="utf-8", errors="surrogateescape")
    except (OSError, ValueError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        typer.echo(f"error: cannot write {where}: {why}", err=True)
        raise typer.Exit(2) from None
    typer.echo(f"wrote {where}", err=True)
