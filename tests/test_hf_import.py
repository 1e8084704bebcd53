"""`--from-hf-config`: the scaffold's own answers from a Hugging Face config.json (the
package name, dtype, max_seq_len, the CLI flag), and parity of the rendered package with
transformers for every supported model_type. What the shared reader accepts and refuses
is tests/test_hf_reader.py, run through the scaffold and a rendered package alike."""

import inspect
import json
import os
import subprocess
import sys

import pytest
from test_hf_reader import ACCEPTED, write_config

from scaffold.cli import new_model
from scaffold.errors import UserError
from scaffold.hf_config import SUPPORTED_MODEL_TYPES, answers_from_hf_config
from scaffold.interview import collect_answers
from scaffold.render import render
from scaffold.spec import validate


def test_llama_answers_for_the_interview(tmp_path):
    path = write_config(
        tmp_path / "Llama-3.2-Tiny", model_type="llama", torch_dtype="bfloat16", head_dim=64
    )
    answers = answers_from_hf_config(path)
    assert answers["model_name"] == "llama_3_2_tiny"  # from the checkpoint directory's name
    assert answers["dtype"] == "bfloat16"
    assert "max_seq_len" not in answers  # 4096 >= the default: keep the default
    validate(collect_answers(answers, defaults=True))


def test_short_context_sets_max_seq_len_and_dtype(tmp_path):
    path = write_config(
        tmp_path / "q2", model_type="qwen2", max_position_embeddings=512, dtype="float16"
    )
    answers = answers_from_hf_config(path / "config.json")  # the file itself works too
    assert answers["max_seq_len"] == 512 and answers["dtype"] == "float16"
    assert answers["model_name"] == "q2"


def test_a_float32_checkpoint_keeps_the_device_default(tmp_path):
    """float32 is no device dtype (the fused attention takes float16/bfloat16)."""
    path = write_config(tmp_path / "m", model_type="llama", torch_dtype="float32")
    answers = answers_from_hf_config(path)
    assert "dtype" not in answers
    assert validate(collect_answers(answers, defaults=True)).dtype == "bfloat16"


def test_unsupported_dtype_is_left_to_the_default(tmp_path):
    path = write_config(tmp_path / "m", model_type="llama", torch_dtype="float64")
    assert "dtype" not in answers_from_hf_config(path)


def test_qwen3_directory_name_becomes_the_package_name(tmp_path):
    path = write_config(tmp_path / "qwen3", model_type="qwen3", tie_word_embeddings=True)
    spec = validate(collect_answers(answers_from_hf_config(path), defaults=True))
    assert spec.model_name == "qwen3" and spec.qk_norm and spec.tie_word_embeddings


def test_no_name_from_a_directory_without_a_leading_letter(tmp_path):
    path = write_config(tmp_path / "7b", model_type="mistral", sliding_window=None)
    assert "model_name" not in answers_from_hf_config(path)  # the default/flag decides


@pytest.mark.parametrize(("fields", "expected"), ACCEPTED.values(), ids=ACCEPTED)
def test_every_accepted_config_passes_the_interviews_rules(tmp_path, fields, expected):
    """The shared reader's architecture (tests/test_hf_reader.py) is also a valid set of
    interview answers: copier.yml's validators accept it."""
    path = write_config(tmp_path / "ckpt", **fields)
    answers = answers_from_hf_config(path)
    assert {k: answers[k] for k in expected} == expected
    validate(collect_answers(answers, defaults=True))


def test_reader_errors_are_one_line_user_errors(tmp_path):
    path = write_config(tmp_path / "m", model_type="gpt2")
    with pytest.raises(UserError) as error:
        answers_from_hf_config(path)
    assert error.value.exit_code == 2 and "\n" not in str(error.value)
    assert str(error.value).startswith(str(path / "config.json"))


@pytest.mark.skipif(
    "from_hf_config" not in inspect.signature(new_model).parameters,
    reason="--from-hf-config is not wired into the CLI yet",
)
def test_cli_flag_fills_answers_and_flags_override(cli, tmp_path):
    path = write_config(tmp_path / "ckpt", model_type="qwen3", head_dim=64)
    result = cli("new", "model", tmp_path / "out", "--from-hf-config", path, "--defaults",
                 "--model-name", "mine", "--num-hidden-layers", "2")  # fmt: skip
    assert result.exit_code == 0, result.output
    text = (tmp_path / "out/src/mine/architecture.py").read_text()
    assert "num_hidden_layers: int = 2" in text and "head_dim: int = 64" in text
    code = "".join(file.read_text() for file in (tmp_path / "out/src/mine").rglob("*.py"))
    assert "self.q_norm" in code  # qwen3: QK-norm
    bad = write_config(tmp_path / "bad", model_type="gemma")
    result = cli("new", "model", tmp_path / "nothing", "--from-hf-config", bad, "--defaults")
    assert result.exit_code == 2 and "model_type 'gemma' is not supported" in result.output
    assert not (tmp_path / "nothing").exists()


# One rendered package per model_type (three more with RoPE scaling), each in a different
# decode mode, running its own transformers parity tests (prefill + 8 greedy decode steps,
# eager and compiled, fp32).
PARITY = {
    "llama": "npugraph_ex", "mistral": "npugraph_ex", "qwen2": "eager", "qwen3": "ge_graph",
    "qwen3_moe": "npugraph_ex", "qwen2_moe": "eager", "mixtral": "ge_graph",
    "deepseek_v3": "npugraph_ex", "kimi_k2": "ge_graph", "deepseek_v2": "eager",
}  # fmt: skip
# The config class and tiny MoE fields of each MoE model_type (3 layers; Qwen mixes in dense).
MOE_CONFIGS = {
    "qwen3_moe": ("Qwen3MoeConfig", dict(num_experts=8, mlp_only_layers=[1], norm_topk_prob=True)),
    "qwen2_moe": (
        "Qwen2MoeConfig",
        dict(num_experts=8, shared_expert_intermediate_size=64, decoder_sparse_step=2),
    ),
    "mixtral": ("MixtralConfig", dict(num_local_experts=8)),
}
# MLA (DeepSeek): the config class, its tiny fields (layer 0 dense) and the model_type its
# config.json says (Kimi-K2 ships DeepSeek-V3's architecture under its own model_type).
_MLA = dict(
    kv_lora_rank=32, qk_nope_head_dim=24, qk_rope_head_dim=8, v_head_dim=16, n_routed_experts=8,
    first_k_dense_replace=1, num_key_value_heads=4,
)  # fmt: skip
MLA_CONFIGS = {
    "deepseek_v3": ("DeepseekV3Config", dict(_MLA, q_lora_rank=32, n_group=2, topk_group=1)),
    "kimi_k2": ("DeepseekV3Config", dict(_MLA, q_lora_rank=32, n_group=1, topk_group=1)),
    "deepseek_v2": ("DeepseekV2Config", dict(_MLA, q_lora_rank=None, topk_method="greedy")),
}
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
    extra = {"sliding_window": None} if model_type == "mistral" else {}
    experts = {**MOE_CONFIGS, **MLA_CONFIGS}
    if model_type in experts:
        name[model_type], moe = experts[model_type]
        extra.update(moe, num_experts_per_tok=2, moe_intermediate_size=32, num_hidden_layers=3)
    config_cls = getattr(transformers, name.get(model_type, "MistralConfig"))
    if rope_scaling != "none":
        extra["rope_scaling"] = ROPE_SCALING[rope_scaling]
    ckpt = tmp_path / f"hf_{model_type}"
    fields = dict(
        vocab_size=512, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2,
    )  # fmt: skip
    config_cls(**{**fields, **extra}).save_pretrained(ckpt)
    if model_type == "kimi_k2":  # DeepseekV3Config's architecture under Kimi-K2's model_type
        config = json.loads((ckpt / "config.json").read_text())
        (ckpt / "config.json").write_text(json.dumps({**config, "model_type": "kimi_k2"}))
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
    # + the two MoE loader tests; MLA: also the MTP-skip and FP8-refusal tests
    passed = 14 if model_type in MLA_CONFIGS else 12 if model_type in MOE_CONFIGS else 10
    assert f"{passed} passed" in result.stdout and "skipped" not in result.stdout, tail
