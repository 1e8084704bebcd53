"""The `ascend-scaffold` command line. Commands parse, call the library, print."""

from __future__ import annotations

import inspect
import time
from pathlib import Path
from typing import Any, Optional

import typer
import yaml

from . import __version__
from .check_cmd import check
from .errors import UserError
from .npu_emulate_cmd import npu_emulate
from .questions import Question, asked_questions
from .update_cmd import check_update, update

app = typer.Typer(
    help="Render Ascend NPU graph-mode-ready LLM model packages.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
new_app = typer.Typer(help="Create something new from a template.", no_args_is_help=True)
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


def fail(error: UserError) -> typer.Exit:
    typer.echo(f"error: {error}", err=True)
    return typer.Exit(error.exit_code)


def _read_data_file(path: Path | None) -> dict[str, Any]:
    if path is None:
        return {}
    try:
        data = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise UserError(f"cannot read answers file {path}: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise UserError(f"answers file {path} is not valid YAML: {exc}".splitlines()[0]) from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise UserError(f"answers file {path} must hold a mapping of answers")
    return {k: v for k, v in data.items() if not str(k).startswith("_")}


def _prompt(question: Question, default: Any) -> Any:
    label = question.help
    if question.choices:
        label += f" [{'/'.join(question.choices)}]"
    if question.type == "bool":
        return typer.confirm(label, default=default)
    while True:
        raw = typer.prompt(label, default=str(default), type=str)
        try:
            return question.coerce(raw)
        except UserError as exc:
            typer.echo(f"  {exc}", err=True)


def collect_answers(given: dict[str, Any], defaults: bool) -> dict[str, Any]:
    """Every asked question, in copier.yml order: given answers first, then the
    (rendered) default when --defaults, else an interactive prompt."""
    answers: dict[str, Any] = {}
    for question in asked_questions():
        if not question.applies(answers):
            if question.name in given:
                raise UserError(
                    f"{question.name} does not apply to these answers ({question.when})"
                )
            answers[question.name] = question.default_for(answers)  # unused by the template
        elif question.name in given:
            answers[question.name] = question.coerce(given[question.name])
        elif defaults:
            answers[question.name] = question.default_for(answers)
        else:
            answers[question.name] = _prompt(question, question.default_for(answers))
    for name in given.keys() - answers.keys():
        answers[name] = given[name]  # reported as unknown by validation
    return answers


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
    force: bool = typer.Option(False, "--force", help="Render into a non-empty directory."),
    from_hf_config: Optional[Path] = typer.Option(  # noqa: UP045
        None,
        "--from-hf-config",
        help="Hugging Face config.json (or checkpoint dir) to take the architecture answers "
        "from; --data-file and flags still override them.",
    ),
    **flags: Any,
) -> None:
    """Interview for a dense GQA decoder and render its package."""
    from .hf_config import answers_from_hf_config
    from .render import render
    from .spec import validate

    try:
        given = answers_from_hf_config(from_hf_config) if from_hf_config else {}
        given.update(_read_data_file(data_file))
        given.update({name: value for name, value in flags.items() if value is not None})
        spec = validate(collect_answers(given, defaults))
        target = dest or Path(spec.model_name)
        start = time.perf_counter()
        files = render(spec, target, force=force)
    except UserError as error:
        raise fail(error) from None
    elapsed = time.perf_counter() - start
    typer.echo(f"rendered {len(files)} files into {target} in {elapsed:.2f}s")
    typer.echo(
        f"  exe_mode={spec.exe_mode} fa_interface={spec.fa_interface} "
        f"enable_dynamic_graph={spec.enable_dynamic_graph}"
    )
    typer.echo(f"next: pip install -e {target}[test] && pytest {target}/tests")


def _with_question_flags(func):
    """Add one `--<question>` option per asked question of copier.yml to `func`."""
    signature = inspect.signature(func)
    params = [p for p in signature.parameters.values() if p.kind is not p.VAR_KEYWORD]
    for question in asked_questions():
        flag = "--" + question.name.replace("_", "-")
        decls = [f"{flag}/--no-{flag[2:]}"] if question.type == "bool" else [flag]
        option = typer.Option(None, *decls, help=question.help, show_default=False)
        annotation = Optional[question.py_type]  # noqa: UP045
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
