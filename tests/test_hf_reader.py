"""One Hugging Face config reader, two call sites, the same fixtures.

The template's `src/{{ model_name }}/hf_config.py` is the only reader: the scaffold loads it
(`answers_from_hf_config`, `new model --from-hf-config`) and every rendered package carries
it (`weights.model_args_from_hf`). Every fixture below goes through both: an accepted
config gives the same architecture, a refused one the same one-line message naming the
file (UserError exit 2 in the scaffold, the package's CheckpointError, an InputError).
"""

from __future__ import annotations

import ast
import dataclasses
import importlib
import json
import math
import sys
from pathlib import Path

import pytest

from ascend_runtime import config as runtime_config
from ascend_runtime import hf_config as runtime_hf_config
from ascend_runtime import weights
from ascend_runtime.args import FLAGS
from scaffold.errors import UserError
from scaffold.hf_config import answers_from_hf_config, reader
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
ARCH = {  # what BASE reads as, for a llama
    "family": "dense",
    "vocab_size": 1000,
    "hidden_size": 256,
    "num_hidden_layers": 4,
    "num_attention_heads": 8,
    "num_key_value_heads": 2,
    "head_dim": 32,
    "intermediate_size": 704,
    "rope_theta": 10000.0,
    "rope_scaling": "none",
    "rms_norm_eps": 1e-5,
    "tie_word_embeddings": False,
    "qk_norm": False,
    "attention_bias": False,
}
# The MoE answers of the tiny MoE configs below (8 experts, top-2).
MOE_FIELDS = dict(num_experts_per_tok=2, moe_intermediate_size=64)
MOE_ARCH = {
    **ARCH,
    "family": "moe",
    "num_experts": 8,
    "num_experts_per_tok": 2,
    "moe_intermediate_size": 64,
    "decoder_sparse_step": 1,
    "mlp_only_layers": "",
    "shared_expert_intermediate_size": 0,
}
INF = "__1e400__"  # written as the JSON number 1e400, which json.loads reads as inf


def write_config(directory: Path, **fields) -> Path:
    """BASE + fields as config.json (a field given as `...` is left out)."""
    directory.mkdir(parents=True, exist_ok=True)
    cfg = {k: v for k, v in {**BASE, **fields}.items() if v is not ...}
    text = json.dumps(cfg).replace(json.dumps(INF), "1e400")
    (directory / "config.json").write_text(text)
    return directory


LLAMA3 = {
    "rope_type": "llama3",
    "factor": 32.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 8192,
    "rope_theta": 500000.0,
}
YARN_DEFAULTS = {"rope_beta_fast": 32.0, "rope_beta_slow": 1.0, "rope_truncate": True}
LOG8 = math.log(8.0)

# id -> (config.json fields, the architecture both call sites must read)
ACCEPTED = {
    "qwen3-moe-hub-names": (  # Qwen3-30B-A3B style: num_experts, rope_theta
        dict(
            model_type="qwen3_moe",
            num_experts=8,
            **MOE_FIELDS,
            norm_topk_prob=True,
            decoder_sparse_step=1,
            mlp_only_layers=[],
            head_dim=64,
            rope_theta=1e6,
            rope_scaling=None,
        ),
        {**MOE_ARCH, "head_dim": 64, "rope_theta": 1e6, "qk_norm": True, "norm_topk_prob": True},
    ),
    "qwen3-moe-transformers5-mixed-layers": (  # save_pretrained: num_local_experts
        dict(
            model_type="qwen3_moe",
            num_local_experts=8,
            **MOE_FIELDS,
            mlp_only_layers=[3, 0],
            decoder_sparse_step=1,
            rope_parameters={"rope_type": "default", "rope_theta": 1e6},
        ),
        {
            **MOE_ARCH,
            "rope_theta": 1e6,
            "qk_norm": True,
            "norm_topk_prob": False,  # Qwen3MoeConfig's default
            "mlp_only_layers": "0,3",
        },
    ),
    "qwen2-moe-shared-expert": (
        dict(
            model_type="qwen2_moe",
            num_experts=8,
            **MOE_FIELDS,
            shared_expert_intermediate_size=128,
            decoder_sparse_step=2,
            use_sliding_window=False,
            sliding_window=0,
        ),
        {
            **MOE_ARCH,
            "attention_bias": True,  # qkv_bias defaults to true
            "norm_topk_prob": False,
            "decoder_sparse_step": 2,
            "shared_expert_intermediate_size": 128,
            "shared_expert_gate": True,
        },
    ),
    "mixtral": (
        dict(model_type="mixtral", num_local_experts=8, num_experts_per_tok=2, head_dim=None),
        {
            **MOE_ARCH,
            "rope_theta": 1e6,  # MixtralConfig.default_theta
            "moe_intermediate_size": 704,  # Mixtral's intermediate_size is per expert
            "norm_topk_prob": True,  # MixtralTopKRouter always renormalises
        },
    ),
    "llama-transformers4": (
        dict(
            model_type="llama",
            rope_theta=500000.0,
            rope_scaling=None,
            tie_word_embeddings=True,
            torch_dtype="bfloat16",
            head_dim=64,
        ),
        {**ARCH, "head_dim": 64, "rope_theta": 500000.0, "tie_word_embeddings": True},
    ),
    "qwen2-transformers5": (
        dict(
            model_type="qwen2",
            rope_parameters={"rope_type": "default", "rope_theta": 1e6},
            use_sliding_window=False,
            sliding_window=4096,  # ignored by transformers when use_sliding_window is false
            max_window_layers=2,
            layer_types=["full_attention"] * 4,
            max_position_embeddings=512,
            dtype="float32",
        ),
        {**ARCH, "rope_theta": 1e6, "attention_bias": True},
    ),
    "qwen2-use-sliding-window-without-a-window": (
        dict(model_type="qwen2", use_sliding_window=True, sliding_window=None),
        {**ARCH, "attention_bias": True},
    ),
    "qwen3": (
        dict(
            model_type="qwen3",
            head_dim=128,
            attention_bias=False,
            rope_theta=1e6,
            rope_parameters={"rope_type": "default", "rope_theta": 1e6},
            sliding_window=None,
            tie_word_embeddings=True,
        ),
        {**ARCH, "head_dim": 128, "rope_theta": 1e6, "tie_word_embeddings": True, "qk_norm": True},
    ),
    "qwen3-config-class-defaults": (  # Qwen3Config: head_dim 128, rms_norm_eps 1e-6
        dict(model_type="qwen3", rms_norm_eps=..., max_position_embeddings=...),
        {**ARCH, "head_dim": 128, "rms_norm_eps": 1e-6, "qk_norm": True},
    ),
    "mistral-without-sliding-window": (
        dict(model_type="mistral", sliding_window=None, num_key_value_heads=...),
        {**ARCH, "num_key_value_heads": 8},
    ),
    "nulls-are-absent-keys": (
        dict(
            model_type="llama",
            num_key_value_heads=None,
            head_dim=None,
            rope_theta=None,
            rms_norm_eps=None,
            tie_word_embeddings=None,
        ),
        {**ARCH, "num_key_value_heads": 8, "rms_norm_eps": 1e-6},
    ),
    "llama3-transformers5": (
        dict(model_type="llama", rope_parameters=LLAMA3),
        {
            **ARCH,
            "rope_theta": 500000.0,
            "rope_scaling": "llama3",
            "rope_scaling_factor": 32.0,
            "rope_low_freq_factor": 1.0,
            "rope_high_freq_factor": 4.0,
            "rope_original_max_position_embeddings": 8192,
        },
    ),
    "llama3-transformers4": (
        dict(
            model_type="llama",
            rope_theta=500000.0,
            rope_scaling={k: v for k, v in LLAMA3.items() if k != "rope_theta"},
        ),
        {
            **ARCH,
            "rope_theta": 500000.0,
            "rope_scaling": "llama3",
            "rope_scaling_factor": 32.0,
            "rope_low_freq_factor": 1.0,
            "rope_high_freq_factor": 4.0,
            "rope_original_max_position_embeddings": 8192,
        },
    ),
    "linear-legacy-type-key": (
        dict(model_type="qwen2", rope_scaling={"type": "linear", "factor": 2.0}),
        {**ARCH, "rope_scaling": "linear", "rope_scaling_factor": 2.0, "attention_bias": True},
    ),
    "linear-per-layer-type-rope-parameters": (
        dict(
            model_type="llama",
            layer_types=["full_attention"] * 4,
            rope_parameters={
                "full_attention": {"rope_type": "linear", "factor": 4, "rope_theta": 1e6}
            },
        ),
        {**ARCH, "rope_theta": 1e6, "rope_scaling": "linear", "rope_scaling_factor": 4.0},
    ),
    "yarn-qwen3-long-context": (  # Qwen3's documented block: factor 4 over 32k
        dict(
            model_type="qwen3",
            rope_theta=1e6,
            rope_scaling={
                "rope_type": "yarn",
                "factor": 4.0,
                "original_max_position_embeddings": 32768,
            },
        ),
        {
            **ARCH,
            "head_dim": 128,  # Qwen3Config's default
            "qk_norm": True,
            "rope_theta": 1e6,
            "rope_scaling": "yarn",
            "rope_scaling_factor": 4.0,
            "rope_original_max_position_embeddings": 32768,
            "rope_attention_factor": 0.0,  # derived in the package: 0.1 * ln(4) + 1
            **YARN_DEFAULTS,
        },
    ),
    # No factor: the context ratio; mscale/mscale_all_dim: their mscale ratio; a top-level
    # original_max_position_embeddings wins over the scaling dict's (transformers' order).
    "yarn-derived-like-transformers": (
        dict(
            model_type="llama",
            rope_parameters={
                "rope_type": "yarn",
                "original_max_position_embeddings": 1024,
                "mscale": 1.0,
                "mscale_all_dim": 0.5,
                "beta_fast": 16,
                "truncate": False,
            },
            original_max_position_embeddings=512,
        ),
        {
            **ARCH,
            "rope_scaling": "yarn",
            "rope_scaling_factor": 8.0,
            "rope_original_max_position_embeddings": 512,
            "rope_attention_factor": (0.1 * LOG8 + 1) / (0.05 * LOG8 + 1),
            "rope_beta_fast": 16.0,
            "rope_beta_slow": 1.0,
            "rope_truncate": False,
        },
    ),
    "yarn-original-context-from-max-position-embeddings": (
        dict(
            model_type="mistral",
            sliding_window=None,
            rope_parameters={"rope_type": "yarn", "factor": 2, "truncate": None},
        ),
        {
            **ARCH,
            "rope_scaling": "yarn",
            "rope_scaling_factor": 2.0,
            "rope_original_max_position_embeddings": 4096,
            "rope_attention_factor": 0.0,
            "rope_beta_fast": 32.0,
            "rope_beta_slow": 1.0,
            "rope_truncate": False,  # null: falsy in transformers' find_correction_range
        },
    ),
}

QWEN2_WINDOW = dict(model_type="qwen2", use_sliding_window=True, sliding_window=32)
# id -> (config.json fields, a part of the message both call sites must give)
REFUSED = {
    "unsupported-model-type": (
        {"model_type": "gpt2"},
        "model_type 'gpt2' is not supported (supported: llama, qwen2, qwen3, mistral, "
        "qwen3_moe, qwen2_moe, mixtral, deepseek_v3, kimi_k2, deepseek_v2)",
    ),
    "moe-top-k-above-experts": (
        {"model_type": "qwen3_moe", "num_experts": 4, "num_experts_per_tok": 6},
        "num_experts_per_tok (6) must be between 1 and the number of experts (4, at least 2)",
    ),
    "moe-expert-counts-contradict": (
        {"model_type": "qwen3_moe", "num_experts": 8, "num_local_experts": 16},
        "num_experts (8) contradicts num_local_experts (16)",
    ),
    "moe-layer-index-out-of-range": (
        {"model_type": "qwen2_moe", "mlp_only_layers": [0, 4]},
        "mlp_only_layers must be a list of layer indices 0..3, got [0, 4]",
    ),
    "moe-without-moe-layers": (
        {"model_type": "qwen3_moe", "decoder_sparse_step": 3, "mlp_only_layers": [2]},
        "no layer is MoE (decoder_sparse_step=3, mlp_only_layers=[2]): this is a dense model",
    ),
    "moe-expert-count-not-an-integer": (
        {"model_type": "mixtral", "num_local_experts": 8.5},
        "num_local_experts must be a positive integer, got 8.5",
    ),
    "mixtral-sliding-window": (
        {"model_type": "mixtral", "sliding_window": 4096},
        "sliding_window=4096 is not supported",
    ),
    "no-model-type": ({"model_type": ...}, "model_type None is not supported"),
    "model-type-not-a-string": ({"model_type": ["llama"]}, "model_type ['llama'] is not"),
    "missing-field": ({"model_type": "llama", "vocab_size": ...}, "missing field(s) vocab_size"),
    "int-field-a-string": (
        {"model_type": "llama", "hidden_size": "big"},
        "hidden_size must be a positive integer, got 'big'",
    ),
    "int-field-a-float": (
        {"model_type": "llama", "hidden_size": 256.0},
        "hidden_size must be a positive integer, got 256.0",
    ),
    "int-field-a-bool": (
        {"model_type": "qwen2", "num_hidden_layers": True},
        "num_hidden_layers must be a positive integer, got True",
    ),
    "int-field-zero": (
        {"model_type": "qwen3", "num_attention_heads": 0},
        "num_attention_heads must be a positive integer, got 0",
    ),
    "int-field-1e400": (
        {"model_type": "llama", "intermediate_size": INF},
        "intermediate_size must be a positive integer, got inf",
    ),
    "max-position-embeddings-a-string": (
        {"model_type": "llama", "max_position_embeddings": "4k"},
        "max_position_embeddings must be a positive integer, got '4k'",
    ),
    "kv-heads-not-dividing": (
        {"model_type": "llama", "num_key_value_heads": 3},
        "num_attention_heads (8) must be divisible by num_key_value_heads (3)",
    ),
    "odd-head-dim": ({"model_type": "llama", "head_dim": 33}, "head_dim must be even"),
    "llama3-incomplete": (
        {"model_type": "llama", "rope_scaling": {"rope_type": "llama3", "factor": 8.0}},
        "rope_scaling (llama3) has no low_freq_factor, high_freq_factor",
    ),
    "llama3-bands-inverted": (
        {"model_type": "llama", "rope_parameters": {**LLAMA3, "high_freq_factor": 1.0}},
        "rope_parameters.high_freq_factor (1.0) must be > low_freq_factor (1.0)",
    ),
    "dynamic-rope": (
        {"model_type": "qwen3", "rope_parameters": {"rope_type": "dynamic", "factor": 2.0}},
        "rope_parameters rope_type 'dynamic' is not supported: dynamic NTK rescales RoPE",
    ),
    "longrope": (
        {"model_type": "llama", "rope_scaling": {"rope_type": "longrope", "factor": 2.0}},
        "rope_scaling rope_type 'longrope' is not supported: LongRoPE switches",
    ),
    "unknown-rope-type": (
        {"model_type": "llama", "rope_scaling": {"type": "su", "factor": 2.0}},
        "rope_type 'su' is not supported (supported: default, linear, llama3, yarn)",
    ),
    "rope-type-not-a-string": (
        {"model_type": "llama", "rope_scaling": {"rope_type": 5, "factor": 2.0}},
        "rope_scaling.rope_type must be a string, got 5",
    ),
    "rope-scaling-not-an-object": (
        {"model_type": "llama", "rope_scaling": "linear"},
        "rope_scaling must be an object or null, got 'linear'",
    ),
    "yarn-factor-a-string": (
        {"model_type": "qwen2", "rope_scaling": {"rope_type": "yarn", "factor": "4"}},
        "rope_scaling.factor must be a finite number >= 0, got '4'",
    ),
    "yarn-factor-1e400": (
        {"model_type": "qwen2", "rope_scaling": {"rope_type": "yarn", "factor": INF}},
        "rope_scaling.factor must be a finite number >= 0, got inf",
    ),
    "yarn-factor-below-1": (
        {"model_type": "llama", "rope_parameters": {"rope_type": "yarn", "factor": 0.5}},
        "rope_parameters.factor must be >= 1 for yarn",
    ),
    "yarn-attention-factor-0": (
        {
            "model_type": "llama",
            "rope_parameters": {"rope_type": "yarn", "factor": 2.0, "attention_factor": 0},
        },
        "rope_parameters.attention_factor must be > 0, got 0",
    ),
    "yarn-truncate-a-string": (
        {"model_type": "llama", "rope_scaling": {"rope_type": "yarn", "truncate": "no"}},
        "rope_scaling.truncate must be true or false, got 'no'",
    ),
    "linear-factor-zero": (
        {"model_type": "llama", "rope_scaling": {"rope_type": "linear", "factor": 0}},
        "rope_scaling.factor must be a finite number > 0, got 0",
    ),
    "original-context-zero": (
        {
            "model_type": "qwen3",
            "rope_scaling": {"rope_type": "yarn", "factor": 4.0},
            "original_max_position_embeddings": 0,
        },
        "original_max_position_embeddings must be a positive integer, got 0",
    ),
    "rope-theta-contradicts-rope-parameters": (
        {
            "model_type": "llama",
            "rope_theta": 1e4,
            "rope_parameters": {"rope_type": "default", "rope_theta": 5e5},
        },
        "rope_theta (10000.0) contradicts rope_parameters.rope_theta (500000.0)",
    ),
    "rope-parameters-theta-contradicts-rope-scaling": (
        {
            "model_type": "llama",
            "rope_parameters": {"rope_type": "linear", "factor": 2.0, "rope_theta": 5e5},
            "rope_scaling": {"rope_type": "linear", "factor": 2.0, "rope_theta": 1e4},
        },
        "rope_parameters.rope_theta (500000.0) contradicts rope_scaling.rope_theta (10000.0)",
    ),
    "rope-kinds-contradict": (
        {
            "model_type": "llama",
            "rope_parameters": {"rope_type": "linear", "factor": 2.0},
            "rope_scaling": {"rope_type": "yarn", "factor": 2.0},
        },
        "rope_scaling rope_type 'yarn' contradicts rope_parameters rope_type 'linear'",
    ),
    "rope-theta-1e400": (
        {"model_type": "llama", "rope_theta": INF},
        "rope_theta must be a finite number > 0, got inf",
    ),
    "rope-theta-an-integer-without-a-float": (
        {"model_type": "llama", "rope_theta": 10**400},
        "rope_theta must be a finite number > 0, got 1000",
    ),
    "rope-theta-a-string": (
        {"model_type": "llama", "rope_theta": "1e4"},
        "rope_theta must be a finite number > 0, got '1e4'",
    ),
    "rope-parameters-theta-negative": (
        {"model_type": "qwen2", "rope_parameters": {"rope_type": "default", "rope_theta": -1}},
        "rope_parameters.rope_theta must be a finite number > 0, got -1",
    ),
    "partial-rotary-factor": (
        {"model_type": "llama", "partial_rotary_factor": 0.5},
        "partial_rotary_factor=0.5 is not supported",
    ),
    "partial-rotary-factor-in-rope-parameters": (
        {
            "model_type": "qwen3",
            "rope_parameters": {"rope_type": "default", "partial_rotary_factor": 0.25},
        },
        "rope_parameters.partial_rotary_factor=0.25 is not supported",
    ),
    "mistral-sliding-window": (
        {"model_type": "mistral", "sliding_window": 4096},
        "sliding_window=4096 is not supported",
    ),
    "mistral-default-sliding-window": (  # MistralConfig's default when the key is absent
        {"model_type": "mistral"},
        "sliding_window=4096 is not supported",
    ),
    "qwen2-sliding-window-from-max-window-layers": (
        {**QWEN2_WINDOW, "sliding_window": 4096, "max_window_layers": 2},  # layers 2, 3 slide
        "use_sliding_window=true (sliding_window=4096) is not supported",
    ),
    "qwen2-sliding-window-max-window-layers-28-of-4": (  # the example
        {**QWEN2_WINDOW, "max_window_layers": 28},
        "use_sliding_window=true (sliding_window=32) is not supported",
    ),
    "qwen3-default-sliding-window": (  # Qwen3Config's default window, 4096
        {"model_type": "qwen3", "use_sliding_window": True},
        "use_sliding_window=true (sliding_window=4096) is not supported",
    ),
    "sliding-layer-types": (
        {"model_type": "qwen3", "layer_types": ["full_attention", "sliding_attention"]},
        "layer_types has 1 'sliding_attention' layer(s)",
    ),
    "layer-types-not-a-list": (
        {"model_type": "qwen2", "layer_types": "full_attention"},
        "layer_types must be a list of strings (one per layer), got 'full_attention'",
    ),
    "layer-types-not-strings": (
        {"model_type": "llama", "layer_types": [0, 0, 0, 0]},
        "layer_types must be a list of strings",
    ),
    "use-sliding-window-a-string": (
        {"model_type": "qwen2", "use_sliding_window": "false"},
        "use_sliding_window must be true or false, got 'false'",
    ),
    "o-proj-bias": ({"model_type": "llama", "attention_bias": True}, "also biases o_proj"),
    "attention-bias-a-string": (
        {"model_type": "qwen3", "attention_bias": "no"},
        "attention_bias must be true or false, got 'no'",
    ),
    "gelu": ({"model_type": "mistral", "hidden_act": "gelu"}, "hidden_act 'gelu' is not supported"),
    "mlp-bias": ({"model_type": "llama", "mlp_bias": True}, "mlp_bias=true is not supported"),
    "mlp-bias-a-string": (
        {"model_type": "llama", "mlp_bias": "no"},
        "mlp_bias must be true or false, got 'no'",
    ),
    "rms-norm-eps-zero": (
        {"model_type": "llama", "rms_norm_eps": 0},
        "rms_norm_eps must be a finite number > 0, got 0",
    ),
    "rms-norm-eps-a-string": (
        {"model_type": "llama", "rms_norm_eps": "x"},
        "rms_norm_eps must be a finite number > 0, got 'x'",
    ),
    "rms-norm-eps-1e400": (
        {"model_type": "qwen2", "rms_norm_eps": INF},
        "rms_norm_eps must be a finite number > 0, got inf",
    ),
    "tie-word-embeddings-a-string": (
        {"model_type": "llama", "tie_word_embeddings": "yes"},
        "tie_word_embeddings must be true or false, got 'yes'",
    ),
}
_LLAMA_JSON = json.dumps({**BASE, "model_type": "llama"})
# id -> (config.json bytes or None for no file, a part of the message)
UNREADABLE = {
    "no-config-json": (None, "no Hugging Face config at"),
    "invalid-json": (b"{oops", "invalid JSON at line 1, column 2"),
    "not-an-object": (b"[1]", "top level must be a JSON object, got list"),
    "a-string": (b'"llama"', "top level must be a JSON object, got str"),
    "not-utf8": (b'{"model_type": "llama\xff"}', "is not UTF-8 text"),
    "integer-past-the-digit-limit": (
        ('{"model_type": "llama", "vocab_size": ' + "9" * 5000 + "}").encode(),
        "invalid JSON: Exceeds the limit",
    ),
    "nested-too-deep": (b"[" * 200_000, "invalid JSON"),
    "nan-literal": (
        _LLAMA_JSON.replace('"rms_norm_eps": 1e-05', '"rms_norm_eps": NaN').encode(),
        "rms_norm_eps must be a finite number > 0, got nan",
    ),
}


# --- the two call sites ---------------------------------------------------------------


def scaffold_reads(path: Path, packages, expected: dict) -> dict:
    answers = answers_from_hf_config(path, derive_name=False)
    return {k: v for k, v in answers.items() if k not in ("dtype", "max_seq_len")}


def scaffold_refusal(path: Path, packages) -> str:
    with pytest.raises(UserError) as error:
        answers_from_hf_config(path, derive_name=False)
    assert error.value.exit_code == 2
    return str(error.value)


def package_reads(path: Path, packages, expected: dict) -> dict:
    """A package rendered with the expected architecture loads the config: its ModelArgs
    and its copy of the reader give the architecture."""
    moe = {k: v for k, v in expected.items() if k in MOE_ARCH and k not in ARCH}
    package = packages(
        expected["qk_norm"], expected["attention_bias"], expected["rope_scaling"], moe
    )
    args = weights.model_args_from_hf(package.MODEL, path)
    architecture = reader.read_hf_config(path).architecture
    model_args = {f.name: getattr(args, f.name) for f in dataclasses.fields(args)}
    assert model_args.pop("max_seq_len") >= 1
    for flag in (*FLAGS, "kv_cache", "block_size", "kv_cache_tokens", "shared_expert_gate"):
        model_args.pop(flag, None)  # not sizes: the rendered variant and cache layout
    read = {
        k: v
        for k, v in architecture.items()
        if k not in ("family", "rope_scaling", "qk_norm", "attention_bias", "shared_expert_gate")
    }
    if "mlp_only_layers" in read:  # the interview's text, ModelArgs' tuple
        read["mlp_only_layers"] = reader.parse_layer_list(read["mlp_only_layers"])
    assert model_args == read
    assert architecture["rope_scaling"] == package.MODEL.args.rope_scaling
    return architecture


def package_refusal(path: Path, packages) -> str:
    package = packages(False, False, "none", {})
    with pytest.raises(weights.CheckpointError) as error:
        weights.model_args_from_hf(package.MODEL, path)
    assert isinstance(error.value, runtime_config.InputError)  # the runner: one line, exit 2
    return str(error.value)


SITES = {
    "scaffold": (scaffold_reads, scaffold_refusal),
    "package": (package_reads, package_refusal),
}


@pytest.fixture(scope="session")
def packages(tmp_path_factory):
    """(qk_norm, attention_bias, rope_scaling, MoE answers) -> a package rendered with them,
    imported (family moe when MoE answers are given)."""
    made: dict[tuple, object] = {}
    root = tmp_path_factory.mktemp("hf_reader_packages")

    def get(qk_norm: bool, attention_bias: bool, rope_scaling: str, moe: dict):
        key = (qk_norm, attention_bias, rope_scaling, tuple(sorted(moe.items())))
        if key not in made:
            name = f"hfr_{rope_scaling}{'_q' if qk_norm else ''}{'_b' if attention_bias else ''}"
            name += f"_moe{len(made)}" if moe else ""
            answers = {
                "model_name": name,
                "qk_norm": qk_norm,
                "attention_bias": attention_bias,
                "rope_scaling": rope_scaling,
                **({"family": "moe", **moe} if moe else {}),
            }
            render(validate(collect_answers(answers, defaults=True)), root / name)
            sys.path.insert(0, str(root / name / "src"))
            made[key] = importlib.import_module(name)
        return made[key]

    yield get
    for module in made.values():
        sys.path.remove(str(root / module.__name__ / "src"))
        for name in [m for m in sys.modules if m.split(".")[0] == module.__name__]:
            del sys.modules[name]


@pytest.mark.parametrize("site", SITES)
@pytest.mark.parametrize(("fields", "expected"), ACCEPTED.values(), ids=ACCEPTED)
def test_accepted_configs_read_the_same(tmp_path, packages, site, fields, expected):
    path = write_config(tmp_path / "ckpt", **fields)
    reads, _ = SITES[site]
    assert reads(path, packages, expected) == expected
    assert reads(path / "config.json", packages, expected) == expected


@pytest.mark.parametrize("site", SITES)
@pytest.mark.parametrize(("fields", "message"), REFUSED.values(), ids=REFUSED)
def test_refused_configs_give_the_same_message(tmp_path, packages, site, fields, message):
    path = write_config(tmp_path / "ckpt", **fields)
    _, refusal = SITES[site]
    text = refusal(path, packages)
    assert message in text
    assert text.startswith(f"{path / 'config.json'}: ") and "\n" not in text


@pytest.mark.parametrize("site", SITES)
@pytest.mark.parametrize(("content", "message"), UNREADABLE.values(), ids=UNREADABLE)
def test_unreadable_configs_give_the_same_message(tmp_path, packages, site, content, message):
    if content is not None:
        (tmp_path / "config.json").write_bytes(content)
    _, refusal = SITES[site]
    text = refusal(tmp_path, packages)
    assert message in text
    assert str(tmp_path / "config.json") in text and "\n" not in text


def test_both_sites_give_identical_messages(tmp_path, packages):
    """Not only the same rule: the same text, for a sample of every kind of refusal."""
    for key in ("no-model-type", "qwen2-sliding-window-max-window-layers-28-of-4",
                "rope-theta-contradicts-rope-parameters", "layer-types-not-a-list"):  # fmt: skip
        path = write_config(tmp_path / key, **REFUSED[key][0])
        assert scaffold_refusal(path, packages) == package_refusal(path, packages)


# --- one file, stdlib only ------------------------------------------------------------


def test_the_scaffold_and_packages_use_the_runtimes_one_reader(packages):
    """One reader: the scaffold imports the runtime's module, and no package carries a copy."""
    assert reader is runtime_hf_config
    package = packages(False, False, "none", {})
    root = Path(package.__file__).parent
    assert not [p for p in root.rglob("*.py") if "read_hf_config" in p.read_text()]


def test_the_reader_imports_only_the_standard_library():
    tree = ast.parse(Path(runtime_hf_config.__file__).read_text())
    imported = {
        (node.module if isinstance(node, ast.ImportFrom) else alias.name).split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.Import | ast.ImportFrom)
        for alias in node.names
    }
    assert imported <= {"__future__", "dataclasses", "json", "math", "pathlib", "typing"}
    assert not any(
        isinstance(node, ast.ImportFrom) and node.level for node in ast.walk(tree)
    )  # no relative imports: the scaffold loads it on its own
