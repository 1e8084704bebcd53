"""MLA decoder with DeepSeek MoE layers: prefill runs eager, only `decode` is compiled.

Everything that changes between decode steps (positions, cache write index, sequence
lengths, cos/sin) enters as an input, so one decode graph serves every step. The layers
are in layers/ (decoder.py, attention.py, moe.py); the KV cache
(contiguous) is allocated and kept by ascend_runtime.model.CausalLM.

Split over ranks (`parallel`, the YAML's parallel_config): the embedding and lm_head hold
this rank's rows of the vocabulary; the embedding's partial rows are all-reduced, the
lm_head's logits gathered (ascend_runtime/parallel.py).
"""

from __future__ import annotations

from types import ModuleType

import torch
from ascend_runtime.layers.linear import ColumnParallelLinear, VocabParallelEmbedding
from ascend_runtime.layers.norm import RMSNorm
from ascend_runtime.layers.rope import RotaryEmbedding
from ascend_runtime.model import AttentionMetadata, CausalLM
from ascend_runtime.ops import Lengths
from ascend_runtime.parallel import SINGLE, Parallel
from torch import nn

from .architecture import ModelArgs
from .layers.decoder import DecoderLayer


class Transformer(CausalLM):
    def __init__(self, args: ModelArgs, ops: ModuleType, parallel: Parallel = SINGLE):
        super().__init__()
        self.args = args
        self.parallel = parallel
        self.embed_tokens = VocabParallelEmbedding(
            args.vocab_size, args.hidden_size, parallel.embed_tp
        )
        self.layers = nn.ModuleList(
            DecoderLayer(args, ops, i, parallel) for i in range(args.num_hidden_layers)
        )
        self.norm = RMSNorm(args.hidden_size, args.rms_norm_eps, ops)
        self.lm_head = ColumnParallelLinear.split(
            args.hidden_size, (args.vocab_size,), parallel.lmhead_tp
        )
        if args.tie_word_embeddings:
            self.lm_head.weight = self.embed_tokens.weight
        self.rotary = RotaryEmbedding(args, args.qk_rope_head_dim)

    def forward(self, input_ids: torch.Tensor, meta: AttentionMetadata) -> torch.Tensor:
        """Logits of the last position of each row: (batch, 1, vocab)."""
        h = self.parallel.embed_tp.all_reduce(self.embed_tokens(input_ids))
        for layer in self.layers:
            h = layer(h, meta)
        if meta.is_prefill:
            h = h[:, -1:]
        return self.parallel.lmhead_tp.all_gather_last(self.lm_head(self.norm(h)))

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
