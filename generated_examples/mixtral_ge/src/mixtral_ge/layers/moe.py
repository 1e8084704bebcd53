"""Sparse MoE block: top-k softmax routing over routed SwiGLU experts, plus a shared expert
where ModelArgs has one (shared_expert_intermediate_size > 0, Qwen2-MoE).

The dataflow of cann-recipes-infer's models/qwen3_moe/models/modeling_qwen3_moe.py
(`Qwen3MoeSparseMoeBlock`, `moe_infer_tp`): router logits in float32, top-k softmax,
renormalised when norm_topk_prob, then `ops.moe_experts` dispatches the tokens by expert,
runs two grouped matmuls with SwiGLU between and combines the weighted results (npu: the
torch_npu fused MoE ops; portable: the same maths in plain torch). Every tensor is sized by
tokens x top-k or by the expert count, so one decode graph serves every routing.

Split over ranks (parallel_config), each rank holds world_size / moe_tp_size of the
experts (expert parallel), each cut to its moe_tp_size share of the intermediate size, and
its share of the shared expert. Every token is routed on every rank; a slot whose expert
is elsewhere weighs 0 here (`RoutedExperts.local_routing`, fixed shapes), and the decoder
layer all-reduces the partial sums. npu_moe_distribute_dispatch_v2/_combine_v2 (MC2,
cann-recipes-infer `moe_infer_dispatch_combine`) would replace that with token exchange on
an NPU; it needs HCCL group names and is not rendered (docs/design.md).
"""

from types import ModuleType

import torch
from ascend_runtime.layers.experts import RoutedExperts
from ascend_runtime.layers.mlp import MLP
from ascend_runtime.parallel import SINGLE, Parallel
from torch import nn
from torch.nn import functional as F

from ..architecture import ModelArgs


class SparseMoeBlock(nn.Module):
    def __init__(self, args: ModelArgs, ops: ModuleType, parallel: Parallel = SINGLE):
        super().__init__()
        self.ops = ops
        self.top_k = args.num_experts_per_tok
        self.norm_topk_prob = args.norm_topk_prob
        self.gate = nn.Linear(args.hidden_size, args.num_experts, bias=False)  # the router
        self.experts = RoutedExperts(
            args.num_experts,
            args.hidden_size,
            args.moe_intermediate_size,
            parallel.moe_ep,
            parallel.moe_tp,
        )
        # Qwen2-MoE: every token also passes through one dense expert, scaled by a sigmoid
        # gate (transformers' Qwen2MoeSparseMoeBlock.shared_expert and shared_expert_gate).
        self.shared_expert = self.shared_expert_gate = None
        if args.shared_expert_intermediate_size:
            self.shared_expert = MLP(
                args.hidden_size, args.shared_expert_intermediate_size, parallel.moe
            )
            if args.shared_expert_gate:
                self.shared_expert_gate = nn.Linear(args.hidden_size, 1, bias=False)

    def route(self, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(weights float32 [T, k], expert ids int32 [T, k]) for tokens [T, hidden]."""
        logits = F.linear(tokens.float(), self.gate.weight.float())  # float32, as the recipes
        weights, expert_ids = self.ops.moe_gating_top_k_softmax(logits, self.top_k)
        if self.norm_topk_prob:
            weights = weights / (weights.sum(dim=-1, keepdim=True) + 1e-20)
        return weights, expert_ids

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        tokens = x.reshape(-1, x.shape[-1])
        weights, expert_ids = self.route(tokens)
        expert_ids, weights = self.experts.local_routing(expert_ids, weights)
        shared = None
        if self.shared_expert is not None:
            shared = self.shared_expert(tokens)
            if self.shared_expert_gate is not None:
                shared = torch.sigmoid(self.shared_expert_gate(tokens)) * shared
        out = self.ops.moe_experts(
            tokens, expert_ids, weights, self.experts.w13_weight, self.experts.w2_weight, shared
        )
        return out.view(x.shape)  # this rank's partial sum
