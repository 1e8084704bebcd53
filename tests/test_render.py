import subprocess
import sys
from pathlib import Path

import pytest

from scaffold.examples import EXAMPLES_DIR, example_answers, render_example, stable_text
from scaffold.interview import collect_answers
from scaffold.render import render
from scaffold.spec import validate


def files_of(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): stable_text(p)
        for p in sorted(root.rglob("*"))
        if p.is_file() and "__pycache__" not in p.parts and ".egg-info" not in str(p)
    }


def render_answers(dest: Path, **overrides) -> Path:
    render(validate(collect_answers(overrides, defaults=True)), dest)
    return dest


def test_two_renders_are_byte_identical(tmp_path):
    a = render_answers(tmp_path / "a")
    b = render_answers(tmp_path / "b")
    assert files_of(a) == files_of(b)
    raw_a = (a / "src/llama_tiny/modeling.py").read_bytes()
    assert raw_a == (b / "src/llama_tiny/modeling.py").read_bytes()


@pytest.mark.parametrize("name", sorted(example_answers()))
def test_generated_examples_match_a_fresh_render(tmp_path, name):
    fresh = tmp_path / name
    render_example(example_answers()[name], fresh)
    committed = EXAMPLES_DIR / name
    expected, actual = files_of(fresh), files_of(committed)
    assert sorted(actual) == sorted(expected), "file list differs: run python -m scaffold.examples"
    stale = [path for path in expected if expected[path] != actual[path]]
    assert not stale, f"stale example files {stale}: run python -m scaffold.examples"


def test_rendered_code_is_ruff_clean(tmp_path):
    roots = [
        render_answers(tmp_path / "qk", model_name="qk", qk_norm=True, attention_bias=True),
        render_answers(tmp_path / "l3", model_name="l3", rope_scaling="llama3"),
        render_answers(tmp_path / "lin", model_name="lin", rope_scaling="linear"),
        render_answers(tmp_path / "yarn", model_name="yarn", rope_scaling="yarn"),
        render_answers(tmp_path / "ge", model_name="ge", exe_mode="ge_graph"),
        render_answers(tmp_path / "eager", model_name="eager", exe_mode="eager"),
        render_answers(tmp_path / "long", model_name="a_model_name_of_forty_characters_for_ruff"),
        render_answers(tmp_path / "longest", model_name="m" * 64, rope_scaling="yarn"),
        EXAMPLES_DIR,
    ]
    for root in roots:
        for command in (["check"], ["format", "--check"]):
            result = subprocess.run(
                [sys.executable, "-m", "ruff", *command, "--no-cache", str(root)],
                capture_output=True,
                text=True,
            )
            assert result.returncode == 0, result.stdout + result.stderr


def test_only_the_chosen_architecture_is_rendered(tmp_path):
    plain_root = render_answers(tmp_path / "a")
    plain = (plain_root / "src/llama_tiny/layers/attention.py").read_text()
    qwen3 = render_answers(tmp_path / "b", model_name="q3", qk_norm=True, attention_bias=True)
    # the flags are ModelArgs fields (read at run time); the layers hold no Jinja branches
    assert "{%" not in plain and plain == (qwen3 / "src/q3/layers/attention.py").read_text()
    assert "qk_norm: bool = False" in (plain_root / "src/llama_tiny/architecture.py").read_text()
    arch = (qwen3 / "src/q3/architecture.py").read_text()
    assert "qk_norm: bool = True" in arch and "attention_bias: bool = True" in arch


@pytest.mark.parametrize("kind", ["none", "linear", "llama3", "yarn"])
def test_the_rope_scaling_is_data_the_runtime_registry_reads(tmp_path, kind):
    """RoPE scaling is a ModelArgs field, its kind's maths the runtime's registry
    (ascend_runtime/layers/rope_scaling.py): no per-kind file, only that kind's parameters."""
    from ascend_runtime.layers.rope_scaling import ROPE_SCALINGS

    root = render_answers(tmp_path / "p", rope_scaling=kind)
    layers = sorted(p.name for p in (root / "src/llama_tiny/layers").iterdir())
    assert layers == ["__init__.py", "attention.py", "decoder.py"]
    arch = (root / "src/llama_tiny/architecture.py").read_text()
    assert f'rope_scaling: str = "{kind}"' in arch and kind in ROPE_SCALINGS
    assert ("rope_scaling_factor" in arch) == (kind != "none")
    assert ("rope_beta_fast" in arch) == (kind == "yarn")


@pytest.mark.parametrize(
    ("overrides", "dynamic_line"),
    [
        ({}, "enable_dynamic_graph: true"),
        ({"exe_mode": "ge_graph"}, "enable_dynamic_graph: false"),
        ({"exe_mode": "eager"}, "enable_dynamic_graph: false"),
    ],
)
def test_config_records_dynamic_with_its_reason(tmp_path, overrides, dynamic_line):
    root = render_answers(tmp_path / "p", **overrides)
    text = (root / "config/llama_tiny.yaml").read_text()
    lines = text.splitlines()
    index = next(i for i, line in enumerate(lines) if line.strip() == dynamic_line)
    assert lines[index - 1].strip().startswith("#"), "the dynamic setting needs its reason"


def test_rendered_package_imports_without_torch_npu(tmp_path):
    root = render_answers(tmp_path / "p")
    code = "import llama_tiny, ascend_runtime.graph, llama_tiny.runner; import sys; " + (
        "assert 'torch_npu' not in sys.modules and 'torchair' not in sys.modules"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        env={"PYTHONPATH": str(root / "src"), "PATH": ""},
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("overrides", [{}, {"exe_mode": "ge_graph", "qk_norm": True}])
def test_rendered_code_passes_ascend_scaffold_check(tmp_path, overrides):
    from scaffold.hazards import check_paths

    root = render_answers(tmp_path / "p", **overrides)
    result = check_paths([root])
    assert not result.errors
    assert not result.hazards, [f"{h.path}:{h.line} {h.rule} {h.message}" for h in result.hazards]
