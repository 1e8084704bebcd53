"""Interview answers from a Hugging Face `config.json` (`new model --from-hf-config PATH`).

Only what the template can express exactly is accepted: llama, qwen2, qwen3 and mistral
dense decoders with SwiGLU, RoPE (plain, linear, llama3 or yarn) and full causal
attention. Anything else (another model_type, dynamic/longrope RoPE, a sliding window,
biases the template has no place for) is a UserError naming the field, before anything
is written.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

from .errors import UserError
from .questions import asked_questions
from .spec import name_problem

SUPPORTED_MODEL_TYPES = ("llama", "qwen2", "qwen3", "mistral")
DTYPES = ("bfloat16", "float16", "float32")
_REQUIRED = (
    "vocab_size",
    "hidden_size",
    "intermediate_size",
    "num_hidden_layers",
    "num_attention_heads",
)
# transformers' config-class defaults for keys a config.json may leave out.
_DEFAULTS: dict[str, dict[str, Any]] = {
    "llama": {"rms_norm_eps": 1e-6, "max_position_embeddings": 2048},
    "qwen2": {"rms_norm_eps": 1e-6, "max_position_embeddings": 32768},
    "qwen3": {"rms_norm_eps": 1e-6, "max_position_embeddings": 32768, "head_dim": 128},
    "mistral": {"rms_norm_eps": 1e-6, "max_position_embeddings": 131072},
}


def _load(path: Path) -> tuple[dict[str, Any], Path]:
    path = Path(path)
    file = path / "config.json" if path.is_dir() else path
    if not file.is_file():
        raise UserError(f"no Hugging Face config at {file} (give config.json or a checkpoint dir)")
    try:
        data = json.loads(file.read_text())
    except OSError as exc:
        raise UserError(f"cannot read {file}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise UserError(f"{file} is not UTF-8 text") from None
    except (json.JSONDecodeError, RecursionError) as exc:
        raise UserError(f"{file} is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise UserError(f"{file} must hold a JSON object")
    return data, file


def _positive_number(value: Any) -> bool:
    """A finite number > 0 (JSON's 1e400 parses as inf)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    return math.isfinite(value) and value > 0


def _int(cfg: dict[str, Any], key: str, where: str) -> int:
    value = cfg[key]
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise UserError(f"{where}: {key} must be a positive integer, got {value!r}")
    return value


_SCALING_KEYS = {
    "linear": {"factor": "rope_scaling_factor"},
    "llama3": {
        "factor": "rope_scaling_factor",
        "low_freq_factor": "rope_low_freq_factor",
        "high_freq_factor": "rope_high_freq_factor",
    },
    "yarn": {},
}
# Scaling kinds a precomputed cos/sin table cannot express, and why.
_UNSUPPORTED_SCALING = {
    "dynamic": "dynamic NTK rescales RoPE with the running sequence length, which a cos/sin "
    "table precomputed once for the graph cannot follow",
    "longrope": "LongRoPE switches frequency sets at runtime by sequence length",
}


def _original_context(cfg: dict[str, Any], spec: dict[str, Any]) -> Any:
    """Pre-training context of llama3/yarn scaling, found where transformers looks: the
    top-level key first, then the scaling dict, then max_position_embeddings."""
    value = cfg.get("original_max_position_embeddings")
    if value is None:
        value = spec.get("original_max_position_embeddings")
    return cfg["max_position_embeddings"] if value is None else value


def _yarn_mscale(factor: float, mscale: float) -> float:
    return 1.0 if factor <= 1 else 0.1 * mscale * math.log(factor) + 1.0


def _yarn(cfg: dict[str, Any], spec: dict[str, Any], original: int, where: str) -> dict[str, Any]:
    """YaRN answers with transformers' defaults: factor from the context ratio when absent,
    attention_factor from mscale/mscale_all_dim when both are given (0: derived from the
    factor), beta_fast 32, beta_slow 1, truncate true."""
    keys = ("factor", "attention_factor", "mscale", "mscale_all_dim", "beta_fast", "beta_slow")
    for key in keys:
        value = spec.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)):
            raise UserError(f"{where}: yarn {key} must be a number, got {value!r}")
    factor = spec.get("factor")
    if factor is None:
        factor = cfg["max_position_embeddings"] / original
    attention = spec.get("attention_factor")
    mscale, mscale_all_dim = spec.get("mscale"), spec.get("mscale_all_dim")
    if attention is None and mscale and mscale_all_dim:
        attention = _yarn_mscale(factor, mscale) / _yarn_mscale(factor, mscale_all_dim)
    return {
        "rope_scaling_factor": float(factor),
        "rope_beta_fast": float(spec.get("beta_fast") or 32.0),
        "rope_beta_slow": float(spec.get("beta_slow") or 1.0),
        "rope_attention_factor": float(attention or 0.0),
        "rope_truncate": bool(spec.get("truncate", True)),
    }


def _rope(cfg: dict[str, Any], where: str) -> dict[str, Any]:
    """rope_theta and RoPE scaling answers from transformers 5 `rope_parameters` or 4.x
    `rope_theta`/`rope_scaling`."""
    params = cfg.get("rope_parameters")
    scaling = cfg.get("rope_scaling")
    if isinstance(params, dict) and "full_attention" in params:  # per-layer-type form
        params = params["full_attention"]
    theta = cfg.get("rope_theta")
    answers: dict[str, Any] = {"rope_scaling": "none"}
    for field, spec in (("rope_parameters", params), ("rope_scaling", scaling)):
        if spec is None:
            continue
        if not isinstance(spec, dict):
            raise UserError(f"{where}: {field} must be an object or null, got {spec!r}")
        if spec.get("partial_rotary_factor", 1.0) != 1.0:
            raise UserError(f"{where}: partial_rotary_factor != 1.0 is not supported")
        if "rope_theta" in spec:
            if theta is not None and float(theta) != float(spec["rope_theta"]):
                raise UserError(
                    f"{where}: rope_theta ({theta}) contradicts {field}.rope_theta "
                    f"({spec['rope_theta']})"
                )
            theta = spec["rope_theta"]
        kind = spec.get("rope_type", spec.get("type", "default"))
        if not isinstance(kind, str):
            raise UserError(f"{where}: {field}.rope_type must be a string, got {kind!r}")
        if kind == "default":
            continue
        if kind not in _SCALING_KEYS:
            why = f": {_UNSUPPORTED_SCALING[kind]}" if kind in _UNSUPPORTED_SCALING else ""
            raise UserError(
                f"{where}: {field} rope_type {kind!r} is not supported{why} "
                f"(supported: default, {', '.join(_SCALING_KEYS)})"
            )
        missing = [key for key in _SCALING_KEYS[kind] if spec.get(key) is None]
        if missing:
            raise UserError(f"{where}: {field} ({kind}) has no {', '.join(missing)}")
        answers["rope_scaling"] = kind
        answers.update({name: spec[key] for key, name in _SCALING_KEYS[kind].items()})
        if kind in ("llama3", "yarn"):
            original = _original_context(cfg, spec)
            if isinstance(original, bool) or not isinstance(original, int) or original < 1:
                raise UserError(
                    f"{where}: original_max_position_embeddings must be a positive integer, "
                    f"got {original!r}"
                )
            answers["rope_original_max_position_embeddings"] = original
            if kind == "yarn":
                answers.update(_yarn(cfg, spec, original, where))
    if cfg.get("partial_rotary_factor", 1.0) != 1.0:
        raise UserError(f"{where}: partial_rotary_factor != 1.0 is not supported")
    theta = 10000.0 if theta is None else theta
    if not _positive_number(theta):
        raise UserError(f"{where}: rope_theta must be a positive number, got {theta!r}")
    return {"rope_theta": float(theta), **answers}


def _reject_sliding_window(cfg: dict[str, Any], model_type: str, layers: int, where: str) -> None:
    window = cfg.get("sliding_window")
    why = "the template has full causal attention only"
    if model_type == "mistral":
        if window is not None:
            raise UserError(
                f"{where}: sliding_window={window} is not supported ({why}; if prompt + "
                'generation never exceed the window, set "sliding_window": null)'
            )
        return
    layer_types = cfg.get("layer_types")
    if layer_types is not None:
        if not isinstance(layer_types, list) or not all(isinstance(t, str) for t in layer_types):
            raise UserError(
                f"{where}: layer_types must be a list of strings (one per layer), "
                f"got {layer_types!r}"
            )
        sliding = [t for t in layer_types if t != "full_attention"]
        if sliding:
            raise UserError(
                f"{where}: layer_types has {len(sliding)} {sliding[0]!r} layer(s) ({why})"
            )
        return
    if cfg.get("use_sliding_window") and window is not None:
        if cfg.get("max_window_layers", 28) < layers:
            raise UserError(
                f"{where}: use_sliding_window=true (sliding_window={window}) is not supported "
                f"({why})"
            )


def _model_name(file: Path) -> str | None:
    """A package name from the checkpoint directory's name (`Qwen3-0.6B` -> `qwen3_0_6b`),
    held to the same rules as a typed one; None when the name has no letters to start."""
    directory = file.parent.resolve()
    name = re.sub(r"[^a-z0-9]+", "_", directory.name.lower()).strip("_")
    if not name or not name[0].isalpha():
        return None
    problem = name_problem(name)
    if problem:
        raise UserError(
            f"{problem} (derived from the checkpoint directory {directory}); "
            "choose one with --model-name"
        )
    return name


def answers_from_hf_config(path: Path, derive_name: bool = True) -> dict[str, Any]:
    """Interview answers (copier.yml names) for the architecture in a HF config.

    `path` is a config.json or a checkpoint directory holding one. Returns every
    architecture answer, `dtype` when the config names a supported one, `max_seq_len` when
    `max_position_embeddings` is below the default, and (when `derive_name`) `model_name`
    derived from the directory name. Raises UserError otherwise.
    """
    cfg, file = _load(path)
    where = str(file)
    model_type = cfg.get("model_type")
    if model_type not in SUPPORTED_MODEL_TYPES:
        raise UserError(
            f"{where}: model_type {model_type!r} is not supported "
            f"(supported: {', '.join(SUPPORTED_MODEL_TYPES)})"
        )
    missing = [key for key in _REQUIRED if cfg.get(key) is None]
    if missing:
        raise UserError(f"{where}: missing field(s) {', '.join(missing)}")
    cfg = {**_DEFAULTS[model_type], **{k: v for k, v in cfg.items() if v is not None}}
    if cfg.get("hidden_act", "silu") != "silu":
        raise UserError(f"{where}: hidden_act {cfg['hidden_act']!r} is not supported (SwiGLU/silu)")
    if cfg.get("mlp_bias"):
        raise UserError(f"{where}: mlp_bias=true is not supported")

    vocab, hidden, inter, layers, heads = (_int(cfg, key, where) for key in _REQUIRED)
    kv_heads = _int({"num_key_value_heads": heads, **cfg}, "num_key_value_heads", where)
    head_dim = _int({"head_dim": hidden // heads, **cfg}, "head_dim", where)
    if heads % kv_heads:
        raise UserError(
            f"{where}: num_attention_heads ({heads}) must be divisible by "
            f"num_key_value_heads ({kv_heads})"
        )
    if head_dim % 2:
        raise UserError(f"{where}: head_dim must be even (RoPE rotates halves), got {head_dim}")

    # q/k/v bias: Qwen2 always; llama/qwen3/mistral `attention_bias` also biases o_proj.
    if model_type != "qwen2" and cfg.get("attention_bias"):
        raise UserError(
            f"{where}: attention_bias=true on {model_type} also biases o_proj, which the "
            "template does not support"
        )
    _reject_sliding_window(cfg, model_type, layers, where)
    eps = cfg["rms_norm_eps"]
    if not _positive_number(eps):
        raise UserError(f"{where}: rms_norm_eps must be a positive number, got {eps!r}")
    tie = cfg.get("tie_word_embeddings", False)
    if not isinstance(tie, bool):
        raise UserError(f"{where}: tie_word_embeddings must be true or false, got {tie!r}")

    answers: dict[str, Any] = {
        "vocab_size": vocab,
        "hidden_size": hidden,
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "num_key_value_heads": kv_heads,
        "head_dim": head_dim,
        "intermediate_size": inter,
        **_rope(cfg, where),
        "rms_norm_eps": float(eps),
        "tie_word_embeddings": tie,
        "qk_norm": model_type == "qwen3",
        "attention_bias": model_type == "qwen2",
    }
    dtype = cfg.get("dtype", cfg.get("torch_dtype"))
    if dtype in DTYPES:
        answers["dtype"] = dtype
    max_pos = cfg["max_position_embeddings"]
    default_len = next(q for q in asked_questions() if q.name == "max_seq_len").default_for({})
    if isinstance(max_pos, int) and not isinstance(max_pos, bool) and 2 <= max_pos < default_len:
        answers["max_seq_len"] = max_pos
    name = _model_name(file) if derive_name else None
    if name is not None:
        answers["model_name"] = name
    return answers
