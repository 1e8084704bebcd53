"""DeepSeek's MoE routing, static shapes only: one decode graph whatever experts are chosen.

Three methods, by the name config.json gives them (`topk_method`):
- `noaux_tc` (DeepSeek-V3/R1, Kimi-K2): sigmoid scores; the choice adds the
  `e_score_correction_bias`; experts come in `n_group` groups, a group scoring the sum of
  its two best, and only the `topk_group` best groups are eligible; the weights are the
  chosen experts' scores without the bias.
- `greedy` (DeepSeek-V2): softmax scores, plain top-k.
- `group_limited_greedy` (DeepSeek-V2): softmax scores, a group scoring its best expert.
Then the top-k weights are renormalised when `norm_topk_prob`, and multiplied by
`routed_scaling_factor`. The maths of transformers' DeepseekV3TopkRouter and
DeepseekV2TopkRouter (models/deepseek_v3, models/deepseek_v2), and of the pure-PyTorch
fallback of cann-recipes-infer's models/deepseek_r1/models/modeling_deepseek.py
(`DeepseekV3MoE._forward_gate`). Every tensor is [T, E], [T, n_group] or [T, k].
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

TOPK_METHODS = ("noaux_tc", "greedy", "group_limited_greedy")
SCORING = {"noaux_tc": "sigmoid", "greedy": "softmax", "group_limited_greedy": "softmax"}


@dataclass(frozen=True)
class Routing:
    method: str
    top_k: int
    n_group: int = 1
    topk_group: int = 1
    norm_topk_prob: bool = False
    routed_scaling_factor: float = 1.0

    @classmethod
    def of(cls, args) -> Routing:
        """The routing a ModelArgs of family mla describes."""
        return cls(
            args.topk_method,
            args.num_experts_per_tok,
            args.n_group,
            args.topk_group,
            args.norm_topk_prob,
            args.routed_scaling_factor,
        )


def _group_mask(group_scores: torch.Tensor, topk_group: int, experts: int) -> torch.Tensor:
    """[T, E] True where the expert is in one of the token's topk_group best groups."""
    groups = group_scores.shape[-1]
    chosen = torch.topk(group_scores, k=topk_group, dim=-1, sorted=False).indices
    mask = torch.zeros_like(group_scores, dtype=torch.bool).scatter_(1, chosen, True)
    return mask.unsqueeze(-1).expand(-1, groups, experts // groups).reshape(-1, experts)


def route(
    logits: torch.Tensor, bias: torch.Tensor | None, routing: Routing
) -> tuple[torch.Tensor, torch.Tensor]:
    """(weights float32 [T, k], expert ids int32 [T, k]) from router logits float32 [T, E]."""
    tokens, experts = logits.shape
    k = routing.top_k
    if routing.method == "noaux_tc":
        scores = logits.sigmoid()
        choice = scores if bias is None else scores + bias.float()
        per_group = choice.view(tokens, routing.n_group, -1)
        group_scores = per_group.topk(min(2, per_group.shape[-1]), dim=-1).values.sum(-1)
        mask = _group_mask(group_scores, routing.topk_group, experts)
        ids = torch.topk(choice.masked_fill(~mask, float("-inf")), k, dim=-1, sorted=False)[1]
        weights = scores.gather(1, ids)
    elif routing.method == "greedy":
        weights, ids = torch.topk(logits.softmax(dim=-1), k, dim=-1, sorted=False)
    elif routing.method == "group_limited_greedy":
        scores = logits.softmax(dim=-1)
        group_scores = scores.view(tokens, routing.n_group, -1).max(dim=-1).values
        mask = _group_mask(group_scores, routing.topk_group, experts)
        weights, ids = torch.topk(scores.masked_fill(~mask, 0.0), k, dim=-1, sorted=False)
    else:
        raise ValueError(f"topk_method must be one of {TOPK_METHODS}, got {routing.method!r}")
    if routing.norm_topk_prob:
        weights = weights / (weights.sum(dim=-1, keepdim=True) + 1e-20)
    return weights * routing.routed_scaling_factor, ids.to(torch.int32)
