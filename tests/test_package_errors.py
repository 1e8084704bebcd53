"""A rendered package answers bad input with one `error:` line on stderr and exit 2, never a
traceback: flags, the YAML config, the checkpoint (safetensors + config.json), lengths that
do not fit the KV cache. Its own default config runs, whatever max_seq_len it was rendered
with.

Most cases call the package's `runner.main` in-process (one torch import for the module);
the end-to-end ones run `python -m <pkg>.runner` as a user would.
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from scaffold.cli import collect_answers
from scaffold.render import render
from scaffold.spec import validate

torch = pytest.importorskip("torch")
safetensors_torch = pytest.importorskip("safetensors.torch")

PKG = "errpkg"
MAX_SEQ_LEN = 64
TINY = {
    "hidden_size": 64,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "vocab_size": 256,
    "max_seq_len": MAX_SEQ_LEN,
    "exe_mode": "eager",
}
HF_CONFIG = {
    "model_type": "llama",
    "vocab_size": 256,
    "hidden_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "intermediate_size": 128,
    "max_position_embeddings": MAX_SEQ_LEN,
    "rms_norm_eps": 1e-6,
    "rope_theta": 10000.0,
    "tie_word_embeddings": False,
}
K_PROJ = "model.layers.0.self_attn.k_proj.weight"
UP_PROJ = "model.layers.1.mlp.up_proj.weight"


def render_package(dest: Path, **answers) -> Path:
    render(validate(collect_answers({**TINY, **answers}, defaults=True)), dest)
    return dest


def run_module(dest: Path, name: str, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(dest / "src"), "TORCH_DEVICE_BACKEND_AUTOLOAD": "0"}
    return subprocess.run(
        [sys.executable, "-m", f"{name}.runner", *args],
        cwd=dest,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def one_error_line(stderr: str) -> str:
    assert "Traceback" not in stderr, stderr
    lines = stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), stderr
    return lines[0]


@pytest.fixture(scope="module")
def package(tmp_path_factory):
    """(package dir, its imported runner module), rendered once."""
    dest = render_package(tmp_path_factory.mktemp("pkg") / PKG, model_name=PKG)
    sys.path.insert(0, str(dest / "src"))
    try:
        yield dest, importlib.import_module(f"{PKG}.runner")
    finally:
        sys.path.remove(str(dest / "src"))
        for name in [m for m in sys.modules if m == PKG or m.startswith(f"{PKG}.")]:
            del sys.modules[name]


@pytest.fixture
def runner(package, capsys, monkeypatch):
    """runner(*argv) -> (exit code, stdout, stderr), in-process."""
    dest, module = package
    monkeypatch.delenv("TASK_QUEUE_ENABLE", raising=False)  # the runner sets it
    monkeypatch.chdir(dest)

    def call(*argv: str):
        try:
            code = module.main([str(a) for a in argv])
        except SystemExit as exc:  # argparse
            code = exc.code
        out = capsys.readouterr()
        return code, out.out, out.err

    return call


def config_file(dest: Path, tmp_path: Path, **sections) -> Path:
    """The package's shipped YAML with `sections` merged in."""
    raw = yaml.safe_load((dest / "config" / f"{PKG}.yaml").read_text())
    for section, values in sections.items():
        raw.setdefault(section, {}).update(values)
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def hf_tensors() -> dict:
    g = torch.Generator().manual_seed(0)

    def rand(*shape):
        return torch.randn(*shape, generator=g) * 0.05

    tensors = {
        "model.embed_tokens.weight": rand(256, 64),
        "model.norm.weight": torch.ones(64),
        "lm_head.weight": rand(256, 64),
    }
    for i in range(2):
        p = f"model.layers.{i}."
        tensors |= {
            p + "self_attn.q_proj.weight": rand(64, 64),
            p + "self_attn.k_proj.weight": rand(32, 64),
            p + "self_attn.v_proj.weight": rand(32, 64),
            p + "self_attn.o_proj.weight": rand(64, 64),
            p + "mlp.gate_proj.weight": rand(128, 64),
            p + "mlp.up_proj.weight": rand(128, 64),
            p + "mlp.down_proj.weight": rand(64, 128),
            p + "input_layernorm.weight": torch.ones(64),
            p + "post_attention_layernorm.weight": torch.ones(64),
        }
    return tensors


def checkpoint(dest, tmp_path, *, config_json=None, tensors=None, **model_config) -> Path:
    """A tiny llama checkpoint dir and a YAML config that loads it; returns the YAML."""
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    (ckpt / "config.json").write_text(json.dumps(HF_CONFIG) if config_json is None else config_json)
    safetensors_torch.save_file(
        hf_tensors() if tensors is None else tensors, ckpt / "model.safetensors"
    )
    section = {"model_path": str(ckpt), "with_ckpt": True, "dtype": "float32", **model_config}
    return config_file(dest, tmp_path, model_config=section)


def truncate(file: Path) -> None:
    data = file.read_bytes()
    file.write_bytes(data[: len(data) // 2])


def corrupt_header(file: Path) -> None:
    data = file.read_bytes()
    file.write_bytes(data[:8] + b"{not json" + data[17:])


# --- 1. lengths beyond max_seq_len (prefill [0, P) + one position a decode step) ---------


@pytest.mark.parametrize(
    ("flags", "names"),
    [
        (["--prompt-len", "64", "--steps", "1"], ["--prompt-len (64)", "--steps (1)", "= 65"]),
        (["--prompt-len", "60", "--steps", "5"], ["--prompt-len (60)", "--steps (5)", "= 65"]),
        (["--token-ids", ",".join(["7"] * 65), "--steps", "1"], ["--token-ids length (65)"]),
    ],
)
def test_lengths_beyond_max_seq_len(package, runner, flags, names):
    dest, _ = package
    code, _, err = runner("--config", f"config/{PKG}.yaml", *flags)
    line = one_error_line(err)
    assert code == 2
    assert all(name in line for name in names), line
    assert f"max_seq_len ({MAX_SEQ_LEN})" in line


def test_yaml_lengths_beyond_max_seq_len_name_both_keys(package, runner, tmp_path):
    dest, _ = package
    path = config_file(
        dest,
        tmp_path,
        data_config={"input_truncated_len": 60},
        scheduler_config={"max_new_tokens": 10},
    )
    code, _, err = runner("--config", path)
    line = one_error_line(err)
    assert code == 2
    assert "data_config.input_truncated_len (60)" in line
    assert "scheduler_config.max_new_tokens (10)" in line


@pytest.mark.parametrize("flags", [["--prompt-len", "60", "--steps", "4"], ["--token-ids", "5"]])
def test_lengths_that_fill_the_cache_exactly_run(package, runner, flags):
    """60 + 4 == max_seq_len fits, warm-up pass included; 1 + the default 32 too."""
    code, out, err = runner("--config", f"config/{PKG}.yaml", *flags)
    assert code == 0, err
    assert "decode median" in out


# --- 2. the YAML file --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "text", "needles"),
    [
        (
            "malformed",
            "model_config: [unclosed\n  a: b: c\n",
            ["bad.yaml", "invalid YAML", "line 2"],
        ),
        ("tab", "model_config:\n\texe_mode: eager\n", ["bad.yaml", "invalid YAML"]),
        ("list", "- 1\n- 2\n", ["bad.yaml", "top level must be a mapping"]),
        ("section", "data_config: 3\n", ["data_config must be a mapping"]),
        (
            "type",
            "scheduler_config:\n  max_new_tokens: many\n",
            ["scheduler_config.max_new_tokens"],
        ),
        (
            "null",
            "data_config:\n  input_truncated_len: null\n",
            ["data_config.input_truncated_len"],
        ),
        ("nan", "data_config:\n  temperature: .nan\n", ["data_config.temperature", "finite"]),
        ("inf", "data_config:\n  top_p: .inf\n", ["data_config.top_p", "finite"]),
        ("-inf", "data_config:\n  temperature: -.inf\n", ["data_config.temperature", "finite"]),
    ],
)
def test_bad_yaml(runner, tmp_path, name, text, needles):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    code, _, err = runner("--config", path)
    line = one_error_line(err)
    assert code == 2
    assert all(needle in line for needle in needles), line


def test_missing_config_file(runner, tmp_path):
    code, _, err = runner("--config", tmp_path / "missing.yaml")
    assert code == 2
    assert "missing.yaml does not exist" in one_error_line(err)


# --- 3. flags ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "flags",
    [["--steps", "-3"], ["--steps", "0"], ["--prompt-len", "0"], ["--prompt-len", "-2"]],
)
def test_non_positive_lengths_are_usage_errors(runner, flags):
    code, _, err = runner("--config", f"config/{PKG}.yaml", *flags)
    line = one_error_line(err)
    assert code == 2
    assert f"argument {flags[0]}: must be >= 1, got {flags[1]}" in line


# --- 4. safetensors files ----------------------------------------------------------------


@pytest.mark.parametrize("damage", [truncate, corrupt_header], ids=["truncated", "corrupt"])
def test_unreadable_safetensors_names_the_file(package, runner, tmp_path, damage):
    dest, _ = package
    path = checkpoint(dest, tmp_path)
    damage(tmp_path / "ckpt" / "model.safetensors")
    code, _, err = runner("--config", path, "--steps", "1")
    line = one_error_line(err)
    assert code == 2
    assert str(tmp_path / "ckpt" / "model.safetensors") in line


@pytest.mark.parametrize(
    ("key", "shape", "expected"),
    [(K_PROJ, (48, 64), (32, 64)), (UP_PROJ, (128, 48), (128, 64))],
)
def test_wrong_shaped_tensor_names_it_and_both_shapes(
    package, runner, tmp_path, key, shape, expected
):
    dest, _ = package
    tensors = hf_tensors()
    tensors[key] = torch.zeros(shape)
    path = checkpoint(dest, tmp_path, tensors=tensors)
    code, _, err = runner("--config", path, "--steps", "1")
    line = one_error_line(err)
    assert code == 2
    assert f"{key} has shape {shape}, this model needs {expected}" in line
    assert "model.safetensors" in line


def test_a_good_checkpoint_runs(package, runner, tmp_path):
    dest, _ = package
    code, out, err = runner("--config", checkpoint(dest, tmp_path), "--steps", "2")
    assert code == 0, err
    assert "tokens [" in out


# --- 5. config.json ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("{not json", "invalid JSON at line 1"),
        ("[1, 2]", "top level must be a JSON object, got list"),
        (json.dumps({**HF_CONFIG, "hidden_size": "64"}), "hidden_size must be a positive integer"),
        (json.dumps({**HF_CONFIG, "num_hidden_layers": 2.5}), "num_hidden_layers must be a pos"),
        (json.dumps({**HF_CONFIG, "rope_theta": "big"}), "rope_theta must be a finite number"),
        (json.dumps({**HF_CONFIG, "rope_scaling": "linear"}), "rope_scaling must be an object"),
        (json.dumps({**HF_CONFIG, "num_key_value_heads": 3}), "divisible by num_key_value_heads"),
    ],
)
def test_invalid_config_json_names_the_file(package, runner, tmp_path, text, needle):
    dest, _ = package
    path = checkpoint(dest, tmp_path, config_json=text)
    code, _, err = runner("--config", path, "--steps", "1")
    line = one_error_line(err)
    assert code == 2
    assert str(tmp_path / "ckpt" / "config.json") in line and needle in line, line


# --- 6. with_ckpt without a model_path ---------------------------------------------------


def test_with_ckpt_needs_a_model_path(package, runner, tmp_path):
    dest, _ = package
    path = config_file(dest, tmp_path, model_config={"with_ckpt": True, "model_path": ""})
    code, _, err = runner("--config", path, "--steps", "1")
    assert code == 2
    assert "model_config.with_ckpt is true but model_path is empty" in one_error_line(err)


# --- 7. no decode step past the cache (host-side check, before the step runs) ------------


def test_decode_step_past_the_cache_is_refused_on_the_host(package):
    _, runner_module = package
    metadata = importlib.import_module("ascend_runtime.metadata")
    tokens = torch.zeros(1, 1, dtype=torch.long)
    metadata.decode_inputs(tokens, [MAX_SEQ_LEN - 1], False, MAX_SEQ_LEN)  # the last slot
    for tensor_lengths in (False, True):
        with pytest.raises(metadata.CacheOverflowError) as error:
            metadata.decode_inputs(tokens, [MAX_SEQ_LEN], tensor_lengths, MAX_SEQ_LEN)
        assert str(error.value).startswith(
            f"decode step would write position {MAX_SEQ_LEN}, cache holds max_seq_len {MAX_SEQ_LEN}"
        )
    assert issubclass(metadata.CacheOverflowError, ValueError)


def test_run_refuses_before_writing_past_the_cache(package):
    _, runner_module = package
    config = importlib.import_module("ascend_runtime.config")
    runtime_runner = importlib.import_module("ascend_runtime.runner")
    spec = importlib.import_module(PKG).MODEL
    cfg = config.InferenceConfig()
    model = runtime_runner.build_model(spec, spec.args, cfg, torch.device("cpu"))
    with pytest.raises(config.InputError, match=r"prompt_len \(60\) \+ steps \(5\) = 65"):
        runtime_runner.run(model, cfg, prompt_len=60, steps=5)


# --- 8. the rendered defaults fit the rendered max_seq_len -------------------------------


def test_default_config_runs_end_to_end(package):
    """max_seq_len 64: the shipped YAML (prompt 32 + 32 new tokens) runs as is."""
    dest, _ = package
    text = (dest / "config" / f"{PKG}.yaml").read_text()
    assert "input_truncated_len: 32 " in text and "max_new_tokens: 32" in text
    result = run_module(dest, PKG, "--config", f"config/{PKG}.yaml")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "decode median" in result.stdout and "over 31 steps" in result.stdout


@pytest.mark.parametrize("max_seq_len", [3, 4])
def test_smallest_max_seq_len_default_config_runs(tmp_path, max_seq_len):
    """3 (the interview's minimum) fits one prompt token and two decode steps."""
    name = f"seq{max_seq_len}"
    dest = render_package(tmp_path / name, model_name=name, max_seq_len=max_seq_len)
    raw = yaml.safe_load((dest / "config" / f"{name}.yaml").read_text())
    prompt = raw["data_config"]["input_truncated_len"]
    assert prompt == max_seq_len // 2
    assert raw["scheduler_config"]["max_new_tokens"] == max_seq_len - prompt
    result = run_module(dest, name, "--config", f"config/{name}.yaml")
    assert result.returncode == 0, result.stderr[-3000:]


@pytest.mark.parametrize("max_seq_len", [3, 4, 63, 64, 65, 128, 2048])
def test_rendered_defaults_fit(tmp_path, max_seq_len):
    dest = render_package(tmp_path / "p", model_name="p", max_seq_len=max_seq_len)
    raw = yaml.safe_load((dest / "config" / "p.yaml").read_text())
    prompt = raw["data_config"]["input_truncated_len"]
    new_tokens = raw["scheduler_config"]["max_new_tokens"]
    assert prompt >= 1 and new_tokens >= 1 and prompt + new_tokens <= max_seq_len
    assert prompt == min(64, max_seq_len // 2)
    assert new_tokens == min(32, max_seq_len - prompt)


def test_errors_end_to_end_have_no_traceback(package, tmp_path):
    """The same one line through `python -m`, as a user sees it."""
    dest, _ = package
    path = checkpoint(dest, tmp_path)
    truncate(tmp_path / "ckpt" / "model.safetensors")
    result = run_module(dest, PKG, "--config", str(path), "--steps", "1")
    assert result.returncode == 2
    assert "model.safetensors" in one_error_line(result.stderr)
    result = run_module(dest, PKG, "--config", f"config/{PKG}.yaml", "--steps", "0")
    assert result.returncode == 2
    assert "--steps" in one_error_line(result.stderr)
