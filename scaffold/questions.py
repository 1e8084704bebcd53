"""Read the interview from copier.yml so the CLI and copier ask the same questions."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import jinja2
import yaml

from .errors import UserError
from .template import template_root

_TYPES = {"str": str, "int": int, "float": float, "bool": bool}
_TRUE = {"y", "yes", "true", "1", "on"}
_FALSE = {"n", "no", "false", "0", "off"}


@dataclass(frozen=True)
class Question:
    name: str
    type: str
    help: str
    default: Any
    choices: tuple[str, ...] = ()
    when: bool | str = True  # copier's `when`: a bool or a Jinja condition on earlier answers
    validator: str = ""  # copier's `validator`: Jinja rendering to an error message, or empty

    @property
    def asked(self) -> bool:
        """False for values computed from other answers (`when: false`)."""
        return self.when is not False

    @property
    def py_type(self) -> type:
        return _TYPES[self.type]

    def applies(self, answers: dict[str, Any]) -> bool:
        """Whether copier would ask this question, given the earlier answers."""
        if isinstance(self.when, bool):
            return self.when
        return _render(self.when, answers).strip().lower() in _TRUE

    def default_for(self, answers: dict[str, Any]) -> Any:
        """The default, rendered against earlier answers when it is a Jinja expression."""
        if _is_template(self.default):
            try:
                rendered = _render(self.default, answers)
            except (jinja2.TemplateError, ArithmeticError, TypeError) as exc:
                raise UserError(
                    f"cannot derive {self.name} = {self.derivation()} from these answers: {exc}"
                ) from None
            return self.coerce(rendered)
        return self.coerce(self.default)

    def coerce(self, value: Any) -> Any:
        """Convert an answer (from YAML, a flag or a prompt) to the question's type."""
        if self.type == "yaml":  # computed tables: YAML data as written
            return yaml.safe_load(value) if isinstance(value, str) else value
        try:
            if self.type == "bool":
                if isinstance(value, bool):
                    return value
                text = str(value).strip().lower()
                if text in _TRUE | _FALSE:
                    return text in _TRUE
                raise ValueError
            if self.type in ("int", "float") and isinstance(value, bool):
                raise ValueError
            if self.type == "int" and isinstance(value, float):
                raise ValueError
            if self.type == "str" and not isinstance(value, str):
                raise ValueError
            result = self.py_type(value)
        except (TypeError, ValueError, OverflowError):
            raise UserError(f"{self.name} must be {self.type}, got {value!r}") from None
        if self.type == "float" and not math.isfinite(result):
            raise UserError(f"{self.name} must be a finite number, got {value!r}")
        if self.choices and result not in self.choices:
            raise UserError(f"{self.name} must be one of {', '.join(self.choices)}, got {result!r}")
        return result

    def problem(self, answers: dict[str, Any]) -> str | None:
        """What this question's validator says about `answers`, as copier evaluates it."""
        if not self.validator:
            return None
        try:
            message = _render(self.validator, answers).strip()
        except (jinja2.TemplateError, ArithmeticError, TypeError) as exc:
            return f"{self.name}: cannot check {self.name} against these answers ({exc})"
        return message or None

    def when_in_words(self, answers: dict[str, Any]) -> str:
        """`when` as a sentence: "rope_scaling is not 'none' (here it is 'none')"."""
        return describe_condition(str(self.when), answers)

    def derivation(self) -> str | None:
        """The expression a Jinja default computes, e.g. "hidden_size // num_attention_heads"."""
        if isinstance(self.default, str) and "{{" in self.default:
            return self.default.strip().removeprefix("{{").removesuffix("}}").strip()
        return None


_CONDITION = re.compile(r"^\{\{\s*(?P<name>\w+)\s+(?P<op>==|!=|in|not in)\s+(?P<value>.+?)\s*\}\}$")
_OPS = {"==": "is", "!=": "is not", "in": "is", "not in": "is not"}


def _is_template(value: Any) -> bool:
    return isinstance(value, str) and ("{{" in value or "{%" in value)


def describe_condition(condition: str, answers: dict[str, Any]) -> str:
    """A copier `when` of the simple forms the interview uses, said in words."""
    match = _CONDITION.match(condition.strip())
    if match is None:
        return condition.strip().removeprefix("{{").removesuffix("}}").strip()
    name, op, value = match["name"], match["op"], match["value"]
    if value.startswith("[") and value.endswith("]"):
        value = " or ".join(v.strip() for v in value[1:-1].split(","))
    here = f" (here it is {answers[name]!r})" if name in answers else ""
    return f"{name} {_OPS[op]} {value}{here}"


@cache
def _environment() -> jinja2.Environment:
    """copier's own: sandboxed, with the Ansible filters its templates may use
    (`regex_search`, ...); undefined names raise instead of rendering empty."""
    from jinja2.sandbox import SandboxedEnvironment

    return SandboxedEnvironment(
        extensions=["jinja2_ansible_filters.AnsibleCoreFiltersExtension"],
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
    )


@cache
def _compiled(template: str) -> jinja2.Template:
    return _environment().from_string(template)


def _render(template: str, answers: dict[str, Any]) -> str:
    return _compiled(template).render(**answers)


@cache
def copier_config(root: Path | None = None) -> dict[str, Any]:
    """copier.yml, parsed once."""
    return yaml.safe_load((root or template_root()).joinpath("copier.yml").read_text())


def user_owned_files(answers: dict[str, Any]) -> list[str]:
    """copier's `_skip_if_exists` paths, rendered: files the user owns after the first render."""
    patterns = copier_config().get("_skip_if_exists", [])
    return [_render(pattern, answers) for pattern in patterns]


def parse_questions(config: dict[str, Any]) -> tuple[Question, ...]:
    """The questions of a parsed copier.yml, in file order (`_` settings skipped; a bare
    value is copier's shorthand for a default)."""
    questions = []
    for name, spec in config.items():
        if str(name).startswith("_"):
            continue
        spec = spec if isinstance(spec, dict) else {"default": spec}
        questions.append(
            Question(
                name=str(name),
                type=spec.get("type", "str"),
                help=str(spec.get("help", name)),
                default=spec.get("default"),
                choices=tuple(str(c) for c in spec.get("choices", ()) if not isinstance(c, dict)),
                when=spec.get("when", True),
                validator=spec.get("validator") or "",
            )
        )
    return tuple(questions)


@cache
def load_questions(root: Path | None = None) -> tuple[Question, ...]:
    """Questions of this template's copier.yml, in file order."""
    return parse_questions(copier_config(root))


def asked_questions() -> tuple[Question, ...]:
    return tuple(q for q in load_questions() if q.asked)


def with_computed(answers: dict[str, Any]) -> dict[str, Any]:
    """`answers` plus copier.yml's computed values (`when: false`), each evaluated in file
    order against the answers and computed values before it, as copier does."""
    known: dict[str, Any] = {}
    for item in load_questions():
        if item.asked:
            if item.name in answers:
                known[item.name] = answers[item.name]
        else:
            known[item.name] = item.default_for(known)
    return {**answers, **known}


def question(name: str) -> Question:
    return next(q for q in load_questions() if q.name == name)
