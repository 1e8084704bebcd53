"""Host-side token choice: greedy at temperature 0, reproducible sampling for a seed, top-k
and top-p keep only the tokens they should."""

import torch

from ascend_runtime.config import (
    DataConfig,
)
from ascend_runtime.sampling import (
    TokenSampler,
)

VOCAB = 50


def random_logits(batch: int = 4, seed: int = 0) -> torch.Tensor:
    return torch.randn(batch, 1, VOCAB, generator=torch.Generator().manual_seed(seed))


def draws(sampler: TokenSampler, logits: torch.Tensor, n: int = 200) -> set[int]:
    return {int(t) for _ in range(n) for t in sampler(logits).view(-1)}


def test_temperature_zero_is_greedy():
    logits = random_logits()
    sampler = TokenSampler.from_config(DataConfig(temperature=0.0, seed=1))
    assert torch.equal(sampler(logits), logits.argmax(-1))


def test_a_seed_reproduces_a_run_and_another_seed_differs():
    logits = random_logits(batch=16)

    def run(seed: int) -> list[torch.Tensor]:
        sampler = TokenSampler(temperature=1.0, top_k=0, top_p=1.0, seed=seed)
        return [sampler(logits) for _ in range(8)]

    first, again, other = run(7), run(7), run(8)
    assert all(torch.equal(a, b) for a, b in zip(first, again, strict=True))
    assert not all(torch.equal(a, b) for a, b in zip(first, other, strict=True))
    assert first[0].shape == (16, 1) and first[0].dtype == torch.long


def test_top_k_keeps_only_the_k_most_likely():
    logits = random_logits(batch=1)
    top2 = set(logits.view(-1).topk(2).indices.tolist())
    sampler = TokenSampler(temperature=2.0, top_k=2, top_p=1.0, seed=0)
    assert draws(sampler, logits) == top2
    greedy = TokenSampler(temperature=2.0, top_k=1, top_p=1.0, seed=0)
    assert draws(greedy, logits) == {int(logits.argmax())}


def test_top_p_keeps_the_smallest_set_reaching_p():
    probs = torch.tensor([0.6, 0.3, 0.1] + [0.0] * (VOCAB - 3))
    logits = probs.clamp_min(1e-12).log().view(1, 1, -1)
    assert draws(TokenSampler(1.0, 0, 0.5, seed=0), logits) == {0}  # 0.6 >= 0.5
    assert draws(TokenSampler(1.0, 0, 0.7, seed=0), logits) == {0, 1}  # 0.6 + 0.3 >= 0.7
    assert draws(TokenSampler(1.0, 0, 0.0, seed=0), logits) == {0}  # always one token
