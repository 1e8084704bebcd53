"""Read the interview from copier.yml so the CLI and copier ask the same questions."""

from __future__ import annotations

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
        if isinstance(self.default, str) and "{{" in self.default:
            return self.coerce(_render(self.default, answers))
        return self.coerce(self.default)

    def coerce(self, value: Any) -> Any:
        """Convert an answer (from YAML, a flag or a prompt) to the question's type."""
        try:
            if self.type == "bool":
                if isinstance(value, bool):
                    return value
                text = str(value).strip().lower()
                if text in _TRUE | _FALSE:
                    return text in _TRUE
                raise ValueError
            if self.type == "int" and isinstance(value, float | bool):
                raise ValueError
            result = self.py_type(value)
        except (TypeError, ValueError):
            raise UserError(f"{self.name} must be {self.type}, got {value!r}") from None
        if self.choices and result not in self.choices:
            raise UserError(f"{self.name} must be one of {', '.join(self.choices)}, got {result!r}")
        return result


def _render(template: str, answers: dict[str, Any]) -> str:
    environment = jinja2.Environment(undefined=jinja2.StrictUndefined)
    return environment.from_string(template).render(**answers)


@cache
def load_questions(root: Path | None = None) -> tuple[Question, ...]:
    """Questions of copier.yml in file order (settings starting with `_` skipped)."""
    data = yaml.safe_load((root or template_root()).joinpath("copier.yml").read_text())
    questions = []
    for name, spec in data.items():
        if name.startswith("_"):
            continue
        questions.append(
            Question(
                name=name,
                type=spec.get("type", "str"),
                help=spec.get("help", name),
                default=spec.get("default"),
                choices=tuple(spec.get("choices", ())),
                when=spec.get("when", True),
            )
        )
    return tuple(questions)


def asked_questions() -> tuple[Question, ...]:
    return tuple(q for q in load_questions() if q.asked)
