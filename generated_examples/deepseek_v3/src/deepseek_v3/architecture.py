"""The architecture (ModelArgs): hyperparameters rendered from the interview answers.

MLA attention with DeepSeek's mixture of experts (DeepSeek-V2/V3, Kimi-K2). The variant
flags are fields read at run time (ascend_runtime/args.py says what each means, and which
Hugging Face model_type they run); a checkpoint's config.json replaces the sizes, never the
flags. The runtime settings are in the YAML config (config/).
"""

from dataclasses import dataclass

from ascend_runtime.args import check_args, moe_layers


@dataclass(frozen=True)
class ModelArgs:
    family: str = "mla"
    qk_norm: bool = False  # MLA norms the latents instead (q_a_layernorm, kv_a_layernorm)
    attention_bias: bool = False
    rope_scaling: str = "yarn"  # ascend_runtime/layers/rope_scaling.py
    rope_interleave: bool = True  # RoPE on dimension pairs (DeepSeek's layout)
    topk_method: str = "noaux_tc"  # ascend_runtime/layers/deepseek_router.py
    vocab_size: int = 129280
    hidden_size: int = 7168
    num_hidden_layers: int = 8
    num_attention_heads: int = 128
    q_lora_rank: int = 1536  # 0: q_proj straight from the hidden state
    kv_lora_rank: int = 512
    qk_nope_head_dim: int = 128
    qk_rope_head_dim: int = 64
    v_head_dim: int = 128
    intermediate_size: int = 18432  # the dense layers' MLP
    num_experts: int = 256
    num_experts_per_tok: int = 8
    moe_intermediate_size: int = 2048
    n_shared_experts: int = 1  # 0: none
    first_k_dense_replace: int = 3
    moe_layer_freq: int = 1
    n_group: int = 8
    topk_group: int = 4
    norm_topk_prob: bool = True
    routed_scaling_factor: float = 2.5
    rope_theta: float = 10000.0
    rope_scaling_factor: float = 40.0
    rope_original_max_position_embeddings: int = 4096
    rope_beta_fast: float = 32.0
    rope_beta_slow: float = 1.0
    rope_attention_factor: float = 1.0  # 0: 0.1 * ln(factor) + 1
    rope_truncate: bool = True
    # YaRN's mscale_all_dim: the softmax scale is multiplied by (0.1 * m * ln(factor) + 1)^2
    # (transformers' yarn_apply_mscale); 0: not.
    rope_mscale_all_dim: float = 1.0
    rms_norm_eps: float = 1e-06
    max_seq_len: int = 4096
    tie_word_embeddings: bool = False
    # The KV cache layout (not in config.json): contiguous rows, or paged blocks with a
    # default budget the YAML's scheduler_config.kv_cache_tokens replaces.
    kv_cache: str = "paged"
    block_size: int = 128
    kv_cache_tokens: int = 16384

    def __post_init__(self):
        check_args(self)

    @property
    def moe_layers(self) -> tuple[int, ...]:
        """Layers with routed experts; the others keep the dense MLP."""
        return moe_layers(self)
