"""What a package's ModelArgs mean to the runtime: the variant flags read at run time, the
checks every ModelArgs runs, and the Hugging Face model_type(s) a set of flags runs.

A ModelArgs is a frozen dataclass rendered into the package (architecture.py). Besides the
sizes it carries the variant flags as fields: `family` ("dense" or "moe"), `qk_norm`,
`attention_bias`, `rope_scaling` (a kind in layers/rope_scaling.py) and, for MoE,
`shared_expert_intermediate_size` (0: none) and `shared_expert_gate`; and the cache layout
(`kv_cache`, `block_size`, `kv_cache_tokens`), which config.json does not say.
"""

from __future__ import annotations

from .hf_config import moe_layer_indices
from .model import KV_CACHES

FLAGS = ("family", "qk_norm", "attention_bias", "rope_scaling")


def moe_layers(args) -> tuple[int, ...]:
    """Layers with routed experts (none for a dense model); the others keep the dense MLP."""
    if args.family != "moe":
        return ()
    return moe_layer_indices(args.num_hidden_layers, args.decoder_sparse_step, args.mlp_only_layers)


def shared_expert(args) -> bool:
    return getattr(args, "shared_expert_intermediate_size", 0) > 0


def check_args(args) -> None:
    """ValueError for a ModelArgs no model can have (ModelArgs.__post_init__ calls this)."""
    if args.num_attention_heads % args.num_key_value_heads:
        raise ValueError(
            f"num_attention_heads ({args.num_attention_heads}) must be divisible by "
            f"num_key_value_heads ({args.num_key_value_heads})"
        )
    if args.kv_cache not in KV_CACHES:
        raise ValueError(f"kv_cache must be one of {KV_CACHES}, got {args.kv_cache!r}")
    if args.family == "moe":
        if not 1 <= args.num_experts_per_tok <= args.num_experts:
            raise ValueError(
                f"num_experts_per_tok ({args.num_experts_per_tok}) must be between 1 and "
                f"num_experts ({args.num_experts})"
            )
        if not moe_layers(args):
            raise ValueError(
                f"no layer is MoE (decoder_sparse_step {args.decoder_sparse_step}, "
                f"mlp_only_layers {args.mlp_only_layers})"
            )


def hf_model_types(args) -> tuple[str, ...]:
    """The Hugging Face model_type(s) whose checkpoints these flags run: the one answer the
    checkpoint loader and the package's HF-parity test both use. Empty when no HF model
    has this combination (the package still runs its own weights)."""
    qk_norm, bias = args.qk_norm, args.attention_bias
    if args.family == "moe":
        if qk_norm and not bias and not shared_expert(args):
            return ("qwen3_moe",)  # QK-norm, no shared expert: Qwen3MoeAttention
        if not qk_norm and shared_expert(args) and args.shared_expert_gate:
            return ("qwen2_moe",)  # gated shared expert: Qwen2MoeSparseMoeBlock
        if not (qk_norm or bias or shared_expert(args)) and args.norm_topk_prob:
            return ("mixtral",)  # no QK-norm, no bias, top-k renormalised
        return ()
    if qk_norm and bias:
        return ()  # q/k/v bias with QK-norm: no Hugging Face model_type has both
    if qk_norm:
        return ("qwen3",)  # QK-norm: Qwen3Attention's q_norm/k_norm
    if bias:
        return ("qwen2",)  # q/k/v bias: Qwen2Attention's q/k/v_proj
    return ("llama", "mistral")
