"""`ascend-scaffold update` / `check-update` against a template repo with two release tags.

The template repo is this repository's copier.yml + templates/ + scaffold/migrations/,
committed and tagged v1.0.0, then changed and tagged v2.0.0:
- modeling.py (template-rendered, merged three-way): a docstring line changes;
- README.md (template-owned): the pip install line changes, and a new last line;
- a new question `profile_dir` (default "profile");
- config YAML: `scheduler_config.max_new_tokens` renamed to `max_decode_steps`, carried into
  the user-owned config by a `_migrations` entry running scaffold/migrations/rename_config_key.py.

A second, lean template repo (v1.0.0, then v2.0.0 removing triage.py) serves the "no
data loss, no tracebacks" cases: each asserts the exit code, the one-line message, and that
nothing else in the package changed.
"""

from __future__ import annotations

import importlib
import pkgutil
import shutil
import subprocess
from collections import Counter
from pathlib import Path

import copier
import pytest
import typer
import yaml
from typer.testing import CliRunner

import scaffold
import scaffold.update as update_mod
from scaffold.migrations.rename_config_key import main as rename_main
from scaffold.migrations.rename_config_key import rename_key
from scaffold.template_source import dirty_template_files, record_source, recorded_source
from scaffold.update.cli import check_update, update

REPO = Path(__file__).resolve().parents[1]
PKG = "demo"
GRAPH = f"src/{PKG}/modeling.py"
CONFIG = f"config/{PKG}.yaml"
TOKENIZER = f"src/{PKG}/triage.py"
ANSWERS = ".copier-answers.yml"
GIT_ENV = {
    "GIT_AUTHOR_NAME": "t",
    "GIT_AUTHOR_EMAIL": "t@example.invalid",
    "GIT_COMMITTER_NAME": "t",
    "GIT_COMMITTER_EMAIL": "t@example.invalid",
}

V1_DOC = "Everything that changes between decode steps (positions, cache write index, sequence"
V2_DOC = "Everything that changes between decode steps (v2: positions, cache index, sequence"
V1_PIP = 'pip install torch==2.13.0 && pip install -e ".[test]"\n'
V2_PIP = 'pip install torch==2.13.0 && pip install -e ".[test]" --no-build-isolation\n'
USER_PIP = 'uv pip install torch==2.13.0 && uv pip install -e ".[test]"\n'
USER_TAIL = "\n\ndef my_helper() -> int:  # user code in a template-owned file\n    return 1\n"
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


def make_template(tpl: Path, tag: str = "v1.0.0") -> Path:
    """A template git repo: this repository's copier.yml, templates/ and migrations, tagged."""
    tpl.mkdir(parents=True)
    shutil.copy(REPO / "copier.yml", tpl / "copier.yml")
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    shutil.copytree(REPO / "templates", tpl / "templates", ignore=ignore)
    shutil.copytree(REPO / "scaffold/migrations", tpl / "scaffold/migrations", ignore=ignore)
    git(tpl, "init", "-q")
    git(tpl, "add", "-A")
    git(tpl, "commit", "-qm", tag)
    git(tpl, "tag", tag)
    return tpl


def commit_package(pkg: Path, message: str = "rendered") -> Path:
    git(pkg, "init", "-q")
    git(pkg, "add", "-A")
    git(pkg, "commit", "-qm", message)
    return pkg


def render_package(src: Path, pkg: Path, ref: str | None = "v1.0.0") -> Path:
    copier.run_copy(str(src), pkg, data={"model_name": PKG}, vcs_ref=ref, defaults=True, quiet=True)
    return commit_package(pkg)


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """(template repo, committed v1 package with the user's edits), built once."""
    with pytest.MonkeyPatch.context() as mp:
        for key, value in GIT_ENV.items():
            mp.setenv(key, value)
        root = tmp_path_factory.mktemp("update")
        tpl = make_template(root / "template")

        model = tpl / "templates/model"
        edit(model / "src/{{ model_name }}/modeling.py.jinja", V1_DOC, V2_DOC)
        readme = model / "README.md.jinja"
        edit(readme, V1_PIP, V2_PIP)
        readme.write_text(readme.read_text() + "\nProfiles go to `{{ profile_dir }}/`.\n")
        edit(model / "config/{{ model_name }}.yaml.jinja", "max_new_tokens:", "max_decode_steps:")
        edit(tpl / "copier.yml", "\nmodel_name:\n", "\n" + MIGRATION + "\nmodel_name:\n")
        (tpl / "copier.yml").write_text((tpl / "copier.yml").read_text() + NEW_QUESTION)
        git(tpl, "commit", "-qam", "v2")
        git(tpl, "tag", "v2.0.0")

        pkg = render_package(tpl, root / "pristine")
        # The user's edits: one per ownership case.
        edit(pkg / "README.md", V1_PIP, USER_PIP)  # overlaps v2's change -> conflict
        (pkg / GRAPH).write_text((pkg / GRAPH).read_text() + USER_TAIL)  # far from v2's change
        edit(pkg / CONFIG, "max_new_tokens: 32", "max_new_tokens: 64  # longer runs")  # user-owned
        git(pkg, "commit", "-qam", "user edits")
        yield tpl, pkg


def make_invoke():
    app = typer.Typer()
    app.command("update")(update)
    app.command("check-update")(check_update)
    runner = CliRunner(env={"COLUMNS": "200", "TERMINAL_WIDTH": "200"})

    def invoke(*args: str, input: str | None = None):
        return runner.invoke(app, [str(a) for a in args], input=input)

    return invoke


@pytest.fixture
def env(world, tmp_path, monkeypatch):
    """A fresh copy of the v1 package, the app, and git identity for copier's commits."""
    for key, value in GIT_ENV.items():
        monkeypatch.setenv(key, value)
    tpl, pristine = world
    pkg = tmp_path / PKG
    shutil.copytree(pristine, pkg, symlinks=True)
    return tpl, pkg, make_invoke()


@pytest.fixture(scope="module")
def lean_world(tmp_path_factory):
    """(template repo whose v2.0.0 only removes triage.py, committed v1.0.0 package)."""
    with pytest.MonkeyPatch.context() as mp:
        for key, value in GIT_ENV.items():
            mp.setenv(key, value)
        root = tmp_path_factory.mktemp("lean")
        tpl = make_template(root / "template")
        git(tpl, "rm", "-q", "templates/model/src/{{ model_name }}/triage.py.jinja")
        git(tpl, "commit", "-qm", "v2: no triage.py")
        git(tpl, "tag", "v2.0.0")
        yield tpl, render_package(tpl, root / "pristine")


@pytest.fixture
def lean(lean_world, tmp_path, monkeypatch):
    """A fresh copy of the lean v1 package (own template: no trust question), the app."""
    for key, value in GIT_ENV.items():
        monkeypatch.setenv(key, value)
    tpl, pristine = lean_world
    monkeypatch.setattr("scaffold.update.trust.template_root", lambda: tpl)
    pkg = tmp_path / PKG
    shutil.copytree(pristine, pkg, symlinks=True)
    return tpl, pkg, make_invoke()


def status(pkg: Path) -> set[str]:
    """`git status --porcelain` lines: what the command changed in the package."""
    return set(git(pkg, "status", "--porcelain", "--untracked-files=all").splitlines())


def one_line(text: str) -> str:
    assert text.count("\n") == 1 and text.endswith("\n"), text
    return text


def answers(pkg: Path) -> dict:
    return yaml.safe_load((pkg / ".copier-answers.yml").read_text())


def test_update_to_v2_keeps_user_edits_and_marks_the_overlap(env, monkeypatch):
    tpl, pkg, invoke = env
    monkeypatch.setattr("scaffold.update.trust.template_root", lambda: tpl)  # "our own" template
    monkeypatch.setattr("scaffold.update.cli._interactive", lambda: True)  # answers on stdin
    before = answers(pkg)

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
    # The user-owned config keeps the user's value and comment, under the key renamed by
    # the migration.
    config = (pkg / CONFIG).read_text()
    assert "  max_decode_steps: 64  # longer runs\n" in config
    assert "max_new_tokens:" not in config  # the key is renamed (comments may mention it)
    assert f"changed   {CONFIG}" in result.stdout

    # Unresolved: check-update says so (exit 1), update refuses (exit 2). Resolve (keep the
    # user's line), commit.
    result = invoke("check-update", pkg)
    assert result.exit_code == 1 and "unresolved update conflicts in README.md" in result.stderr
    result = invoke("update", pkg, "--vcs-ref", "v2.0.0")
    assert result.exit_code == 2 and "unresolved conflicts" in one_line(result.stderr)
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


# --- no data loss, no tracebacks -------------------------------------------------------------


def test_removed_upstream_file_edited_here_is_kept_as_a_conflict(lean):
    _tpl, pkg, invoke = lean
    mine = (pkg / TOKENIZER).read_text() + "\n\ndef my_triage_tweak() -> None:\n    pass\n"
    (pkg / TOKENIZER).write_text(mine)
    git(pkg, "commit", "-qam", "user edit of a file v2 removes")

    result = invoke("update", pkg, "--defaults")
    assert result.exit_code == 1, result.output
    assert f"  conflict  {TOKENIZER}  (removed upstream, edited here: kept)\n" in result.stdout
    assert "2 file(s) changed, 1 conflict(s)" in result.stdout
    assert "were kept: git add to keep, or git rm to drop; then commit" in one_line(result.stderr)
    assert (pkg / TOKENIZER).read_text() == mine  # nothing lost
    assert answers(pkg)["_commit"] == "v2.0.0"
    # Nothing else changed; the kept file is unmerged ("deleted by them"), so it cannot be
    # committed unnoticed and the next update refuses until it is resolved.
    assert status(pkg) == {f" M {ANSWERS}", f"UD {TOKENIZER}"}
    result = invoke("update", pkg, "--defaults")
    assert result.exit_code == 2 and TOKENIZER in one_line(result.stderr)

    git(pkg, "add", TOKENIZER, ANSWERS)  # keep it
    git(pkg, "commit", "-qm", "update to v2, keeping my triage")
    result = invoke("check-update", pkg)
    assert result.exit_code == 0 and not result.stderr, result.output


def test_removed_upstream_file_not_edited_is_deleted(lean):
    _tpl, pkg, invoke = lean
    result = invoke("update", pkg, "--defaults")
    assert result.exit_code == 0, result.output
    assert f"  changed   {TOKENIZER}\n" in result.stdout and "0 conflict(s)" in result.stdout
    assert not result.stderr
    assert status(pkg) == {f" M {ANSWERS}", f" D {TOKENIZER}"}


@pytest.mark.parametrize("leftover", ["README.md", "README.md.rej"])
def test_update_refuses_committed_conflict_leftovers(lean, leftover):
    _tpl, pkg, invoke = lean
    markers = "<<<<<<< before updating\nmine\n=======\ntheirs\n>>>>>>> after updating\n"
    path = pkg / leftover
    path.write_text((path.read_text() if path.exists() else "") + markers)
    git(pkg, "add", "-A")
    git(pkg, "commit", "-qm", "oops: git commit -a with conflicts")
    head = git(pkg, "rev-parse", "HEAD")

    result = invoke("update", pkg, "--defaults")
    assert result.exit_code == 2, result.output
    assert one_line(result.stderr).startswith(
        f"error: {pkg} has unresolved conflicts from an earlier update in {leftover}: "
    )
    assert status(pkg) == set() and git(pkg, "rev-parse", "HEAD") == head

    result = invoke("check-update", pkg)
    assert result.exit_code == 1, result.output
    assert "update available" in result.stdout  # still reported
    assert one_line(result.stderr).startswith(f"error: unresolved update conflicts in {leftover}:")
    assert status(pkg) == set()


def _point_answers(pkg: Path, key: str, value: str) -> None:
    path = pkg / ANSWERS
    data = yaml.safe_load(path.read_text())
    path.write_text(path.read_text().replace(f"{key}: {data[key]}\n", f"{key}: {value}\n"))
    git(pkg, "commit", "-qam", f"point {key} at {value}")


@pytest.mark.parametrize("kind", ["plain copy", "bare without .git"])
def test_src_path_that_copier_cannot_read_as_git(lean, tmp_path, kind):
    tpl, pkg, invoke = lean
    if kind == "plain copy":  # e.g. an installed template, or a copy without .git
        src = tmp_path / "copy"
        shutil.copytree(tpl, src, ignore=shutil.ignore_patterns(".git"))
        expected = f"error: template source {src} (from _src_path) is not a git repository, "
    else:
        src = tmp_path / "bare"
        git(tmp_path, "clone", "-q", "--bare", str(tpl), str(src))
        expected = f"error: template repository {src} (from _src_path) is a bare repository "
    _point_answers(pkg, "_src_path", str(src))

    result = invoke("update", pkg, "--defaults")
    assert result.exit_code == 2, result.output
    assert one_line(result.stderr).startswith(expected)
    assert "uncommitted template changes" not in result.stderr
    assert status(pkg) == set()


@pytest.mark.parametrize(
    ("commit", "expected"),
    [
        ("v1.0.0-3-gdeadbee", "commit deadbee is not there"),
        ("v0.9.0", "no such tag or commit there"),
    ],
)
def test_commit_unknown_in_the_template_repository(lean, commit, expected):
    tpl, pkg, invoke = lean
    _point_answers(pkg, "_commit", commit)
    result = invoke("update", pkg, "--defaults")
    assert result.exit_code == 2, result.output
    message = one_line(result.stderr)
    assert message.startswith(
        f"error: _commit {commit} in {pkg / ANSWERS} is unknown in the template repository {tpl}: "
    )
    assert expected in message and f"git -C {tpl} fetch --tags" in message
    assert status(pkg) == set()


def test_unknown_vcs_ref_names_the_tags(lean):
    tpl, pkg, invoke = lean
    result = invoke("update", pkg, "--defaults", "--vcs-ref", "nosuchtag")
    assert result.exit_code == 2, result.output
    assert result.stderr == (
        f"error: template ref 'nosuchtag' not found in {tpl} (tags: v1.0.0, v2.0.0)\n"
    )
    assert status(pkg) == set()


def test_without_a_terminal_update_names_only_the_questions_that_apply(env):
    _tpl, pkg, invoke = env  # v2 adds profile_dir; the 8 rope_* do not apply (rope none)
    result = invoke("update", pkg, "--trust")  # CliRunner's stdin is no terminal
    assert result.exit_code == 2, result.output
    assert result.stderr == (
        "error: template v2.0.0 asks new question(s) profile_dir, and no terminal is attached "
        "to ask them; pass --defaults to answer them with their defaults, or run in a terminal\n"
    )
    assert not result.stdout
    assert status(pkg) == set()


def test_update_reads_the_package_and_the_remote_once(env, monkeypatch):
    tpl, pkg, invoke = env
    monkeypatch.setattr("scaffold.update.trust.template_root", lambda: tpl)
    calls: Counter[str] = Counter()
    names = ("read_package", "require_clean_git", "_ls_remote", "template_file")

    def counting(name, real):
        def counted(*args, **kwargs):
            calls[name] += 1
            return real(*args, **kwargs)

        return counted

    steps = [update_mod] + [
        importlib.import_module(f"{update_mod.__name__}.{info.name}")
        for info in pkgutil.iter_modules(update_mod.__path__)
    ]
    for name in names:
        real = next(getattr(m, name) for m in steps if hasattr(m, name))
        for module in steps:  # the defining module and every one that imported it
            if getattr(module, name, None) is real:
                monkeypatch.setattr(module, name, counting(name, real))
    result = invoke("update", pkg, "--defaults")
    assert result.exit_code == 1, result.output  # v2's README conflict
    assert "v1.0.0 -> v2.0.0" in result.stdout
    assert calls == dict.fromkeys(names, 1)


# --- packages rendered by a wheel-installed CLI, or from a dirty checkout ----------------------


def test_package_rendered_from_an_installed_template_updates_from_its_repository(
    tmp_path, monkeypatch
):
    for key, value in GIT_ENV.items():
        monkeypatch.setenv(key, value)
    tpl = make_template(tmp_path / "template", tag="v0.2.0")
    wheel = tmp_path / "site-packages/scaffold/_template"  # as packed by pyproject's force-include
    wheel.mkdir(parents=True)
    shutil.copy(tpl / "copier.yml", wheel / "copier.yml")
    shutil.copytree(tpl / "templates", wheel / "templates")
    edit(tpl / "templates/model/src/{{ model_name }}/modeling.py.jinja", V1_DOC, V2_DOC)
    git(tpl, "commit", "-qam", "v0.3.0")
    git(tpl, "tag", "v0.3.0")
    remote = tmp_path / "remote/ascend-scaffold.git"  # a local bare repo stands in for the URL
    git(tmp_path, "clone", "-q", "--bare", str(tpl), str(remote))

    monkeypatch.setattr("scaffold.template_source.template_root", lambda: wheel)
    monkeypatch.setattr(scaffold, "__version__", "0.2.0")
    monkeypatch.setenv("ASCEND_SCAFFOLD_TEMPLATE_URL", str(remote))
    pkg = tmp_path / PKG
    # What render.py does: render the (non-git) template, then record the repository.
    copier.run_copy(str(wheel), pkg, data={"model_name": PKG}, defaults=True, quiet=True)
    source = recorded_source()
    assert source == (str(remote), "v0.2.0")
    record_source(pkg / ANSWERS, *source)
    commit_package(pkg)
    assert (answers(pkg)["_src_path"], answers(pkg)["_commit"]) == (str(remote), "v0.2.0")

    invoke = make_invoke()
    result = invoke("update", pkg, "--defaults")
    assert result.exit_code == 0, result.output
    assert "template v0.2.0 -> v0.3.0, 2 file(s) changed, 0 conflict(s)" in result.stdout
    assert f"  changed   {GRAPH}\n" in result.stdout and not result.stderr
    assert V2_DOC in (pkg / GRAPH).read_text()
    assert status(pkg) == {f" M {ANSWERS}", f" M {GRAPH}"}
    assert answers(pkg)["_commit"] == "v0.3.0"


def test_new_model_from_an_installed_template_records_a_reachable_source(
    tmp_path, monkeypatch, cli
):
    """The same through `new model` itself: render.py records the repository and tag."""
    for key, value in GIT_ENV.items():
        monkeypatch.setenv(key, value)
    tpl = make_template(tmp_path / "template", tag="v0.2.0")
    wheel = tmp_path / "site-packages/scaffold/_template"
    wheel.mkdir(parents=True)
    shutil.copy(tpl / "copier.yml", wheel / "copier.yml")
    shutil.copytree(tpl / "templates", wheel / "templates")
    remote = tmp_path / "remote/ascend-scaffold.git"
    git(tmp_path, "clone", "-q", "--bare", str(tpl), str(remote))
    monkeypatch.setattr("scaffold.template_source.template_root", lambda: wheel)
    monkeypatch.setattr("scaffold.render.template_root", lambda: wheel)
    monkeypatch.setattr("scaffold.cli.template_root", lambda: wheel)
    monkeypatch.setattr(scaffold, "__version__", "0.2.0")
    monkeypatch.setenv("ASCEND_SCAFFOLD_TEMPLATE_URL", str(remote))
    pkg = tmp_path / PKG
    result = cli("new", "model", "--defaults", "--model-name", PKG, pkg)
    assert result.exit_code == 0, result.output
    assert "warning" not in result.stderr
    assert (answers(pkg)["_src_path"], answers(pkg)["_commit"]) == (str(remote), "v0.2.0")
    commit_package(pkg)
    result = make_invoke()("check-update", pkg)
    assert result.exit_code == 0, result.output  # v0.2.0 is the newest tag
    monkeypatch.delenv("ASCEND_SCAFFOLD_TEMPLATE_URL")
    result = cli("new", "model", "--defaults", "--model-name", PKG, tmp_path / "other")
    assert result.exit_code == 0, result.output
    assert "knows no template repository" in result.stderr


def test_render_from_a_checkout_dirty_outside_the_template_records_a_real_commit(
    tmp_path, monkeypatch
):
    for key, value in GIT_ENV.items():
        monkeypatch.setenv(key, value)
    tpl = make_template(tmp_path / "template")
    (tpl / "NOTES.md").write_text("work in progress, not part of the template\n")
    (tpl / "scaffold/migrations/rename_config_key.py").write_text("# being rewritten\n")
    monkeypatch.setattr("scaffold.template_source.template_root", lambda: tpl)
    assert dirty_template_files(tpl) == []  # the render equals HEAD's
    pkg = tmp_path / PKG
    with pytest.warns(UserWarning, match="Dirty template"):  # as render.py renders: HEAD
        copier.run_copy(
            str(tpl), pkg, data={"model_name": PKG}, vcs_ref="HEAD", quiet=True, defaults=True
        )
    assert answers(pkg)["_commit"] != "v1.0.0"  # copier's throwaway commit
    record_source(pkg / ANSWERS, *recorded_source())
    commit_package(pkg)
    assert answers(pkg)["_commit"] == "v1.0.0"

    result = make_invoke()("check-update", pkg)
    assert result.exit_code == 0, result.output
    assert result.stdout == f"{pkg} is up to date (template v1.0.0)\n" and not result.stderr


def test_update_from_a_template_checkout_with_uncommitted_changes_is_refused(lean):
    """copier would render the working tree and record a commit for it that exists nowhere,
    after which the package could never be updated again."""
    tpl, pkg, invoke = lean
    readme = tpl / "templates/model/README.md.jinja"
    before = readme.read_text()
    readme.write_text(before + "\nAn uncommitted line.\n")
    try:
        result = invoke("update", pkg, "--defaults")
        assert result.exit_code == 2, result.output
        line = one_line(result.stderr)
        assert "uncommitted changes (templates/model/README.md.jinja)" in line, line
        assert status(pkg) == set()  # nothing written
    finally:
        readme.write_text(before)
    result = invoke("update", pkg, "--defaults")  # committed (here: reverted): it updates
    assert result.exit_code == 0, result.output
    assert answers(pkg)["_commit"] == "v2.0.0"


def test_check_update_offers_no_downgrade_to_a_package_past_the_newest_release(lean):
    """A package recorded at a bare commit after the newest release tag is up to date: the
    tag would be a downgrade, which update refuses (check-update used to offer it)."""
    tpl, pkg, invoke = lean
    (tpl / "NOTES.md").write_text("after the release\n")
    git(tpl, "add", "NOTES.md")
    git(tpl, "commit", "-qm", "after v2.0.0")
    head = git(tpl, "rev-parse", "HEAD").strip()
    try:
        text = (pkg / ANSWERS).read_text()
        (pkg / ANSWERS).write_text(text.replace("_commit: v1.0.0", f"_commit: {head}"))
        git(pkg, "commit", "-qam", "recorded at a bare commit")
        result = invoke("check-update", pkg)
        assert result.exit_code == 0, result.output
        assert "is up to date" in result.stdout
    finally:
        git(tpl, "reset", "-q", "--hard", "v2.0.0")


def test_new_questions_asked_by_update_get_their_validators(monkeypatch, capsys):
    """A bad answer to a new question is refused on the spot and asked again (as `new model`
    does), not accepted and then refused when the update has run."""
    from scaffold.questions import question
    from scaffold.update.cli import _ask_valid
    from scaffold.update.new_questions import NewQuestion

    answers = iter([0, 5000, 8])
    monkeypatch.setattr("scaffold.update.cli.ask", lambda q, default: next(answers))
    assert _ask_valid(NewQuestion(question("batch_size")), {}) == 8
    err = capsys.readouterr().err
    assert "batch_size must be >= 1, got 0" in err and "batch_size must be <= 4,096" in err


def test_update_switches_the_kv_cache_and_refuses_a_bad_change(lean):
    """--set changes a recorded answer (as copier's --data does), checked with every other
    answer first; the questions it makes apply take their defaults."""
    _tpl, pkg, invoke = lean
    for args, message in [
        (("--set", "kv_cache=pages"), "kv_cache must be one of contiguous, paged"),
        (("--set", "nope=1"), "--set nope: no such question"),
        (("--set", "family"), "--set takes KEY=VALUE"),
        (("--set", "family=moe", "--set", "num_experts=1"), "num_experts must be >= 2"),
    ]:
        result = invoke("update", pkg, "--defaults", *args)
        assert result.exit_code == 2, (args, result.output)
        assert message in one_line(result.stderr), (args, result.stderr)
        assert status(pkg) == set()
    result = invoke("update", pkg, "--defaults", "--set", "kv_cache=paged")
    assert result.exit_code == 0, result.output
    recorded = answers(pkg)
    assert recorded["kv_cache"] == "paged" and recorded["block_size"] == 128
    assert 'kv_cache: str = "paged"' in (pkg / "src" / PKG / "architecture.py").read_text()
    # already on the newest release: --set alone re-renders the same template
    git(pkg, "add", "-A")
    git(pkg, "commit", "-qm", "paged")
    result = invoke("update", pkg, "--defaults", "--set", "kv_cache=contiguous")
    assert result.exit_code == 0, result.output
    assert answers(pkg)["kv_cache"] == "contiguous"
    assert 'kv_cache: str = "contiguous"' in (pkg / "src" / PKG / "architecture.py").read_text()
