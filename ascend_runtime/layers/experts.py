"""Routed experts' weights, stacked per layer for the grouped matmul (ops.moe_experts)."""

import torch
from torch import nn


class RoutedExperts(nn.Module):
    """Every expert's SwiGLU weights stacked in the grouped matmul's [E, K, N] layout, as
    cann-recipes-infer's module/fuse_moe_gmm.py keeps them after loading: w13 is gate | up,
    [E, hidden, 2 * moe_intermediate]; w2 is [E, moe_intermediate, hidden]."""

    def __init__(self, num_experts: int, hidden_size: int, intermediate_size: int):
        super().__init__()
        self.w13_weight = nn.Parameter(torch.empty(num_experts, hidden_size, 2 * intermediate_size))
        self.w2_weight = nn.Parameter(torch.empty(num_experts, intermediate_size, hidden_size))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """nn.Linear's default init per expert: uniform in +-1/sqrt(in_features)."""
        for weight in (self.w13_weight, self.w2_weight):
            bound = weight.shape[1] ** -0.5
            nn.init.uniform_(weight, -bound, bound)
