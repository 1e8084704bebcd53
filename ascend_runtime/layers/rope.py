"""Rotary position embedding: the cos/sin of every position, computed once at init."""

import torch
from torch import nn

from .rope_scaling import scale_frequencies


class RotaryEmbedding(nn.Module):
    """Reads rope_theta, max_seq_len and rope_scaling (a kind in rope_scaling.ROPE_SCALINGS,
    with its rope_* parameters) from the model's args; rotates `dim` dimensions (default
    args.head_dim; MLA rotates only its qk_rope_head_dim part)."""

    def __init__(self, args, dim: int | None = None):
        super().__init__()
        self.args = args
        self.dim = dim or args.head_dim
        self.reset_tables()

    def reset_tables(self, device: torch.device | None = None) -> None:
        """(Re)build the cos/sin tables on `device`, e.g. after building on the meta device."""
        args, dim = self.args, self.dim
        exponents = torch.arange(0, dim, 2, dtype=torch.float32, device=device) / dim
        inv_freq = 1.0 / args.rope_theta**exponents
        inv_freq, scale = scale_frequencies(args.rope_scaling, inv_freq, args)
        positions = torch.arange(args.max_seq_len, dtype=torch.float32, device=device)
        emb = torch.outer(positions, inv_freq).repeat(1, 2)
        cos, sin = emb.cos(), emb.sin()
        if scale != 1.0:
            cos, sin = cos * scale, sin * scale
        self.register_buffer("cos_cached", cos, persistent=False)
        self.register_buffer("sin_cached", sin, persistent=False)

    def forward(self, position_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Each token's cos/sin, gathered by position (no host value enters the graph), as
        (batch, seq_len, 1, head_dim): BSND with N=1, as the fused rotary op takes."""
        bsz, seq_len = position_ids.shape
        index = position_ids.reshape(-1)
        cos = torch.index_select(self.cos_cached, 0, index)
        sin = torch.index_select(self.sin_cached, 0, index)
        return cos.view(bsz, seq_len, 1, -1), sin.view(bsz, seq_len, 1, -1)


def rotate_interleaved(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """RoPE on dimension pairs (x0, x1), (x2, x3), ... (DeepSeek's layout, transformers'
    `apply_rotary_pos_emb_interleave`), each pair rotated by one frequency; the rotated
    evens then odds come out, a fixed permutation of the dimensions that leaves the q.k
    products unchanged as long as queries and keys both take it. cos/sin as
    RotaryEmbedding returns them ((B, S, 1, D), the frequencies repeated twice)."""
    half = x.shape[-1] // 2
    cos, sin = cos[..., :half], sin[..., :half]
    even, odd = x[..., 0::2], x[..., 1::2]
    return torch.cat((even * cos - odd * sin, odd * cos + even * sin), dim=-1)
