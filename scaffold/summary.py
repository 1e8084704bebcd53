"""The design summary shown before anything is written (the seed's 方案设计 → 方案确认)."""

from __future__ import annotations

from .render import BACKUP_DIR, Placement
from .spec import (
    CACHE_SPARE_POSITIONS,
    ModelSpec,
    gib,
    gqa_equivalent_kv_bytes_per_token,
    kv_bytes_per_token,
    local_kv_heads,
    moe_layers,
    paged_blocks,
)

_MODES = {
    "eager": "prefill and decode eager; nothing is compiled",
    "npugraph_ex": "prefill eager; decode captured once and replayed as an aclgraph (npugraph_ex)",
    "ge_graph": "prefill eager; decode compiled to a static GE graph (torchair, Ascend IR)",
}


def npu_ops(spec: ModelSpec) -> list[str]:
    """The NPU ops the rendered package calls (ascend_runtime/ops/npu.py), and what falls back."""
    attention = "torchair.ops" if spec.fa_interface == "torchair" else "torch_npu"
    if spec.family == "mla":
        computed = spec.computed
        decode = (
            "prefill, and its MLA mode for decode"
            if computed["fused_mla_attention"]
            else "prefill; decode's absorbed attention in plain torch (outside the MLA mode's "
            "limits)"
        )
        return [
            f"{attention}.npu_fused_infer_attention_score ({decode})",
            "torch_npu.npu_rms_norm",
            "rotary in plain torch (interleaved)"
            if spec.rope_interleave
            else "torch_npu.npu_apply_rotary_pos_emb"
            if spec.computed["fused_rotary"]
            else "rotary in plain torch",
            "torch_npu.npu_scatter_nd_update_"
            if spec.kv_cache == "paged"
            else "torch_npu.scatter_update_",
            "torch_npu.npu_moe_gating_top_k"
            if computed["fused_moe_gating_top_k"]
            else "DeepSeek routing in plain torch",
            *(f"torch_npu.{op}" for op in MOE_OPS[1:]),
        ]
    rotary = (
        "torch_npu.npu_apply_rotary_pos_emb"
        if spec.computed["fused_rotary"]
        else f"rotary in plain torch (the fused op does not take head_dim {spec.head_dim})"
    )
    ops = [
        f"{attention}.npu_fused_infer_attention_score",
        "torch_npu.npu_rms_norm",
        rotary,
        "torch_npu.npu_scatter_nd_update_"
        if spec.kv_cache == "paged"
        else "torch_npu.scatter_update_",
    ]
    if spec.family == "moe":
        ops += [f"torch_npu.{op}" for op in MOE_OPS]
    return ops


# The fused MoE chain of ascend_runtime/ops/npu.py (cann-recipes-infer's moe_infer_tp).
MOE_OPS = (
    "npu_moe_gating_top_k_softmax",
    "npu_moe_init_routing_v2",
    "npu_grouped_matmul",
    "npu_swiglu",
    "npu_moe_finalize_routing",
)


def _mla_lines(spec: ModelSpec) -> list[str]:
    a = spec.answers()
    layers = moe_layers(a)
    groups = (
        f" from the best {spec.topk_group} of {spec.n_group} groups" if spec.n_group > 1 else ""
    )
    shared = f", {spec.n_shared_experts} shared" if spec.n_shared_experts else ""
    mla, gqa = kv_bytes_per_token(a), gqa_equivalent_kv_bytes_per_token(a)
    return [
        f"  model       {spec.num_hidden_layers} layers, hidden {spec.hidden_size}, "
        f"{spec.num_attention_heads} heads of MLA (q_lora {spec.q_lora_rank or 'none'}, "
        f"kv_lora {spec.kv_lora_rank}, qk {spec.qk_nope_head_dim}+{spec.qk_rope_head_dim}, "
        f"v {spec.v_head_dim}), MLP {spec.intermediate_size}, vocab {spec.vocab_size:,}",
        f"  MoE         {spec.num_experts} experts x {spec.moe_intermediate_size}, top-"
        f"{spec.num_experts_per_tok} ({spec.topk_method}{groups}){shared} in layers "
        f"{layers[0]}..{layers[-1]}"
        + (f" every {spec.moe_layer_freq}" if spec.moe_layer_freq > 1 else "")
        + "; decode graph static in the routing",
        f"  KV / token  {mla:,} bytes (latent {spec.kv_lora_rank} + rope key "
        f"{spec.qk_rope_head_dim}, one head, x {spec.num_hidden_layers} layers) against "
        f"{gqa:,} for K and V of {spec.num_attention_heads} heads: {gqa / mla:.1f}x less",
    ]


def _moe_line(spec: ModelSpec) -> list[str]:
    if spec.family != "moe":
        return []
    layers = moe_layers(spec.answers())
    which = "every layer" if len(layers) == spec.num_hidden_layers else f"layers {list(layers)}"
    shared = (
        f", shared expert {spec.shared_expert_intermediate_size}"
        + (" (sigmoid-gated)" if spec.shared_expert_gate else "")
        if spec.shared_expert_intermediate_size
        else ""
    )
    renorm = "renormalised" if spec.norm_topk_prob else "not renormalised"
    return [
        f"  MoE         {spec.num_experts} experts x {spec.moe_intermediate_size}, top-"
        f"{spec.num_experts_per_tok} ({renorm}){shared} in {which}; decode graph static in "
        "the routing (every tensor sized by tokens x top-k or experts)"
    ]


def _kv_cache_line(s: ModelSpec) -> str:
    parts = "latent,rope" if s.family == "mla" else "K,V"
    if s.kv_cache == "paged":
        blocks = paged_blocks(s.answers())
        return (
            f"  KV cache    paged: {blocks:,} block{'s' if blocks != 1 else ''} of "
            f"{s.block_size} tokens + 1 null block "
            f"(budget {s.kv_cache_tokens:,} tokens for batch_size {s.batch_size}, rows of up to "
            f"{s.max_seq_len:,}) x {parts} x {s.num_hidden_layers} layers, preallocated, "
            f"written in place at slot_mapping: {gib(s.kv_cache_bytes)}"
        )
    if s.family == "mla":
        return (
            f"  KV cache    ({s.batch_size}, 1, {s.max_seq_len + CACHE_SPARE_POSITIONS:,}, "
            f"{s.kv_lora_rank} + {s.qk_rope_head_dim}) x {s.num_hidden_layers} layers, "
            f"preallocated, written in place: {gib(s.kv_cache_bytes)} (batch_size "
            f"{s.batch_size}, max_seq_len {s.max_seq_len:,})"
        )
    return (
        f"  KV cache    BNSD ({s.batch_size}, {local_kv_heads(s.answers())}, "
        f"{s.max_seq_len + CACHE_SPARE_POSITIONS:,}, "
        f"{s.head_dim}) x K,V x {s.num_hidden_layers} layers, preallocated, written in place: "
        f"{gib(s.kv_cache_bytes)} (batch_size {s.batch_size}, max_seq_len {s.max_seq_len:,})"
    )


def _parallel_lines(s: ModelSpec) -> list[str]:
    """The split over ranks and what one rank holds (weights and KV cache are per rank)."""
    if s.world_size == 1:
        return ["  parallel    one device (world_size 1)"]
    if s.family == "mla":
        heads = f"{s.num_attention_heads // s.attn_tp_size} heads, the latent cache whole"
    else:
        heads = (
            f"{s.num_attention_heads // s.attn_tp_size} query / {local_kv_heads(s.answers())} KV"
            " heads" + (" (replicated)" if s.num_key_value_heads < s.attn_tp_size else "")
        )
    parts = [f"attention TP {s.attn_tp_size} ({heads} per rank)"]
    if s.family == "dense" or len(moe_layers(s.answers())) < s.num_hidden_layers:
        parts.append(f"dense MLP TP {s.dense_tp_size}")
    if s.family != "dense":
        ep = s.world_size // s.moe_tp_size
        parts.append(
            f"experts over EP {ep} ({s.num_experts // ep} per rank) x MoE TP {s.moe_tp_size}"
        )
    parts.append(f"vocab over {s.embed_tp_size} (embedding) / {s.lmhead_tp_size} (lm_head)")
    return [
        f"  parallel    {s.world_size} ranks (torchrun or cann-recipes-infer's launcher): "
        + ", ".join(parts)
        + "; the weights and KV cache below are one rank's"
    ]


def design_summary(spec: ModelSpec, placement: Placement) -> str:
    s, computed = spec, spec.computed
    model = (
        _mla_lines(s)
        if s.family == "mla"
        else [
            f"  model       {s.num_hidden_layers} layers, hidden {s.hidden_size}, "
            f"{s.num_attention_heads} query / {s.num_key_value_heads} KV heads, head_dim "
            f"{s.head_dim}, MLP {s.intermediate_size}, vocab {s.vocab_size:,}",
            *_moe_line(s),
        ]
    )
    lines = [
        f"design summary for {s.model_name}:",
        *model,
        *_parallel_lines(s),
        f"  weights     {s.parameter_count / 1e6:,.1f} M parameters, {gib(s.weight_bytes)} "
        f"in {s.dtype}" + (f", on each of {s.world_size} ranks" if s.world_size > 1 else ""),
        f"  exe_mode    {s.exe_mode}: {_MODES[s.exe_mode]}",
        f"  attention   fa_interface={s.fa_interface}; enable_dynamic_graph "
        f"{str(s.enable_dynamic_graph).lower()}: {computed['dynamic_reason']}",
        f"  NPU ops     ({s.platform}) {', '.join(npu_ops(s))}",
        _kv_cache_line(s),
        f"  files       {len(placement.files)} in {placement.dest}"
        + (f" ({len(placement.unchanged)} unchanged)" if placement.unchanged else "")
        + ":",
    ]
    status = {
        **{p: "new" for p in placement.new},
        **{p: "replace" for p in placement.replaced},
        **{p: "keep" for p in placement.kept},
    }
    lines += [f"    {status[path]:<7}  {path}" for path in sorted(status)]
    if placement.replaced:
        lines.append(f"    (replaced files are first moved to {placement.dest.name}/{BACKUP_DIR}/)")
    if placement.kept:
        lines.append("    (kept files are yours: rendered once, never overwritten)")
    return "\n".join(lines)
