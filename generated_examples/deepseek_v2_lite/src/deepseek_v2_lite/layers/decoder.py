"""One decoder layer of an MLA model: pre-norm multi-head latent attention, then a pre-norm
DeepSeek MoE block on the layers ModelArgs.moe_layers lists (from first_k_dense_replace on,
every moe_layer_freq-th), a dense SwiGLU MLP on the rest.

Split over ranks, attention and the MLP or MoE block each return this rank's partial sum;
the two all_reduces here complete them: over the attention TP group, then over the dense
TP group or, for a MoE layer, every rank (each holds a part of its experts)."""

from types import ModuleType

import torch
from ascend_runtime.layers.mlp import MLP
from ascend_runtime.layers.norm import RMSNorm
from ascend_runtime.model import AttentionMetadata
from ascend_runtime.parallel import SINGLE, Parallel
from torch import nn

from ..architecture import ModelArgs
from .attention import Attention
from .moe import DeepseekMoE


class DecoderLayer(nn.Module):
    def __init__(
        self, args: ModelArgs, ops: ModuleType, layer_idx: int, parallel: Parallel = SINGLE
    ):
        super().__init__()
        self.input_layernorm = RMSNorm(args.hidden_size, args.rms_norm_eps, ops)
        self.self_attn = Attention(args, ops, parallel)
        self.post_attention_layernorm = RMSNorm(args.hidden_size, args.rms_norm_eps, ops)
        if layer_idx in args.moe_layers:
            self.mlp = DeepseekMoE(args, ops, parallel)
            self.mlp_group = parallel.moe
        else:
            self.mlp = MLP(args.hidden_size, args.intermediate_size, parallel.dense_tp)
            self.mlp_group = parallel.dense_tp
        self.attn_tp = parallel.attn_tp

    def forward(self, x: torch.Tensor, meta: AttentionMetadata) -> torch.Tensor:
        h = x + self.attn_tp.all_reduce(self.self_attn(self.input_layernorm(x), meta))
        return h + self.mlp_group.all_reduce(self.mlp(self.post_attention_layernorm(h)))
