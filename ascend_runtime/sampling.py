"""The next token, chosen on the host after the compiled decode: greedy at temperature 0,
else sampled with temperature, top-k and top-p (nucleus), as transformers' logits warpers
(`TemperatureLogitsWarper`, `TopKLogitsWarper`, `TopPLogitsWarper`) do. No random op enters
the decode graph; a seeded CPU generator makes a run reproducible on any device."""

from __future__ import annotations

import math

import torch

from .config import MAX_SEED, MAX_TOP_K, DataConfig, InputError


def _number(value) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _integer(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def check_sampling(temperature, top_k, top_p, seed) -> None:
    """The sampler's values, as data_config's rules have them: InputError, one line each."""
    if not _number(temperature) or temperature < 0:
        raise InputError(f"temperature must be a finite number >= 0, got {temperature!r}")
    if not _integer(top_k) or not 0 <= top_k <= MAX_TOP_K:
        raise InputError(f"top_k must be an integer in [0, {MAX_TOP_K:,}], got {top_k!r}")
    if not _number(top_p) or not 0 <= top_p <= 1:
        raise InputError(f"top_p must be a number in [0, 1], got {top_p!r}")
    if seed is not None and (not _integer(seed) or not 0 <= seed <= MAX_SEED):
        raise InputError(f"seed must be None or an integer in [0, 2**63 - 1], got {seed!r}")


def greedy(logits: torch.Tensor) -> torch.Tensor:
    """logits (batch, 1, vocab) -> the first most likely token of each row (batch, 1).
    `max(-1).indices`, not `argmax(-1)`: the same index (the first maximum; NaN wins in
    both), in a third of the host time on CPU at vocab 32k (ATen's argmax is scalar)."""
    return logits.max(-1).indices


class TokenSampler:
    def __init__(self, temperature: float, top_k: int, top_p: float, seed: int | None):
        check_sampling(temperature, top_k, top_p, seed)
        self.temperature, self.top_k, self.top_p = temperature, top_k, top_p
        self.generator = torch.Generator()
        if seed is None:
            self.generator.seed()
        else:
            self.generator.manual_seed(seed)

    @classmethod
    def from_config(cls, data: DataConfig) -> TokenSampler:
        return cls(data.temperature, data.top_k, data.top_p, data.seed)

    def __call__(self, logits: torch.Tensor) -> torch.Tensor:
        """logits (batch, 1, vocab) -> next tokens (batch, 1), on the logits' device."""
        if self.temperature == 0:
            return greedy(logits)
        scores = logits[:, -1].float().cpu() / self.temperature
        if self.top_k:
            kth = scores.topk(min(self.top_k, scores.shape[-1])).values[:, -1:]
            scores = scores.masked_fill(scores < kth, float("-inf"))
        if self.top_p < 1:
            ordered, order = scores.sort(dim=-1, descending=True)
            probs = ordered.softmax(-1)
            before = probs.cumsum(-1) - probs  # mass of the more likely tokens
            ordered = ordered.masked_fill(before > self.top_p, float("-inf"))  # keeps the first
            scores = torch.full_like(scores, float("-inf")).scatter(-1, order, ordered)
        tokens = torch.multinomial(scores.softmax(-1), 1, generator=self.generator)
        return tokens.to(logits.device)
