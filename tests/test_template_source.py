"""scaffold.template_source: what a render records so `copier update` finds its template.

End-to-end updates of packages recorded this way are in tests/test_update.py.
"""

from __future__ import annotations

import subprocess
from email.message import Message
from importlib import metadata
from pathlib import Path

import pytest
import yaml

import scaffold
from scaffold import template_source
from scaffold.template_source import (
    dirty_template_files,
    record_source,
    recorded_source,
    repository_url,
)

GIT_ENV = {
    "GIT_AUTHOR_NAME": "t",
    "GIT_AUTHOR_EMAIL": "t@example.invalid",
    "GIT_COMMITTER_NAME": "t",
    "GIT_COMMITTER_EMAIL": "t@example.invalid",
}
HEADER = "# Changes here will be overwritten by Copier; NEVER EDIT MANUALLY\n"


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=cwd, check=True, capture_output=True, text=True
    ).stdout


@pytest.fixture
def checkout(tmp_path, monkeypatch):
    """A tiny template checkout (copier.yml, templates/, README.md), committed and tagged."""
    for key, value in GIT_ENV.items():
        monkeypatch.setenv(key, value)
    root = tmp_path / "ascend-scaffold"
    (root / "templates/model").mkdir(parents=True)
    (root / "copier.yml").write_text("_subdirectory: templates/model\nname: x\n")
    (root / "templates/model/a.txt").write_text("a\n")
    (root / "README.md").write_text("readme\n")
    git(root, "init", "-q")
    git(root, "add", "-A")
    git(root, "commit", "-qm", "v0.2.0")
    git(root, "tag", "v0.2.0")
    return root


def fake_metadata(monkeypatch, *urls: str) -> None:
    message = Message()
    for url in urls:
        message["Project-URL"] = url
    monkeypatch.setattr(template_source.metadata, "metadata", lambda name: message)


def test_repository_url_env_then_project_urls(monkeypatch, tmp_path):
    monkeypatch.delenv("ASCEND_SCAFFOLD_TEMPLATE_URL", raising=False)
    fake_metadata(monkeypatch, "Homepage, https://h.example", "Source, https://s.example/x")
    assert repository_url() == "https://s.example/x"
    fake_metadata(monkeypatch, "Source, https://s.example/x", "Repository, https://r.example/y")
    assert repository_url() == "https://r.example/y"  # "Repository" first
    fake_metadata(monkeypatch, "Homepage, https://h.example")
    assert repository_url() is None
    monkeypatch.setenv("ASCEND_SCAFFOLD_TEMPLATE_URL", "https://env.example/z.git")
    assert repository_url() == "https://env.example/z.git"
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("ASCEND_SCAFFOLD_TEMPLATE_URL", "mirrors/ascend-scaffold.git")
    assert repository_url() == str((tmp_path / "mirrors/ascend-scaffold.git").resolve())

    monkeypatch.delenv("ASCEND_SCAFFOLD_TEMPLATE_URL")

    def missing(name):
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setattr(template_source.metadata, "metadata", missing)
    assert repository_url() is None


def test_recorded_source_for_an_installed_template(tmp_path, monkeypatch):
    installed = tmp_path / "site-packages/scaffold/_template"
    installed.mkdir(parents=True)
    monkeypatch.setattr(template_source, "template_root", lambda: installed)
    monkeypatch.setattr(scaffold, "__version__", "0.3.0")
    monkeypatch.delenv("ASCEND_SCAFFOLD_TEMPLATE_URL", raising=False)
    fake_metadata(monkeypatch, "Repository, https://git.example/ascend-scaffold")
    assert recorded_source() == ("https://git.example/ascend-scaffold", "v0.3.0")
    fake_metadata(monkeypatch)
    assert recorded_source() is None  # nowhere to update from: keep copier's record
    monkeypatch.setenv("ASCEND_SCAFFOLD_TEMPLATE_URL", "/srv/git/ascend-scaffold.git")
    assert recorded_source() == ("/srv/git/ascend-scaffold.git", "v0.3.0")


def test_recorded_source_for_a_checkout(checkout, monkeypatch):
    monkeypatch.setattr(template_source, "template_root", lambda: checkout)
    monkeypatch.setenv("ASCEND_SCAFFOLD_TEMPLATE_URL", "https://ignored.example")
    assert recorded_source() is None  # clean: copier records HEAD itself
    (checkout / "README.md").write_text("being edited\n")
    assert recorded_source() == (str(checkout), "v0.2.0")  # not copier's throwaway commit
    git(checkout, "commit", "-qam", "next")
    (checkout / "NOTES.md").write_text("untracked\n")
    head = git(checkout, "rev-parse", "--short", "HEAD").strip()
    assert recorded_source() == (str(checkout), f"v0.2.0-1-g{head}")


def test_record_source_rewrites_only_the_source_lines(tmp_path):
    answers = tmp_path / ".copier-answers.yml"
    body = "attention_bias: false\nmodel_name: demo\nrope_theta: 10000.0\n"
    answers.write_text(HEADER + "_src_path: /site-packages/scaffold/_template\n" + body)
    record_source(answers, "https://git.example/a s#c: d.git", "v0.2.0")
    text = answers.read_text()
    assert text.startswith(HEADER) and text.endswith(body)
    assert yaml.safe_load(text)["_src_path"] == "https://git.example/a s#c: d.git"
    assert text.splitlines()[1] == "_commit: v0.2.0"  # added, in copier's sorted order

    # An existing _commit, and a long _src_path that yaml folded onto a second line.
    long = "/very long/" * 12
    folded = yaml.safe_dump({"_commit": "v0.1.0-2-gabc1234", "_src_path": long})
    assert len(folded.splitlines()) > 2
    answers.write_text(HEADER + folded + body)
    record_source(answers, "/srv/git/ascend-scaffold.git", "v0.1.0")
    assert answers.read_text() == (
        HEADER + "_commit: v0.1.0\n_src_path: /srv/git/ascend-scaffold.git\n" + body
    )

    # Not copier's order, and no trailing newline: still one line each, at the first key.
    answers.write_text(HEADER + "_src_path: /a\nmodel_name: demo\n_commit: v0.0.1")
    record_source(answers, "/b", "v0.2.0")
    assert answers.read_text() == HEADER + "_commit: v0.2.0\n_src_path: /b\nmodel_name: demo\n"
    answers.write_text(HEADER + body)
    record_source(answers, "/b", "v0.2.0")
    assert answers.read_text() == HEADER + "_commit: v0.2.0\n_src_path: /b\n" + body


def test_dirty_template_files_lists_only_template_changes(checkout, tmp_path):
    assert dirty_template_files(checkout) == []
    (checkout / "README.md").write_text("outside the template\n")
    (checkout / "notes.txt").write_text("untracked, outside\n")
    assert dirty_template_files(checkout) == []
    (checkout / "templates/model/a.txt").write_text("edited\n")
    (checkout / "templates/model/b.txt.jinja").write_text("new, untracked\n")
    (checkout / "copier.yml").unlink()
    assert dirty_template_files(checkout) == [
        "copier.yml",
        "templates/model/a.txt",
        "templates/model/b.txt.jinja",
    ]
    git(checkout, "add", "-A")  # staged counts too
    assert dirty_template_files(checkout) == [
        "copier.yml",
        "templates/model/a.txt",
        "templates/model/b.txt.jinja",
    ]
    plain = tmp_path / "plain"
    plain.mkdir()
    assert dirty_template_files(plain) == []
