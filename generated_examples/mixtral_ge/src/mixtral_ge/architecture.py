"""The architecture (ModelArgs): hyperparameters rendered from the interview answers.

The variant flags are fields read at run time (ascend_runtime/args.py says what each
means, and which Hugging Face model_type they run); a checkpoint's config.json replaces
the sizes, never the flags. The runtime settings are in the YAML config (config/).
"""

from dataclasses import dataclass

from ascend_runtime.args import check_args, moe_layers


@dataclass(frozen=True)
class ModelArgs:
    family: str = "moe"
    qk_norm: bool = False
    attention_bias: bool = False  # on q/k/v (Qwen2), never on o_proj
    rope_scaling: str = "none"  # ascend_runtime/layers/rope_scaling.py
    vocab_size: int = 32000
    hidden_size: int = 4096
    num_hidden_layers: int = 32
    num_attention_heads: int = 32
    num_key_value_heads: int = 8
    head_dim: int = 128
    intermediate_size: int = 14336
    num_experts: int = 8
    num_experts_per_tok: int = 2
    moe_intermediate_size: int = 14336
    norm_topk_prob: bool = True
    decoder_sparse_step: int = 1
    mlp_only_layers: tuple[int, ...] = ()
    shared_expert_intermediate_size: int = 0  # 0: none
    shared_expert_gate: bool = False
    rope_theta: float = 1000000.0
    rms_norm_eps: float = 1e-05
    max_seq_len: int = 4096
    tie_word_embeddings: bool = False
    # The KV cache layout (not in config.json): contiguous rows, or paged blocks with a
    # default budget the YAML's scheduler_config.kv_cache_tokens replaces.
    kv_cache: str = "contiguous"
    block_size: int = 128
    kv_cache_tokens: int = 0

    def __post_init__(self):
        check_args(self)

    @property
    def moe_layers(self) -> tuple[int, ...]:
        """Layers with routed experts; the others keep the dense MLP."""
        return moe_layers(self)
