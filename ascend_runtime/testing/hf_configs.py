"""A tiny Hugging Face config of each model_type the runtime runs, with what real
checkpoints of that type use, for a package's HF-parity tests. Which of them a package
runs is `ascend_runtime.args.hf_model_types(ModelArgs())`: the loader's answer too."""

from __future__ import annotations

from ..args import hf_model_types

# MoE: 8 experts, top-2, 3 layers; Qwen3-MoE and Qwen2-MoE mix dense and MoE layers.
MOE = dict(num_experts_per_tok=2, moe_intermediate_size=32, num_hidden_layers=3)

MLA = dict(
    kv_lora_rank=32, qk_nope_head_dim=24, qk_rope_head_dim=8, v_head_dim=16,
    moe_intermediate_size=32, num_experts_per_tok=2, n_routed_experts=8, n_group=2,
    topk_group=1, first_k_dense_replace=1, num_hidden_layers=3, routed_scaling_factor=2.5,
    num_key_value_heads=4,  # unused by MLA; transformers' repeat_kv reads it
)  # fmt: skip

TINY_HF_CONFIGS: dict[str, tuple[str, dict]] = {
    "llama": ("LlamaConfig", dict(head_dim=16, rope_theta=500000.0)),
    "mistral": ("MistralConfig", dict(head_dim=32, sliding_window=None)),
    "qwen2": ("Qwen2Config", dict(rope_theta=1000000.0, tie_word_embeddings=True)),
    "qwen3": ("Qwen3Config", dict(head_dim=32, rope_theta=1000000.0, tie_word_embeddings=True)),
    "qwen3_moe": (
        "Qwen3MoeConfig",
        dict(**MOE, num_experts=8, head_dim=32, norm_topk_prob=True, mlp_only_layers=[1]),
    ),
    "qwen2_moe": (
        "Qwen2MoeConfig",
        dict(**MOE, num_experts=8, shared_expert_intermediate_size=48, decoder_sparse_step=2),
    ),
    "mixtral": ("MixtralConfig", dict(**MOE, num_local_experts=8, intermediate_size=32)),
    # MLA + DeepSeek MoE: layer 0 dense, 1 and 2 MoE; 2 groups of 4 experts. Kimi-K2 is
    # DeepSeek-V3's classes with a config.json saying kimi_k2 (the test rewrites it).
    "deepseek_v3": ("DeepseekV3Config", dict(**MLA, q_lora_rank=32, n_shared_experts=1)),
    "kimi_k2": ("DeepseekV3Config", dict(**MLA, q_lora_rank=32, n_shared_experts=1)),
    "deepseek_v2": ("DeepseekV2Config", dict(**MLA, q_lora_rank=None, n_shared_experts=2)),
}


def tiny_hf_configs(args) -> dict[str, tuple[str, dict]]:
    """(config class name, fields) per model_type `args` runs (Qwen2-MoE's q/k/v bias as
    args.attention_bias says)."""
    configs = {}
    for model_type in hf_model_types(args):
        name, fields = TINY_HF_CONFIGS[model_type]
        if model_type == "qwen2_moe":
            fields = {**fields, "qkv_bias": args.attention_bias}
        if args.family == "mla":
            fields = {**fields, **_mla_flags(args)}
        configs[model_type] = (name, fields)
    return configs


def _mla_flags(args) -> dict:
    """The rendered router and RoPE layout, which choose code (a V3 config with V2 routing
    is no Hugging Face model)."""
    flags = {"norm_topk_prob": args.norm_topk_prob}
    if args.topk_method != "noaux_tc":
        flags["topk_method"] = args.topk_method
    else:
        flags["rope_interleave"] = args.rope_interleave
    if args.topk_method == "greedy":
        flags.update(n_group=None, topk_group=None)
    return flags
