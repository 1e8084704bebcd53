"""SwiGLU MLP with gate and up fused into one matmul (loaded from gate_proj + up_proj)."""

from __future__ import annotations

import torch
from torch import nn

from ..parallel import SINGLE_GROUP, Group
from .linear import ColumnParallelLinear, RowParallelLinear


class MLP(nn.Module):
    """Split over `group` (dense TP, or every rank for a MoE layer's shared experts): this
    rank's share of the intermediate size, so its output is a partial sum the model
    all-reduces. It never communicates itself."""

    def __init__(self, hidden_size: int, intermediate_size: int, group: Group = SINGLE_GROUP):
        super().__init__()
        self.gate_up_proj = ColumnParallelLinear.split(
            hidden_size, (intermediate_size, intermediate_size), group
        )
        self.intermediate_size = self.gate_up_proj.local_sizes[0]
        self.down_proj = RowParallelLinear(intermediate_size, hidden_size, group)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = self.gate_up_proj(x).split(self.intermediate_size, dim=-1)
        return self.down_proj(nn.functional.silu(gate) * up)
