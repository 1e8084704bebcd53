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
- A paged cache gets the whole request's worst case checked before the prefill
  (`start_request`), gives a finished row's blocks back at once (`release_row`) and every
  row's at the end of the call, so nothing is held from one call to the next.
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

from .config import InputError
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


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _check_ids(ids, name: str) -> set[int]:
    if isinstance(ids, str | bytes) or not hasattr(ids, "__iter__"):
        raise InputError(f"{name} must be a set of token ids, got {ids!r}")
    ids = list(ids)
    bad = next((i for i in ids if not _is_int(i)), None)
    if bad is not None:
        raise InputError(f"{name} must hold integer token ids, got {bad!r}")
    return set(ids)


def _check_prompts(prompts, rows: int, vocab_size: int) -> list[list[int]]:
    """One list of in-vocabulary integer ids per cache row (an id past the vocabulary is an
    IndexError on CPU and reads another row's weights on an NPU)."""
    if isinstance(prompts, str | bytes | torch.Tensor) or not isinstance(prompts, Sequence):
        raise InputError(f"prompts must be a list of token-id lists, got {type(prompts).__name__}")
    if len(prompts) != rows:
        raise InputError(f"{len(prompts)} prompts for a KV cache of {rows} rows")
    out = []
    for row, prompt in enumerate(prompts):
        if isinstance(prompt, str | bytes) or not isinstance(prompt, Sequence):
            raise InputError(f"prompt {row} must be a list of token ids, got {prompt!r:.60}")
        if not prompt:
            raise InputError("every prompt needs at least one token")
        bad = next((t for t in prompt if not _is_int(t) or not 0 <= t < vocab_size), None)
        if bad is not None:
            raise InputError(
                f"prompt {row}: token id {bad!r} is not an integer in [0, {vocab_size}) "
                "(the vocabulary)"
            )
        out.append(list(prompt))
    return out


def _check_budgets(max_new_tokens, rows: int) -> list[int]:
    if _is_int(max_new_tokens):
        budgets = [max_new_tokens] * rows
    elif isinstance(max_new_tokens, Sequence) and not isinstance(max_new_tokens, str | bytes):
        budgets = list(max_new_tokens)
    else:
        raise InputError(
            f"max_new_tokens must be an integer or one per row, got {max_new_tokens!r}"
        )
    if len(budgets) != rows or not all(_is_int(b) and b >= 1 for b in budgets):
        raise InputError(
            f"max_new_tokens must be an integer >= 1 for each of the {rows} rows: {budgets}"
        )
    return budgets


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
    prompts = _check_prompts(prompts, rows, model.args.vocab_size)
    budgets = _check_budgets(max_new_tokens, rows)
    eos_token_ids = _check_ids(eos_token_ids, "eos_token_ids")
    if not callable(sampler):
        raise InputError(f"sampler must be callable (logits -> tokens), got {sampler!r}")
    lengths = [len(p) for p in prompts]
    for row, (n, budget) in enumerate(zip(lengths, budgets, strict=True)):
        if n + budget - 1 > max_seq_len:
            raise CacheOverflowError(
                f"row {row}: prompt {n} + max_new_tokens {budget} - 1 = {n + budget - 1} "
                f"positions, the KV cache holds {max_seq_len}"
            )
    model.start_request([n + budget - 1 for n, budget in zip(lengths, budgets, strict=True)])
    try:
        return _generate(
            model, decode, prompts, budgets, set(eos_token_ids), sampler, tensor_lengths,
            keep_logits, on_step, max_seq_len,
        )  # fmt: skip
    finally:
        for row in range(rows):
            model.release_row(row)


def _generate(
    model, decode, prompts, budgets, eos, sampler, tensor_lengths, keep_logits, on_step, max_seq_len
) -> Generation:
    rows, lengths = len(prompts), [len(p) for p in prompts]
    device = model.embed_tokens.weight.device

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
    for row in (r for r in range(rows) if done[r]):
        model.release_row(row)
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
            if done[row]:
                model.release_row(row)
    return result
