"""The model protocol: what the runtime needs of a model package, and the KV-cache
machinery every decoder shares.

A package's `Transformer` subclasses `CausalLM`: it builds its layers (each attention
module with a `kv_cache` attribute the runtime fills) and defines `forward`, `prefill` and
`decode`; `CausalLM` allocates the caches (contiguous or paged, as `args.kv_cache` says)
and does the host-side bookkeeping between steps. The package describes itself with a
`ModelSpec`, which the runner, validate, triage and the checkpoint loader take.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import torch
from torch import nn

from .block_allocator import BlockAllocator, pool_blocks
from .kv_cache import KVCache
from .latent_cache import LatentCache, PagedLatentCache
from .ops import Lengths
from .paged_kv_cache import PagedKVCache
from .parallel import SINGLE, Parallel

KV_CACHES = ("contiguous", "paged")


class AttentionMetadata(NamedTuple):
    """What changes between steps, passed down every layer as one object (the role of
    cann-recipes-infer's ForwardMetaData); each field is a graph input, not a constant."""

    cos: torch.Tensor  # (batch, seq_len, 1, head_dim)
    sin: torch.Tensor
    kv_len: torch.Tensor  # (batch,) tokens already cached = decode write position
    actual_seq_lengths_q: Lengths
    actual_seq_lengths_kv: Lengths
    is_prefill: bool  # a Python bool: prefill and decode are separate graphs
    cache_row: int | None = None  # prefill of one row of a ragged batch (eager only)


class CausalLM(nn.Module):
    """Base of a package's Transformer: `self.args` (with kv_cache, block_size and
    kv_cache_tokens), `self.rotary`, and `attention_modules()` holding `kv_cache`: K and V
    of `num_kv_heads` x `head_dim` (this rank's heads under attention TP), or, for an
    attention module with `latent_dims` (kv_lora_rank, rope dim), MLA's latent cache
    (latent_cache.py), whole on every rank as cann-recipes-infer keeps it."""

    args: Any
    block_allocator: BlockAllocator | None = None
    parallel: Parallel = SINGLE  # this rank's groups (parallel.py): set by the constructor

    def attention_modules(self) -> Iterator[nn.Module]:
        """Every module that owns a KV cache (default: `layer.self_attn` of `self.layers`)."""
        return (layer.self_attn for layer in self.layers)

    @property
    def host_written_tensors(self) -> tuple[str, ...]:
        """Tensors decode reads through the model that the host rewrites between steps:
        they must stay graph inputs (graph.py's inductor stand-in freezes nothing for them).
        A paged cache's block table and slot mapping; none for a contiguous cache."""
        if self.args.kv_cache == "paged":
            return ("block_allocator.block_table", "block_allocator.slot_mapping")
        return ()

    def setup_caches(
        self,
        batch_size: int,
        max_seq_len: int | None = None,
        kv_cache_tokens: int | None = None,
        block_size: int | None = None,
    ) -> None:
        """Allocate every layer's KV cache once, on the weights' device and dtype; decode
        writes into it in place. Contiguous: every row holds max_seq_len positions. Paged:
        one pool of blocks for a budget of `kv_cache_tokens` (all rows together; None: the
        rendered args.kv_cache_tokens), rows take blocks as they grow (block_allocator.py)."""
        args = self.args
        max_seq_len = max_seq_len or args.max_seq_len
        weight = self.embed_tokens.weight
        where = {"dtype": weight.dtype, "device": weight.device}
        if args.kv_cache == "contiguous":
            if kv_cache_tokens is not None or block_size is not None:
                raise ValueError(
                    "kv_cache_tokens and block_size set a paged cache; this one is contiguous"
                )
            for attn in self.attention_modules():
                latent = getattr(attn, "latent_dims", None)  # MLA: (kv_lora_rank, rope dim)
                if latent:
                    attn.kv_cache = LatentCache(batch_size, max_seq_len, *latent, attn.ops, **where)
                    continue
                attn.kv_cache = KVCache(
                    batch_size, attn.num_kv_heads, max_seq_len, attn.head_dim, attn.ops, **where
                )
            return
        block_size = block_size or args.block_size
        self.block_allocator = BlockAllocator(
            batch_size,
            pool_blocks(kv_cache_tokens or args.kv_cache_tokens, block_size),
            block_size,
            max_seq_len,
            device=weight.device,
        )
        for attn in self.attention_modules():
            latent = getattr(attn, "latent_dims", None)
            if latent:
                attn.kv_cache = PagedLatentCache(self.block_allocator, *latent, attn.ops, **where)
                continue
            attn.kv_cache = PagedKVCache(
                self.block_allocator, attn.num_kv_heads, attn.head_dim, attn.ops, **where
            )

    def kv_elements_per_token(self) -> int:
        """Cache elements one token takes in every layer together on this rank: K and V of
        its KV heads, or MLA's latent and rope key (works on a meta-device model)."""
        total = 0
        for attn in self.attention_modules():
            latent = getattr(attn, "latent_dims", None)
            total += sum(latent) if latent else 2 * attn.num_kv_heads * attn.head_dim
        return total

    @property
    def kv_cache_tokens(self) -> int | None:
        """A paged pool's token budget (whole blocks, null excluded); None when contiguous
        (every row owns max_seq_len positions)."""
        if self.block_allocator is None:
            return None
        return (self.block_allocator.num_blocks - 1) * self.block_allocator.block_size

    def prepare_decode(self, kv_len: list[int], active: list[bool] | None = None) -> None:
        """Host side, before each decode call. Paged: reserve a block for a row entering a
        new one and fill the slot_mapping (an inactive row, finished or padding, writes the
        null block); CacheBudgetError when the pool is exhausted. Contiguous: nothing, the
        cache is written at kv_len inside the graph."""
        if self.block_allocator is not None:
            self.block_allocator.decode_slots(kv_len, active or [True] * len(kv_len))

    def start_request(self, tokens_per_row: list[int]) -> None:
        """Before a new request's prefill. Paged: every row's blocks go back to the pool,
        and the request's worst case (`tokens_per_row` positions each) must fit the budget,
        else CacheBudgetError before anything runs. Contiguous: nothing to reserve."""
        if self.block_allocator is not None:
            self.block_allocator.release_all()
            self.block_allocator.check_request(tokens_per_row)

    def release_row(self, row: int) -> None:
        """A finished row's blocks go back to the pool (it writes the null block from now)."""
        if self.block_allocator is not None:
            self.block_allocator.release(row)

    def _reserve_prompt(self, input_ids: torch.Tensor, cache_row: int | None) -> None:
        """Paged prefill: each prompt row's old blocks go back to the pool, then the prompt's
        are reserved once for every layer (CacheBudgetError, nothing written, when they do
        not fit the budget)."""
        if self.block_allocator is None:
            return
        rows = range(input_ids.shape[0]) if cache_row is None else [cache_row]
        for row in rows:
            self.block_allocator.release(row)
        for row in rows:
            self.block_allocator.reserve(row, input_ids.shape[1])

    def _step(
        self, input_ids, position_ids, kv_len, lengths_q, lengths_kv, is_prefill, cache_row=None
    ) -> torch.Tensor:
        """One forward over the cache: the metadata every layer reads, then `forward`."""
        if any(attn.kv_cache is None for attn in self.attention_modules()):
            raise RuntimeError("no KV cache: call model.setup_caches(batch_size) first")
        if is_prefill:
            self._reserve_prompt(input_ids, cache_row)
        cos, sin = self.rotary(position_ids)
        meta = AttentionMetadata(cos, sin, kv_len, lengths_q, lengths_kv, is_prefill, cache_row)
        return self(input_ids, meta)


@dataclass(frozen=True)
class ModelSpec:
    """A model package as the runtime takes it (runner, validate, triage, weights).

    `weight_sources(name, shape, args)` lists where a parameter can come from
    (weights.Source); `checkpoint_renames` maps a checkpoint's tensor names to the Hugging
    Face names the weight map expects, for checkpoints saved with other names.
    """

    name: str
    args_class: type
    model_class: Callable[..., CausalLM]
    weight_sources: Callable[[str, tuple[int, ...], Any], list]
    checkpoint_renames: Mapping[str, str] = field(default_factory=dict)

    @property
    def args(self):
        """The rendered ModelArgs (every field at its default)."""
        return self.args_class()
