"""One decoder layer of an MLA model: pre-norm multi-head latent attention, then a pre-norm
DeepSeek MoE block on the layers ModelArgs.moe_layers lists (from first_k_dense_replace on,
every moe_layer_freq-th), a dense SwiGLU MLP on the rest."""

from types import ModuleType

import torch
from ascend_runtime.layers.mlp import MLP
from ascend_runtime.layers.norm import RMSNorm
from ascend_runtime.model import AttentionMetadata
from torch import nn

from ..architecture import ModelArgs
from .attention import Attention
from .moe import DeepseekMoE


class DecoderLayer(nn.Module):
    def __init__(self, args: ModelArgs, ops: ModuleType, layer_idx: int):
        super().__init__()
        self.input_layernorm = RMSNorm(args.hidden_size, args.rms_norm_eps, ops)
        self.self_attn = Attention(args, ops)
        self.post_attention_layernorm = RMSNorm(args.hidden_size, args.rms_norm_eps, ops)
        if layer_idx in args.moe_layers:
            self.mlp = DeepseekMoE(args, ops)
        else:
            self.mlp = MLP(args.hidden_size, args.intermediate_size)

    def forward(self, x: torch.Tensor, meta: AttentionMetadata) -> torch.Tensor:
        h = x + self.self_attn(self.input_layernorm(x), meta)
        return h + self.mlp(self.post_attention_layernorm(h))
