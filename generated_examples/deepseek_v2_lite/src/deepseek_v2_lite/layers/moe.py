"""DeepSeek MoE block: routed SwiGLU experts chosen by DeepSeek's router, plus the shared
experts every token passes through (n_shared_experts of them, one fused MLP).

The dataflow of cann-recipes-infer's models/deepseek_r1/models/modeling_deepseek.py
(`DeepseekV3MoE`, `moe_infer_tp`): router logits in float32, the routing of
ascend_runtime/layers/deepseek_router.py (noaux_tc, greedy or group_limited_greedy, static
shapes), then `ops.moe_experts` dispatches by expert, runs the two grouped matmuls with
SwiGLU between and combines the weighted results with the shared experts' output (on the
NPU as npu_moe_finalize_routing's skip1). Every tensor is sized by tokens x top-k or by the
expert count, so one decode graph serves every routing.

Split over ranks (parallel_config), each rank holds world_size / moe_tp_size of the routed
experts, each cut to its moe_tp_size share of the intermediate size, and its share of the
shared experts; a slot routed elsewhere weighs 0 here (`RoutedExperts.local_routing`) and
the decoder layer all-reduces the partial sums.
"""

from types import ModuleType

import torch
from ascend_runtime.layers.deepseek_router import Routing
from ascend_runtime.layers.experts import RoutedExperts
from ascend_runtime.layers.mlp import MLP
from ascend_runtime.parallel import SINGLE, Parallel
from torch import nn
from torch.nn import functional as F

from ..architecture import ModelArgs


class Router(nn.Module):
    """The gate's weight and noaux_tc's e_score_correction_bias (a Parameter here so the
    loader fills it from the checkpoint; transformers keeps it as a buffer)."""

    def __init__(self, args: ModelArgs, ops: ModuleType):
        super().__init__()
        self.ops = ops
        self.routing = Routing.of(args)
        self.weight = nn.Parameter(torch.empty(args.num_experts, args.hidden_size))
        nn.init.kaiming_uniform_(self.weight, a=5**0.5)  # nn.Linear's default
        self.e_score_correction_bias = None
        if args.topk_method == "noaux_tc":
            bias = torch.zeros(args.num_experts)
            self.e_score_correction_bias = nn.Parameter(bias, requires_grad=False)

    def route(self, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(weights float32 [T, k], expert ids int32 [T, k]) for tokens [T, hidden]."""
        logits = F.linear(tokens.float(), self.weight.float())  # float32, as the recipes
        # npu: npu_moe_gating_top_k where its limits hold (ascend_runtime/ops/npu.py)
        return self.ops.deepseek_gating(logits, self.e_score_correction_bias, self.routing)


class DeepseekMoE(nn.Module):
    def __init__(self, args: ModelArgs, ops: ModuleType, parallel: Parallel = SINGLE):
        super().__init__()
        self.ops = ops
        self.gate = Router(args, ops)
        self.experts = RoutedExperts(
            args.num_experts,
            args.hidden_size,
            args.moe_intermediate_size,
            parallel.moe_ep,
            parallel.moe_tp,
        )
        self.shared_experts = None
        if args.n_shared_experts:
            width = args.moe_intermediate_size * args.n_shared_experts
            self.shared_experts = MLP(args.hidden_size, width, parallel.moe)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        tokens = x.reshape(-1, x.shape[-1])
        weights, expert_ids = self.gate.route(tokens)
        expert_ids, weights = self.experts.local_routing(expert_ids, weights)
        shared = None if self.shared_experts is None else self.shared_experts(tokens)
        out = self.ops.moe_experts(
            tokens, expert_ids, weights, self.experts.w13_weight, self.experts.w2_weight, shared
        )
        return out.view(x.shape)  # this rank's partial sum
