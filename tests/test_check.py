"""Tests for `ascend-scaffold check` (scaffold/hazards, scaffold/hazards/cli.py)."""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import threading
from collections import Counter
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from scaffold.hazards import RULES, analyze_source, check_paths, render
from scaffold.hazards.cli import check
from scaffold.hazards.design import choose_mode
from scaffold.hazards.rules import EFFECTS, resolve

FIXTURES = Path(__file__).parent / "fixtures" / "check"
EXPECT = re.compile(r"#\s*expect:\s*(GM\d{3})")
app = typer.Typer()
app.command()(check)
runner = CliRunner()


def invoke(*args: str):
    return runner.invoke(app, [str(a) for a in args])


def found(*paths: Path) -> set[tuple[str, int, str]]:
    return {(Path(h.path).name, h.line, h.rule) for h in check_paths(list(paths)).hazards}


def expected(path: Path) -> set[tuple[str, int, str]]:
    """(file, line, rule) for every rule an `# expect: GM00x [GM00y ...]` comment names."""
    lines = path.read_text().splitlines()
    return {
        (path.name, i, rule)
        for i, line in enumerate(lines, 1)
        if (m := EXPECT.search(line))
        for rule in re.findall(r"GM\d{3}", line[m.start() :])
    }


# -- rule table ----------------------------------------------------------------------------------
def test_rule_table_is_complete():
    assert len(RULES) >= 10
    for rule_id, rule in RULES.items():
        assert rule.id == rule_id and re.fullmatch(r"GM\d{3}", rule_id)
        assert rule.effect in EFFECTS
        assert rule.title and rule.why and rule.fix and rule.detects
        assert resolve(rule.slug) == rule_id and resolve(rule_id.lower()) == rule_id
    assert len({r.slug for r in RULES.values()}) == len(RULES)


def test_checker_does_not_import_torch():
    for src in (Path(__file__).parents[1] / "scaffold" / "hazards").glob("*.py"):
        for node in ast.walk(ast.parse(src.read_text())):
            if isinstance(node, ast.Import):
                assert all(a.name.split(".")[0] != "torch" for a in node.names), src
            if isinstance(node, ast.ImportFrom):
                assert (node.module or "").split(".")[0] != "torch", src


# -- fixtures: one positive and one negative per rule --------------------------------------------
@pytest.mark.parametrize("rule", sorted(RULES))
def test_positive_fixture(rule):
    path = FIXTURES / f"{rule.lower()}_pos.py"
    want = expected(path)
    assert want and {r for _, _, r in want} == {rule}
    assert found(path) == want


@pytest.mark.parametrize("rule", sorted(RULES))
def test_negative_fixture(rule):
    assert found(FIXTURES / f"{rule.lower()}_neg.py") == set()


def test_host_values_the_issue_listed_are_found():
    """int()/float()/bool() of a tensor, np.asarray, print, a branch on a tensor row, a
    tensor-valued slice bound, and a module-level helper called from forward; not int() of
    a shape or of an unannotated list parameter's element."""
    path = FIXTURES / "host_values_pos.py"
    assert found(path) == expected(path)


def test_eval_mode_dropout_is_not_a_capture_failure():
    """nn.Dropout modules and F.dropout(..., training=self.training / module.training) are
    identity in eval mode: 1,939 of 2,064 GM004 hits over transformers' models were these."""
    src = (
        "import torch.nn.functional as F\n"
        "from torch import nn\n"
        "class M(nn.Module):\n"
        "    def __init__(self):\n"
        "        self.drop = nn.Dropout(0.1)\n"
        "    def forward(self, x):\n"
        "        x = self.drop(F.dropout(x, 0.1, training=self.training))\n"
        "        return F.dropout(x, 0.1)\n"
    )
    assert hazards_of(src) == [(8, "GM004")]  # the one whose training defaults to True


def test_what_follows_a_return_at_inference_is_training_only():
    """drop_path (timm, transformers: 44 DropPath hits over transformers' models) returns its
    input unless training; its torch.rand runs only in training. Random ops before such a
    return, or in a function without one, are still found."""
    src = (
        "import torch\n"
        "from torch import nn\n"
        "def drop_path(x, p=0.0, training=False):\n"
        "    noise = torch.randn_like(x)\n"
        "    if p == 0.0 or not training:\n"
        "        return x + noise\n"
        "    return x * torch.rand(x.shape[0], 1)\n"
        "class M(nn.Module):\n"
        "    def forward(self, x):\n"
        "        x = drop_path(x, 0.1, self.training)\n"
        "        if not self.training:\n"
        "            return x\n"
        "        return torch.rand_like(x)\n"
        "class N(nn.Module):\n"
        "    def forward(self, x):\n"
        "        if x.shape[0] > 1 and not self.training:\n"
        "            return x\n"
        "        return torch.rand_like(x)\n"
    )
    # line 4: before the return; line 18: N's early return is not taken for one row
    assert hazards_of(src) == [(4, "GM004"), (18, "GM004")]


# -- focused heuristics ---------------------------------------------------------------------------
def hazards_of(source: str) -> list[tuple[int, str]]:
    return sorted((h.line, h.rule) for h in analyze_source(source)[0])


def test_forward_scope_follows_self_method_calls():
    src = (
        "class M:\n"
        "    def forward(self, x):\n"
        "        return self._helper(x)\n"
        "    def _helper(self, x):\n"
        "        return x.item()\n"
        "    def unrelated(self, x):\n"
        "        return x.item()\n"
    )
    assert hazards_of(src) == [(5, "GM002")]


def test_decode_and_forward_named_functions_are_scope():
    src = (
        "def decode(x):\n    return x.item()\n"
        "def eager_attention_forward(x):\n    return x.tolist()\n"
        "def prefill_forward(x):\n    return x.item()\n"
    )
    assert hazards_of(src) == [(2, "GM002"), (4, "GM002")]


def test_fa_list_rule_is_cross_file(tmp_path):
    (tmp_path / "attn.py").write_text(
        "import torch_npu\n"
        "def forward(q, k, v, lens):\n"
        "    return torch_npu.npu_fused_infer_attention_score(q, k, v, actual_seq_lengths=lens)\n"
    )
    (tmp_path / "graph.py").write_text(
        "import torch\n"
        "def build(m, backend):\n"
        "    return torch.compile(m, backend=backend, dynamic=False)\n"
    )
    assert found(tmp_path) == {("graph.py", 3, "GM010")}
    assert found(tmp_path / "graph.py") == set()


# -- suppression -----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("comment", "left"),
    [
        ("# graph-ok: GM002", []),
        ("# graph-ok: host-sync", []),
        ("# graph-ok: GM004, GM002 value is needed on host", []),
        ("# graph-ok", []),
        ("# GRAPH-OK:GM002", []),
        ("# graph-ok: GM004", [(2, "GM002")]),
        ("# noqa", [(2, "GM002")]),
    ],
)
def test_suppression(tmp_path, comment, left):
    path = tmp_path / "m.py"
    path.write_text(f"def forward(x):\n    return x.item()  {comment}\n")
    result = check_paths([path])
    assert [(h.line, h.rule) for h in result.hazards] == left
    assert result.suppressed == (0 if left else 1)


def test_suppression_inside_string_is_ignored(tmp_path):
    path = tmp_path / "m.py"
    path.write_text('def forward(x):\n    return x.item(), "# graph-ok"\n')
    assert [h.rule for h in check_paths([path]).hazards] == ["GM002"]


# -- CLI ----------------------------------------------------------------------------------------
def test_cli_clean_exit_0():
    result = invoke(FIXTURES / "gm001_neg.py", FIXTURES / "gm002_neg.py")
    assert result.exit_code == 0, result.output
    assert "No graph-mode hazards found in 2 file(s)" in result.stdout


def test_cli_hazards_exit_1_text_format():
    path = FIXTURES / "gm002_pos.py"
    result = invoke(path)
    assert result.exit_code == 1
    first = result.stdout.splitlines()[0]
    assert re.fullmatch(rf"{re.escape(str(path))}:6:\d+: GM002 graph break: .+", first)
    assert "Found 5 graph-mode hazard(s) in 1 of 1 file(s): GM002 x5" in result.stdout


def test_cli_walks_directories(tmp_path):
    (tmp_path / "pkg" / "sub").mkdir(parents=True)
    (tmp_path / "pkg" / "sub" / "m.py").write_text("def forward(x):\n    return x.item()\n")
    (tmp_path / "pkg" / "notes.txt").write_text("x.item()")
    (tmp_path / "pkg" / ".hidden").mkdir()
    (tmp_path / "pkg" / ".hidden" / "m.py").write_text("def forward(x):\n    return x.item()\n")
    result = invoke(tmp_path / "pkg")
    assert result.exit_code == 1
    assert "in 1 of 1 file(s)" in result.stdout


def test_cli_missing_path_exit_2(tmp_path):
    result = invoke(tmp_path / "nope.py")
    assert result.exit_code == 2
    assert "nope.py: no such file or directory" in result.stderr


def test_cli_syntax_error_exit_2(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("def forward(x):\n    return x.item()\n\ndef broken(:\n    pass\n")
    result = invoke(bad, FIXTURES / "gm002_pos.py")
    assert result.exit_code == 2
    assert f"{bad}:4: syntax error:" in result.stderr
    assert "GM002" in result.stdout  # the other file is still reported


def test_cli_bad_format_exit_2():
    result = invoke(FIXTURES / "gm001_neg.py", "--format", "yaml")
    assert result.exit_code == 2


def test_cli_json_format():
    result = invoke(FIXTURES / "gm008_pos.py", "--format", "json")
    assert result.exit_code == 1
    rows = json.loads(result.stdout)
    assert len(rows) == 5
    assert list(rows[0]) == [
        "rule",
        "name",
        "title",
        "effect",
        "path",
        "line",
        "col",
        "function",
        "message",
        "code",
        "why",
        "fix",
    ]
    assert {r["rule"] for r in rows} == {"GM008"}
    assert rows[0]["effect"] == "capture failure" and "npugraph_ex" in rows[0]["fix"]
    assert rows[0]["code"].startswith("a = torch.compile(")


def test_cli_markdown_design_doc_to_output(tmp_path):
    out = tmp_path / "design.md"
    result = invoke(FIXTURES, "--format", "markdown", "--output", out)
    assert result.exit_code == 1
    doc = out.read_text()
    assert result.stdout == ""
    for heading in (
        "## 1. 概述 / Summary",
        "## 2. 修改文件 / Files to change",
        "## 3. 逐项修改 / Per-hazard changes",
        "## 4. 影响评估 / Impact",
        "## 5. Prefill/Decode 拆分 / Prefill/decode split plan",
        "## 6. 图模式选择 / Mode and dynamic setting",
    ):
        assert heading in doc
    assert "gm001_pos.py" in doc and "scatter_update_" in doc
    assert "- Mode: **npugraph_ex**" in doc and "- dynamic: **True**" in doc


def test_mode_choice(tmp_path):
    plain = tmp_path / "plain.py"
    plain.write_text("def forward(x):\n    return x\n")
    assert choose_mode(check_paths([plain]))[:2] == ("npugraph_ex", True)
    assert choose_mode(check_paths([FIXTURES / "gm010_neg.py"]))[:2] == ("ge_graph", False)
    doc = render(check_paths([plain]), "markdown")
    assert "No file needs changes." in doc


GENERATED_STYLE = {
    "model.py": """
import torch
import torch_npu


class Attention(torch.nn.Module):
    def __init__(self, max_batch, max_seq, heads, dim):
        super().__init__()
        self.register_buffer("k_cache", torch.zeros(max_batch, max_seq, heads, dim))
        self.register_buffer("v_cache", torch.zeros(max_batch, max_seq, heads, dim))

    def forward(self, x, position_ids, kv_len, actual_seq_lengths_kv, cos, sin, is_prefill):
        if is_prefill:
            return self.prefill(x, position_ids, kv_len, actual_seq_lengths_kv, cos, sin)
        return self.decode(x, position_ids, kv_len, actual_seq_lengths_kv, cos, sin)

    def prefill(self, x, position_ids, kv_len, actual_seq_lengths_kv, cos, sin):
        seq_len = x.size(1)
        self.k_cache[:, :seq_len] = x
        return x

    def decode(self, x, position_ids, kv_len, actual_seq_lengths_kv, cos, sin):
        self.k_cache.index_put_((torch.arange(x.shape[0]), kv_len), x[:, 0])
        torch_npu.scatter_update_(self.v_cache, kv_len, x, 1)
        out, _ = torch_npu.npu_fused_infer_attention_score(
            x, self.k_cache, self.v_cache, actual_seq_lengths_kv=actual_seq_lengths_kv
        )
        return out * cos + out * sin
""",
    "graph.py": """
import torch

FALLBACK_BACKEND = "aot_eager"  # host without NPU only


def compile_decode(model, has_npu: bool):
    backend = "npugraph_ex" if has_npu else FALLBACK_BACKEND
    return torch.compile(model.decode, backend=backend, dynamic=True, fullgraph=True)
""",
}


def test_generated_style_code_checks_clean(tmp_path):
    for name, source in GENERATED_STYLE.items():
        (tmp_path / name).write_text(source)
    result = invoke(tmp_path)
    assert result.exit_code == 0, result.stdout


# -- real model sources from transformers (installed, never imported) ----------------------------
def transformers_model(name: str) -> Path:
    spec = importlib.util.find_spec("transformers")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("transformers is not installed (test-only dependency)")
    path = Path(spec.submodule_search_locations[0]) / "models" / name / f"modeling_{name}.py"
    if not path.exists():
        pytest.skip(f"{path} not in this transformers version")
    return path


def rule_counts(path: Path) -> Counter:
    result = check_paths([path])
    assert not result.errors
    return Counter(h.rule for h in result.hazards)


@pytest.mark.parametrize("name", ["llama", "qwen2"])
def test_transformers_dense_models(name):
    counts = rule_counts(transformers_model(name))
    # eager_attention_forward's dropout follows module.training: identity in eval, no hazard
    assert counts["GM004"] == 0, counts
    # Modern HF code: Cache objects (no torch.cat in the model file), no compile calls,
    # no host syncs, position_ids computed only as an `if position_ids is None` fallback.
    for rule in ("GM001", "GM002", "GM007", "GM008", "GM009", "GM010"):
        assert counts[rule] == 0, (rule, counts)
    assert sum(counts.values()) <= 10, counts


def test_transformers_mixtral_moe():
    path = transformers_model("mixtral")
    counts = rule_counts(path)
    # expert dispatch: `.nonzero()` over the expert hit mask and torch.where(expert_mask[i])
    assert counts["GM005"] >= 2
    assert counts["GM004"] == 0, counts  # its jitter noise is under `if self.training`
    for rule in ("GM001", "GM008", "GM009", "GM010"):
        assert counts[rule] == 0, (rule, counts)
    doc = render(check_paths([path]), "markdown")
    assert "fixed-shape masking" in doc and "modeling_mixtral.py" in doc


# -- robustness: user input gives one error line and an exit code, never a traceback or a hang ---
HAZARD = "def forward(x):\n    return x.item()\n"
IS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0
needs_fifo = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="os.mkfifo: POSIX only")


def run_check(cli, *args):
    """``ascend-scaffold check ARGS`` in-process: the exit code, stdout and stderr lines."""
    result = cli("check", *args)
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exc_info
    assert "Traceback" not in result.output
    return result.exit_code, result.stdout, result.stderr.splitlines()


def run_check_subprocess(*args, timeout=30):
    """The real CLI in a child process with a timeout, so a hang fails the test instead."""
    cmd = [sys.executable, "-c", "from scaffold.cli import app; app()", "check", *map(str, args)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    assert "Traceback" not in done.stderr + done.stdout
    return done.returncode, done.stdout, done.stderr.splitlines()


def deep(kind: str, n: int) -> str:
    return {
        "parens": "x = " + "(" * n + "1" + ")" * n + "\n",
        "list": "x = " + "[" * n + "]" * n + "\n",
        "unary": "x = " + "-" * n + "1\n",
        "binop": "x = " + " + ".join(["a"] * n) + "\n",
    }[kind]


@pytest.mark.parametrize(
    ("kind", "n"), [("parens", 5000), ("list", 5000), ("unary", 100000), ("binop", 100000)]
)
def test_too_deep_for_the_parser_is_one_error_line(cli, tmp_path, kind, n):
    bad = tmp_path / "deep.py"
    bad.write_text(deep(kind, n))
    other = tmp_path / "other.py"
    other.write_text(HAZARD)
    code, out, err = run_check(cli, bad, other)
    assert code == 2
    assert len(err) == 1 and re.fullmatch(
        rf"{re.escape(str(bad))}(: cannot analyse: expression nested too deeply"
        r"|:1: syntax error: too many nested parentheses)",
        err[0],
    ), err
    assert f"{other}:2:" in out  # the other file is still checked
    assert len(check_paths([bad]).errors) == 1


@pytest.mark.parametrize(
    "body",
    [
        " + ".join(["x"] * 1200) + " + x.item()",  # BinOp chain: ~1200 levels
        "x" + "[0]" * 1200 + ".item()",  # Subscript chain
        "torch.arange(x.shape[" + "-" * 1200 + "1]) + x.item()",  # unary chain (dim_value)
        "x[" + " & ".join(["mask"] * 1200) + "].item()",  # &-chain boolean mask (_is_mask_index)
        "(" + "x.item() if x.sum() > 0 else " * 400 + "x)",  # nested conditional expressions
        "lambda: " * 1000 + "x.item()",
    ],
)
def test_deep_source_that_parses_is_analysed(cli, tmp_path, body):
    """Thousands of levels parse fine; the analysis must not recurse per AST level."""
    path = tmp_path / "deep.py"
    path.write_text(f"def forward(x, mask):\n    return {body}\n")
    ast.parse(path.read_text())  # the source itself is valid
    code, out, err = run_check(cli, path)
    assert code == 1 and err == [], err
    assert "GM002" in out


@pytest.mark.parametrize(
    ("where", "exc", "why"),
    [
        ("parse", RecursionError("maximum recursion depth exceeded during ast construction"), None),
        ("parse", MemoryError(), None),
        # Python < 3.11.? raises ValueError (not SyntaxError) for a NUL byte in the source
        ("parse", ValueError("source code string cannot contain null bytes"), "syntax error"),
        ("analyse", RecursionError("maximum recursion depth exceeded"), None),  # backstop
    ],
)
def test_parser_and_analyser_failures_are_per_file_errors(
    cli, tmp_path, monkeypatch, where, exc, why
):
    """Whatever the Python version's parser raises, and any RecursionError left in an analyser
    helper, is one error line for that file."""
    from scaffold.hazards import analyzer

    path = tmp_path / "m.py"
    path.write_text(HAZARD)
    real_parse = ast.parse

    def parse(source, filename="<unknown>", *args, **kwargs):  # fails for this file only
        if filename == str(path):
            raise exc
        return real_parse(source, filename, *args, **kwargs)

    def boom(*args, **kwargs):
        raise exc

    if where == "parse":
        monkeypatch.setattr(ast, "parse", parse)
    else:
        monkeypatch.setattr(analyzer, "seq_len_hazards", boom)
    code, _, err = run_check(cli, path)
    reason = f"{why}: {exc}" if why else "cannot analyse: expression nested too deeply"
    assert (code, err) == (2, [f"{path}: {reason}"])


@needs_fifo
def test_fifo_is_not_read(tmp_path):
    fifo = tmp_path / "x.py"
    os.mkfifo(fifo)
    code, _, err = run_check_subprocess(fifo)
    assert (code, err) == (2, [f"{fifo}: not a regular file"])


@needs_fifo
def test_fifo_in_directory_walk_is_not_read(tmp_path):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    os.mkfifo(pkg / "x.py")
    (pkg / "model.py").write_text(HAZARD)
    code, out, err = run_check_subprocess(pkg)
    assert (code, err) == (2, [f"{pkg / 'x.py'}: not a regular file"])
    assert f"{pkg / 'model.py'}:2:" in out


@needs_fifo
def test_read_source_refuses_a_fifo_without_blocking(tmp_path):
    """A path that becomes a FIFO after it was listed: opened non-blocking, refused by fstat."""
    from scaffold.hazards.runner import SourceError, read_source

    fifo = tmp_path / "x.py"
    os.mkfifo(fifo)
    outcome = []

    def target():
        try:
            read_source(fifo)
        except SourceError as exc:
            outcome.append(str(exc))

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(30)
    if thread.is_alive():  # unblock the reader so the test process can exit
        with open(fifo, "w"):
            pass
        pytest.fail("read_source blocked on a FIFO")
    assert outcome == ["not a regular file"]


def test_pep263_latin1_source_is_decoded(cli, tmp_path):
    path = tmp_path / "latin.py"
    path.write_bytes(
        b"# -*- coding: latin-1 -*-\ndef forward(x):\n    return x.item()  # caf\xe9\n"
    )
    code, out, err = run_check(cli, path, "--format", "json")
    assert (code, err) == (1, [])
    assert json.loads(out)[0]["code"] == "return x.item()  # caf\u00e9"


def test_utf8_bom_and_crlf_source(cli, tmp_path):
    path = tmp_path / "bom.py"
    path.write_bytes(b"\xef\xbb\xbfdef forward(x):\r\n    return x.item()  # graph-ok\r\n")
    code, out, err = run_check(cli, path)
    assert (code, err) == (0, [])
    assert "(1 suppressed)" in out


@pytest.mark.parametrize(
    ("data", "why"),
    [
        (b"x = '\xe9'\n", r"cannot decode: invalid utf-8 data at byte 5 .*"),
        (bytes(range(256)) * 4, r"cannot decode: .*"),  # a binary file named .py
        (b"# coding: no-such-codec\nx = 1\n", r"cannot decode: unknown encoding: no-such-codec"),
        (b"# coding: rot13\nx = 1\n", r"cannot decode with 'rot13': .*"),
        (b"x = 1\x00\n", r"syntax error: .*null bytes"),
    ],
)
def test_undecodable_or_binary_source_is_one_error_line(cli, tmp_path, data, why):
    path = tmp_path / "bad.py"
    path.write_bytes(data)
    code, out, err = run_check(cli, path)
    assert code == 2
    assert len(err) == 1 and re.fullmatch(rf"{re.escape(str(path))}(:\d+)?: {why}", err[0]), err
    assert "No graph-mode hazards found" not in out


def test_summary_never_claims_clean_next_to_errors(cli, tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("def broken(:\n")
    good = tmp_path / "good.py"
    good.write_text("x = 1\n")
    code, out, err = run_check(cli, bad, good)
    assert code == 2 and err == [f"{bad}:1: syntax error: invalid syntax"]
    assert (
        out
        == "Incomplete: 1 error(s), see stderr; no graph-mode hazards in the 1 file(s) checked\n"
    )
    code, out, _ = run_check(cli, bad)
    assert (code, out) == (2, "Nothing checked: 1 error(s), see stderr\n")
    code, out, _ = run_check(cli, bad, FIXTURES / "gm002_pos.py")
    assert code == 2 and out.endswith("GM002 x5; incomplete: 1 error(s), see stderr\n")
    doc = render(check_paths([bad, good]), "markdown")
    assert "No file needs changes." not in doc
    assert "**Incomplete:** 1 path(s) could not be checked" in doc and "syntax error" in doc


def test_empty_directory_exit_2(cli, tmp_path):
    (tmp_path / "notes.txt").write_text("x.item()")
    (tmp_path / ".hidden").mkdir()
    (tmp_path / ".hidden" / "m.py").write_text(HAZARD)
    code, out, err = run_check(cli, tmp_path)
    assert (code, err) == (2, [f"error: no Python files found under {tmp_path}"])
    assert out == "Nothing checked: 1 error(s), see stderr\n"


def test_every_path_failed_exit_2(cli, tmp_path):
    for name in ("a.py", "b.py"):
        (tmp_path / name).write_text("def (:\n")
    code, _, err = run_check(cli, tmp_path / "a.py", tmp_path / "b.py")
    assert code == 2 and len(err) == 2


def test_symlink_loops_in_a_walk_are_not_followed(tmp_path):
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "sub" / "m.py").write_text(HAZARD)
    os.symlink("..", pkg / "sub" / "up")
    os.symlink(".", pkg / "self")
    code, out, err = run_check_subprocess(pkg)
    assert (code, err) == (1, [])
    assert "in 1 of 1 file(s)" in out


@pytest.mark.parametrize(
    ("make", "why"),
    [
        (lambda p: os.symlink(p.parent / "missing.py", p), "broken symbolic link"),
        (lambda p: os.symlink(p, p), "cannot access: Too many levels of symbolic links"),
        (lambda p: None, "no such file or directory"),
    ],
)
def test_unusable_path_is_one_error_line(cli, tmp_path, make, why):
    path = tmp_path / "m.py"
    make(path)
    for args in ([path], [tmp_path]):  # by name, and found in a directory walk
        if args == [tmp_path] and why == "no such file or directory":
            continue
        code, _, err = run_check(cli, *args)
        assert (code, err) == (2, [f"{path}: {why}"])


@pytest.mark.skipif(IS_ROOT, reason="running as root: chmod 000 does not stop root reading")
def test_unreadable_file_and_directory(cli, tmp_path):
    locked = tmp_path / "locked.py"
    locked.write_text(HAZARD)
    locked.chmod(0)
    closed = tmp_path / "closed"
    closed.mkdir()
    (closed / "m.py").write_text(HAZARD)
    closed.chmod(0)
    try:
        code, _, err = run_check(cli, tmp_path)
    finally:
        closed.chmod(0o755)
    assert code == 2
    assert sorted(err) == [
        f"{closed}: cannot read directory: Permission denied",
        f"{locked}: cannot read: Permission denied",
    ]


def test_unreadable_file_and_directory_simulated(cli, tmp_path, monkeypatch):
    """The same as above for root too: os.open / os.scandir fail with EACCES."""
    from scaffold.hazards import runner

    locked = tmp_path / "locked.py"
    locked.write_text(HAZARD)
    closed = tmp_path / "closed"
    closed.mkdir()
    (closed / "m.py").write_text(HAZARD)
    real_open, real_scandir = os.open, os.scandir

    def denied(real, target):
        def call(path, *args, **kwargs):
            if os.fspath(path) == str(target):
                raise PermissionError(13, "Permission denied", os.fspath(path))
            return real(path, *args, **kwargs)

        return call

    monkeypatch.setattr(runner.os, "open", denied(real_open, locked))
    monkeypatch.setattr(os, "scandir", denied(real_scandir, closed))
    code, _, err = run_check(cli, tmp_path)
    assert code == 2
    assert sorted(err) == [
        f"{closed}: cannot read directory: Permission denied",
        f"{locked}: cannot read: Permission denied",
    ]


def test_directory_named_py_is_walked_not_read(cli, tmp_path):
    (tmp_path / "odd.py").mkdir()
    (tmp_path / "odd.py" / "m.py").write_text(HAZARD)
    code, out, err = run_check(cli, tmp_path)
    assert (code, err) == (1, [])
    assert "in 1 of 1 file(s)" in out


def test_same_file_twice_is_checked_once(cli, tmp_path):
    path = tmp_path / "m.py"
    path.write_text(HAZARD)
    code, out, _ = run_check(cli, path, tmp_path, path)
    assert code == 1 and "Found 1 graph-mode hazard(s) in 1 of 1 file(s)" in out


def test_control_characters_in_file_names_stay_on_one_line(cli, tmp_path):
    path = tmp_path / "a\nb.py"
    path.write_text(HAZARD)
    code, out, _ = run_check(cli, tmp_path)
    assert code == 1
    assert out.splitlines()[0].startswith(ascii(str(path)) + ":2:")


@pytest.mark.parametrize(
    ("target", "why"),
    [
        (lambda d: d, "Is a directory"),
        (lambda d: d / "no" / "such" / "design.md", "No such file or directory"),
        (lambda d: d / "m.py", None),
    ],
)
def test_output_that_cannot_be_written(cli, tmp_path, target, why):
    path = tmp_path / "m.py"
    path.write_text(HAZARD)
    out = target(tmp_path)
    code, stdout, err = run_check(cli, path, "-o", out)
    assert code == 2 and stdout == ""
    if why is None:
        assert err == [f"error: --output {out} is one of the checked files"]
        assert path.read_text() == HAZARD
    else:
        assert err == [f"error: cannot write {out}: {why}"]


def _example_sources(name: str) -> list[Path]:
    from scaffold.examples import EXAMPLES_DIR

    return sorted((EXAMPLES_DIR / name / "src").rglob("*.py"))


@pytest.mark.parametrize("name", ["llama_tiny", "qwen3_moe", "mixtral_ge"])
def test_examples_have_no_graph_hazards(name):
    result = check_paths(_example_sources(name))
    assert result.errors == [] and result.hazards == [], [h.message for h in result.hazards]


def test_a_data_dependent_moe_dispatch_is_flagged(tmp_path):
    """In the MoE block's forward, a per-expert count with torch.bincount (output sized by
    the largest id) is what `check` flags; the example routes with fixed-size tensors."""
    package = tmp_path / "src"
    shutil.copytree(_example_sources("qwen3_moe")[0].parent, package / "qwen3_moe")
    block = package / "qwen3_moe" / "layers" / "moe.py"
    routed = "        weights, expert_ids = self.route(tokens)\n"
    assert routed in block.read_text()
    assert check_paths(sorted(package.rglob("*.py"))).hazards == []
    counted = routed + "        weights = weights * torch.bincount(expert_ids.flatten()).sum()\n"
    block.write_text(block.read_text().replace(routed, counted))
    assert "GM005" in {h.rule for h in check_paths(sorted(package.rglob("*.py"))).hazards}
