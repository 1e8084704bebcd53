"""``ascend-scaffold check``: find graph-mode hazards in model code, write the design doc."""

from enum import Enum
from pathlib import Path
from typing import Annotated

import typer

from scaffold.hazards import check_paths, render


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

    Exit code: 0 clean, 1 hazards found, 2 usage or parse error.
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
        try:
            output.write_text(report, encoding="utf-8")
        except OSError as exc:
            typer.echo(f"error: cannot write {output}: {exc}", err=True)
            raise typer.Exit(2) from None
        typer.echo(f"wrote {output}", err=True)
    else:
        typer.echo(report, nl=False)
    if result.errors:
        raise typer.Exit(2)
    raise typer.Exit(1 if result.hazards else 0)
