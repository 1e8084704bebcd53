"""Render `generated_examples/<name>/` from `generated_examples/<name>.yml`.

python -m scaffold.examples          # re-render every example
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

import yaml

from .interview import collect_answers
from .render import render
from .spec import validate

EXAMPLES_DIR = Path(__file__).resolve().parents[1] / "generated_examples"
# Lines of the answers file that name this checkout, not the example.
VOLATILE_ANSWERS = ("_commit:", "_src_path:")


def example_answers() -> dict[str, Path]:
    return {path.stem: path for path in sorted(EXAMPLES_DIR.glob("*.yml"))}


def render_example(answers_file: Path, dest: Path) -> None:
    given = yaml.safe_load(answers_file.read_text()) or {}
    render(validate(collect_answers(given, defaults=True)), dest)


def stable_text(path: Path) -> str:
    """File text with the checkout-specific answers lines dropped."""
    lines = path.read_text().splitlines(keepends=True)
    if path.name == ".copier-answers.yml":
        lines = [line for line in lines if not line.startswith(VOLATILE_ANSWERS)]
    return "".join(lines)


def main() -> int:
    """Render every example outside the repository first, then swap them in: a checkout
    left clean while copier reads it records a real commit (`copier update` works)."""
    with tempfile.TemporaryDirectory() as scratch:
        rendered = {}
        for name, answers_file in example_answers().items():
            rendered[name] = Path(scratch) / name
            render_example(answers_file, rendered[name])
        for name, source in rendered.items():
            dest = EXAMPLES_DIR / name
            shutil.rmtree(dest, ignore_errors=True)
            shutil.copytree(source, dest)
            print(f"rendered {dest}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
