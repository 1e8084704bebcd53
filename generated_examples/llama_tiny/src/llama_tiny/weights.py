"""Load a local Hugging Face checkpoint (config.json + *.safetensors) into this package.

Paths only: nothing is ever downloaded. HF parameter names are mapped to this package's
(q/k/v fused into `qkv_proj`, gate/up into `gate_up_proj`); a checkpoint whose keys do
not match raises ValueError listing the missing and unexpected HF keys.

    model = load_pretrained("path/to/ckpt", ops.load("portable"), dtype=torch.bfloat16)
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from types import ModuleType

import torch
from torch import nn

from .configuration import ModelArgs
from .extensions import weight_name_overrides
from .modeling import Transformer

# Architecture baked into modeling.py when this package was rendered.
QK_NORM = False
ATTENTION_BIAS = False
ROPE_SCALING = "none"
if QK_NORM and not ATTENTION_BIAS:
    MODEL_TYPES: tuple[str, ...] = ("qwen3",)
elif ATTENTION_BIAS and not QK_NORM:
    MODEL_TYPES = ("qwen2",)
elif not (QK_NORM or ATTENTION_BIAS):
    MODEL_TYPES = ("llama", "mistral")
else:
    MODEL_TYPES = ()  # q/k/v bias with QK-norm: no supported HF architecture has both

_IGNORED_SUFFIXES = ("rotary_emb.inv_freq",)
_DEFAULT_HEAD_DIM = {"qwen3": 128}
_MAX_LISTED = 12


def read_hf_config(path: str | Path) -> dict:
    """config.json of a checkpoint directory (or the file itself)."""
    path = Path(path)
    file = path / "config.json" if path.is_dir() else path
    if not file.is_file():
        raise FileNotFoundError(f"no config.json at {file}")
    return json.loads(file.read_text())


def _rope(cfg: dict, where: Path) -> dict:
    """rope_theta and the scaling fields of ModelArgs; the scaling kind must be ROPE_SCALING."""
    theta, scaling = cfg.get("rope_theta"), {}
    for field in ("rope_parameters", "rope_scaling"):
        spec = cfg.get(field)
        if isinstance(spec, dict) and "full_attention" in spec:
            spec = spec["full_attention"]
        if spec is None:
            continue
        if spec.get("partial_rotary_factor", 1.0) != 1.0:
            raise ValueError(f"{where}: partial_rotary_factor != 1.0 is not supported")
        theta = spec.get("rope_theta", theta)
        kind = spec.get("rope_type", spec.get("type", "default"))
        if kind != "default":
            scaling = {**spec, "rope_type": kind}
    kind = scaling.get("rope_type", "none")
    if kind != ROPE_SCALING:
        raise ValueError(
            f"{where}: RoPE scaling {kind!r} does not match this package's rope_scaling="
            f"{ROPE_SCALING!r}"
        )
    fields = {"rope_theta": float(10000.0 if theta is None else theta)}
    if kind in ("llama3", "yarn"):  # where transformers looks for the pre-training context
        original = cfg.get("original_max_position_embeddings")
        original = original or scaling.get("original_max_position_embeddings")
        original = int(original or cfg["max_position_embeddings"])
        fields["rope_original_max_position_embeddings"] = original
    if kind in ("linear", "llama3"):
        fields["rope_scaling_factor"] = float(scaling["factor"])
    if kind == "llama3":
        fields["rope_low_freq_factor"] = float(scaling["low_freq_factor"])
        fields["rope_high_freq_factor"] = float(scaling["high_freq_factor"])
    if kind == "yarn":
        fields.update(_yarn(scaling, cfg, original))
    return fields


def _yarn(scaling: dict, cfg: dict, original: int) -> dict:
    """YaRN fields with transformers' defaults (factor: the context ratio; cos/sin scale:
    from mscale/mscale_all_dim when both are given, else 0, derived in modeling.py)."""
    factor = float(scaling.get("factor") or cfg["max_position_embeddings"] / original)
    attention = scaling.get("attention_factor")
    mscale, mscale_all_dim = scaling.get("mscale"), scaling.get("mscale_all_dim")
    if attention is None and mscale and mscale_all_dim and factor > 1:
        log_factor = math.log(factor)
        attention = (0.1 * mscale * log_factor + 1) / (0.1 * mscale_all_dim * log_factor + 1)
    return {
        "rope_scaling_factor": factor,
        "rope_beta_fast": float(scaling.get("beta_fast") or 32.0),
        "rope_beta_slow": float(scaling.get("beta_slow") or 1.0),
        "rope_attention_factor": float(attention or 0.0),
        "rope_truncate": bool(scaling.get("truncate", True)),
    }


def model_args_from_hf(path: str | Path, max_seq_len: int | None = None) -> ModelArgs:
    """ModelArgs from a checkpoint's config.json; checks that this package can run it.

    max_seq_len (KV cache and RoPE table length) defaults to this package's rendered
    value, capped at the checkpoint's max_position_embeddings.
    """
    cfg = read_hf_config(path)
    where = Path(path)
    model_type = cfg.get("model_type")
    if model_type not in MODEL_TYPES:
        raise ValueError(
            f"{where}: model_type {model_type!r} cannot run on this package (rendered with "
            f"qk_norm={QK_NORM}, attention_bias={ATTENTION_BIAS}; it runs: "
            f"{', '.join(MODEL_TYPES) or 'none'})"
        )
    if cfg.get("hidden_act", "silu") != "silu" or cfg.get("mlp_bias"):
        raise ValueError(f"{where}: only a bias-free SwiGLU (silu) MLP is supported")
    if model_type != "qwen2" and cfg.get("attention_bias"):
        raise ValueError(f"{where}: attention_bias=true (o_proj bias) is not supported")
    if cfg.get("sliding_window") is not None and (
        model_type == "mistral" or cfg.get("use_sliding_window")
    ):
        raise ValueError(f"{where}: sliding-window attention is not supported")
    if any(kind != "full_attention" for kind in cfg.get("layer_types") or ()):
        raise ValueError(f"{where}: only full_attention layers are supported")
    try:
        heads = cfg["num_attention_heads"]
        default_len = ModelArgs.__dataclass_fields__["max_seq_len"].default
        max_pos = cfg.get("max_position_embeddings") or default_len
        return ModelArgs(
            vocab_size=cfg["vocab_size"],
            hidden_size=cfg["hidden_size"],
            num_hidden_layers=cfg["num_hidden_layers"],
            num_attention_heads=heads,
            num_key_value_heads=cfg.get("num_key_value_heads") or heads,
            head_dim=cfg.get("head_dim")
            or _DEFAULT_HEAD_DIM.get(model_type, cfg["hidden_size"] // heads),
            intermediate_size=cfg["intermediate_size"],
            **_rope(cfg, where),
            rms_norm_eps=float(cfg.get("rms_norm_eps", 1e-6)),
            max_seq_len=max_seq_len or min(default_len, max_pos),
            tie_word_embeddings=bool(cfg.get("tie_word_embeddings", False)),
        )
    except KeyError as exc:
        raise ValueError(f"{where}: config.json has no {exc.args[0]!r}") from None


def hf_names(name: str) -> list[str]:
    """The HF checkpoint key(s) one package parameter is made of, in concatenation order."""
    if name == "lm_head.weight":
        return [name]
    hf = f"model.{name}"
    if ".self_attn.qkv_proj." in hf:
        return [hf.replace(".qkv_proj.", f".{p}_proj.") for p in ("q", "k", "v")]
    if ".mlp.gate_up_proj." in hf:
        return [hf.replace(".gate_up_proj.", f".{p}_proj.") for p in ("gate", "up")]
    return [hf]


def checkpoint_files(path: str | Path) -> dict[str, Path]:
    """HF key -> safetensors file: from model.safetensors.index.json when sharded."""
    path = Path(path)
    index = path / "model.safetensors.index.json"
    if index.is_file():
        weight_map = json.loads(index.read_text())["weight_map"]
        return {key: path / file for key, file in weight_map.items()}
    files = sorted(path.glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(f"no *.safetensors files in {path} (paths only, no download)")
    safe_open = _safe_open()
    keys: dict[str, Path] = {}
    for file in files:
        with safe_open(file, framework="pt") as f:
            keys.update(dict.fromkeys(f.keys(), file))
    return keys


def _safe_open():
    try:
        from safetensors import safe_open
    except ImportError:
        raise ImportError(
            "loading a checkpoint needs the safetensors package: pip install safetensors"
        ) from None
    return safe_open


def _listing(keys: set[str]) -> str:
    shown = sorted(keys)[:_MAX_LISTED]
    more = len(keys) - len(shown)
    return ", ".join(shown) + (f", ... ({more} more)" if more else "")


@torch.no_grad()
def load_checkpoint(
    model: Transformer, path: str | Path, dtype: torch.dtype | str | None = None
) -> Transformer:
    """Copy a local HF checkpoint's weights into `model` (in `dtype` when given)."""
    if dtype is not None:
        model.to(dtype=_as_dtype(dtype))
    stored = checkpoint_files(path)
    overrides = weight_name_overrides()  # user hook: stored name -> HF name
    original = {overrides.get(k, k): k for k in stored}
    files = {overrides.get(k, k): file for k, file in stored.items()}
    params = dict(model.named_parameters())  # a tied lm_head shows up once, as embed_tokens
    sources = {name: hf_names(name) for name in params}
    needed = {key for keys in sources.values() for key in keys}
    ignored = {k for k in files if k.endswith(_IGNORED_SUFFIXES)}
    if model.args.tie_word_embeddings:
        ignored.add("lm_head.weight")
    missing = needed - files.keys()
    unexpected = files.keys() - needed - ignored
    if missing or unexpected:
        parts = [f"missing {len(missing)}: {_listing(missing)}"] if missing else []
        if unexpected:
            parts.append(f"unexpected {len(unexpected)}: {_listing(unexpected)}")
        raise ValueError(f"checkpoint {path} does not match this model; " + "; ".join(parts))
    safe_open = _safe_open()
    with ExitStack() as stack:
        handles = {
            file: stack.enter_context(safe_open(file, framework="pt"))
            for file in {files[key] for key in needed}
        }
        for name, param in params.items():
            pieces = [handles[files[key]].get_tensor(original[key]) for key in sources[name]]
            tensor = pieces[0] if len(pieces) == 1 else torch.cat(pieces, dim=0)
            if tensor.shape != param.shape:
                raise ValueError(
                    f"checkpoint {path}: {' + '.join(sources[name])} has shape "
                    f"{tuple(tensor.shape)}, {name} needs {tuple(param.shape)}"
                )
            param.copy_(tensor)
    return model


def _as_dtype(dtype: torch.dtype | str) -> torch.dtype:
    return getattr(torch, dtype) if isinstance(dtype, str) else dtype


@contextmanager
def _uninitialized(dtype: torch.dtype) -> Iterator[None]:
    """Build modules without random init, directly in `dtype` (weights come from disk)."""
    resets = {cls: cls.reset_parameters for cls in (nn.Linear, nn.Embedding)}
    previous = torch.get_default_dtype()
    try:
        for cls in resets:
            cls.reset_parameters = lambda self: None
        torch.set_default_dtype(dtype)
        yield
    finally:
        for cls, reset in resets.items():
            cls.reset_parameters = reset
        torch.set_default_dtype(previous)


def load_pretrained(
    path: str | Path,
    ops_module: ModuleType,
    *,
    dtype: torch.dtype | str = torch.float32,
    device: torch.device | str = "cpu",
    batch_size: int = 1,
    max_seq_len: int | None = None,
) -> Transformer:
    """Build the model from a checkpoint's config.json, load its weights, allocate caches."""
    args = model_args_from_hf(path, max_seq_len)
    dtype = _as_dtype(dtype)
    with _uninitialized(dtype), torch.device(device):
        model = Transformer(args, ops_module)
    model.to(dtype=dtype)  # RoPE tables are built in float32, as build_model casts them
    load_checkpoint(model, path)
    model.eval()
    model.setup_caches(batch_size)
    return model
