"""The architecture (ModelArgs): hyperparameters rendered from the interview answers; the
runtime settings are in inference_config.py."""

from dataclasses import dataclass


@dataclass(frozen=True)
class ModelArgs:
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

    def __post_init__(self):
        if self.num_attention_heads % self.num_key_value_heads:
            raise ValueError(
                f"num_attention_heads ({self.num_attention_heads}) must be divisible by "
                f"num_key_value_heads ({self.num_key_value_heads})"
            )
