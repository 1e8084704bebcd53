"""Per-step forward inputs, built on the host outside the graph.

Like cann-recipes-infer's ForwardMetaData: the runner knows every row's length on
the host, so the List[int] lengths for npugraph_ex decode cost no device sync, and
the Tensor forms are plain host-to-device copies.

Given the KV cache's length (`max_seq_len`), both builders refuse, on the host and before
anything runs, a step that would write past its end: on CPU that would be an IndexError
from inside the model, on an NPU `scatter_update_` does not check bounds and would
overwrite memory silently. Nothing is added to the compiled decode graph.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .config import InputError
from .ops import Lengths


class CacheOverflowError(InputError):
    """A step would write a KV-cache position >= max_seq_len."""


# Decode's query lengths as a Tensor are always ones: one per (batch, device), made once and
# read (never written) by every step, so a step pays one host list -> tensor, not three ops.
_QUERY_ONES: dict[tuple[int, torch.device], torch.Tensor] = {}


def _query_ones(batch: int, device: torch.device) -> torch.Tensor:
    ones = _QUERY_ONES.get((batch, device))
    if ones is None:
        with torch.inference_mode(False):  # a normal tensor: usable in and out of the mode
            ones = torch.ones(batch, dtype=torch.long, device=device)
        _QUERY_ONES[batch, device] = ones
    return ones


@dataclass
class StepInputs:
    input_ids: torch.Tensor  # (batch, seq_len)
    position_ids: torch.Tensor  # (batch, seq_len)
    kv_len: torch.Tensor  # (batch,) tokens already in the cache = write position
    actual_seq_lengths_q: Lengths
    actual_seq_lengths_kv: Lengths

    def as_kwargs(self) -> dict:
        # The instance dict, in field order: dataclasses.fields() per step is host time.
        return dict(self.__dict__)


def prefill_inputs(input_ids: torch.Tensor, max_seq_len: int | None = None) -> StepInputs:
    """Equal-length prompts written at positions [0, seq_len); lengths as host lists."""
    bsz, seq_len = input_ids.shape
    if max_seq_len is not None and seq_len > max_seq_len:
        raise CacheOverflowError(
            f"prefill would write positions [0, {seq_len}), cache holds max_seq_len {max_seq_len}"
        )
    device = input_ids.device
    return StepInputs(
        input_ids=input_ids,
        position_ids=torch.arange(seq_len, device=device).expand(bsz, -1),
        kv_len=torch.zeros(bsz, dtype=torch.long, device=device),
        actual_seq_lengths_q=[seq_len] * bsz,
        actual_seq_lengths_kv=[seq_len] * bsz,
    )


def decode_inputs(
    tokens: torch.Tensor,
    kv_len: list[int],
    tensor_lengths: bool,
    max_seq_len: int | None = None,
) -> StepInputs:
    """One new token per row; `kv_len[b]` tokens of row b are already cached, so row b's
    token is written at position kv_len[b], which must be < max_seq_len when given."""
    if max_seq_len is not None and kv_len and max(kv_len) >= max_seq_len:
        raise CacheOverflowError(
            f"decode step would write position {max(kv_len)}, cache holds max_seq_len "
            f"{max_seq_len} (positions 0..{max_seq_len - 1})"
        )
    device = tokens.device
    kv_len_t = torch.tensor(kv_len, dtype=torch.long, device=device)
    if tensor_lengths:  # one host list -> tensor per step; the rest are device-side
        lengths_q = _query_ones(len(kv_len), device)
        lengths_kv = kv_len_t + 1
    else:
        lengths_q = [1] * len(kv_len)
        lengths_kv = [n + 1 for n in kv_len]
    return StepInputs(
        input_ids=tokens.view(-1, 1),
        position_ids=kv_len_t.view(-1, 1),
        kv_len=kv_len_t,
        actual_seq_lengths_q=lengths_q,
        actual_seq_lengths_kv=lengths_kv,
    )
