from pathlib import Path

import pytest
from typer.testing import CliRunner

from scaffold.cli import app

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def cli():
    runner = CliRunner(env={"COLUMNS": "200", "TERMINAL_WIDTH": "200"})

    def invoke(*args: str, input: str | None = None):
        return runner.invoke(app, [str(a) for a in args], input=input)

    return invoke
