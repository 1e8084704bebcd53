"""Tensor-parallel layers that never communicate: each holds this rank's shard, sized at
construction, and knows how to cut it from a full tensor (cann-recipes-infer's
module/linear.py: column-parallel layers narrow the output dim, row-parallel layers the
input dim). The model calls the collectives (parallel.Group).

Loading asks each layer three things (weights.py):
- `full_shape(param, shape)`: the unsharded shape, what the checkpoint holds;
- `shard(param, index, count, piece)`: this rank's part of checkpoint piece `index` of
  `count` (q, k, v; gate, up; one expert), read through `piece[...]` indexing, so a
  safetensors slice reads only those bytes. None: no part of it is on this rank;
- `local_of(param, tensor)`: this rank's part of the one-device model's parameter
  (random weights, the same on every rank from one seed).
With one group of size 1 the layers are plain nn.Linear / nn.Embedding.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F

from ..parallel import SINGLE_GROUP, Group, local_kv_heads


@dataclass(frozen=True)
class Part:
    """One output block of a column-parallel linear: `full` rows, split `shards` ways, this
    rank's being shard `index` (a replicated KV head: fewer shards than ranks)."""

    full: int
    shards: int = 1
    index: int = 0

    @property
    def local(self) -> int:
        return self.full // self.shards

    def cut(self, piece, dim: int = 0):
        start = self.index * self.local
        index = (slice(None),) * dim + (slice(start, start + self.local),)
        return piece[index]


def split_parts(parts: tuple[Part, ...], group: Group) -> tuple[Part, ...]:
    return tuple(Part(p.full, group.size, group.rank) for p in parts)


class ColumnParallelLinear(nn.Linear):
    """y = x A^T with A's rows (the outputs) split over the group: each Part (q, k, v;
    gate, up) cut separately, so a merged layer keeps [q_local | k_local | v_local]."""

    def __init__(self, in_features: int, parts: tuple[Part, ...], bias: bool = False):
        super().__init__(in_features, sum(p.local for p in parts), bias=bias)
        self.parts = parts

    @classmethod
    def split(cls, in_features: int, sizes, group: Group = SINGLE_GROUP, bias: bool = False):
        """Every block of `sizes` split evenly over `group`."""
        return cls(in_features, split_parts(tuple(Part(s) for s in sizes), group), bias)

    @property
    def local_sizes(self) -> list[int]:
        return [p.local for p in self.parts]

    def full_shape(self, param: str, shape: tuple[int, ...]) -> tuple[int, ...]:
        return (sum(p.full for p in self.parts), *shape[1:])

    def shard(self, param: str, index: int, count: int, piece) -> torch.Tensor:
        if count == len(self.parts):
            return self.parts[index].cut(piece)
        if count != 1:
            raise ValueError(f"{count} pieces for a layer of {len(self.parts)} parts")
        out, start = [], 0  # one fused tensor of every part
        for p in self.parts:
            out.append(piece[start + p.index * p.local : start + (p.index + 1) * p.local])
            start += p.full
        return torch.cat(out) if len(out) > 1 else out[0]

    def local_of(self, param: str, tensor: torch.Tensor) -> torch.Tensor:
        return self.shard(param, 0, 1, tensor)


def qkv_linear(
    hidden: int, head_dim: int, heads: int, kv_heads: int, group: Group, bias: bool
) -> ColumnParallelLinear:
    """q, k and v fused: this rank's query heads, and its KV heads (one, replicated, when
    there are fewer KV heads than ranks)."""
    kv_local, kv_first = local_kv_heads(kv_heads, group)
    q = Part(heads * head_dim, group.size, group.rank)
    kv = Part(kv_heads * head_dim, kv_heads // kv_local, kv_first // kv_local)
    return ColumnParallelLinear(hidden, (q, kv, kv), bias=bias)


class RowParallelLinear(nn.Linear):
    """y = x A^T with A's columns (the inputs) split over the group: a partial sum, which
    the model all-reduces. No bias (it would be added once per rank)."""

    def __init__(self, in_features: int, out_features: int, group: Group = SINGLE_GROUP):
        super().__init__(in_features // group.size, out_features, bias=False)
        self.part = Part(in_features, group.size, group.rank)

    def full_shape(self, param: str, shape: tuple[int, ...]) -> tuple[int, ...]:
        return (shape[0], self.part.full)

    def shard(self, param: str, index: int, count: int, piece) -> torch.Tensor:
        return self.part.cut(piece, dim=1)

    def local_of(self, param: str, tensor: torch.Tensor) -> torch.Tensor:
        return self.part.cut(tensor, dim=1)


class VocabParallelEmbedding(nn.Embedding):
    """The rows [rank * V / size, (rank + 1) * V / size) of the table; an id outside them
    looks up zeros, and the model all-reduces (cann-recipes-infer models/qwen3_moe: mask,
    embed, all_reduce over the embedding group, with the rank inside that group)."""

    def __init__(self, vocab_size: int, hidden_size: int, group: Group = SINGLE_GROUP):
        super().__init__(vocab_size // group.size, hidden_size)
        self.part = Part(vocab_size, group.size, group.rank)

    def full_shape(self, param: str, shape: tuple[int, ...]) -> tuple[int, ...]:
        return (self.part.full, shape[1])

    def shard(self, param: str, index: int, count: int, piece) -> torch.Tensor:
        return self.part.cut(piece)

    def local_of(self, param: str, tensor: torch.Tensor) -> torch.Tensor:
        return self.part.cut(tensor)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        if self.part.shards == 1:
            return super().forward(input_ids)
        local = input_ids - self.part.index * self.part.local
        here = (local >= 0) & (local < self.part.local)
        rows = F.embedding(torch.where(here, local, 0), self.weight)
        return rows * here.unsqueeze(-1).to(rows.dtype)
