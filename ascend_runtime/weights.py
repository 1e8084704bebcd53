"""Load a local Hugging Face checkpoint (config.json + *.safetensors) into a model package.

Paths only: nothing is ever downloaded. config.json is read by hf_config.py, the same
reader `ascend-scaffold new model --from-hf-config` uses, then checked against the
architecture the package was rendered with. HF parameter names are mapped to the
package's by its weight map (`ModelSpec.weight_sources`). Every problem with the files
raises CheckpointError (a ValueError) naming the file, and the tensor with both shapes
when one does not fit; keys that do not match are listed, missing and unexpected.

    model = load_pretrained(MODEL, "path/to/ckpt", ops.load("portable"), dtype=torch.bfloat16)
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import torch
from torch import nn

from .args import FLAGS, hf_model_types, shared_expert
from .config import InputError
from .hf_config import (
    HFConfigError,
    load_json,
    parse_layer_list,
    quantized_refusal,
    read_hf_config,
)
from .model import CausalLM, ModelSpec
from .parallel import SINGLE, Parallel


@dataclass(frozen=True)
class Source:
    """The HF keys of one parameter, the shape each must have, and how they combine
    (a package's weight_map.py returns these)."""

    keys: tuple[str, ...]
    shapes: tuple[tuple[int, ...], ...]
    assemble: Callable[[list[torch.Tensor]], torch.Tensor]


# How a parameter's pieces combine (Source.assemble), for every weight map:


def concat(pieces: list[torch.Tensor]) -> torch.Tensor:
    """One tensor, or several concatenated on dim 0 (q/k/v, gate/up)."""
    return pieces[0] if len(pieces) == 1 else torch.cat(pieces, dim=0)


def stack_gate_up(pieces: list[torch.Tensor]) -> torch.Tensor:
    """[gate_0, up_0, gate_1, ...] of [I, H] each -> [E, H, 2I] (gate | up per expert), the
    grouped matmul's [E, K, N] layout (cann-recipes-infer module/fuse_moe_gmm.py)."""
    pairs = zip(pieces[::2], pieces[1::2], strict=True)
    return torch.stack([torch.cat(pair, dim=0).t() for pair in pairs])


def stack_down(pieces: list[torch.Tensor]) -> torch.Tensor:
    """[down_0, down_1, ...] of [H, I] each -> [E, I, H]."""
    return torch.stack([piece.t() for piece in pieces])


def transposed(pieces: list[torch.Tensor]) -> torch.Tensor:
    """A fused HF [E, N, K] expert tensor (transformers 5's in-memory layout) -> [E, K, N]."""
    return pieces[0].transpose(1, 2).contiguous()


def gqa_source(name: str, shape: tuple[int, ...], args) -> Source:
    """A GQA decoder's parameter (dense, MoE attention and dense MLPs) from Hugging Face's
    names: one tensor, or q/k/v fused into `qkv_proj` and gate/up into `gate_up_proj`
    (concatenated on dim 0)."""
    hf = name if name == "lm_head.weight" else f"model.{name}"
    rest = shape[1:]
    if ".self_attn.qkv_proj." in hf:
        q = args.num_attention_heads * args.head_dim
        kv = args.num_key_value_heads * args.head_dim
        keys = [hf.replace(".qkv_proj.", f".{p}_proj.") for p in ("q", "k", "v")]
        return Source(tuple(keys), ((q, *rest), (kv, *rest), (kv, *rest)), concat)
    if ".gate_up_proj." in hf:  # a dense MLP or a shared expert
        keys = [hf.replace(".gate_up_proj.", f".{p}_proj.") for p in ("gate", "up")]
        return Source(tuple(keys), ((shape[0] // 2, *rest),) * 2, concat)
    return Source((hf,), (shape,), concat)


# Buffers older transformers releases saved with the weights (LlamaRotaryEmbedding's
# inv_freq, src/transformers/models/llama/modeling_llama.py); this package computes them.
_IGNORED_SUFFIXES = ("rotary_emb.inv_freq",)
log = logging.getLogger(__name__)
_MAX_LISTED = 12


class CheckpointError(InputError):
    """A checkpoint's config.json or safetensors files cannot be used; names the file."""


def model_args_from_hf(spec: ModelSpec, path: str | Path, max_seq_len: int | None = None):
    """The package's ModelArgs from a checkpoint's config.json; checks that it can run it.

    max_seq_len (KV cache and RoPE table length) defaults to the package's rendered value,
    capped at the checkpoint's max_position_embeddings. The variant flags (family, qk_norm,
    attention_bias, rope_scaling, a shared expert) must be the package's: they choose code.
    """
    try:
        hf = read_hf_config(path)
    except HFConfigError as exc:
        raise CheckpointError(str(exc)) from None
    if hf.quantization is not None:
        raise CheckpointError(quantized_refusal(hf.file, hf.quantization))
    rendered = spec.args
    model_types = hf_model_types(rendered)
    if hf.model_type not in model_types:
        raise CheckpointError(
            f"{hf.file}: model_type {hf.model_type!r} cannot run on this package (rendered "
            f"with qk_norm={rendered.qk_norm}, attention_bias={rendered.attention_bias}; it "
            f"runs: {', '.join(model_types) or 'none'})"
        )
    fields = dict(hf.architecture)
    for flag in FLAGS:
        value, baked = fields[flag], getattr(rendered, flag)
        if value != baked:
            if flag == "rope_scaling":
                theirs = f"RoPE scaling {value!r}", f"rope_scaling={baked!r}"
            else:
                theirs = f"{flag} {value!r}", repr(baked)
            raise CheckpointError(
                f"{hf.file}: {theirs[0]} does not match this package's {theirs[1]}"
            )
    if fields["family"] == "moe":
        found = fields.get("shared_expert_intermediate_size", 0) > 0
        if found != shared_expert(rendered):
            raise CheckpointError(
                f"{hf.file}: shared expert {found!r} does not match this package's "
                f"{shared_expert(rendered)!r}"
            )
        fields["mlp_only_layers"] = parse_layer_list(fields["mlp_only_layers"])
        fields.pop("shared_expert_gate", None)  # Qwen2-MoE always gates: decided by model_type
        if not found:
            fields.pop("shared_expert_intermediate_size", None)
    known = {f.name for f in dataclasses.fields(spec.args_class)}
    default_len = rendered.max_seq_len
    max_seq_len = max_seq_len or min(default_len, hf.max_position_embeddings)
    try:
        return spec.args_class(
            **{k: v for k, v in fields.items() if k in known}, max_seq_len=max_seq_len
        )
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


def _mtp_keys(path: str | Path, keys, num_layers: int) -> set[str]:
    """DeepSeek's multi-token-prediction layers (`num_nextn_predict_layers` of them, stored
    as model.layers.{num_hidden_layers}...): this package decodes one token a step, so their
    tensors are skipped, with one line saying so."""
    try:
        raw, _ = load_json(path)
    except HFConfigError:
        return set()
    extra = raw.get("num_nextn_predict_layers")
    if isinstance(extra, bool) or not isinstance(extra, int) or extra < 1:
        return set()
    prefixes = tuple(f"model.layers.{i}." for i in range(num_layers, num_layers + extra))
    skipped = {k for k in keys if k.startswith(prefixes)}
    if skipped:
        log.warning(
            "skipping %d tensors of %d multi-token-prediction layer(s) (num_nextn_predict_"
            "layers): this package decodes one token per step",
            len(skipped),
            extra,
        )
    return skipped


def _chosen(candidates: list[Source], available: dict[str, Path]) -> Source:
    """The source the checkpoint holds most keys of (the first of equals): complete when
    the checkpoint fits, else the one whose missing keys are worth reporting."""
    return max(candidates, key=lambda c: sum(k in available for k in c.keys) / len(c.keys))


def _checkpoint_tensors(
    spec: ModelSpec, model: CausalLM, path: str | Path
) -> Iterator[tuple[str, torch.Tensor]]:
    """(parameter name, tensor) for every parameter of `model` (a tied lm_head once, as
    embed_tokens), assembled as weight_map.py says, each HF tensor checked against the shape
    it must have (a meta-device model has them too); mismatched keys are listed first."""
    stored = checkpoint_files(path)
    overrides = spec.checkpoint_renames  # stored name -> HF name
    original = {overrides.get(k, k): k for k in stored}
    files = {overrides.get(k, k): file for k, file in stored.items()}
    params = dict(model.named_parameters())
    sharded = {name: _sharding(model, name) for name in params}
    chosen = {
        name: _chosen(
            spec.weight_sources(name, _full_shape(param, sharded[name]), model.args), files
        )
        for name, param in params.items()
    }
    needed = {key for source in chosen.values() for key in source.keys}
    ignored = {k for k in files if k.endswith(_IGNORED_SUFFIXES)}
    ignored |= _mtp_keys(path, files, model.args.num_hidden_layers)
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
            for index, (key, shape) in enumerate(zip(source.keys, source.shapes, strict=True)):
                piece = _read(
                    handles[files[key]], original[key], files[key], shape, name, sharded[name],
                    index, len(source.keys),
                )  # fmt: skip
                if piece is not None:
                    pieces.append(piece)
            yield name, source.assemble(pieces)


def _sharding(model: CausalLM, name: str):
    """(layer, parameter leaf) when the model is split over ranks and the layer holding
    `name` is sharded (layers/linear.py's protocol), else None: the whole tensor."""
    if not model.parallel.distributed:
        return None
    path, _, leaf = name.rpartition(".")
    owner = model.get_submodule(path)
    return (owner, leaf) if hasattr(owner, "shard") else None


def _full_shape(param: torch.Tensor, sharding) -> tuple[int, ...]:
    if sharding is None:
        return tuple(param.shape)
    owner, leaf = sharding
    return owner.full_shape(leaf, tuple(param.shape))


def _read(handle, key, file, shape, name, sharding, index, count) -> torch.Tensor | None:
    """Checkpoint tensor `key`, checked against the full `shape` it must have; sharded,
    only this rank's part of it is read (a safetensors slice), None when it has none."""
    try:
        piece = handle.get_slice(key) if sharding is not None else None
        found = tuple(piece.get_shape()) if piece is not None else None
    except Exception as exc:
        raise _unreadable(file, exc) from None
    if piece is None:
        tensor = _get_tensor(handle, key, file)
        found = tuple(tensor.shape)
    if found != shape:
        raise CheckpointError(
            f"{file}: tensor {key} has shape {found}, this model needs {shape} (for {name})"
        )
    if piece is None:
        return tensor
    owner, leaf = sharding
    try:
        return owner.shard(leaf, index, count, piece)
    except Exception as exc:  # unreadable data
        raise _unreadable(file, exc) from None


@torch.no_grad()
def load_checkpoint(
    spec: ModelSpec, model: CausalLM, path: str | Path, dtype: torch.dtype | str | None = None
) -> CausalLM:
    """Copy a local HF checkpoint's weights into `model` (in `dtype` when given)."""
    if dtype is not None:
        model.to(dtype=_as_dtype(dtype))
    params = dict(model.named_parameters())
    for name, tensor in _checkpoint_tensors(spec, model, path):
        params[name].copy_(tensor)
    return model


def _as_dtype(dtype: torch.dtype | str) -> torch.dtype:
    return getattr(torch, dtype) if isinstance(dtype, str) else dtype


@torch.no_grad()
def load_pretrained(
    spec: ModelSpec,
    path: str | Path,
    ops_module: ModuleType,
    *,
    dtype: torch.dtype | str = torch.float32,
    device: torch.device | str = "cpu",
    batch_size: int = 1,
    kv_cache_tokens: int | None = None,
    max_seq_len: int | None = None,
    parallel: Parallel = SINGLE,
) -> CausalLM:
    """Build the model from a checkpoint's config.json, load its weights, allocate caches.

    As pytorch-labs/gpt-fast's generate.py (`_load_model`) does: the model is built on the
    meta device (no memory, no random init), the checkpoint's tensors become its parameters
    (`load_state_dict(..., assign=True)`), each converted once to `dtype` on `device`.
    What is not in the checkpoint is then created on `device`: the RoPE cos/sin tables
    (`RotaryEmbedding.reset_tables`) and the KV cache (`setup_caches`).
    Split over ranks (`parallel`), each rank reads only its own slices of each tensor and
    allocates the KV cache of its own heads.
    """
    args = model_args_from_hf(spec, path, max_seq_len)
    dtype, device = _as_dtype(dtype), torch.device(device)
    with torch.device("meta"):
        model = spec.model_class(args, ops_module, parallel)
    loaded = {
        name: tensor.to(device=device, dtype=dtype)
        for name, tensor in _checkpoint_tensors(spec, model, path)
    }
    return assign_weights(model, loaded, device, dtype, batch_size, kv_cache_tokens)


def assign_weights(
    model: CausalLM,
    tensors: dict[str, torch.Tensor],
    device: torch.device,
    dtype: torch.dtype,
    batch_size: int,
    kv_cache_tokens: int | None = None,
) -> CausalLM:
    """A meta-device `model` takes `tensors` (one per parameter, tied ones once) as its
    parameters; then the RoPE tables and the KV cache are created on `device`."""
    loaded = {name: nn.Parameter(tensor) for name, tensor in tensors.items()}
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
            f"load_pretrained left {', '.join(on_meta)} on the meta device: the model must "
            "create it in RotaryEmbedding.reset_tables or setup_caches"
        )
    return model


def shard_state(model: CausalLM, full: CausalLM) -> dict[str, torch.Tensor]:
    """This rank's part of every parameter of `full`, the same model on one device (random
    weights under parallelism: every rank builds the one-device model from the same seed
    and keeps its shards)."""
    whole = dict(full.named_parameters())
    out = {}
    for name, _ in model.named_parameters():
        sharding = _sharding(model, name)
        if sharding is None:
            out[name] = whole[name].detach()
            continue
        owner, leaf = sharding
        out[name] = owner.local_of(leaf, whole[name].detach())
    return out
