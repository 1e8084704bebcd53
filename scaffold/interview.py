"""The interview: every asked question of copier.yml, in order, each answer checked the
moment it is given (type, range, name rules, and every rule the answers so far decide)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import typer

from .errors import UserError
from .questions import Question, load_questions
from .spec import check_answered

# Asks one question interactively: (question, default) -> the user's (coerced) answer.
Ask = Callable[[Question, Any], Any]


def flag_of(question: Question) -> str:
    return "--" + question.name.replace("_", "-")


def _checked(answers: dict[str, Any], question: Question, derived: bool, check: bool) -> None:
    if not check:
        return
    try:
        check_answered(answers, question.name)
    except UserError as error:
        expression = question.derivation()
        if derived and expression:
            raise UserError(
                f"{error} ({question.name} defaults to {expression}; "
                f"set it with {flag_of(question)})"
            ) from None
        raise


def collect_answers(
    given: dict[str, Any],
    defaults: bool,
    ask: Ask | None = None,
    check: bool = True,
    derived: dict[str, Any] | None = None,
    ignored: list[str] | None = None,
) -> dict[str, Any]:
    """Every asked question in copier.yml order: the given answer first, then one `derived`
    from a Hugging Face config, else the (rendered) default when `defaults` or no `ask`,
    else `ask`. A bad given answer or default raises UserError (unless not `check`: for
    tests that feed invalid answers to copier itself); a bad interactive answer is reported
    and asked again. A given answer to a question that does not apply is an error; a
    derived one is dropped (the user's override made it inapplicable), its name appended
    to `ignored`."""
    derived = {k: v for k, v in (derived or {}).items() if k not in given}
    given = {**derived, **given}
    answers: dict[str, Any] = {}
    for question in load_questions():
        if not question.asked:  # computed: later validators may read it
            answers[question.name] = question.default_for(answers)
        elif not question.applies(answers):
            if question.name in derived:
                if ignored is not None:
                    ignored.append(question.name)
                del given[question.name]
            elif question.name in given:
                raise UserError(
                    f"{question.name} applies only when {question.when_in_words(answers)}; "
                    "leave it out"
                )
            answers[question.name] = question.default_for(answers)  # unused by the template
        elif question.name in given:
            answers[question.name] = question.coerce(given[question.name])
            _checked(answers, question, derived=False, check=check)
        elif defaults or ask is None:
            answers[question.name] = question.default_for(answers)
            _checked(answers, question, derived=True, check=check)
        else:
            _ask_until_valid(answers, question, ask)
    for name in given.keys() - answers.keys():
        answers[name] = given[name]  # reported as unknown by validation
    return answers


def _ask_until_valid(answers: dict[str, Any], question: Question, ask: Ask) -> None:
    while True:
        answers[question.name] = ask(question, question.default_for(answers))
        try:
            check_answered(answers, question.name)
            return
        except UserError as error:
            typer.echo(f"  {error}", err=True)
