"""`--from-hf-config`: answers from a Hugging Face config.json, and parity of the rendered
package with transformers for every supported model_type."""

import inspect
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from scaffold.cli import new_model
from scaffold.errors import UserError
from scaffold.hf_config import SUPPORTED_MODEL_TYPES, answers_from_hf_config
from scaffold.interview import collect_answers
from scaffold.render import render
from scaffold.spec import validate

BASE = {
    "vocab_size": 1000,
    "hidden_size": 256,
    "intermediate_size": 704,
    "num_hidden_layers": 4,
    "num_attention_heads": 8,
    "num_key_value_heads": 2,
    "rms_norm_eps": 1e-5,
    "max_position_embeddings": 4096,
}


def write_config(directory: Path, **fields) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    cfg = {**BASE, **fields}
    (directory / "config.json").write_text(json.dumps({k: v for k, v in cfg.items() if v != ...}))
    return directory


def test_llama_transformers4_style(tmp_path):
    path = write_config(
        tmp_path / "Llama-3.2-Tiny",
        model_type="llama",
        rope_theta=500000.0,
        rope_scaling=None,
        tie_word_embeddings=True,
        torch_dtype="bfloat16",
        head_dim=64,
    )
    answers = answers_from_hf_config(path)
    assert answers == {
        **{k: v for k, v in BASE.items() if k in answers},
        "head_dim": 64,
        "rope_theta": 500000.0,
        "rope_scaling": "none",
        "rms_norm_eps": 1e-5,
        "tie_word_embeddings": True,
        "qk_norm": False,
        "attention_bias": False,
        "dtype": "bfloat16",
        "model_name": "llama_3_2_tiny",
    }
    assert "max_seq_len" not in answers  # 4096 >= the default: keep the default
    validate(collect_answers(answers, defaults=True))


def test_qwen2_has_qkv_bias_and_derived_head_dim(tmp_path):
    path = write_config(
        tmp_path / "q2",
        model_type="qwen2",
        rope_parameters={"rope_type": "default", "rope_theta": 1e6},
        use_sliding_window=False,
        sliding_window=4096,  # ignored by transformers when use_sliding_window is false
        layer_types=["full_attention"] * 4,
        max_position_embeddings=512,
        dtype="float32",
    )
    answers = answers_from_hf_config(path / "config.json")  # the file itself works too
    assert answers["attention_bias"] is True and answers["qk_norm"] is False
    assert answers["head_dim"] == 32 and answers["rope_theta"] == 1e6
    assert answers["max_seq_len"] == 512 and answers["dtype"] == "float32"
    assert answers["tie_word_embeddings"] is False


def test_qwen3_has_qk_norm_and_its_own_head_dim(tmp_path):
    path = write_config(
        tmp_path / "qwen3",
        model_type="qwen3",
        head_dim=128,
        attention_bias=False,
        rope_theta=1e6,
        rope_parameters={"rope_type": "default", "rope_theta": 1e6},
        sliding_window=None,
        tie_word_embeddings=True,
    )
    answers = answers_from_hf_config(path)
    assert answers["qk_norm"] is True and answers["attention_bias"] is False
    assert answers["head_dim"] == 128  # != hidden_size / heads: fine
    spec = validate(collect_answers(answers, defaults=True))
    assert spec.model_name == "qwen3"  # from the checkpoint directory's name
    assert spec.tie_word_embeddings


def test_mistral_without_sliding_window_and_defaults(tmp_path):
    path = write_config(
        tmp_path / "7b", model_type="mistral", sliding_window=None, num_key_value_heads=...
    )
    answers = answers_from_hf_config(path)
    assert answers["num_key_value_heads"] == 8  # absent: as many as query heads
    assert answers["rope_theta"] == 10000.0 and answers["tie_word_embeddings"] is False
    assert "model_name" not in answers  # `7b` is no package name: the default/flag decides


def test_llama3_rope_scaling_fills_its_answers(tmp_path):
    scaling = {
        "rope_type": "llama3",
        "factor": 32.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8192,
        "rope_theta": 500000.0,
    }
    path = write_config(tmp_path / "l31", model_type="llama", rope_parameters=scaling)
    answers = answers_from_hf_config(path)
    assert {k: v for k, v in answers.items() if k.startswith("rope_")} == {
        "rope_theta": 500000.0,
        "rope_scaling": "llama3",
        "rope_scaling_factor": 32.0,
        "rope_low_freq_factor": 1.0,
        "rope_high_freq_factor": 4.0,
        "rope_original_max_position_embeddings": 8192,
    }
    validate(collect_answers(answers, defaults=True))


def rope_answers(answers):
    return {k: v for k, v in answers.items() if k.startswith("rope_")}


def test_qwen3_yarn_fills_its_answers_with_transformers_defaults(tmp_path):
    """Qwen3's documented long-context block: factor 4 over a 32k pre-training context."""
    scaling = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}
    path = write_config(tmp_path / "q", model_type="qwen3", rope_theta=1e6, rope_scaling=scaling)
    answers = answers_from_hf_config(path)
    assert rope_answers(answers) == {
        "rope_theta": 1e6,
        "rope_scaling": "yarn",
        "rope_scaling_factor": 4.0,
        "rope_original_max_position_embeddings": 32768,
        "rope_beta_fast": 32.0,
        "rope_beta_slow": 1.0,
        "rope_attention_factor": 0.0,  # derived in the package: 0.1 * ln(4) + 1
        "rope_truncate": True,
    }
    validate(collect_answers(answers, defaults=True))


def test_yarn_factor_and_attention_factor_derived_like_transformers(tmp_path):
    """No factor: the context ratio; mscale/mscale_all_dim: their mscale ratio; a top-level
    original_max_position_embeddings wins over the scaling dict's (transformers' order)."""
    scaling = {
        "rope_type": "yarn",
        "original_max_position_embeddings": 1024,
        "mscale": 1.0,
        "mscale_all_dim": 0.5,
        "beta_fast": 16,
        "truncate": False,
    }
    path = write_config(
        tmp_path / "y",
        model_type="llama",
        rope_parameters=scaling,
        original_max_position_embeddings=512,
        max_position_embeddings=4096,
    )
    rope = rope_answers(answers_from_hf_config(path))
    assert rope["rope_original_max_position_embeddings"] == 512
    assert rope["rope_scaling_factor"] == 8.0
    log8 = math.log(8.0)
    assert rope["rope_attention_factor"] == pytest.approx((0.1 * log8 + 1) / (0.05 * log8 + 1))
    assert (rope["rope_beta_fast"], rope["rope_beta_slow"], rope["rope_truncate"]) == (
        16.0,
        1.0,
        False,
    )


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"model_type": "gpt2"}, "model_type 'gpt2' is not supported (supported: llama"),
        ({"model_type": ...}, "model_type None is not supported"),
        ({"model_type": "llama", "vocab_size": ...}, "missing field(s) vocab_size"),
        ({"model_type": "llama", "hidden_size": "big"}, "hidden_size must be a positive"),
        ({"model_type": "llama", "num_key_value_heads": 3}, "must be divisible by"),
        ({"model_type": "llama", "head_dim": 33}, "head_dim must be even"),
        (
            {"model_type": "llama", "rope_scaling": {"rope_type": "llama3", "factor": 8.0}},
            "rope_scaling (llama3) has no low_freq_factor, high_freq_factor",
        ),
        (
            {"model_type": "qwen3", "rope_parameters": {"rope_type": "dynamic", "factor": 2.0}},
            "rope_type 'dynamic' is not supported: dynamic NTK rescales RoPE with the running",
        ),
        (
            {"model_type": "llama", "rope_scaling": {"rope_type": "longrope", "factor": 2.0}},
            "rope_type 'longrope' is not supported: LongRoPE switches",
        ),
        (
            {"model_type": "qwen2", "rope_scaling": {"rope_type": "yarn", "factor": "4"}},
            "yarn factor must be a number, got '4'",
        ),
        (
            {
                "model_type": "qwen3",
                "rope_scaling": {"rope_type": "yarn", "factor": 4.0},
                "original_max_position_embeddings": 0,
            },
            "original_max_position_embeddings must be a positive integer, got 0",
        ),
        (
            {
                "model_type": "llama",
                "rope_theta": 1e4,
                "rope_parameters": {"rope_type": "default", "rope_theta": 5e5},
            },
            "rope_theta (10000.0) contradicts rope_parameters.rope_theta (500000.0)",
        ),
        ({"model_type": "llama", "partial_rotary_factor": 0.5}, "partial_rotary_factor"),
        ({"model_type": "mistral", "sliding_window": 4096}, "sliding_window=4096 is not supported"),
        (
            {
                "model_type": "qwen2",
                "use_sliding_window": True,
                "sliding_window": 4096,
                "max_window_layers": 2,  # layers 2 and 3 slide
            },
            "use_sliding_window=true (sliding_window=4096) is not supported",
        ),
        (
            {"model_type": "qwen3", "layer_types": ["full_attention", "sliding_attention"]},
            "layer_types has 1 'sliding_attention' layer(s)",
        ),
        ({"model_type": "llama", "attention_bias": True}, "also biases o_proj"),
        ({"model_type": "mistral", "hidden_act": "gelu"}, "hidden_act 'gelu' is not supported"),
        ({"model_type": "llama", "mlp_bias": True}, "mlp_bias=true is not supported"),
        ({"model_type": "llama", "rms_norm_eps": 0}, "rms_norm_eps must be a positive number"),
        ({"model_type": "llama", "tie_word_embeddings": "yes"}, "tie_word_embeddings must be"),
    ],
)
def test_bad_configs_are_user_errors(tmp_path, fields, message):
    path = write_config(tmp_path / "m", **fields)
    with pytest.raises(UserError) as error:
        answers_from_hf_config(path)
    assert message in str(error.value)
    assert "\n" not in str(error.value) and error.value.exit_code == 2


@pytest.mark.parametrize(
    ("content", "message"),
    [(None, "no Hugging Face config at"), ("{oops", "is not valid JSON"), ("[1]", "JSON object")],
)
def test_unreadable_configs(tmp_path, content, message):
    if content is not None:
        (tmp_path / "config.json").write_text(content)
    with pytest.raises(UserError, match=message):
        answers_from_hf_config(tmp_path)


@pytest.mark.skipif(
    "from_hf_config" not in inspect.signature(new_model).parameters,
    reason="--from-hf-config is not wired into the CLI yet",
)
def test_cli_flag_fills_answers_and_flags_override(cli, tmp_path):
    path = write_config(tmp_path / "ckpt", model_type="qwen3", head_dim=64)
    result = cli("new", "model", tmp_path / "out", "--from-hf-config", path, "--defaults",
                 "--model-name", "mine", "--num-hidden-layers", "2")  # fmt: skip
    assert result.exit_code == 0, result.output
    text = (tmp_path / "out/src/mine/configuration.py").read_text()
    assert "num_hidden_layers: int = 2" in text and "head_dim: int = 64" in text
    assert "self.q_norm" in (tmp_path / "out/src/mine/modeling.py").read_text()
    bad = write_config(tmp_path / "bad", model_type="gemma")
    result = cli("new", "model", tmp_path / "nothing", "--from-hf-config", bad, "--defaults")
    assert result.exit_code == 2 and "model_type 'gemma' is not supported" in result.output
    assert not (tmp_path / "nothing").exists()


# One rendered package per model_type (three more with RoPE scaling), each in a different
# decode mode, running its own transformers parity tests (prefill + 8 greedy decode steps,
# eager and compiled, fp32).
PARITY = {"llama": "npugraph_ex", "mistral": "npugraph_ex", "qwen2": "eager", "qwen3": "ge_graph"}
ROPE_SCALING = {
    "llama3": {
        "rope_type": "llama3",
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 1024,
    },
    "linear": {"rope_type": "linear", "factor": 2.0},
    "yarn": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 4096},
}
CASES = [(t, "none") for t in SUPPORTED_MODEL_TYPES] + [
    ("llama", "llama3"),
    ("qwen2", "linear"),
    ("qwen3", "yarn"),
]


@pytest.mark.slow
@pytest.mark.parametrize(("model_type", "rope_scaling"), CASES)
def test_rendered_package_matches_transformers(tmp_path, model_type, rope_scaling):
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("safetensors")
    name = {"llama": "LlamaConfig", "qwen2": "Qwen2Config", "qwen3": "Qwen3Config"}
    config_cls = getattr(transformers, name.get(model_type, "MistralConfig"))
    extra = {"sliding_window": None} if model_type == "mistral" else {}
    if rope_scaling != "none":
        extra["rope_scaling"] = ROPE_SCALING[rope_scaling]
    ckpt = tmp_path / f"hf_{model_type}"
    config_cls(
        vocab_size=512,
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        **extra,
    ).save_pretrained(ckpt)
    given = answers_from_hf_config(ckpt)
    assert given["model_name"] == f"hf_{model_type}"
    assert given["rope_scaling"] == rope_scaling
    given["exe_mode"] = PARITY[model_type]  # as a flag would, after the config's answers
    dest = tmp_path / "pkg"
    render(validate(collect_answers(given, defaults=True)), dest)
    env = {**os.environ, "PYTHONPATH": str(dest / "src")}
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-W", "ignore",
         "tests/test_hf_parity.py", "-k", f"{model_type} or not matches_transformers"],
        cwd=dest, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    tail = result.stdout[-3000:] + result.stderr[-2000:]
    assert result.returncode == 0, tail
    assert "5 passed" in result.stdout and "skipped" not in result.stdout, tail
