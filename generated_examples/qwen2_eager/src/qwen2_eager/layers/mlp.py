"""SwiGLU MLP with gate and up fused into one matmul (loaded from gate_proj + up_proj)."""

import torch
from torch import nn

from ..architecture import ModelArgs


class MLP(nn.Module):
    def __init__(self, args: ModelArgs):
        super().__init__()
        self.intermediate_size = args.intermediate_size
        self.gate_up_proj = nn.Linear(args.hidden_size, 2 * args.intermediate_size, bias=False)
        self.down_proj = nn.Linear(args.intermediate_size, args.hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = self.gate_up_proj(x).split(self.intermediate_size, dim=-1)
        return self.down_proj(nn.functional.silu(gate) * up)
