"""Read a Hugging Face `config.json` into the architecture fields of this template.

The one reader of HF configs: `ascend-scaffold new model --from-hf-config` loads this
very file from its template, and every rendered package carries a copy (weights.py builds
ModelArgs with it), so both accept and refuse exactly the same configs. Standard library
only, importable without the package around it.

Accepted is what the template expresses exactly: llama, qwen2, qwen3 and mistral dense
decoders and qwen3_moe, qwen2_moe and mixtral mixture-of-experts decoders, with SwiGLU
(silu) MLPs or experts, full causal attention and RoPE without scaling or with linear,
llama3 or yarn scaling (transformers' defaults and mscale rules). Everything else
raises HFConfigError, one line naming the file and the field. A JSON null counts as an
absent top-level key (transformers' config-class default applies), except
`sliding_window`, where null means "no window".

Sources: transformers' src/transformers/modeling_rope_utils.py (`standardize_rope_params`,
`_compute_linear_scaling_rope_parameters`, `_compute_llama3_parameters`,
`_compute_yarn_parameters`) and src/transformers/models/<type>/configuration_<type>.py
(defaults, `layer_types` from `use_sliding_window`/`max_window_layers`), and for MoE
models/qwen3_moe/modeling_qwen3_moe.py (which layers are MoE), modeling_qwen2_moe.py (the
shared expert and its gate) and modeling_mixtral.py (top-k always renormalised).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DENSE_MODEL_TYPES = ("llama", "qwen2", "qwen3", "mistral")
MOE_MODEL_TYPES = ("qwen3_moe", "qwen2_moe", "mixtral")
# MLA + DeepSeek MoE; Kimi-K2's config.json says kimi_k2 for DeepSeek-V3's architecture.
MLA_MODEL_TYPES = ("deepseek_v3", "kimi_k2", "deepseek_v2")
SUPPORTED_MODEL_TYPES = (*DENSE_MODEL_TYPES, *MOE_MODEL_TYPES, *MLA_MODEL_TYPES)
ROPE_SCALINGS = ("none", "linear", "llama3", "yarn")
REQUIRED = (
    "vocab_size",
    "hidden_size",
    "intermediate_size",
    "num_hidden_layers",
    "num_attention_heads",
)
_DEEPSEEK_V3 = {
    "rms_norm_eps": 1e-6, "max_position_embeddings": 4096, "n_routed_experts": 256,
    "num_experts_per_tok": 8, "moe_intermediate_size": 2048, "n_shared_experts": 1,
    "first_k_dense_replace": 3, "kv_lora_rank": 512, "q_lora_rank": 1536,
    "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128, "n_group": 8,
    "topk_group": 4, "norm_topk_prob": True, "routed_scaling_factor": 2.5,
    "rope_interleave": True, "topk_method": "noaux_tc",
}  # fmt: skip
# transformers' config-class defaults for the keys a config.json may leave out
# (LlamaConfig, Qwen2Config, Qwen3Config, MistralConfig).
DEFAULTS: dict[str, dict[str, Any]] = {
    "llama": {"rms_norm_eps": 1e-6, "max_position_embeddings": 2048},
    "qwen2": {"rms_norm_eps": 1e-6, "max_position_embeddings": 32768},
    "qwen3": {"rms_norm_eps": 1e-6, "max_position_embeddings": 32768, "head_dim": 128},
    "mistral": {"rms_norm_eps": 1e-6, "max_position_embeddings": 131072},
    # Qwen3MoeConfig, Qwen2MoeConfig, MixtralConfig
    "qwen3_moe": {
        "rms_norm_eps": 1e-6, "max_position_embeddings": 32768, "num_experts": 128,
        "num_experts_per_tok": 8, "moe_intermediate_size": 768, "norm_topk_prob": False,
    },
    "qwen2_moe": {
        "rms_norm_eps": 1e-6, "max_position_embeddings": 32768, "num_experts": 60,
        "num_experts_per_tok": 4, "moe_intermediate_size": 1408, "norm_topk_prob": False,
        "shared_expert_intermediate_size": 5632, "qkv_bias": True,
    },
    "mixtral": {
        "rms_norm_eps": 1e-5, "max_position_embeddings": 131072, "num_experts": 8,
        "num_experts_per_tok": 2,
    },
    # DeepseekV3Config (Kimi-K2 ships a DeepSeek-V3 config), DeepseekV2Config
    "deepseek_v3": _DEEPSEEK_V3,
    "kimi_k2": _DEEPSEEK_V3,
    "deepseek_v2": {
        "rms_norm_eps": 1e-6, "max_position_embeddings": 2048, "n_routed_experts": 64,
        "moe_intermediate_size": 1407, "n_shared_experts": 2, "first_k_dense_replace": 0,
        "kv_lora_rank": 512, "q_lora_rank": 1536, "qk_nope_head_dim": 128,
        "qk_rope_head_dim": 64, "v_head_dim": 128, "routed_scaling_factor": 1.0,
        "topk_method": "greedy",
    },
}  # fmt: skip
# rope_theta when config.json gives none (MixtralConfig.default_theta; the others 10000).
_DEFAULT_THETA = {"mixtral": 1e6}
_INT_FIELDS = (*REQUIRED, "num_key_value_heads", "head_dim", "max_position_embeddings")
_MOE_INT_FIELDS = (
    "num_experts", "num_local_experts", "num_experts_per_tok", "moe_intermediate_size",
    "decoder_sparse_step",
)  # fmt: skip
_MLA_INT_FIELDS = (
    "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim", "n_routed_experts",
    "moe_layer_freq",
)  # fmt: skip
_FLOAT_FIELDS = ("rms_norm_eps", "rope_theta")
_BOOL_FIELDS = (
    "tie_word_embeddings", "attention_bias", "mlp_bias", "use_sliding_window", "norm_topk_prob",
    "qkv_bias",
)  # fmt: skip
# The config classes' sliding_window when config.json has no such key (null: no window).
_DEFAULT_SLIDING_WINDOW = {
    "mistral": 4096, "qwen2": 4096, "qwen3": 4096, "qwen2_moe": 4096, "qwen3_moe": 4096,
}  # fmt: skip
_EVERY_LAYER_SLIDES = ("mistral", "mixtral")  # MistralAttention, MixtralAttention
_FULL = "full causal attention only"
_LLAMA3_FIELDS = ("rope_scaling_factor", "rope_low_freq_factor", "rope_high_freq_factor")
# Scaling kinds a cos/sin table precomputed once for the graph cannot express, and why.
_UNSUPPORTED_SCALING = {
    "dynamic": "dynamic NTK rescales RoPE with the running sequence length, which a cos/sin "
    "table precomputed once for the graph cannot follow",
    "longrope": "LongRoPE switches frequency sets at runtime by sequence length",
}


class HFConfigError(ValueError):
    """A config.json that cannot be read, or describes what the template cannot express.
    The message is one line and names the file."""


@dataclass(frozen=True)
class HFConfig:
    """What a config.json says, in the template's terms.

    `architecture` uses the interview's (copier.yml's) answer names: `family`, the sizes,
    `rope_theta`, `rope_scaling` (none/linear/llama3/yarn) and that kind's `rope_*`
    fields, `rms_norm_eps`, `tie_word_embeddings`, `qk_norm`, `attention_bias` and, for
    family moe, the MoE answers (`mlp_only_layers` as the interview's "0,3" text).
    """

    file: Path
    model_type: str
    architecture: dict[str, Any]
    max_position_embeddings: int
    dtype: str | None  # `dtype` (transformers 5) or `torch_dtype` (4.x), as written
    # `quantization_config`'s quant_method (DeepSeek-V3's "fp8"): the architecture is read,
    # the weights are refused by the loader (weights.model_args_from_hf: dequantise first)
    quantization: str | None = None


def config_file(path: str | Path) -> Path:
    """The config.json of a checkpoint directory, or `path` itself."""
    path = Path(path)
    return path / "config.json" if path.is_dir() else path


def load_json(path: str | Path) -> tuple[dict[str, Any], Path]:
    """The JSON object in config.json (strict UTF-8, as transformers opens it) and its path."""
    file = config_file(path)
    if not file.is_file():
        raise HFConfigError(
            f"no Hugging Face config at {file} (give config.json or a checkpoint directory)"
        )
    try:
        text = file.read_bytes().decode("utf-8")
    except OSError as exc:
        raise HFConfigError(f"cannot read {file}: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise HFConfigError(f"{file} is not UTF-8 text (byte {exc.start})") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise HFConfigError(
            f"{file}: invalid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}"
        ) from None
    except (ValueError, RecursionError) as exc:  # an integer past the digit limit, deep nesting
        raise HFConfigError(f"{file}: invalid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise HFConfigError(f"{file}: top level must be a JSON object, got {type(data).__name__}")
    return data, file


def _finite(value: Any) -> float | None:
    """A JSON number as a finite float, else None (true/false are no numbers; JSON's 1e400
    parses as inf, NaN as nan, and an integer of 400 digits has no float)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None


def _positive_int(value: Any, name: str, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise HFConfigError(f"{where}: {name} must be a positive integer, got {value!r}")
    return value


def _positive_float(value: Any, name: str, where: str) -> float:
    number = _finite(value)
    if number is None or number <= 0:
        raise HFConfigError(f"{where}: {name} must be a finite number > 0, got {value!r}")
    return number


def _flag(cfg: dict[str, Any], key: str, where: str, default: bool = False) -> bool:
    value = cfg.get(key, default)
    if not isinstance(value, bool):
        raise HFConfigError(f"{where}: {key} must be true or false, got {value!r}")
    return value


def read_hf_config(path: str | Path) -> HFConfig:
    """Read and check a config.json (or a checkpoint directory holding one)."""
    raw, file = load_json(path)
    where = str(file)
    model_type = raw.get("model_type")
    if not isinstance(model_type, str) or model_type not in SUPPORTED_MODEL_TYPES:
        raise HFConfigError(
            f"{where}: model_type {model_type!r} is not supported "
            f"(supported: {', '.join(SUPPORTED_MODEL_TYPES)})"
        )
    cfg = {**DEFAULTS[model_type], **{k: v for k, v in raw.items() if v is not None}}
    for key in (*_INT_FIELDS, *_MOE_INT_FIELDS):  # a wrong type names its field, first
        if key in cfg:
            _positive_int(cfg[key], key, where)
    if model_type in MLA_MODEL_TYPES:
        for key in _MLA_INT_FIELDS:
            if key in cfg:
                _positive_int(cfg[key], key, where)
        for key in ("n_shared_experts", "first_k_dense_replace"):
            if key in cfg:
                _int_at_least(cfg, key, 0, where)
        _positive_float(cfg["routed_scaling_factor"], "routed_scaling_factor", where)
    for key in _FLOAT_FIELDS:
        if key in cfg:
            _positive_float(cfg[key], key, where)
    for key in _BOOL_FIELDS:
        _flag(cfg, key, where)
    missing = [key for key in REQUIRED if key not in cfg]
    if missing:
        raise HFConfigError(f"{where}: missing field(s) {', '.join(missing)}")

    act = cfg.get("hidden_act", "silu")
    if act != "silu":
        raise HFConfigError(
            f"{where}: hidden_act {act!r} is not supported (the MLP is SwiGLU: silu)"
        )
    if _flag(cfg, "mlp_bias", where):
        raise HFConfigError(f"{where}: mlp_bias=true is not supported")
    vocab, hidden, inter, layers, heads = (_positive_int(cfg[k], k, where) for k in REQUIRED)
    if model_type in MLA_MODEL_TYPES:  # MLA has no KV heads (its config's are unused)
        rope_dim = _positive_int(cfg.get("qk_rope_head_dim"), "qk_rope_head_dim", where)
        if rope_dim % 2:
            raise HFConfigError(f"{where}: qk_rope_head_dim must be even, got {rope_dim}")
        cfg = {**cfg, "num_key_value_heads": heads, "head_dim": rope_dim}
    kv_heads = _positive_int(cfg.get("num_key_value_heads", heads), "num_key_value_heads", where)
    head_dim = _positive_int(cfg.get("head_dim", hidden // heads), "head_dim", where)
    if heads % kv_heads:
        raise HFConfigError(
            f"{where}: num_attention_heads ({heads}) must be divisible by "
            f"num_key_value_heads ({kv_heads})"
        )
    if head_dim % 2:
        raise HFConfigError(f"{where}: head_dim must be even (RoPE rotates halves), got {head_dim}")
    # q/k/v bias: Qwen2Attention always has it; the others' `attention_bias` also biases
    # o_proj (LlamaAttention, Qwen3Attention), which the template has no place for.
    if _flag(cfg, "attention_bias", where) and model_type not in ("qwen2", "qwen2_moe"):
        raise HFConfigError(
            f"{where}: attention_bias=true on {model_type} also biases o_proj, which the "
            "template does not support"
        )
    _reject_sliding_window(raw, cfg, model_type, where)
    eps = _positive_float(cfg["rms_norm_eps"], "rms_norm_eps", where)
    tie = _flag(cfg, "tie_word_embeddings", where)
    max_pos = _positive_int(cfg["max_position_embeddings"], "max_position_embeddings", where)
    moe = model_type in MOE_MODEL_TYPES
    family = "mla" if model_type in MLA_MODEL_TYPES else "moe" if moe else "dense"
    architecture: dict[str, Any] = {
        "family": family,
        "vocab_size": vocab,
        "hidden_size": hidden,
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "num_key_value_heads": kv_heads,
        "head_dim": head_dim,
        "intermediate_size": inter,
        **_rope(cfg, max_pos, where),
        "rms_norm_eps": eps,
        "tie_word_embeddings": tie,
        "qk_norm": model_type in ("qwen3", "qwen3_moe"),  # Qwen3Attention's q_norm/k_norm
        # q/k/v bias: Qwen2Attention always; Qwen2MoeAttention as `qkv_bias` says
        "attention_bias": model_type == "qwen2"
        or (model_type == "qwen2_moe" and _flag(cfg, "qkv_bias", where)),
    }
    mscale_all_dim = architecture.pop("rope_mscale_all_dim", None)
    if moe:
        architecture.update(_moe(raw, cfg, model_type, layers, inter, where))
    if model_type in MLA_MODEL_TYPES:
        for gqa_only in ("num_key_value_heads", "head_dim"):  # MLA caches a latent instead
            architecture.pop(gqa_only)
        architecture.update(_mla(raw, cfg, model_type, layers, heads, where))
        if mscale_all_dim is not None:
            architecture["rope_mscale_all_dim"] = mscale_all_dim
    dtype = raw.get("dtype", raw.get("torch_dtype"))
    return HFConfig(
        file=file,
        model_type=model_type,
        architecture=architecture,
        max_position_embeddings=max_pos,
        dtype=dtype if isinstance(dtype, str) else None,
        quantization=quantization_method(raw),
    )


def _reject_sliding_window(
    raw: dict[str, Any], cfg: dict[str, Any], model_type: str, where: str
) -> None:
    """Every form of sliding-window attention is refused: the template has full causal
    attention only."""
    window = raw.get("sliding_window", _DEFAULT_SLIDING_WINDOW.get(model_type))
    if model_type in _EVERY_LAYER_SLIDES and window is not None:
        raise HFConfigError(
            f"{where}: sliding_window={window} is not supported ({_FULL}; if prompt + "
            'generation never exceed the window, set "sliding_window": null)'
        )
    layer_types = cfg.get("layer_types")
    if layer_types is not None:
        if not isinstance(layer_types, list) or not all(isinstance(t, str) for t in layer_types):
            raise HFConfigError(
                f"{where}: layer_types must be a list of strings (one per layer), "
                f"got {layer_types!r}"
            )
        sliding = [t for t in layer_types if t != "full_attention"]
        if sliding:
            raise HFConfigError(
                f"{where}: layer_types has {len(sliding)} {sliding[0]!r} layer(s) ({_FULL})"
            )
    # Qwen2/Qwen3: where a declared window applies has changed across transformers releases
    # (huggingface/transformers#35924: 4.48.1 dropped it from the causal mask); today it is
    # the layers from max_window_layers on (layer_types in configuration_qwen2.py). Refused
    # whatever max_window_layers says: the checkpoint declares a window.
    if _flag(cfg, "use_sliding_window", where) and window is not None:
        raise HFConfigError(
            f"{where}: use_sliding_window=true (sliding_window={window}) is not supported "
            f"({_FULL}; if prompt + generation never exceed the window, set "
            '"use_sliding_window": false)'
        )


def moe_layer_indices(
    num_layers: int, decoder_sparse_step: int, mlp_only_layers: tuple[int, ...]
) -> tuple[int, ...]:
    """The MoE layers, transformers' rule (Qwen3MoeDecoderLayer, Qwen2MoeDecoderLayer):
    layer i is MoE iff i is not in mlp_only_layers and (i + 1) % decoder_sparse_step == 0."""
    return tuple(
        i
        for i in range(num_layers)
        if i not in mlp_only_layers and (i + 1) % decoder_sparse_step == 0
    )


def mla_moe_layer_indices(
    num_layers: int, first_k_dense_replace: int, moe_layer_freq: int
) -> tuple[int, ...]:
    """DeepSeek's MoE layers (cann-recipes-infer's models/deepseek_r1, DeepSeek's own code):
    layer i is MoE iff i >= first_k_dense_replace and i % moe_layer_freq == 0
    (transformers 5 ignores moe_layer_freq, 1 in every released DeepSeek)."""
    return tuple(
        i for i in range(num_layers) if i >= first_k_dense_replace and i % moe_layer_freq == 0
    )


def moe_layers(args) -> tuple[int, ...]:
    """A ModelArgs' layers with routed experts (none for a dense model); the others keep
    the dense MLP. mla: layer i from first_k_dense_replace on, every moe_layer_freq-th
    (DeepSeek's `layer_idx >= first_k_dense_replace and layer_idx % moe_layer_freq == 0`)."""
    if args.family == "mla":
        return mla_moe_layer_indices(
            args.num_hidden_layers, args.first_k_dense_replace, args.moe_layer_freq
        )
    if args.family != "moe":
        return ()
    return moe_layer_indices(args.num_hidden_layers, args.decoder_sparse_step, args.mlp_only_layers)


def parse_layer_list(text: str) -> tuple[int, ...]:
    """The interview's "0, 3" or "0 3" (layer indices separated by commas or spaces; empty:
    none) as a tuple; copier.yml's validator has refused anything else."""
    return tuple(int(item) for item in text.replace(",", " ").split())


def _moe(
    raw: dict[str, Any],
    cfg: dict[str, Any],
    model_type: str,
    layers: int,
    dense_inter: int,
    where: str,
) -> dict[str, Any]:
    """The MoE answers. Expert count: the Hub's `num_experts` or transformers 5's
    `num_local_experts` (Qwen3MoeConfig.attribute_map), which must agree when both are given."""
    names = ("num_experts", "num_local_experts")
    experts = {key: raw[key] for key in names if raw.get(key) is not None}
    experts = experts or {"num_experts": cfg["num_experts"]}  # the config class default
    if len(set(experts.values())) > 1:
        raise HFConfigError(
            f"{where}: num_experts ({experts['num_experts']}) contradicts num_local_experts "
            f"({experts['num_local_experts']})"
        )
    num_experts = next(iter(experts.values()))
    top_k = cfg["num_experts_per_tok"]
    if num_experts < 2 or top_k > num_experts:
        raise HFConfigError(
            f"{where}: num_experts_per_tok ({top_k}) must be between 1 and the number of "
            f"experts ({num_experts}, at least 2)"
        )
    if model_type == "mixtral":  # MixtralTopKRouter: top-k renormalised, every layer MoE
        return {
            "num_experts": num_experts,
            "num_experts_per_tok": top_k,
            "moe_intermediate_size": dense_inter,  # MixtralConfig: the per-expert size
            "norm_topk_prob": True,
            "decoder_sparse_step": 1,
            "mlp_only_layers": "",
            "shared_expert_intermediate_size": 0,
        }
    step = cfg.get("decoder_sparse_step", 1)
    only = cfg.get("mlp_only_layers", [])
    if not isinstance(only, list) or not all(
        isinstance(i, int) and not isinstance(i, bool) and 0 <= i < layers for i in only
    ):
        raise HFConfigError(
            f"{where}: mlp_only_layers must be a list of layer indices 0..{layers - 1}, "
            f"got {only!r}"
        )
    if not moe_layer_indices(layers, step, tuple(only)):
        raise HFConfigError(
            f"{where}: no layer is MoE (decoder_sparse_step={step}, mlp_only_layers={only}): "
            "this is a dense model"
        )
    shared = 0
    if model_type == "qwen2_moe":
        shared = cfg["shared_expert_intermediate_size"]
        if isinstance(shared, bool) or not isinstance(shared, int) or shared < 0:
            raise HFConfigError(
                f"{where}: shared_expert_intermediate_size must be an integer >= 0, got {shared!r}"
            )
    answers: dict[str, Any] = {
        "num_experts": num_experts,
        "num_experts_per_tok": top_k,
        "moe_intermediate_size": cfg["moe_intermediate_size"],
        "norm_topk_prob": _flag(cfg, "norm_topk_prob", where),
        "decoder_sparse_step": step,
        "mlp_only_layers": ",".join(str(i) for i in sorted(set(only))),
        "shared_expert_intermediate_size": shared,
    }
    if shared:
        answers["shared_expert_gate"] = True  # Qwen2MoeSparseMoeBlock.shared_expert_gate
    return answers


def _rope(cfg: dict[str, Any], max_pos: int, where: str) -> dict[str, Any]:
    """rope_theta and the RoPE scaling fields, from transformers 5 `rope_parameters` (flat,
    or per layer type) or 4.x `rope_theta` + `rope_scaling`; rope_scaling wins over
    rope_parameters as in transformers' `convert_rope_params_to_dict`, so two that differ
    in kind are refused as contradictory."""
    theta, theta_from = cfg.get("rope_theta"), "rope_theta"
    default_theta = _DEFAULT_THETA.get(cfg["model_type"], 10000.0)
    if theta is not None:
        _positive_float(theta, "rope_theta", where)
    _check_partial(cfg, "partial_rotary_factor", where)
    chosen: tuple[str, dict[str, Any], str] | None = None
    for field in ("rope_parameters", "rope_scaling"):
        spec = cfg.get(field)
        if field == "rope_parameters" and isinstance(spec, dict) and "full_attention" in spec:
            field, spec = "rope_parameters.full_attention", spec["full_attention"]
        if spec is None:
            continue
        if not isinstance(spec, dict):
            raise HFConfigError(f"{where}: {field} must be an object or null, got {spec!r}")
        _check_partial(spec, f"{field}.partial_rotary_factor", where)
        if spec.get("rope_theta") is not None:
            value = _positive_float(spec["rope_theta"], f"{field}.rope_theta", where)
            if theta is not None and float(theta) != value:
                raise HFConfigError(
                    f"{where}: {theta_from} ({theta}) contradicts {field}.rope_theta "
                    f"({spec['rope_theta']})"
                )
            theta, theta_from = spec["rope_theta"], f"{field}.rope_theta"
        kind = spec.get("rope_type")
        kind = spec.get("type", "default") if kind is None else kind
        kind = "default" if kind is None else kind
        if not isinstance(kind, str):
            raise HFConfigError(f"{where}: {field}.rope_type must be a string, got {kind!r}")
        if chosen is not None and chosen[2] != kind:
            raise HFConfigError(
                f"{where}: {field} rope_type {kind!r} contradicts {chosen[0]} rope_type "
                f"{chosen[2]!r}"
            )
        chosen = (field, spec, kind)
    rope: dict[str, Any] = {"rope_theta": default_theta if theta is None else float(theta)}
    field, spec, kind = chosen or ("rope_parameters", {}, "default")
    if kind == "default":
        return {**rope, "rope_scaling": "none"}
    if kind not in ROPE_SCALINGS:
        why = f": {_UNSUPPORTED_SCALING[kind]}" if kind in _UNSUPPORTED_SCALING else ""
        raise HFConfigError(
            f"{where}: {field} rope_type {kind!r} is not supported{why} "
            f"(supported: default, {', '.join(ROPE_SCALINGS[1:])})"
        )
    rope["rope_scaling"] = kind
    required = {"linear": ("factor",), "llama3": ("factor", "low_freq_factor", "high_freq_factor")}
    missing = [key for key in required.get(kind, ()) if spec.get(key) is None]
    if missing:
        raise HFConfigError(f"{where}: {field} ({kind}) has no {', '.join(missing)}")
    if kind == "linear":
        rope["rope_scaling_factor"] = _positive_float(spec["factor"], f"{field}.factor", where)
        return rope
    # llama3 and yarn: the pre-training context, where standardize_rope_params takes it
    # from: the top-level key first, then the scaling dict, then max_position_embeddings.
    original = cfg.get("original_max_position_embeddings")
    original = spec.get("original_max_position_embeddings") if original is None else original
    original = max_pos if original is None else original
    rope["rope_original_max_position_embeddings"] = _positive_int(
        original, "original_max_position_embeddings", where
    )
    if kind == "llama3":
        for key, name in zip(required["llama3"], _LLAMA3_FIELDS, strict=True):
            rope[name] = _positive_float(spec[key], f"{field}.{key}", where)
        # _compute_llama3_parameters blends by (high - low): it must be positive.
        if rope["rope_high_freq_factor"] <= rope["rope_low_freq_factor"]:
            raise HFConfigError(
                f"{where}: {field}.high_freq_factor ({spec['high_freq_factor']}) must be > "
                f"low_freq_factor ({spec['low_freq_factor']})"
            )
        return rope
    return {**rope, **_yarn(spec, field, max_pos, original, where)}


def _check_partial(spec: dict[str, Any], name: str, where: str) -> None:
    value = spec.get("partial_rotary_factor")
    if value is not None and _finite(value) != 1.0:
        raise HFConfigError(
            f"{where}: {name}={value!r} is not supported (RoPE rotates the whole head_dim)"
        )


def _optional_number(spec: dict[str, Any], key: str, field: str, where: str) -> float | None:
    """spec[key] as a float >= 0, None when absent or null."""
    value = spec.get(key)
    if value is None:
        return None
    number = _finite(value)
    if number is None or number < 0:
        raise HFConfigError(f"{where}: {field}.{key} must be a finite number >= 0, got {value!r}")
    return number


def _yarn_mscale(factor: float, mscale: float) -> float:
    return 1.0 if factor <= 1 else 0.1 * mscale * math.log(factor) + 1.0


def _yarn(
    spec: dict[str, Any], field: str, max_pos: int, original: int, where: str
) -> dict[str, Any]:
    """YaRN with `_compute_yarn_parameters`' defaults: factor from the context ratio when
    absent; attention_factor from mscale/mscale_all_dim when both are given, else 0 (the
    package derives 0.1 * ln(factor) + 1, as transformers does); beta_fast 32 and
    beta_slow 1 when absent, null or 0; truncate true when absent."""
    factor = _optional_number(spec, "factor", field, where)
    factor = max_pos / original if factor is None else factor
    if factor < 1:
        raise HFConfigError(
            f"{where}: {field}.factor must be >= 1 for yarn (YaRN extends the context), "
            f"got {factor}"
        )
    attention = _optional_number(spec, "attention_factor", field, where)
    if attention == 0:
        raise HFConfigError(f"{where}: {field}.attention_factor must be > 0, got 0")
    mscale = _optional_number(spec, "mscale", field, where)
    mscale_all_dim = _optional_number(spec, "mscale_all_dim", field, where)
    if attention is None and mscale and mscale_all_dim:
        attention = _yarn_mscale(factor, mscale) / _yarn_mscale(factor, mscale_all_dim)
    truncate = spec.get("truncate", True)  # null: falsy, no truncation, as in transformers
    if truncate is not None and not isinstance(truncate, bool):
        raise HFConfigError(f"{where}: {field}.truncate must be true or false, got {truncate!r}")
    return {
        "rope_scaling_factor": factor,
        "rope_beta_fast": _optional_number(spec, "beta_fast", field, where) or 32.0,
        "rope_beta_slow": _optional_number(spec, "beta_slow", field, where) or 1.0,
        "rope_attention_factor": attention or 0.0,
        "rope_truncate": bool(truncate),
        # MLA's softmax scale (transformers' yarn_apply_mscale); read by family mla only
        "rope_mscale_all_dim": mscale_all_dim or 0.0,
    }


def quantization_method(raw: dict[str, Any]) -> str | None:
    """`quantization_config.quant_method` ("fp8" for DeepSeek-V3/R1's 128 x 128 blocks with
    `weight_scale_inv`), or None for float weights."""
    quant = raw.get("quantization_config")
    if quant is None:
        return None
    method = quant.get("quant_method") if isinstance(quant, dict) else None
    return method if isinstance(method, str) else repr(quant)


def quantized_refusal(file: Path, method: str) -> str:
    """The loader's one line for a quantized checkpoint: the package loads float weights;
    cann-recipes-infer converts DeepSeek's fp8 first (models/deepseek_r1/utils/
    convert_model.py), and so must a user of this package."""
    return (
        f"{file}: quantization_config ({method}) is not supported: the package loads "
        "bfloat16/float16/float32 weights; dequantise the checkpoint first (DeepSeek's fp8: "
        "weight * weight_scale_inv per 128 x 128 block) and drop quantization_config"
    )


def _int_at_least(cfg: dict[str, Any], key: str, low: int, where: str) -> int:
    value = cfg.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise HFConfigError(f"{where}: {key} must be an integer >= {low}, got {value!r}")
    return value


def _mla(
    raw: dict[str, Any], cfg: dict[str, Any], model_type: str, layers: int, heads: int, where: str
) -> dict[str, Any]:
    """MLA attention and DeepSeek MoE (transformers' DeepseekV3Config / DeepseekV2Config and
    their modeling files): which layers are MoE, the router, the latent sizes."""
    names = ("n_routed_experts", "num_local_experts", "num_experts")
    experts = {key: raw[key] for key in names if raw.get(key) is not None}
    if len(set(experts.values())) > 1:
        raise HFConfigError(f"{where}: the expert counts contradict each other: {experts}")
    num_experts = next(iter(experts.values()), cfg["n_routed_experts"])
    num_experts = _positive_int(num_experts, "n_routed_experts", where)
    top_k = _positive_int(cfg.get("num_experts_per_tok"), "num_experts_per_tok", where)
    v3 = model_type != "deepseek_v2"
    method = cfg.get("topk_method")
    # transformers' DeepseekV3TopkRouter always routes noaux_tc with sigmoid scores;
    # DeepseekV2TopkRouter greedy or group_limited_greedy over softmax scores.
    methods = ("noaux_tc",) if v3 else ("greedy", "group_limited_greedy")
    if method not in methods:
        raise HFConfigError(
            f"{where}: topk_method {method!r} is not supported for {model_type} "
            f"(supported: {', '.join(methods)})"
        )
    scoring = cfg.get("scoring_func", "sigmoid" if v3 else "softmax")
    if scoring != ("sigmoid" if v3 else "softmax"):
        raise HFConfigError(f"{where}: scoring_func {scoring!r} does not go with {method}")
    grouped = method != "greedy"
    n_group = _int_at_least(cfg, "n_group", 1, where) if grouped else 1
    topk_group = _int_at_least(cfg, "topk_group", 1, where) if grouped else 1
    if num_experts % n_group or topk_group > n_group:
        raise HFConfigError(
            f"{where}: n_routed_experts ({num_experts}) must split into n_group ({n_group}) "
            f"groups, topk_group ({topk_group}) of them chosen"
        )
    if top_k > num_experts // n_group * topk_group:
        raise HFConfigError(
            f"{where}: num_experts_per_tok ({top_k}) exceeds the experts of the topk_group "
            f"chosen groups ({num_experts // n_group * topk_group})"
        )
    first_dense = _int_at_least(cfg, "first_k_dense_replace", 0, where)
    freq = _int_at_least({"moe_layer_freq": 1, **cfg}, "moe_layer_freq", 1, where)
    if not mla_moe_layer_indices(layers, first_dense, freq):
        raise HFConfigError(
            f"{where}: no layer is MoE (first_k_dense_replace={first_dense}, "
            f"moe_layer_freq={freq}, {layers} layers)"
        )
    # null means no query latent (DeepSeek-V2-Lite), not the config class's default
    q_lora = raw["q_lora_rank"] if "q_lora_rank" in raw else cfg.get("q_lora_rank")
    rope_dim = cfg["qk_rope_head_dim"]  # checked, even and positive, by read_hf_config
    scaling = _positive_float(cfg["routed_scaling_factor"], "routed_scaling_factor", where)
    return {
        "q_lora_rank": 0 if q_lora is None else _positive_int(q_lora, "q_lora_rank", where),
        "kv_lora_rank": _positive_int(cfg["kv_lora_rank"], "kv_lora_rank", where),
        "qk_nope_head_dim": _positive_int(cfg["qk_nope_head_dim"], "qk_nope_head_dim", where),
        "qk_rope_head_dim": rope_dim,
        "v_head_dim": _positive_int(cfg["v_head_dim"], "v_head_dim", where),
        "num_experts": num_experts,
        "num_experts_per_tok": top_k,
        "moe_intermediate_size": _positive_int(
            cfg["moe_intermediate_size"], "moe_intermediate_size", where
        ),
        "n_shared_experts": _int_at_least(cfg, "n_shared_experts", 0, where),
        "first_k_dense_replace": first_dense,
        "moe_layer_freq": freq,
        "topk_method": method,
        "n_group": n_group,
        "topk_group": topk_group,
        # DeepseekV2TopkRouter never renormalises, whatever the config says
        "norm_topk_prob": _flag(cfg, "norm_topk_prob", where) if v3 else False,
        "routed_scaling_factor": scaling,
        # DeepSeek-V2 rotates pairs (complex); V3 as rope_interleave says (default true)
        "rope_interleave": _flag(cfg, "rope_interleave", where, True) if v3 else True,
    }
