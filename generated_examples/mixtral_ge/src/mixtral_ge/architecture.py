"""The architecture (ModelArgs): hyperparameters rendered from the interview answers; the
runtime settings are in inference_config.py."""

from dataclasses import dataclass

from .hf_config import moe_layer_indices


@dataclass(frozen=True)
class ModelArgs:
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
    rope_theta: float = 1000000.0
    rms_norm_eps: float = 1e-05
    max_seq_len: int = 4096
    tie_word_embeddings: bool = False

    def __post_init__(self):
        if self.num_attention_heads % self.num_key_value_heads:
            raise ValueError(
                f"num_attention_heads ({self.num_attention_heads}) must be divisible by "
                f"num_key_value_heads ({self.num_key_value_heads})"
            )
        if not 1 <= self.num_experts_per_tok <= self.num_experts:
            raise ValueError(
                f"num_experts_per_tok ({self.num_experts_per_tok}) must be between 1 and "
                f"num_experts ({self.num_experts})"
            )
        if not self.moe_layers:
            raise ValueError(
                f"no layer is MoE (decoder_sparse_step {self.decoder_sparse_step}, "
                f"mlp_only_layers {self.mlp_only_layers})"
            )

    @property
    def moe_layers(self) -> tuple[int, ...]:
        """Layers with routed experts; the others keep the dense MLP."""
        return moe_layer_indices(
            self.num_hidden_layers, self.decoder_sparse_step, self.mlp_only_layers
        )
