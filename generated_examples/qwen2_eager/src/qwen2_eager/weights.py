"""Load a local Hugging Face checkpoint (config.json + *.safetensors) into this package.

Paths only: nothing is ever downloaded. config.json is read by hf_config.py, the same
reader `ascend-scaffold new model --from-hf-config` uses, then checked against the
architecture this package was rendered with. HF parameter names are mapped to this
package's by weight_map.py. Every problem with
the files raises CheckpointError (a ValueError) naming the file, and the tensor with both
shapes when one does not fit; keys that do not match are listed, missing and unexpected.

    model = load_pretrained("path/to/ckpt", ops.load("portable"), dtype=torch.bfloat16)
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from types import ModuleType

import torch
from torch import nn

from .architecture import ModelArgs
from .extensions import weight_name_overrides
from .hf_config import HFConfigError, load_json, read_hf_config
from .inference_config import InputError
from .modeling import Transformer
from .weight_map import Source, sources

# The architecture baked into modeling.py when this package was rendered.
FAMILY = "dense"
ROPE_SCALING = "none"
QK_NORM = False
ATTENTION_BIAS = True
MODEL_TYPES: tuple[str, ...] = ("qwen2",)  # q/k/v bias: Qwen2Attention's q/k/v_proj

# Buffers older transformers releases saved with the weights (LlamaRotaryEmbedding's
# inv_freq, src/transformers/models/llama/modeling_llama.py); this package computes them.
_IGNORED_SUFFIXES = ("rotary_emb.inv_freq",)
_MAX_LISTED = 12


class CheckpointError(InputError):
    """A checkpoint's config.json or safetensors files cannot be used; names the file."""


def model_args_from_hf(path: str | Path, max_seq_len: int | None = None) -> ModelArgs:
    """ModelArgs from a checkpoint's config.json; checks that this package can run it.

    max_seq_len (KV cache and RoPE table length) defaults to this package's rendered
    value, capped at the checkpoint's max_position_embeddings.
    """
    try:
        hf = read_hf_config(path)
    except HFConfigError as exc:
        raise CheckpointError(str(exc)) from None
    if hf.model_type not in MODEL_TYPES:
        raise CheckpointError(
            f"{hf.file}: model_type {hf.model_type!r} cannot run on this package (rendered "
            "with qk_norm=False, attention_bias=True; it runs: "
            f"{', '.join(MODEL_TYPES) or 'none'})"
        )
    fields = dict(hf.architecture)
    baked = {
        "family": FAMILY,
        "qk_norm": QK_NORM,
        "attention_bias": ATTENTION_BIAS,
    }
    found = {
        "family": fields.pop("family"),
        "qk_norm": fields.pop("qk_norm"),
        "attention_bias": fields.pop("attention_bias"),
    }
    for what, value in found.items():
        if value != baked[what]:
            raise CheckpointError(
                f"{hf.file}: {what} {value!r} does not match this package's {baked[what]!r}"
            )
    kind = fields.pop("rope_scaling")
    if kind != ROPE_SCALING:
        raise CheckpointError(
            f"{hf.file}: RoPE scaling {kind!r} does not match this package's "
            f"rope_scaling={ROPE_SCALING!r}"
        )
    default_len = ModelArgs.__dataclass_fields__["max_seq_len"].default
    max_seq_len = max_seq_len or min(default_len, hf.max_position_embeddings)
    try:
        return ModelArgs(**fields, max_seq_len=max_seq_len)
    except ValueError as exc:  # ModelArgs' own checks
        raise CheckpointError(f"{hf.file}: {exc}") from None


def checkpoint_files(path: str | Path) -> dict[str, Path]:
    """HF key -> safetensors file: from model.safetensors.index.json when sharded."""
    path = Path(path)
    index = path / "model.safetensors.index.json"
    if index.is_file():
        try:
            raw, _ = load_json(index)
        except HFConfigError as exc:
            raise CheckpointError(str(exc)) from None
        weight_map = raw.get("weight_map")
        if not isinstance(weight_map, dict) or not all(
            isinstance(file, str) for file in weight_map.values()
        ):
            raise CheckpointError(f"{index}: needs a 'weight_map' object of key -> file name")
        return {key: path / file for key, file in weight_map.items()}
    files = sorted(path.glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(f"no *.safetensors files in {path} (paths only, no download)")
    keys: dict[str, Path] = {}
    for file in files:
        with _open(file) as f:
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


def _unreadable(file: Path, exc: Exception) -> CheckpointError:
    reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return CheckpointError(
        f"checkpoint file {file} cannot be read ({reason}): truncated, corrupt or missing?"
    )


def _open(file: Path):
    """safe_open(file); a missing, truncated or corrupt file raises CheckpointError naming it."""
    safe_open = _safe_open()
    try:
        return safe_open(file, framework="pt")
    except Exception as exc:  # safetensors' SafetensorError (header), OSError, ...
        raise _unreadable(file, exc) from None


def _get_tensor(handle, key: str, file: Path) -> torch.Tensor:
    try:
        return handle.get_tensor(key)
    except Exception as exc:  # unreadable data, unsupported dtype
        raise _unreadable(file, exc) from None


def _listing(keys: set[str]) -> str:
    shown = sorted(keys)[:_MAX_LISTED]
    more = len(keys) - len(shown)
    return ", ".join(shown) + (f", ... ({more} more)" if more else "")


def _chosen(candidates: list[Source], available: dict[str, Path]) -> Source:
    """The source the checkpoint holds most keys of (the first of equals): complete when
    the checkpoint fits, else the one whose missing keys are worth reporting."""
    return max(candidates, key=lambda c: sum(k in available for k in c.keys) / len(c.keys))


def _checkpoint_tensors(model: Transformer, path: str | Path) -> Iterator[tuple[str, torch.Tensor]]:
    """(parameter name, tensor) for every parameter of `model` (a tied lm_head once, as
    embed_tokens), assembled as weight_map.py says, each HF tensor checked against the shape
    it must have (a meta-device model has them too); mismatched keys are listed first."""
    stored = checkpoint_files(path)
    overrides = weight_name_overrides()  # user hook: stored name -> HF name
    original = {overrides.get(k, k): k for k in stored}
    files = {overrides.get(k, k): file for k, file in stored.items()}
    params = dict(model.named_parameters())
    chosen = {
        name: _chosen(sources(name, tuple(param.shape), model.args), files)
        for name, param in params.items()
    }
    needed = {key for source in chosen.values() for key in source.keys}
    ignored = {k for k in files if k.endswith(_IGNORED_SUFFIXES)}
    if model.args.tie_word_embeddings:
        ignored.add("lm_head.weight")
    missing = needed - files.keys()
    unexpected = files.keys() - needed - ignored
    if missing or unexpected:
        parts = [f"missing {len(missing)}: {_listing(missing)}"] if missing else []
        if unexpected:
            parts.append(f"unexpected {len(unexpected)}: {_listing(unexpected)}")
        raise CheckpointError(f"checkpoint {path} does not match this model; " + "; ".join(parts))
    with ExitStack() as stack:
        handles = {
            file: stack.enter_context(_open(file)) for file in sorted({files[k] for k in needed})
        }
        for name, source in chosen.items():
            pieces = []
            for key, shape in zip(source.keys, source.shapes, strict=True):
                piece = _get_tensor(handles[files[key]], original[key], files[key])
                if tuple(piece.shape) != shape:
                    raise CheckpointError(
                        f"{files[key]}: tensor {original[key]} has shape {tuple(piece.shape)}, "
                        f"this model needs {shape} (for {name})"
                    )
                pieces.append(piece)
            yield name, source.assemble(pieces)


@torch.no_grad()
def load_checkpoint(
    model: Transformer, path: str | Path, dtype: torch.dtype | str | None = None
) -> Transformer:
    """Copy a local HF checkpoint's weights into `model` (in `dtype` when given)."""
    if dtype is not None:
        model.to(dtype=_as_dtype(dtype))
    params = dict(model.named_parameters())
    for name, tensor in _checkpoint_tensors(model, path):
        params[name].copy_(tensor)
    return model


def _as_dtype(dtype: torch.dtype | str) -> torch.dtype:
    return getattr(torch, dtype) if isinstance(dtype, str) else dtype


@torch.no_grad()
def load_pretrained(
    path: str | Path,
    ops_module: ModuleType,
    *,
    dtype: torch.dtype | str = torch.float32,
    device: torch.device | str = "cpu",
    batch_size: int = 1,
    kv_cache_tokens: int | None = None,
    max_seq_len: int | None = None,
) -> Transformer:
    """Build the model from a checkpoint's config.json, load its weights, allocate caches.

    As pytorch-labs/gpt-fast's generate.py (`_load_model`) does: the model is built on the
    meta device (no memory, no random init), the checkpoint's tensors become its parameters
    (`load_state_dict(..., assign=True)`), each converted once to `dtype` on `device`.
    What is not in the checkpoint is then created on `device`: the RoPE cos/sin tables
    (`RotaryEmbedding.reset_tables`) and the KV cache (`setup_caches`).
    """
    args = model_args_from_hf(path, max_seq_len)
    dtype, device = _as_dtype(dtype), torch.device(device)
    with torch.device("meta"):
        model = Transformer(args, ops_module)
    loaded = {
        name: nn.Parameter(tensor.to(device=device, dtype=dtype))
        for name, tensor in _checkpoint_tensors(model, path)
    }
    # Every name of every parameter (a tied lm_head.weight too) gets the one loaded
    # Parameter, so assign=True keeps tied weights one tensor.
    first: dict[int, str] = {}
    state: dict[str, nn.Parameter] = {}
    for name, param in model.named_parameters(remove_duplicate=False):
        state[name] = loaded[first.setdefault(id(param), name)]
    model.load_state_dict(state, strict=True, assign=True)
    model.rotary.reset_tables(device)  # non-persistent: still on the meta device
    model.to(device=device, dtype=dtype)  # the tables in `dtype`, as runner.build_model has them
    model.eval()
    model.setup_caches(batch_size, kv_cache_tokens=kv_cache_tokens)
    on_meta = [n for n, t in (*model.named_parameters(), *model.named_buffers()) if t.is_meta]
    if on_meta:
        raise RuntimeError(
            f"load_pretrained left {', '.join(on_meta)} on the meta device: modeling.py must "
            "create it in RotaryEmbedding.reset_tables or Transformer.setup_caches"
        )
    return model
