"""Questions a newer template asks that the package never answered."""

from __future__ import annotations

import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jinja2
import yaml

from ..errors import UserError
from ..questions import Question, parse_questions
from ..template import URL
from .package import Package, git


@dataclass(frozen=True)
class NewQuestion:
    question: Question

    @property
    def name(self) -> str:
        return self.question.name

    def applies(self, answers: dict[str, Any]) -> bool:
        try:
            return self.question.applies(answers)
        except jinja2.TemplateError:
            return True  # depends on something the answers lack: let copier decide

    def default_for(self, answers: dict[str, Any]) -> Any:
        """Rendered default, or None when it needs more than the answers to render."""
        try:
            return self.question.default_for(answers)
        except (jinja2.TemplateError, UserError):
            return None


def template_file(src: str, ref: str, path: str) -> str:
    """Text of `path` at `ref` of the template repository (local: git show; URL: a clone)."""
    if not URL.match(src):
        return git(Path(src).expanduser(), "show", f"{ref}:{path}")
    with tempfile.TemporaryDirectory(prefix="ascend-scaffold-template-") as tmp:
        branch = [] if ref == "HEAD" else ["--branch", ref]
        git(tmp, "clone", "--quiet", "--depth", "1", *branch, "--", src, "repo")
        return (Path(tmp) / "repo" / path).read_text(encoding="utf-8")


def new_questions(package: Package, ref: str) -> list[NewQuestion]:
    """Questions of the template at `ref` that the package's answers file lacks, in order.

    Only these are asked on update; every earlier answer is kept as recorded. Questions
    with `when: false` (computed values) and types the CLI cannot prompt for are left to
    copier's defaults.
    """
    config = yaml.safe_load(template_file(package.src_path, ref, "copier.yml")) or {}
    found = []
    for question in parse_questions(config):
        if question.name in package.answers or not question.asked:
            continue
        if question.type not in ("str", "int", "float", "bool"):
            continue
        found.append(NewQuestion(question))
    return found


def asked_among(answers: dict[str, Any], pending: Iterable[NewQuestion]) -> list[NewQuestion]:
    """The `pending` questions that apply when earlier new ones take their defaults (a
    question whose `when` is false for these answers is not asked, as copier would not ask
    it: e.g. the rope_* questions of a package with rope_scaling none)."""
    known = dict(answers)
    asked = []
    for new in pending:
        if new.applies(known):
            asked.append(new)
            known[new.name] = new.default_for(known)
    return asked


def asked_on_update(package: Package, ref: str) -> list[NewQuestion]:
    """The new questions of the template at `ref` that an update asks (see asked_among)."""
    return asked_among(package.answers, new_questions(package, ref))
