"""The `ascend-scaffold` command line. Commands parse, call the library, print."""

from __future__ import annotations

import inspect
import shlex
import time
from pathlib import Path
from typing import Any, Optional

import typer
import yaml

from . import __version__
from .console import ask, fail
from .errors import UserError
from .hazards.cli import check
from .interview import collect_answers, flag_of
from .npu_emulation.cli import npu_emulate
from .questions import Question, asked_questions, user_owned_files
from .render import check_destination
from .template import template_root
from .template_source import render_warnings
from .update.cli import check_update, update

app = typer.Typer(
    help="Render Ascend NPU graph-mode-ready LLM model packages.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,  # plain click messages: `Error: ...` lines, no boxes
)
new_app = typer.Typer(
    help="Create something new from a template.", no_args_is_help=True, rich_markup_mode=None
)
app.add_typer(new_app, name="new")


def _version(value: bool) -> None:
    if value:
        typer.echo(f"ascend-scaffold {__version__}")
        raise typer.Exit()


@app.callback()
def main(
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Show the version and exit."
    ),
) -> None:
    """Render Ascend NPU graph-mode-ready LLM model packages."""


MAX_DATA_FILE_BYTES = 1 << 20  # answers are a few hundred bytes


def _read_data_file(path: Path | None) -> dict[str, Any]:
    if path is None:
        return {}
    try:
        if path.exists() and not path.is_file():  # a FIFO or a device would never end
            raise UserError(f"answers file {path} is not a regular file")
        if path.stat().st_size > MAX_DATA_FILE_BYTES:
            raise UserError(f"answers file {path} is larger than {MAX_DATA_FILE_BYTES:,} bytes")
        text = path.read_bytes().decode("utf-8")
        data = yaml.safe_load(text)
    except RecursionError:
        raise UserError(f"answers file {path} is nested too deeply") from None
    except OSError as exc:
        raise UserError(f"cannot read answers file {path}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise UserError(f"answers file {path} is not UTF-8 text") from None
    except yaml.YAMLError as exc:
        raise UserError(f"answers file {path} is not valid YAML: {exc}".splitlines()[0]) from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise UserError(f"answers file {path} must hold a mapping of answers")
    for key in data:
        if not isinstance(key, str):
            raise UserError(f"answers file {path}: key {key!r} is not a question name")
    return {k: v for k, v in data.items() if not k.startswith("_")}


class _Prompter:
    """Asks questions on the terminal; remembers whether it asked anything."""

    def __init__(self) -> None:
        self.asked = False

    def __call__(self, question: Question, default: Any) -> Any:
        self.asked = True
        return ask(question, default)


def new_model(
    dest: Optional[Path] = typer.Argument(  # noqa: UP045 (typer needs Optional)
        None, help="Directory to create (default: ./<model_name>)."
    ),
    defaults: bool = typer.Option(
        False, "--defaults", help="Use defaults for every answer not given; ask nothing."
    ),
    data_file: Optional[Path] = typer.Option(  # noqa: UP045
        None, "--data-file", "--answers", help="YAML file of answers (copier's data file)."
    ),
    force: bool = typer.Option(
        False,
        "--force",
        help="Render into a non-empty directory: your files are kept, files it changes are "
        "first moved to .ascend-scaffold-backup/.",
    ),
    yes: bool = typer.Option(
        False, "--yes", "-y", help="Write without asking to confirm the design summary."
    ),
    from_hf_config: Optional[Path] = typer.Option(  # noqa: UP045
        None,
        "--from-hf-config",
        help="Hugging Face config.json (or checkpoint dir) to take the architecture answers "
        "from; --data-file and flags still override them.",
    ),
    **flags: Any,
) -> None:
    """Interview for a decoder (dense GQA, MoE, or MLA + DeepSeek MoE) and render its package.

    Exit code: 0 written; 1 aborted (Ctrl-C, end of input, or the summary not confirmed),
    nothing written; 2 bad input, nothing written.
    """
    from .hf_config import answers_from_hf_config
    from .render import place, plan_placement, scratch_render
    from .spec import validate
    from .summary import design_summary

    prompter = _Prompter()
    try:
        given = _read_data_file(data_file)
        given.update({name: value for name, value in flags.items() if value is not None})
        hf, ignored = {}, []
        if from_hf_config:
            hf = answers_from_hf_config(from_hf_config, derive_name="model_name" not in given)
        spec = validate(collect_answers(given, defaults, ask=prompter, derived=hf, ignored=ignored))
        if ignored:
            typer.echo(
                f"note: the config's {', '.join(ignored)} do not apply to your answers and are "
                "not used",
                err=True,
            )
        target = (dest or Path(spec.model_name)).absolute()
        start = time.perf_counter()
        check_destination(target, force)
        with scratch_render(spec, target) as out:
            placement = plan_placement(out, target, user_owned_files(spec.answers()))
            typer.echo(design_summary(spec, placement))
            if prompter.asked and not yes and not typer.confirm("write these files?", True):
                raise typer.Abort()
            place(placement)
    except UserError as error:
        raise fail(error) from None
    except (KeyboardInterrupt, typer.Abort):
        typer.echo("aborted: nothing was written", err=True)
        raise typer.Exit(1) from None
    elapsed = time.perf_counter() - start
    shown = dest or Path(spec.model_name)
    typer.echo(f"rendered {len(placement.files)} files into {shown} in {elapsed:.2f}s")
    if placement.kept:
        typer.echo(f"  kept your {', '.join(placement.kept)}")
    if placement.backup is not None:
        typer.echo(
            f"  {len(placement.replaced)} changed file(s) replaced; the old copies are in "
            f"{placement.backup}"
        )
    for warning in render_warnings(template_root()):
        typer.echo(f"warning: {warning}", err=True)
    quoted = shlex.quote(str(shown))
    typer.echo(
        f"next: pip install -e {shlex.quote(str(shown) + '[test]')} && pytest {quoted}/tests"
    )


def _with_question_flags(func):
    """Add one `--<question>` option per asked question of copier.yml to `func`."""
    signature = inspect.signature(func)
    params = [p for p in signature.parameters.values() if p.kind is not p.VAR_KEYWORD]
    for question in asked_questions():
        flag = flag_of(question)
        decls = [f"{flag}/--no-{flag[2:]}"] if question.type == "bool" else [flag]
        option = typer.Option(None, *decls, help=question.help, show_default=False)
        # Values arrive as text and are converted by Question.coerce, so a bad one gets the
        # interview's one-line message, as from a data file or a prompt.
        annotation = Optional[bool if question.type == "bool" else str]  # noqa: UP045
        params.append(
            inspect.Parameter(
                question.name, inspect.Parameter.KEYWORD_ONLY, default=option, annotation=annotation
            )
        )
    func.__signature__ = signature.replace(parameters=params)
    func.__annotations__ = {p.name: p.annotation for p in params}
    return func


new_app.command("model")(_with_question_flags(new_model))
app.command("check")(check)
app.command("npu-emulate")(npu_emulate)
app.command("update")(update)
app.command("check-update")(check_update)

if __name__ == "__main__":
    app()
