"""What a package's ModelArgs mean to the runtime: the variant flags read at run time, the
checks every ModelArgs runs, and the Hugging Face model_type(s) a set of flags runs.

A ModelArgs is a frozen dataclass rendered into the package (architecture.py). Besides the
sizes it carries the variant flags as fields: `family` ("dense", "moe" or "mla"), `qk_norm`,
`attention_bias`, `rope_scaling` (a kind in layers/rope_scaling.py) and, for MoE,
`shared_expert_intermediate_size` (0: none) and `shared_expert_gate`; and the cache layout
(`kv_cache`, `block_size`, `kv_cache_tokens`), which config.json does not say. Family
mla (DeepSeek-V2/V3, Kimi-K2) has MLA's latent sizes instead of KV heads, DeepSeek's
routing (layers/deepseek_router.py) and `rope_interleave`.
"""

from __future__ import annotations

from .hf_config import moe_layers
from .layers.deepseek_router import TOPK_METHODS
from .model import KV_CACHES

FLAGS = ("family", "qk_norm", "attention_bias", "rope_scaling")


def shared_expert(args) -> bool:
    return getattr(args, "shared_expert_intermediate_size", 0) > 0


def check_args(args) -> None:
    """ValueError for a ModelArgs no model can have (ModelArgs.__post_init__ calls this)."""
    if args.kv_cache not in KV_CACHES:
        raise ValueError(f"kv_cache must be one of {KV_CACHES}, got {args.kv_cache!r}")
    if args.family == "mla":
        _check_mla(args)
        return
    if args.num_attention_heads % args.num_key_value_heads:
        raise ValueError(
            f"num_attention_heads ({args.num_attention_heads}) must be divisible by "
            f"num_key_value_heads ({args.num_key_value_heads})"
        )
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


def _check_mla(args) -> None:
    experts, k = args.num_experts, args.num_experts_per_tok
    if args.topk_method not in TOPK_METHODS:
        raise ValueError(f"topk_method must be one of {TOPK_METHODS}, got {args.topk_method!r}")
    if experts % args.n_group or not 1 <= args.topk_group <= args.n_group:
        raise ValueError(
            f"num_experts ({experts}) must split into n_group ({args.n_group}) equal groups, "
            f"of which topk_group ({args.topk_group}) are chosen"
        )
    if not 1 <= k <= experts // args.n_group * args.topk_group:
        raise ValueError(
            f"num_experts_per_tok ({k}) must be between 1 and the experts of the topk_group "
            f"best groups ({experts // args.n_group * args.topk_group})"
        )
    if args.qk_rope_head_dim % 2:
        raise ValueError(f"qk_rope_head_dim must be even, got {args.qk_rope_head_dim}")
    if not moe_layers(args):
        raise ValueError(
            f"no layer is MoE (first_k_dense_replace {args.first_k_dense_replace}, "
            f"moe_layer_freq {args.moe_layer_freq}, {args.num_hidden_layers} layers)"
        )


def hf_model_types(args) -> tuple[str, ...]:
    """The Hugging Face model_type(s) whose checkpoints these flags run: the one answer the
    checkpoint loader and the package's HF-parity test both use. Empty when no HF model
    has this combination (the package still runs its own weights)."""
    qk_norm, bias = args.qk_norm, args.attention_bias
    if args.family == "mla":
        if args.topk_method == "noaux_tc":  # DeepseekV3TopkRouter (Kimi-K2: the same model)
            return ("deepseek_v3", "kimi_k2")
        if args.rope_interleave and not args.norm_topk_prob:
            return ("deepseek_v2",)  # DeepseekV2TopkRouter: softmax, never renormalised
        return ()
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
