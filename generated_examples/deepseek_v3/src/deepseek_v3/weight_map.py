"""Which Hugging Face checkpoint tensors make each parameter of this package, and how.

DeepSeek's names (transformers' DeepseekV3ForCausalLM / DeepseekV2ForCausalLM, and the
safetensors DeepSeek ships): the MLA projections keep their names (q_a_proj, q_a_layernorm,
q_b_proj or q_proj, kv_a_proj_with_mqa, kv_a_layernorm, kv_b_proj, o_proj); the dense MLPs'
and the shared experts' gate/up are fused into `gate_up_proj` (concatenated on dim 0); the
router is `mlp.gate.weight` with noaux_tc's `mlp.gate.e_score_correction_bias`; routed
experts are stacked per layer in the grouped matmul's [E, K, N] layout (layers/moe.py)
from per-expert keys (`mlp.experts.{e}.{gate,up,down}_proj.weight`) or from transformers 5's
fused 3-D tensors (`mlp.experts.gate_up_proj` [E, 2I, H], `mlp.experts.down_proj` [E, H, I]).
kv_b_proj stays one tensor: decode's absorbed W_UK and W_UV are views of it.
"""

from __future__ import annotations

from ascend_runtime.weights import Source, concat, stack_down, stack_gate_up, transposed

from .architecture import ModelArgs

# Checkpoint tensor name -> the Hugging Face name `sources` expects, for checkpoints saved
# with other names, e.g. {"transformer.wte.weight": "model.embed_tokens.weight"}.
CHECKPOINT_RENAMES: dict[str, str] = {}


def _expert_sources(hf_experts: str, leaf: str, shape: tuple[int, ...]) -> list[Source]:
    experts, hidden, width = shape  # w13: [E, H, 2I]; w2: [E, I, H]
    if leaf == "w13_weight":
        keys = [f"{hf_experts}.{e}.{p}_proj.weight" for e in range(experts) for p in ("gate", "up")]
        per_expert = Source(tuple(keys), ((width // 2, hidden),) * (2 * experts), stack_gate_up)
        fused = Source((f"{hf_experts}.gate_up_proj",), ((experts, width, hidden),), transposed)
    else:
        keys = [f"{hf_experts}.{e}.down_proj.weight" for e in range(experts)]
        per_expert = Source(tuple(keys), ((width, hidden),) * experts, stack_down)
        fused = Source((f"{hf_experts}.down_proj",), ((experts, width, hidden),), transposed)
    return [per_expert, fused]


def sources(name: str, shape: tuple[int, ...], args: ModelArgs) -> list[Source]:  # noqa: ARG001
    """Where parameter `name` (of `shape`) can come from, in order of preference."""
    hf = name if name == "lm_head.weight" else f"model.{name}"
    if ".mlp.experts." in hf:
        base, _, leaf = hf.rpartition(".")
        return _expert_sources(base, leaf, shape)
    if ".gate_up_proj." in hf:  # a dense MLP or the shared experts
        keys = [hf.replace(".gate_up_proj.", f".{p}_proj.") for p in ("gate", "up")]
        return [Source(tuple(keys), ((shape[0] // 2, *shape[1:]),) * 2, concat)]
    return [Source((hf,), (shape,), concat)]
