"""Routed experts' weights, stacked per layer for the grouped matmul (ops.moe_experts)."""

from __future__ import annotations

import torch
from torch import nn

from ..parallel import SINGLE_GROUP, Group
from .linear import Part


class RoutedExperts(nn.Module):
    """Every expert's SwiGLU weights stacked in the grouped matmul's [E, K, N] layout, as
    cann-recipes-infer's module/fuse_moe_gmm.py keeps them after loading: w13 is gate | up,
    [E, hidden, 2 * moe_intermediate]; w2 is [E, moe_intermediate, hidden].

    Parallel: this rank holds experts [first, first + E / ep) of the expert-parallel group
    `ep`, each cut to its share of the intermediate size over `tp` (MoE TP). Its output is a
    partial sum, all-reduced over every rank by the model."""

    def __init__(
        self,
        num_experts: int,
        hidden_size: int,
        intermediate_size: int,
        ep: Group = SINGLE_GROUP,
        tp: Group = SINGLE_GROUP,
    ):
        super().__init__()
        self.experts = Part(num_experts, ep.size, ep.rank)
        self.inner = Part(intermediate_size, tp.size, tp.rank)
        local, inner = self.experts.local, self.inner.local
        self.w13_weight = nn.Parameter(torch.empty(local, hidden_size, 2 * inner))
        self.w2_weight = nn.Parameter(torch.empty(local, inner, hidden_size))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """nn.Linear's default init per expert: uniform in +-1/sqrt(in_features)."""
        for weight in (self.w13_weight, self.w2_weight):
            bound = weight.shape[1] ** -0.5
            nn.init.uniform_(weight, -bound, bound)

    def local_routing(
        self, expert_ids: torch.Tensor, weights: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The routing in this rank's expert numbering: a slot routed to another rank's
        expert gets weight 0 (and local expert 0, so every shape stays fixed: the
        local-expert decode of cann-recipes-infer's MoE notes, capturable in a graph)."""
        if self.experts.shards == 1:
            return expert_ids, weights
        local = expert_ids - self.experts.index * self.experts.local
        here = (local >= 0) & (local < self.experts.local)
        return torch.where(here, local, 0).to(expert_ids.dtype), weights * here

    # Loading (layers/linear.py's protocol). Checkpoint pieces: per expert gate and up
    # [I, H] (w13: 2E pieces) or down [H, I] (w2: E pieces), or one fused HF tensor,
    # [E, 2I, H] or [E, H, I] (transformers 5's layout).

    def full_shape(self, param: str, shape: tuple[int, ...]) -> tuple[int, ...]:
        experts, rows, cols = shape
        if param == "w13_weight":
            return (self.experts.full, rows, 2 * self.inner.full)
        return (self.experts.full, self.inner.full, cols)

    def shard(self, param: str, index: int, count: int, piece) -> torch.Tensor | None:
        first = self.experts.index * self.experts.local
        last = first + self.experts.local
        start, width = self.inner.index * self.inner.local, self.inner.local
        if count == 1 and len(_shape(piece)) == 3:  # fused: every expert in one tensor
            if param == "w13_weight":  # [E, 2I, H]: gate rows, then up rows
                up = self.inner.full + start
                gate_rows = piece[first:last, start : start + width]
                return torch.cat((gate_rows, piece[first:last, up : up + width]), dim=1)
            return piece[first:last, :, start : start + width]  # [E, H, I]
        expert = index // 2 if param == "w13_weight" else index
        if not first <= expert < last:
            return None
        return self.inner.cut(piece, dim=0 if param == "w13_weight" else 1)

    def local_of(self, param: str, tensor: torch.Tensor) -> torch.Tensor:
        """From the package's own layout, [E, H, 2I] (gate | up) or [E, I, H]."""
        first = self.experts.index * self.experts.local
        mine = tensor[first : first + self.experts.local]
        if param == "w2_weight":
            return self.inner.cut(mine, dim=1)
        gate, up = mine.chunk(2, dim=-1)
        return torch.cat((self.inner.cut(gate, dim=2), self.inner.cut(up, dim=2)), dim=-1)


def _shape(piece) -> tuple[int, ...]:
    return tuple(piece.shape) if isinstance(piece, torch.Tensor) else tuple(piece.get_shape())
