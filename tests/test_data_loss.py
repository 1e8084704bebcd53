"""`new model` never loses what a user wrote: no writes through links or outside DEST,
user-owned files kept, changed files backed up, all or nothing on failure and Ctrl-C."""

import os
import shutil
import subprocess
import sys

import pytest
from conftest import tree_state

from scaffold import render as render_module
from scaffold.render import BACKUP_DIR

PKG = "src/llama_tiny"


@pytest.fixture
def package(cli, tmp_path):
    dest = tmp_path / "pkg"
    result = cli("new", "model", "--defaults", dest)
    assert result.exit_code == 0, result.output
    return dest


def force(cli, dest, *flags):
    return cli("new", "model", "--defaults", "--force", *flags, dest)


def test_symlinked_file_inside_dest_is_refused(cli, tmp_path, package):
    outside = tmp_path / "outside.py"
    outside.write_text("precious\n")
    (package / PKG / "modeling.py").unlink()
    (package / PKG / "modeling.py").symlink_to(outside)
    before = tree_state(tmp_path)
    result = force(cli, package)
    assert result.exit_code == 2
    assert result.stderr.strip().splitlines() == [
        f"error: pkg/{PKG}/modeling.py is a symbolic link; refusing to write through it "
        "(remove the link or render elsewhere)"
    ]
    assert outside.read_text() == "precious\n"
    assert tree_state(tmp_path) == before


def test_symlinked_directory_inside_dest_is_refused(cli, tmp_path, package):
    elsewhere = tmp_path / "elsewhere"
    shutil.move(package / "docs", elsewhere)
    (elsewhere / "design.md").unlink()
    (package / "docs").symlink_to(elsewhere, target_is_directory=True)
    before = tree_state(tmp_path)
    result = force(cli, package)
    assert result.exit_code == 2
    assert "pkg/docs is a symbolic link" in result.stderr
    assert not (elsewhere / "design.md").exists()
    assert tree_state(tmp_path) == before


def test_dangling_symlink_inside_dest_is_refused(cli, tmp_path, package):
    (package / "README.md").unlink()
    (package / "README.md").symlink_to(tmp_path / "nowhere.md")
    before = tree_state(tmp_path)
    result = force(cli, package)
    assert result.exit_code == 2
    assert "pkg/README.md is a symbolic link" in result.stderr
    assert not (tmp_path / "nowhere.md").exists()
    assert tree_state(tmp_path) == before


def test_force_keeps_user_files_and_backs_up_edited_template_files(cli, package):
    config = package / "config/llama_tiny.yaml"
    modeling = package / PKG / "modeling.py"
    config.write_text(config.read_text() + "# my batch notes\n")
    edited = modeling.read_text() + "# my fix\n"
    modeling.write_text(edited)
    result = force(cli, package)
    assert result.exit_code == 0, result.output
    assert config.read_text().endswith("# my batch notes\n")
    assert "kept your config/llama_tiny.yaml" in result.stdout
    assert not modeling.read_text().endswith("# my fix\n")  # the template's version again
    backups = list((package / BACKUP_DIR).glob(f"*/{PKG}/modeling.py"))
    assert [b.read_text() for b in backups] == [edited]
    assert "old copies are in" in result.stdout


def test_force_over_an_identical_package_changes_nothing(cli, package):
    answers = package / ".copier-answers.yml"
    answers.write_text(answers.read_text())  # same bytes
    before = {k: v for k, v in tree_state(package).items() if k != ".copier-answers.yml"}
    result = force(cli, package)
    assert result.exit_code == 0, result.output
    after = tree_state(package)
    assert {k: v for k, v in after.items() if k in before} == before
    assert not any(k.startswith(BACKUP_DIR + "/") and k.endswith(".py") for k in after)


def test_file_where_a_directory_is_needed_writes_nothing(cli, tmp_path):
    dest = tmp_path / "d"
    dest.mkdir()
    (dest / "src").write_text("x\n")
    before = tree_state(tmp_path)
    result = cli("new", "model", "--defaults", "--force", dest)
    assert result.exit_code == 2
    assert result.stderr.strip().splitlines() == [
        "error: d/src exists and is not a directory; the package needs one there"
    ]
    assert tree_state(tmp_path) == before


def test_failure_while_placing_rolls_everything_back(cli, tmp_path, package, monkeypatch):
    (package / PKG / "weight_map.py").write_text("# edited\n")
    (package / PKG / "modeling.py").write_text("# edited\n")
    (package / "README.md").unlink()
    (package / "notes.txt").write_text("mine\n")
    before = tree_state(tmp_path)
    real_move, calls = shutil.move, []

    def move(src, dst):
        calls.append(dst)
        if len(calls) == 4:  # two backups and one file placed, then the disk is full
            raise OSError(28, "No space left on device", str(dst))
        return real_move(src, dst)

    monkeypatch.setattr(render_module.shutil, "move", move)
    result = force(cli, package)
    assert result.exit_code == 1
    assert "No space left on device" in result.stderr and "was left as it was" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert tree_state(tmp_path) == before


def test_ctrl_c_while_placing_rolls_back(cli, tmp_path, package, monkeypatch):
    (package / PKG / "weight_map.py").write_text("# edited\n")
    (package / PKG / "modeling.py").write_text("# edited\n")
    before = tree_state(tmp_path)
    real_move, calls = shutil.move, []

    def move(src, dst):
        calls.append(dst)
        if len(calls) == 3:  # both backups taken, then Ctrl-C
            raise KeyboardInterrupt
        return real_move(src, dst)

    monkeypatch.setattr(render_module.shutil, "move", move)
    result = force(cli, package)
    assert result.exit_code == 1
    assert result.stderr.strip() == "aborted: nothing was written"
    assert tree_state(tmp_path) == before


def test_ctrl_c_while_rendering_leaves_nothing(cli, tmp_path, monkeypatch):
    import copier

    def interrupted(src, dst, **kwargs):
        (dst / "src").mkdir(parents=True)
        raise KeyboardInterrupt

    monkeypatch.setattr(copier, "run_copy", interrupted)
    result = cli("new", "model", "--defaults", tmp_path / "a" / "b")
    assert result.exit_code == 1
    assert result.stderr.strip() == "aborted: nothing was written"
    assert list(tmp_path.iterdir()) == []


def test_ctrl_c_in_a_real_process_exits_1_with_the_message(tmp_path):
    """SIGINT during the interview of a real process: the documented exit 1 and message."""
    import signal
    import time

    proc = subprocess.Popen(
        [sys.executable, "-m", "scaffold.cli", "new", "model", str(tmp_path / "p")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    time.sleep(3)  # at the first prompt
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 1
    assert "aborted: nothing was written" in err and "Traceback" not in err
    assert list(tmp_path.iterdir()) == []


def test_declining_the_summary_writes_nothing(cli, tmp_path):
    from scaffold.questions import asked_questions

    asked = [
        q
        for q in asked_questions()
        if q.applies({"rope_scaling": "none", "family": "dense", "kv_cache": "contiguous"})
    ]
    result = cli("new", "model", tmp_path / "pkg", input="\n" * len(asked) + "n\n")
    assert result.exit_code == 1
    assert "design summary for llama_tiny" in result.stdout
    assert "aborted: nothing was written" in result.stderr
    assert list(tmp_path.iterdir()) == []


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only directories")
def test_read_only_parent_is_one_line(cli, tmp_path):
    parent = tmp_path / "ro"
    parent.mkdir()
    parent.chmod(0o555)
    try:
        result = cli("new", "model", "--defaults", parent / "pkg")
    finally:
        parent.chmod(0o755)
    assert result.exit_code == 2
    assert "cannot create files in" in result.stderr and "Permission denied" in result.stderr
    assert list(parent.iterdir()) == []


def test_unwritable_parent_is_one_line(cli, tmp_path, monkeypatch):
    """The same path as a read-only directory, also when running as root."""

    def denied(*args, **kwargs):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(render_module.tempfile, "TemporaryDirectory", denied)
    result = cli("new", "model", "--defaults", tmp_path / "pkg")
    assert result.exit_code == 2
    assert result.stderr.strip().splitlines() == [
        f"error: cannot create files in {tmp_path}: Permission denied"
    ]
    assert list(tmp_path.iterdir()) == []


def test_bytecode_in_the_template_is_never_rendered(cli, tmp_path, monkeypatch):
    from scaffold import template

    copy = tmp_path / "template"
    root = template.template_root()
    shutil.copytree(root / "templates", copy / "templates")
    shutil.copy(root / "copier.yml", copy / "copier.yml")
    cache = copy / "templates/model/tests/__pycache__"
    cache.mkdir()
    (cache / "conftest.cpython-311.pyc").write_bytes(b"\0")
    (copy / "templates/model/README.pyc").write_bytes(b"\0")
    monkeypatch.setattr(render_module, "template_root", lambda: copy)
    result = cli("new", "model", "--defaults", tmp_path / "pkg")
    assert result.exit_code == 0, result.output
    rendered = [p.name for p in (tmp_path / "pkg").rglob("*")]
    assert "__pycache__" not in rendered
    assert not [name for name in rendered if name.endswith((".pyc", ".pyo"))]


def test_package_tree_stays_clean_in_git_after_bytecode_and_output(package):
    def git(*args):
        return subprocess.run(
            ["git", *args], cwd=package, capture_output=True, text=True, check=True
        ).stdout

    git("init", "-q")
    git("add", "-A")
    git("-c", "user.email=a@b", "-c", "user.name=a", "commit", "-qm", "pkg")
    subprocess.run([sys.executable, "-m", "compileall", "-q", "src", "tests"], cwd=package)
    (package / "output/compile_cache").mkdir(parents=True)
    (package / "output/compile_cache/graph.bin").write_bytes(b"\0")
    (package / "src/llama_tiny.egg-info").mkdir()
    (package / ".venv").mkdir()
    assert list(package.rglob("*.pyc"))
    assert git("status", "--porcelain", "--untracked-files=all") == ""
