"""MLA decoder with DeepSeek MoE layers: prefill runs eager, only `decode` is compiled.

Everything that changes between decode steps (positions, cache write index, sequence
lengths, cos/sin) enters as an input, so one decode graph serves every step. The layers
are in layers/ (decoder.py, attention.py, moe.py); the KV cache
(contiguous) is allocated and kept by ascend_runtime.model.CausalLM.
"""

from __future__ import annotations

from types import ModuleType

import torch
from ascend_runtime.layers.norm import RMSNorm
from ascend_runtime.layers.rope import RotaryEmbedding
from ascend_runtime.model import AttentionMetadata, CausalLM
from ascend_runtime.ops import Lengths
from torch import nn

from .architecture import ModelArgs
from .layers.decoder import DecoderLayer


class Transformer(CausalLM):
    def __init__(self, args: ModelArgs, ops: ModuleType):
        super().__init__()
        self.args = args
        self.embed_tokens = nn.Embedding(args.vocab_size, args.hidden_size)
        self.layers = nn.ModuleList(
            DecoderLayer(args, ops, i) for i in range(args.num_hidden_layers)
        )
        self.norm = RMSNorm(args.hidden_size, args.rms_norm_eps, ops)
        self.lm_head = nn.Linear(args.hidden_size, args.vocab_size, bias=False)
        if args.tie_word_embeddings:
            self.lm_head.weight = self.embed_tokens.weight
        self.rotary = RotaryEmbedding(args, args.qk_rope_head_dim)

    def forward(self, input_ids: torch.Tensor, meta: AttentionMetadata) -> torch.Tensor:
        """Logits of the last position of each row: (batch, 1, vocab)."""
        h = self.embed_tokens(input_ids)
        for layer in self.layers:
            h = layer(h, meta)
        if meta.is_prefill:
            h = h[:, -1:]
        return self.lm_head(self.norm(h))

    def prefill(
        self,
        input_ids: torch.Tensor,
        position_ids: torch.Tensor,
        kv_len: torch.Tensor,
        actual_seq_lengths_q: Lengths,
        actual_seq_lengths_kv: Lengths,
        cache_row: int | None = None,
    ) -> torch.Tensor:
        """Eager: prompt lengths vary, so prefill is never compiled. With `cache_row`, a
        batch-1 prompt fills that row of the KV cache only (a ragged batch)."""
        return self._step(
            input_ids,
            position_ids,
            kv_len,
            actual_seq_lengths_q,
            actual_seq_lengths_kv,
            True,
            cache_row,
        )

    def decode(
        self,
        input_ids: torch.Tensor,
        position_ids: torch.Tensor,
        kv_len: torch.Tensor,
        actual_seq_lengths_q: Lengths,
        actual_seq_lengths_kv: Lengths,
    ) -> torch.Tensor:
        """One token per row with fixed shapes: what the compile seam compiles. The lengths
        are host List[int] (npugraph_ex, eager) or int64 Tensors (ge_graph)."""
        return self._step(
            input_ids, position_ids, kv_len, actual_seq_lengths_q, actual_seq_lengths_kv, False
        )
