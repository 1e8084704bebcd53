"""The architecture (ModelArgs): hyperparameters rendered from the interview answers.

The variant flags are fields read at run time (ascend_runtime/args.py says what each
means, and which Hugging Face model_type they run); a checkpoint's config.json replaces
the sizes, never the flags. The runtime settings are in the YAML config (config/).
"""

from dataclasses import dataclass

from ascend_runtime.args import check_args


@dataclass(frozen=True)
class ModelArgs:
    family: str = "dense"
    qk_norm: bool = False
    attention_bias: bool = True  # on q/k/v (Qwen2), never on o_proj
    rope_scaling: str = "none"  # ascend_runtime/layers/rope_scaling.py
    vocab_size: int = 1000
    hidden_size: int = 256
    num_hidden_layers: int = 4
    num_attention_heads: int = 8
    num_key_value_heads: int = 2
    head_dim: int = 32
    intermediate_size: int = 704
    rope_theta: float = 1000000.0
    rms_norm_eps: float = 1e-06
    max_seq_len: int = 512
    tie_word_embeddings: bool = False
    # The KV cache layout (not in config.json): contiguous rows, or paged blocks with a
    # default budget the YAML's scheduler_config.kv_cache_tokens replaces.
    kv_cache: str = "contiguous"
    block_size: int = 128
    kv_cache_tokens: int = 0

    def __post_init__(self):
        check_args(self)
