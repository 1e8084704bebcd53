"""One decoder layer of a mixture-of-experts model: pre-norm attention, then a pre-norm
sparse MoE block on the layers ModelArgs.moe_layers lists, a dense SwiGLU MLP on the rest."""

from types import ModuleType

import torch
from ascend_runtime.layers.mlp import MLP
from ascend_runtime.layers.norm import RMSNorm
from ascend_runtime.model import AttentionMetadata
from torch import nn

from ..architecture import ModelArgs
from .attention import Attention
from .moe import SparseMoeBlock


class DecoderLayer(nn.Module):
    def __init__(self, args: ModelArgs, ops: ModuleType, layer_idx: int):
        super().__init__()
        self.input_layernorm = RMSNorm(args.hidden_size, args.rms_norm_eps, ops)
        self.self_attn = Attention(args, ops)
        self.post_attention_layernorm = RMSNorm(args.hidden_size, args.rms_norm_eps, ops)
        if layer_idx in args.moe_layers:
            self.mlp = SparseMoeBlock(args, ops)
        else:
            self.mlp = MLP(args.hidden_size, args.intermediate_size)

    def forward(self, x: torch.Tensor, meta: AttentionMetadata) -> torch.Tensor:
        h = x + self.self_attn(self.input_layernorm(x), meta)
        return h + self.mlp(self.post_attention_layernorm(h))
