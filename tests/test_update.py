"""`ascend-scaffold update` / `check-update` against a template repo with two release tags.

The template repo is this repository's copier.yml + templates/ + scaffold/migrations/,
committed and tagged v1.0.0, then changed and tagged v2.0.0:
- graph.py (template-owned): the docstring's first line changes;
- README.md (template-owned): the pip install line changes, and a new last line;
- a new question `profile_dir` (default "profile");
- config YAML: `scheduler_config.max_new_tokens` renamed to `max_decode_steps`, carried into
  the user-owned config by a `_migrations` entry running scaffold/migrations/rename_config_key.py;
- extensions.py (user-owned): a new hook stub, which must NOT reach existing packages.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import copier
import pytest
import typer
import yaml
from typer.testing import CliRunner

from scaffold.migrations.rename_config_key import main as rename_main
from scaffold.migrations.rename_config_key import rename_key
from scaffold.update_cmd import check_update, update

REPO = Path(__file__).resolve().parents[1]
PKG = "demo"
GRAPH = f"src/{PKG}/graph.py"
EXT = f"src/{PKG}/extensions.py"
CONFIG = f"config/{PKG}.yaml"
GIT_ENV = {
    "GIT_AUTHOR_NAME": "t",
    "GIT_AUTHOR_EMAIL": "t@example.invalid",
    "GIT_COMMITTER_NAME": "t",
    "GIT_COMMITTER_EMAIL": "t@example.invalid",
}

V1_DOC = '"""The compile seam: `compile_decode` per exe_mode. Prefill is never compiled.'
V2_DOC = '"""The compile seam: `compile_decode` per exe_mode (v2). Prefill stays eager.'
V1_PIP = 'pip install torch==2.13.0 && pip install -e ".[test]"\n'
V2_PIP = 'pip install torch==2.13.0 && pip install -e ".[test]" --no-build-isolation\n'
USER_PIP = 'uv pip install torch==2.13.0 && uv pip install -e ".[test]"\n'
USER_TAIL = "\n\ndef my_helper() -> int:  # user code in a template-owned file\n    return 1\n"
USER_EXT = '        "transformer.wte.weight": "model.embed_tokens.weight",  # user override\n'
MIGRATION = """_migrations:
  - version: v2.0.0
    command:
      - "{{ _copier_python }}"
      - "{{ _copier_conf.src_path }}/scaffold/migrations/rename_config_key.py"
      - scheduler_config.max_new_tokens
      - scheduler_config.max_decode_steps
"""
NEW_QUESTION = """
profile_dir:
  type: str
  help: Profiler output directory
  default: profile
"""


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=cwd, check=True, capture_output=True, text=True
    ).stdout


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, f"{old!r} not in {path}"
    path.write_text(text.replace(old, new, 1))


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """(template repo, committed v1 package with the user's edits), built once."""
    with pytest.MonkeyPatch.context() as mp:
        for key, value in GIT_ENV.items():
            mp.setenv(key, value)
        root = tmp_path_factory.mktemp("update")
        tpl = root / "template"
        tpl.mkdir()
        shutil.copy(REPO / "copier.yml", tpl / "copier.yml")
        ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
        shutil.copytree(REPO / "templates", tpl / "templates", ignore=ignore)
        shutil.copytree(REPO / "scaffold/migrations", tpl / "scaffold/migrations", ignore=ignore)
        git(tpl, "init", "-q")
        git(tpl, "add", "-A")
        git(tpl, "commit", "-qm", "v1")
        git(tpl, "tag", "v1.0.0")

        model = tpl / "templates/model"
        edit(model / "src/{{ model_name }}/graph.py", V1_DOC, V2_DOC)
        readme = model / "README.md.jinja"
        edit(readme, V1_PIP, V2_PIP)
        readme.write_text(readme.read_text() + "\nProfiles go to `{{ profile_dir }}/`.\n")
        edit(model / "config/{{ model_name }}.yaml.jinja", "max_new_tokens:", "max_decode_steps:")
        ext = model / "src/{{ model_name }}/extensions.py.jinja"
        ext.write_text(ext.read_text() + "\n\ndef customize_model(model) -> None:\n    pass\n")
        edit(tpl / "copier.yml", "\nmodel_name:\n", "\n" + MIGRATION + "\nmodel_name:\n")
        (tpl / "copier.yml").write_text((tpl / "copier.yml").read_text() + NEW_QUESTION)
        git(tpl, "commit", "-qam", "v2")
        git(tpl, "tag", "v2.0.0")

        pkg = root / "pristine"
        copier.run_copy(
            str(tpl), pkg, data={"model_name": PKG}, vcs_ref="v1.0.0", defaults=True, quiet=True
        )
        git(pkg, "init", "-q")
        git(pkg, "add", "-A")
        git(pkg, "commit", "-qm", "rendered v1")
        # The user's edits: one per ownership case.
        edit(pkg / "README.md", V1_PIP, USER_PIP)  # overlaps v2's change -> conflict
        (pkg / GRAPH).write_text((pkg / GRAPH).read_text() + USER_TAIL)  # far from v2's change
        edit(pkg / CONFIG, "max_new_tokens: 32", "max_new_tokens: 64  # longer runs")  # user-owned
        edit(pkg / EXT, "    return {}\n", "    return {\n" + USER_EXT + "    }\n")  # user-owned
        git(pkg, "commit", "-qam", "user edits")
        yield tpl, pkg


@pytest.fixture
def env(world, tmp_path, monkeypatch):
    """A fresh copy of the v1 package, the app, and git identity for copier's commits."""
    for key, value in GIT_ENV.items():
        monkeypatch.setenv(key, value)
    tpl, pristine = world
    pkg = tmp_path / PKG
    shutil.copytree(pristine, pkg, symlinks=True)
    app = typer.Typer()
    app.command("update")(update)
    app.command("check-update")(check_update)
    runner = CliRunner(env={"COLUMNS": "200", "TERMINAL_WIDTH": "200"})

    def invoke(*args: str, input: str | None = None):
        return runner.invoke(app, [str(a) for a in args], input=input)

    return tpl, pkg, invoke


def answers(pkg: Path) -> dict:
    return yaml.safe_load((pkg / ".copier-answers.yml").read_text())


def test_update_to_v2_keeps_user_edits_and_marks_the_overlap(env, monkeypatch):
    tpl, pkg, invoke = env
    monkeypatch.setattr("scaffold.update.template_root", lambda: tpl)  # "our own" template
    before = answers(pkg)
    ext_before = (pkg / EXT).read_text()

    result = invoke("check-update", pkg)
    assert result.exit_code == 3, result.output
    assert "v1.0.0 -> v2.0.0" in result.stdout
    assert "new questions: profile_dir" in result.stdout

    (pkg / "scratch.txt").write_text("not committed\n")
    result = invoke("update", pkg)
    assert result.exit_code == 2
    assert "uncommitted changes" in result.stderr and "scratch.txt" in result.stderr
    assert answers(pkg)["_commit"] == "v1.0.0"
    (pkg / "scratch.txt").unlink()

    result = invoke("update", pkg, input="traces\n")
    assert result.exit_code == 1, result.output  # a conflict is left to resolve
    # Only the new question was asked.
    assert "1 new question(s)" in result.stdout
    assert "Profiler output directory" in result.stdout
    assert "Hidden size" not in result.stdout and "Model name" not in result.stdout
    after = answers(pkg)
    assert after["_commit"] == "v2.0.0"
    assert after["profile_dir"] == "traces"
    kept = ("_commit", "profile_dir")
    assert {k: v for k, v in after.items() if k not in kept} == {
        k: v for k, v in before.items() if k != "_commit"
    }

    # v2's change arrives; the non-overlapping user edit in the same file survives.
    graph = (pkg / GRAPH).read_text()
    assert V2_DOC in graph and V1_DOC not in graph
    assert graph.endswith(USER_TAIL)
    # The overlapping edit is a marked conflict holding both sides: nothing silently lost.
    readme = (pkg / "README.md").read_text()
    assert "<<<<<<< before updating" in readme and ">>>>>>> after updating" in readme
    assert USER_PIP in readme and V2_PIP in readme
    assert "Profiles go to `traces/`." in readme  # the new answer is rendered
    assert "conflict  README.md" in result.stdout
    assert f"changed   {GRAPH}" in result.stdout
    assert "1 file(s) have conflicts" in result.stderr
    # User-owned files: the extension hooks untouched (v2's new stub not merged in); the
    # config keeps the user's value and comment, under the key renamed by the migration.
    assert (pkg / EXT).read_text() == ext_before
    config = (pkg / CONFIG).read_text()
    assert "  max_decode_steps: 64  # longer runs\n" in config
    assert "max_new_tokens" not in config
    assert f"changed   {CONFIG}" in result.stdout

    # Unresolved: check-update says so. Resolve (keep the user's line), commit.
    result = invoke("check-update", pkg)
    assert result.exit_code == 0 and "unresolved update conflicts in README.md" in result.stderr
    lines = readme.splitlines(keepends=True)
    start = lines.index("<<<<<<< before updating\n")
    end = next(i for i, line in enumerate(lines) if line.startswith(">>>>>>> after updating"))
    (pkg / "README.md").write_text("".join(lines[:start] + [USER_PIP] + lines[end + 1 :]))
    git(pkg, "add", "-A")
    git(pkg, "commit", "-qm", "update to v2")

    result = invoke("check-update", pkg)
    assert result.exit_code == 0, result.output
    assert "is up to date (template v2.0.0)" in result.stdout and not result.stderr
    result = invoke("update", pkg)
    assert result.exit_code == 0 and "is up to date" in result.stdout


def test_migrations_of_a_foreign_template_need_trust(env):
    tpl, pkg, invoke = env  # template_root() is this checkout, not `tpl`: not trusted
    head = git(pkg, "rev-parse", "HEAD")
    result = invoke("update", pkg, "--defaults")
    assert result.exit_code == 2, result.output
    assert "needs trust" in result.stderr and "migrations" in result.stderr
    assert "--trust" in result.stderr
    assert git(pkg, "status", "--porcelain") == "" and git(pkg, "rev-parse", "HEAD") == head

    result = invoke("update", pkg, "--defaults", "--trust")
    assert result.exit_code == 1, result.output  # the README conflict
    assert answers(pkg)["profile_dir"] == "profile"  # --defaults: the new question's default
    assert "max_decode_steps: 64" in (pkg / CONFIG).read_text()


def test_refuses_what_is_not_an_updatable_package(env, tmp_path):
    _tpl, pkg, invoke = env
    result = invoke("update", tmp_path / "nowhere")
    assert result.exit_code == 2 and "not a directory" in result.stderr
    plain = tmp_path / "plain"
    plain.mkdir()
    for command in ("update", "check-update"):
        result = invoke(command, plain)
        assert result.exit_code == 2
        message = f"error: {plain} is not a generated package: no .copier-answers.yml\n"
        assert result.stderr == message
    shutil.rmtree(pkg / ".git")
    result = invoke("update", pkg)
    assert result.exit_code == 2 and "not in a git repository" in result.stderr


def test_rename_config_key_keeps_comments_and_is_idempotent(tmp_path, monkeypatch):
    text = (
        "# header\nmodel_config:\n  max_new_tokens: 1  # not this section\n"
        "scheduler_config:\n  batch_size: 1\n  max_new_tokens: 64  # mine\n"
    )
    new, what = rename_key(text, "scheduler_config.max_new_tokens", "scheduler_config.steps")
    assert what == "renamed"
    assert new == text.replace("  max_new_tokens: 64  # mine", "  steps: 64  # mine")
    assert rename_key(new, "scheduler_config.max_new_tokens", "scheduler_config.steps") == (
        new,
        "exists",
    )
    assert rename_key(text, "data_config.x", "data_config.y") == (text, "missing")
    with pytest.raises(ValueError, match="within a section"):
        rename_key(text, "a.b", "c.d")

    (tmp_path / "config").mkdir()
    (tmp_path / "config/a.yaml").write_text(text)
    monkeypatch.chdir(tmp_path)
    assert rename_main(["scheduler_config.max_new_tokens", "scheduler_config.steps"]) == 0
    assert rename_main(["scheduler_config.max_new_tokens", "scheduler_config.steps"]) == 0
    assert rename_main(["nodots", "x.y"]) == 2
    assert (tmp_path / "config/a.yaml").read_text() == new
