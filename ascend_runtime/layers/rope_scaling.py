"""RoPE scaling kinds, by the name transformers gives them (`rope_scaling.rope_type`).

Each kind maps the base inverse frequencies to scaled ones and returns the factor cos/sin
are multiplied by. A kind reads its parameters from ModelArgs' `rope_*` fields.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

Scaling = Callable[[torch.Tensor, object], tuple[torch.Tensor, float]]
ROPE_SCALINGS: dict[str, Scaling] = {}


def register(kind: str) -> Callable[[Scaling], Scaling]:
    """Add a scaling kind (a model needing a new one registers it before building)."""

    def add(scale: Scaling) -> Scaling:
        ROPE_SCALINGS[kind] = scale
        return scale

    return add


def scale_frequencies(kind: str, inv_freq: torch.Tensor, args) -> tuple[torch.Tensor, float]:
    try:
        scale = ROPE_SCALINGS[kind]
    except KeyError:
        known = ", ".join(sorted(ROPE_SCALINGS))
        raise ValueError(f"unknown rope_scaling {kind!r}; known: {known}") from None
    return scale(inv_freq, args)


@register("none")
def _none(inv_freq: torch.Tensor, args) -> tuple[torch.Tensor, float]:
    return inv_freq, 1.0


@register("linear")
def _linear(inv_freq: torch.Tensor, args) -> tuple[torch.Tensor, float]:
    """transformers' `rope_type: linear`: positions divided by `factor`."""
    return inv_freq / args.rope_scaling_factor, 1.0


@register("llama3")
def _llama3(inv_freq: torch.Tensor, args) -> tuple[torch.Tensor, float]:
    """transformers' `_compute_llama3_parameters`: long wavelengths slowed by `factor`,
    short ones kept, the band between blended linearly in (original context / wavelength)."""
    factor = args.rope_scaling_factor
    low, high = args.rope_low_freq_factor, args.rope_high_freq_factor
    context = args.rope_original_max_position_embeddings
    wavelen = 2 * math.pi / inv_freq
    blend = (context / wavelen - low) / (high - low)
    scaled = (1 - blend) * inv_freq / factor + blend * inv_freq
    scaled = torch.where(wavelen > context / low, inv_freq / factor, scaled)
    return torch.where(wavelen < context / high, inv_freq, scaled), 1.0


@register("yarn")
def _yarn(inv_freq: torch.Tensor, args) -> tuple[torch.Tensor, float]:
    """transformers' `_compute_yarn_parameters`: frequencies turning more than beta_fast
    times over the original context are kept, those turning fewer than beta_slow times are
    divided by `factor`, with a linear ramp (over dimension pairs) between; cos/sin scaled."""
    dim, base = 2 * inv_freq.shape[0], args.rope_theta  # the rotated dimensions
    context = args.rope_original_max_position_embeddings

    def pair_turning(turns: float) -> float:
        return dim * math.log(context / (turns * 2 * math.pi)) / (2 * math.log(base))

    low, high = pair_turning(args.rope_beta_fast), pair_turning(args.rope_beta_slow)
    if args.rope_truncate:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    pairs = torch.arange(dim // 2, dtype=torch.float32, device=inv_freq.device)
    ramp = ((pairs - low) / max(high - low, 1e-3)).clamp(0, 1)  # 0 kept, 1 divided
    scaled = inv_freq / args.rope_scaling_factor * ramp + inv_freq * (1 - ramp)
    scale = args.rope_attention_factor or 0.1 * math.log(args.rope_scaling_factor) + 1.0
    return scaled, scale


def softmax_mscale(args) -> float:
    """The factor YaRN's `mscale_all_dim` puts on MLA's softmax scale, squared: it scales
    the non-rotary dimensions too (transformers' `yarn_apply_mscale`, cann-recipes-infer's
    models/deepseek_r1 `softmax_scale * mscale * mscale`); 1.0 without it."""
    mscale_all_dim = getattr(args, "rope_mscale_all_dim", 0.0)
    if args.rope_scaling != "yarn" or not mscale_all_dim or args.rope_scaling_factor <= 1:
        return 1.0
    return (0.1 * mscale_all_dim * math.log(args.rope_scaling_factor) + 1.0) ** 2
