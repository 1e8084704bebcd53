"""Tests for `ascend-scaffold check` (scaffold/hazards, scaffold/check_cmd.py)."""

from __future__ import annotations

import ast
import importlib.util
import json
import re
from collections import Counter
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from scaffold.check_cmd import check
from scaffold.hazards import RULES, analyze_source, check_paths, render
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
    lines = path.read_text().splitlines()
    return {
        (path.name, i, m.group(1)) for i, line in enumerate(lines, 1) if (m := EXPECT.search(line))
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
    # eager_attention_forward applies nn.functional.dropout (identity in eval, still a random op)
    assert counts["GM004"] >= 1
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
    assert counts["GM004"] >= 1
    for rule in ("GM001", "GM008", "GM009", "GM010"):
        assert counts[rule] == 0, (rule, counts)
    doc = render(check_paths([path]), "markdown")
    assert "fixed-shape masking" in doc and "modeling_mixtral.py" in doc
