"""Batched generation over the preallocated cache: prompts of different lengths, per-row
stopping, host-side sampling; the compiled decode keeps one shape throughout.

- Prefill stays eager. Prompts of one length share one batched prefill; a ragged batch is
  prefilled one row at a time, each prompt (batch 1) written into its own cache row
  (`Transformer.prefill(..., cache_row=b)`), so no padding token is ever computed, cached or
  attended to.
- Decode runs the whole batch every step with per-row positions: row b's token goes to
  position kv_len[b] and attends to its first kv_len[b] + 1 keys (`actual_seq_lengths_kv`
  per row: the NPU FIA takes them per row, the portable attention masks per row when rows
  differ).
- A row stops at one of `eos_token_ids` or after its `max_new_tokens`. A finished row keeps
  being fed the last (token, position) it was fed, so it rewrites its own last cache slot
  and nothing past it; batch size and shapes never change, so nothing recompiles.
- The next token is chosen on the host (sampling.TokenSampler); no random op enters the
  decode graph.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch

from .inference_config import InputError
from .metadata import CacheOverflowError, decode_inputs, prefill_inputs
from .sampling import TokenSampler, greedy

Sampler = Callable[[torch.Tensor], torch.Tensor]


@dataclass
class Generation:
    tokens: list[list[int]]  # per row: the new tokens, an EOS that stopped it included
    stopped_on_eos: list[bool]
    logits: list[torch.Tensor] | None = None  # per step (batch, 1, vocab): prefill, decode...
    prefill_ms: float = 0.0
    decode_ms: list[float] = field(default_factory=list)  # per decode call, synchronised
    positions: list[list[int]] = field(default_factory=list)  # per step: write position per row


def eos_token_ids(model_path: str | Path | None) -> set[int]:
    """A checkpoint's end-of-sequence ids: generation_config.json's `eos_token_id` (an int
    or a list), else config.json's; empty without a checkpoint or without either."""
    if not model_path:
        return set()
    for name in ("generation_config.json", "config.json"):
        file = Path(model_path) / name
        if not file.is_file():
            continue
        try:
            value = json.loads(file.read_text()).get("eos_token_id")
        except (OSError, ValueError, AttributeError):
            continue
        if value is None:
            continue
        values = value if isinstance(value, list) else [value]
        ids = {v for v in values if isinstance(v, int) and not isinstance(v, bool)}
        if ids:
            return ids
    return set()


def cache_shape(model) -> tuple[int, int]:
    """(batch rows, positions) of the KV cache, from shapes (no device sync)."""
    cache = model.layers[0].self_attn.kv_cache
    if cache is None:
        raise RuntimeError("no KV cache: call model.setup_caches(batch_size) first")
    rows, positions = cache.capacity
    return rows, min(model.args.max_seq_len, positions)


def _sync(device: torch.device) -> None:
    if device.type == "npu":
        torch.npu.synchronize()


def prefill_rows(model, prompts: Sequence[Sequence[int]], max_seq_len: int) -> torch.Tensor:
    """Eager prefill of every row: (batch, 1, vocab) logits of each prompt's last token.
    One batched call when the prompts have one length, else one batch-1 call per row into
    that row's cache slice."""
    device = model.embed_tokens.weight.device
    if len({len(p) for p in prompts}) == 1:
        ids = torch.tensor([list(p) for p in prompts], dtype=torch.long, device=device)
        return model.prefill(**prefill_inputs(ids, max_seq_len).as_kwargs())
    rows = []
    for row, ids in enumerate(prompts):
        ids = torch.tensor([list(ids)], dtype=torch.long, device=device)
        rows.append(model.prefill(**prefill_inputs(ids, max_seq_len).as_kwargs(), cache_row=row))
    return torch.cat(rows, dim=0)


@torch.inference_mode()
def generate(
    model,
    decode: Callable,
    prompts: Sequence[Sequence[int]],
    max_new_tokens: int | Sequence[int],
    eos_token_ids: set[int] | frozenset[int] = frozenset(),
    sampler: Sampler | TokenSampler = greedy,
    tensor_lengths: bool = False,
    keep_logits: bool = False,
    on_step: Callable[[dict], None] | None = None,
) -> Generation:
    """Generate for each prompt (one per cache row) until its EOS or max_new_tokens.

    `decode` is `model.decode` or `graph.compile_decode(model, ...)`; `max_new_tokens`
    counts every new token (the prefill's first one too), an int or one per row. Each row
    needs len(prompt) + max_new_tokens - 1 <= max_seq_len cache positions, checked before
    anything runs. `on_step`, if given, gets each decode step's inputs (as kwargs) before
    the call: tests use it to watch the writes.
    """
    rows, max_seq_len = cache_shape(model)
    if len(prompts) != rows:
        raise InputError(f"{len(prompts)} prompts for a KV cache of {rows} rows")
    budgets = [max_new_tokens] * rows if isinstance(max_new_tokens, int) else list(max_new_tokens)
    if len(budgets) != rows or min(budgets) < 1:
        raise InputError(f"max_new_tokens must be >= 1 for each of the {rows} rows: {budgets}")
    lengths = [len(p) for p in prompts]
    if min(lengths) < 1:
        raise InputError("every prompt needs at least one token")
    for row, (n, budget) in enumerate(zip(lengths, budgets, strict=True)):
        if n + budget - 1 > max_seq_len:
            raise CacheOverflowError(
                f"row {row}: prompt {n} + max_new_tokens {budget} - 1 = {n + budget - 1} "
                f"positions, the KV cache holds {max_seq_len}"
            )
    device = model.embed_tokens.weight.device
    eos = set(eos_token_ids)

    _sync(device)
    start = time.perf_counter()
    logits = prefill_rows(model, prompts, max_seq_len)
    _sync(device)
    prefill_ms = (time.perf_counter() - start) * 1e3
    chosen = sampler(logits).view(-1).tolist()  # the host needs them: EOS, text
    result = Generation(
        tokens=[[t] for t in chosen],
        stopped_on_eos=[t in eos for t in chosen],
        logits=[logits] if keep_logits else None,
        prefill_ms=prefill_ms,
    )
    done = [hit or budget == 1 for hit, budget in zip(result.stopped_on_eos, budgets, strict=True)]
    # what each row was last fed: its prompt's last token at the last prompt position
    fed = [(p[-1], n - 1) for p, n in zip(prompts, lengths, strict=True)]
    next_pos = list(lengths)
    while not all(done):
        for row in range(rows):
            if not done[row]:
                fed[row] = (result.tokens[row][-1], next_pos[row])
                next_pos[row] += 1
        tokens = torch.tensor([[t] for t, _ in fed], dtype=torch.long, device=device)
        step = decode_inputs(tokens, [pos for _, pos in fed], tensor_lengths, max_seq_len)
        kwargs = step.as_kwargs()
        # host side: a paged cache reserves blocks; rows already done write the null block
        model.prepare_decode([pos for _, pos in fed], [not d for d in done])
        if on_step is not None:
            on_step(kwargs)
        _sync(device)
        start = time.perf_counter()
        logits = decode(**kwargs)
        _sync(device)
        result.decode_ms.append((time.perf_counter() - start) * 1e3)
        chosen = sampler(logits).view(-1).tolist()
        result.positions.append([pos for _, pos in fed])
        if keep_logits:
            result.logits.append(logits)
        for row in range(rows):
            if done[row]:
                continue
            result.tokens[row].append(chosen[row])
            if chosen[row] in eos:
                result.stopped_on_eos[row] = done[row] = True
            elif len(result.tokens[row]) >= budgets[row]:
                done[row] = True
    return result
