"""One dense decoder layer: pre-norm attention, then a pre-norm SwiGLU MLP.

Split over ranks, attention and the MLP each return this rank's partial sum (row-parallel
o_proj and down_proj); the two all_reduces here complete them (cann-recipes-infer's
models call torch.distributed the same way, outside the linear layers)."""

from types import ModuleType

import torch
from ascend_runtime.layers.mlp import MLP
from ascend_runtime.layers.norm import RMSNorm
from ascend_runtime.model import AttentionMetadata
from ascend_runtime.parallel import SINGLE, Parallel
from torch import nn

from ..architecture import ModelArgs
from .attention import Attention


class DecoderLayer(nn.Module):
    def __init__(
        self,
        args: ModelArgs,
        ops: ModuleType,
        layer_idx: int,  # noqa: ARG002
        parallel: Parallel = SINGLE,
    ):
        super().__init__()
        self.input_layernorm = RMSNorm(args.hidden_size, args.rms_norm_eps, ops)
        self.self_attn = Attention(args, ops, parallel)
        self.post_attention_layernorm = RMSNorm(args.hidden_size, args.rms_norm_eps, ops)
        self.mlp = MLP(args.hidden_size, args.intermediate_size, parallel.dense_tp)
        self.attn_tp, self.mlp_tp = parallel.attn_tp, parallel.dense_tp

    def forward(self, x: torch.Tensor, meta: AttentionMetadata) -> torch.Tensor:
        h = x + self.attn_tp.all_reduce(self.self_attn(self.input_layernorm(x), meta))
        return h + self.mlp_tp.all_reduce(self.mlp(self.post_attention_layernorm(h)))
