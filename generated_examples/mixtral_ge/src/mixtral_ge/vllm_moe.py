"""The MoE block of the vLLM model (vllm_model.py): vLLM's fused experts behind a
replicated router, and the shared expert where this package has one.

Routing is layers/moe.py's: softmax over the experts, top-k, renormalised where
norm_topk_prob says; a shared expert is added to the routed sum, through a sigmoid gate
where the package has one (Qwen2-MoE). vLLM's fused MoE all-reduces over the TP ranks.
"""

import torch
from ascend_runtime.serving.vllm_compat import ReplicatedLinear, make_fused_moe
from torch import nn


class SparseMoeBlock(nn.Module):
    def __init__(self, args, quant_config, prefix: str, mlp: type[nn.Module]):
        """`mlp`: the dense MLP class (vllm_model.MLP), which the shared expert is."""
        super().__init__()
        self.gate = ReplicatedLinear(
            args.hidden_size, args.num_experts, bias=False, quant_config=None,
            prefix=f"{prefix}.gate",
        )  # fmt: skip
        self.experts = make_fused_moe(
            args.num_experts, args.num_experts_per_tok, args.hidden_size,
            args.moe_intermediate_size, args.norm_topk_prob, quant_config, f"{prefix}.experts",
        )  # fmt: skip
        width = args.shared_expert_intermediate_size
        self.shared_expert = self.shared_expert_gate = None
        if width:
            self.shared_expert = mlp(
                args.hidden_size, width, quant_config, f"{prefix}.shared_expert"
            )
        if width and args.shared_expert_gate:
            self.shared_expert_gate = ReplicatedLinear(
                args.hidden_size, 1, bias=False, quant_config=None,
                prefix=f"{prefix}.shared_expert_gate",
            )  # fmt: skip

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.experts(hidden_states=x, router_logits=self.gate(x)[0])
        if self.shared_expert is not None:
            shared = self.shared_expert(x)
            if self.shared_expert_gate is not None:
                shared = torch.sigmoid(self.shared_expert_gate(x)[0]) * shared
            out = out + shared
        return out
