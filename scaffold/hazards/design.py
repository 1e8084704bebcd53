"""``--format markdown``: the 方案设计 (design) document written before coding the adaptation."""

from __future__ import annotations

from collections import Counter, defaultdict

from .rules import EFFECTS, RULES
from .runner import CheckResult

# New forward inputs implied by each rule (the seed: pass dynamic facts in from outside).
INPUTS = {
    "GM001": "preallocated `k_cache`/`v_cache` buffers plus the write index (`kv_len`)",
    "GM002": "values previously read with .item()/.tolist() (e.g. `kv_len`, lengths)",
    "GM003": "`is_prefill` (Python mode flag) instead of tensor-valued branches",
    "GM006": "`position_ids`, `kv_len`, `actual_seq_lengths_kv`/`_q`, precomputed `cos`/`sin`",
}

IMPACT = {
    "capture failure": "blocks graph mode entirely: fix these first.",
    "graph break": "splits the decode graph into pieces with host round-trips: slower, and "
    "npugraph_ex capture may fail.",
    "recompile": "a new graph per step or per length: compile latency every step, memory growth.",
}


def choose_mode(result: CheckResult) -> tuple[str, bool, str]:
    """(mode, dynamic, reason) following the seed's rules."""
    if result.uses_torchair and not result.uses_npugraph_ex:
        return (
            "ge_graph",
            False,
            "the code already uses torchair (GE backend, Ascend IR): use the torchair FA "
            "interface with Tensor actual_seq_lengths and compile with dynamic=False.",
        )
    where = f" (found at {result.list_fa[0]})" if result.list_fa else ""
    return (
        "npugraph_ex",
        True,
        "npugraph_ex (aclgraph capture/replay) is the default mode; torch_npu "
        f"npu_fused_infer_attention_score takes actual_seq_lengths as list[int]{where}, which "
        "recompiles under dynamic=False, so compile with dynamic=True. Switch to ge_graph + "
        "torchair FA with Tensor lengths + dynamic=False if the GE path is preferred.",
    )


def _summary(result: CheckResult) -> list[str]:
    effects = Counter(h.info.effect for h in result.hazards)
    hit = len({h.path for h in result.hazards})
    out = [
        "## 1. 概述 / Summary",
        "",
        "Goal: run the **decode** phase in graph mode; prefill stays eager.",
        f"Checked {len(result.files)} file(s); found {len(result.hazards)} hazard(s) in "
        f"{hit} file(s): " + ", ".join(f"{effects[e]} {e}" for e in EFFECTS) + ".",
        "",
    ]
    if result.errors or not result.files:
        out += [
            f"**Incomplete:** {len(result.errors)} path(s) could not be checked; this document "
            "covers only the files checked:",
            "",
            *(f"- `{error}`" for error in result.errors),
            "",
        ]
    if result.hazards:
        out += ["| Rule | Title | Effect | Count |", "|---|---|---|---|"]
        for rule, n in sorted(Counter(h.rule for h in result.hazards).items()):
            info = RULES[rule]
            out.append(f"| {rule} `{info.slug}` | {info.title} | {info.effect} | {n} |")
        out.append("")
    return out


def _files(result: CheckResult) -> list[str]:
    out = ["## 2. 修改文件 / Files to change", ""]
    by_file = defaultdict(list)
    for h in result.hazards:
        by_file[h.path].append(h)
    if not by_file and result.files and not result.errors:
        return out + ["No file needs changes.", ""]
    if not by_file:
        return out + ["No hazards in the files checked (incomplete: see the Summary).", ""]
    out += ["| File | Hazards | Rules |", "|---|---|---|"]
    for path, hs in by_file.items():
        out.append(f"| `{path}` | {len(hs)} | {', '.join(sorted({h.rule for h in hs}))} |")
    return out + [""]


def _changes(result: CheckResult) -> list[str]:
    out = ["## 3. 逐项修改 / Per-hazard changes", ""]
    if not result.hazards:
        return out + ["Nothing to change.", ""]
    current = None
    for h in result.hazards:
        if h.path != current:
            current = h.path
            out += [f"### `{h.path}`", ""]
        info = h.info
        out += [
            f"- **L{h.line} {h.rule} {info.title}** ({info.effect}) in `{h.function}`",
            f"  - Code: `{h.code}`",
            f"  - Problem: {h.message}. {info.why}",
            f"  - Change: {info.fix}",
        ]
    return out + [""]


def _impact(result: CheckResult) -> list[str]:
    rules = {h.rule for h in result.hazards}
    effects = {h.info.effect for h in result.hazards}
    out = ["## 4. 影响评估 / Impact", ""]
    out += [f"- **{e}**: {IMPACT[e]}" for e in EFFECTS if e in effects]
    inputs = [INPUTS[r] for r in sorted(rules) if r in INPUTS]
    if inputs:
        out.append("- Interface: forward/decode gains inputs: " + "; ".join(inputs) + ".")
        out.append("  Callers (runner/generate loop) must prepare them on the host per step.")
    if "GM001" in rules or "GM007" in rules:
        out.append(
            "- Memory: caches/buffers are allocated once at max batch x max sequence length, "
            "so device memory is reserved up front."
        )
    out += [
        "- Numerics: removing dropout and replacing branches with tensor ops must not change "
        "eval outputs; verify eager vs graph decode on the same prompt (greedy tokens equal, "
        "logits close).",
        "- Prefill path: unchanged (eager); it fills the same preallocated cache.",
        "- Verification: `TORCH_LOGS=recompiles,graph_breaks` shows no recompiles after warm-up "
        "and no graph breaks in decode; re-run `ascend-scaffold check` until clean.",
        "",
    ]
    return out


def _split(result: CheckResult) -> list[str]:
    return [
        "## 5. Prefill/Decode 拆分 / Prefill/decode split plan",
        "",
        "- `forward(..., is_prefill)` dispatches to `prefill(...)` (eager) or `decode(...)` "
        "(compiled); `is_prefill` is a Python bool, never a tensor test.",
        "- Prefill: variable length, eager; writes K/V for the whole prompt into the "
        "preallocated cache (`index_put_`/`scatter_update_`) and returns the first logits.",
        "- Decode: one token per sequence, fixed shapes (batch padded to the captured size); "
        "inputs `input_ids`, `position_ids`, `kv_len`, `actual_seq_lengths_kv`, `cos`/`sin` are "
        "prepared outside; cache updated in place, not returned.",
        "- Only the decode function is wrapped with `torch.compile`; compile/capture once at "
        "warm-up, then replay every step.",
        "",
    ]


def _mode(result: CheckResult) -> list[str]:
    mode, dynamic, reason = choose_mode(result)
    backend = (
        'backend="npugraph_ex"'
        if mode == "npugraph_ex"
        else "backend=torchair.get_npu_backend(compiler_config=config)"
    )
    return [
        "## 6. 图模式选择 / Mode and dynamic setting",
        "",
        f"- Mode: **{mode}**",
        f"- dynamic: **{dynamic}**",
        f"- Call: `torch.compile(model.decode, {backend}, dynamic={dynamic}, fullgraph=True)`",
        f"- Reason: {reason}",
        "",
    ]


def render_markdown(result: CheckResult) -> str:
    head = [
        "# 图模式适配方案设计 / Graph-mode adaptation design",
        "",
        "> Generated by `ascend-scaffold check` (static analysis, heuristic). Review it before "
        "coding: 先方案设计，再编码.",
        "",
    ]
    parts = head + _summary(result) + _files(result) + _changes(result)
    parts += _impact(result) + _split(result) + _mode(result)
    return "\n".join(parts)
