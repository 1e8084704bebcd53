"""NPU emulation of the MoE chain a generated package's ops/npu.py calls (family moe):
npu_moe_gating_top_k_softmax -> npu_moe_init_routing_v2 -> npu_grouped_matmul -> npu_swiglu
-> npu_grouped_matmul -> npu_moe_finalize_routing (cann-recipes-infer's qwen3_moe).

Like tests/test_npu_emulation.py: every check runs in a subprocess of the emulation interpreter
(ASCEND_SCAFFOLD_NPU_PYTHON, torch-npu==2.13.0); skipped without it, failed instead where
ASCEND_SCAFFOLD_REQUIRE_NPU_EMULATION=1 (CI).
"""

from __future__ import annotations

import textwrap

import pytest
from conftest import require_npu_emulation, run_npu_code


@pytest.fixture(scope="module", autouse=True)
def _needs_emulation():
    require_npu_emulation()


def run_npu(code: str, stub_root: str, *args: str, env_extra: dict | None = None) -> dict:
    """``code`` after the package's calls (CHAIN), on A3, in the emulation interpreter."""
    env = {"ASCEND_SCAFFOLD_NPU_PLATFORM": "A3", **(env_extra or {})}
    return run_npu_code(CHAIN + textwrap.dedent(code), stub_root, *args, env_extra=env)


# The calls of the generated ops/npu.py (moe_gating_top_k_softmax, moe_experts), verbatim.
CHAIN = """
emu.activate()  # before `import torch`
import torch
import torch.nn.functional as F
import torch_npu

def gate(logits, top_k):
    weights, ids, _ = torch_npu.npu_moe_gating_top_k_softmax(logits, None, k=top_k)
    return weights, ids

def experts(x, ids, weights, w13, w2, shared, mode=2, idx_map=None):
    T, k = ids.shape
    E = w13.shape[0]
    expanded_x, expanded_row_idx, tokens_per_expert, _ = torch_npu.npu_moe_init_routing_v2(
        x, ids, active_num=T * k, expert_num=E, expert_tokens_num_type=1,
        expert_tokens_num_flag=True, active_expert_range=[0, E], quant_mode=-1)
    h = torch_npu.npu_grouped_matmul([expanded_x], [w13], group_list=tokens_per_expert,
        group_type=0, group_list_type=1, split_item=3)[0]
    h = torch_npu.npu_swiglu(h, dim=-1)
    y = torch_npu.npu_grouped_matmul([h], [w2], group_list=tokens_per_expert,
        group_type=0, group_list_type=1, split_item=3)[0]
    rows = expanded_row_idx if idx_map is None else idx_map(expanded_row_idx)
    return torch_npu.npu_moe_finalize_routing(y, skip1=shared, skip2=None, bias=None,
        scales=weights.to(y.dtype), expanded_src_to_dst_row=rows,
        export_for_source_row=None, drop_pad_mode=mode)

def moe(x, logits, w13, w2, shared, top_k):
    weights, ids = gate(logits, top_k)
    return experts(x, ids, weights, w13, w2, shared)

def plain(x, logits, w13, w2, shared, top_k):
    # float64 maths on the same inputs: softmax, top-k (not renormalised), SwiGLU experts
    I = w13.shape[-1] // 2
    p = torch.softmax(logits.double(), dim=-1)
    wts, ids = p.topk(top_k, dim=-1)
    out = torch.zeros(x.shape, dtype=torch.float64) if shared is None else shared.double()
    out = out.clone()
    for t in range(x.shape[0]):
        for j in range(top_k):
            e = int(ids[t, j])
            g = x[t].double() @ w13[e].double()
            out[t] += wts[t, j] * ((F.silu(g[:I]) * g[I:]) @ w2[e].double())
    return out, wts, ids

def inputs(gen, T, E, H, I, dt, with_shared=True):
    r = lambda *s: torch.randn(*s, generator=gen)
    return dict(x=r(T, H).to(dt), logits=r(T, E) * 2, w13=(r(E, H, 2 * I) * 0.3).to(dt),
                w2=(r(E, I, H) * 0.3).to(dt), shared=r(T, H).to(dt) if with_shared else None)
"""


EQUALS_PLAIN_MATHS = """
gen = torch.Generator().manual_seed(1234)
res = {"cases": 0, "errors": {}, "ids_equal": True, "weights_err": 0.0, "structure": True,
       "meta_shapes": True, "col_order_same": True, "row_idx_as_col_differs": False,
       "gating_bf16_err": 0.0}
H, I = 16, 8

def meta_like(op_out, fn, *args, **kw):
    # the wheel's Meta kernel gives the shapes/dtypes a traced graph assumes
    to_meta = lambda a: a.to("meta") if isinstance(a, torch.Tensor) else (
        [to_meta(b) for b in a] if isinstance(a, list) else a)
    m = fn(*[to_meta(a) for a in args], **{k: to_meta(v) for k, v in kw.items()})
    outs = op_out if isinstance(op_out, (tuple, list)) else [op_out]
    ms = m if isinstance(m, (tuple, list)) else [m]
    return all(tuple(a.shape) == tuple(b.shape) and a.dtype == b.dtype for a, b in zip(outs, ms))

for dt in (torch.float32, torch.bfloat16):
    errs = []
    for case in range(40):
        T = 3 + case % 6           # 3..8
        E = 4 + (case // 6) % 5    # 4..8
        k = 1 + case % 3           # 1..3
        a = inputs(gen, T, E, H, I, dt, with_shared=case % 4 != 0)
        out = moe(a["x"], a["logits"], a["w13"], a["w2"], a["shared"], k)
        ref, wts, ids_ref = plain(a["x"], a["logits"], a["w13"], a["w2"], a["shared"], k)
        assert out.dtype == dt and out.shape == (T, H)
        scale = ref.abs().max().item() + 1.0
        errs.append((out.double() - ref).abs().max().item() / scale)
        res["cases"] += 1
        weights, ids = gate(a["logits"], k)
        res["ids_equal"] &= ids.dtype == torch.int32 and torch.equal(ids.long(), ids_ref)
        res["weights_err"] = max(res["weights_err"], (weights.double() - wts).abs().max().item())
        # routing structure: rows grouped by expert, counts int64, the map is a permutation
        ex, eri, tpe, esc = torch_npu.npu_moe_init_routing_v2(
            a["x"], ids, active_num=T * k, expert_num=E, expert_tokens_num_type=1,
            expert_tokens_num_flag=True, active_expert_range=[0, E], quant_mode=-1)
        flat = ids.reshape(-1).long()
        res["structure"] &= (
            tpe.dtype == torch.int64 and torch.equal(tpe, torch.bincount(flat, minlength=E))
            and eri.dtype == torch.int32
            and torch.equal(eri.long().sort().values, torch.arange(T * k))
            and torch.equal(ex[eri.long()], a["x"].repeat_interleave(k, dim=0))
            and bool((torch.diff(flat[eri.long().argsort()]) >= 0).all()))
        ops = torch.ops.npu
        res["meta_shapes"] &= meta_like(
            torch_npu.npu_moe_gating_top_k_softmax(a["logits"], None, k=k),
            ops.npu_moe_gating_top_k_softmax, a["logits"], None, k=k)
        kw = dict(active_num=T * k, expert_num=E, expert_tokens_num_type=1,
                  expert_tokens_num_flag=True, active_expert_range=[0, E], quant_mode=-1)
        res["meta_shapes"] &= meta_like((ex, eri, tpe, esc), ops.npu_moe_init_routing_v2,
                                        a["x"], ids, **kw)
        gkw = dict(group_list=tpe, group_type=0, group_list_type=1, split_item=3)
        h = torch_npu.npu_grouped_matmul([ex], [a["w13"]], **gkw)
        res["meta_shapes"] &= meta_like(h, ops.npu_grouped_matmul, [ex], [a["w13"]], **gkw)
        s = torch_npu.npu_swiglu(h[0], dim=-1)
        res["meta_shapes"] &= meta_like(s, ops.npu_swiglu, h[0], dim=-1)
        y = torch_npu.npu_grouped_matmul([s], [a["w2"]], **gkw)[0]
        fin = torch_npu.npu_moe_finalize_routing(y, a["shared"], None, None, weights.to(dt), eri,
                                                 None, drop_pad_mode=2)
        res["meta_shapes"] &= meta_like(fin, ops.npu_moe_finalize_routing, y, a["shared"], None,
                                        None, weights.to(dt), eri, None, drop_pad_mode=2)
        # drop_pad_mode 0 reads the map in column order (index j * T + t): same result
        col = experts(a["x"], ids, weights, a["w13"], a["w2"], a["shared"], mode=0,
                      idx_map=lambda m: m.view(T, k).t().reshape(-1).contiguous())
        res["col_order_same"] &= torch.equal(col, out)
        if k > 1:  # init_routing_v2's token-major map read as column order is another sum
            wrong = experts(a["x"], ids, weights, a["w13"], a["w2"], a["shared"], mode=0)
            res["row_idx_as_col_differs"] |= not torch.allclose(wrong, out)
    res["errors"][str(dt)] = max(errs)
# the gating op on bfloat16 logits: weights in bfloat16, same experts up to bf16 rounding
lg = torch.randn(8, 8, generator=gen).to(torch.bfloat16)
w, i = gate(lg, 2)
p = torch.softmax(lg.double(), -1)
res["gating_bf16_dtype"] = str(w.dtype)
res["gating_bf16_err"] = (w.double() - p.gather(1, i.long())).abs().max().item()
print("RESULT=" + json.dumps(res))
"""


def test_moe_chain_equals_plain_maths(stub_root):
    """out[t] = shared[t] + sum_j w[t, j] * (silu(x[t] @ w13[e][:, :I]) * (x[t] @ w13[e][:, I:]))
    @ w2[e], e = ids[t, j], over 40 random (T, E, k) per dtype. Tolerances (max |out - ref| /
    (max |ref| + 1)): float32 1e-5 (fp32 maths everywhere); bfloat16 2e-2 (the chain rounds to
    bfloat16 after each op: grouped matmul, SwiGLU, grouped matmul, finalize, ~2^-8 each)."""
    r = run_npu(EQUALS_PLAIN_MATHS, stub_root)
    assert r["cases"] == 80
    assert r["errors"]["torch.float32"] < 1e-5, r["errors"]
    assert r["errors"]["torch.bfloat16"] < 2e-2, r["errors"]
    assert r["ids_equal"] and r["weights_err"] < 1e-6, r
    assert r["structure"], "init_routing_v2: rows by expert, int64 counts, permutation map"
    assert r["meta_shapes"], "a CPU kernel's outputs differ from the wheel's Meta kernel"
    assert r["col_order_same"] and r["row_idx_as_col_differs"], r
    assert r["gating_bf16_dtype"] == "torch.bfloat16" and r["gating_bf16_err"] < 1e-2, r


COMPILED = """
from torch._dynamo.utils import counters
gen = torch.Generator().manual_seed(7)
T, E, k, H, I = 6, 8, 2, 16, 8
a = inputs(gen, T, E, H, I, torch.bfloat16)
torch._dynamo.reset(); counters.clear()
compiled = torch.compile(moe, backend="aot_eager", fullgraph=True)
res = {"max_diff": 0.0, "routings": [], "error": None}
try:
    for step in range(5):
        logits = torch.randn(T, E, generator=gen) * 3  # new routing every call
        got = compiled(a["x"], logits, a["w13"], a["w2"], a["shared"], k)
        want = moe(a["x"], logits, a["w13"], a["w2"], a["shared"], k)
        res["max_diff"] = max(res["max_diff"], (got.float() - want.float()).abs().max().item())
        res["routings"].append(torch.bincount(gate(logits, k)[1].reshape(-1).long(),
                                              minlength=E).tolist())
except Exception as exc:
    res["error"] = type(exc).__name__ + ": " + str(exc).splitlines()[0]
res["graphs"] = counters["stats"]["unique_graphs"]
res["breaks"] = sum(counters["graph_break"].values())
print("RESULT=" + json.dumps(res))
"""


def test_moe_chain_compiles_to_one_graph_while_the_routing_changes(stub_root):
    r = run_npu(COMPILED, stub_root)
    assert r["error"] is None, r
    assert r["graphs"] == 1 and r["breaks"] == 0, r
    assert len({tuple(c) for c in r["routings"]}) > 1, r  # the tokens per expert did change
    assert r["max_diff"] == 0.0, r


STRICT = """
out = {}

def attempt(name, fn):
    try:
        fn()
        out[name] = None
    except Exception as exc:
        out[name] = type(exc).__name__ + ": " + str(exc)

gen = torch.Generator().manual_seed(3)
T, E, k, H, I = 4, 4, 2, 16, 8
a = inputs(gen, T, E, H, I, torch.bfloat16)
weights, ids = gate(a["logits"], k)
ex, eri, tpe, _ = torch_npu.npu_moe_init_routing_v2(
    a["x"], ids, active_num=T * k, expert_num=E, expert_tokens_num_type=1,
    expert_tokens_num_flag=True, active_expert_range=[0, E], quant_mode=-1)
gmm = torch_npu.npu_grouped_matmul
routing = dict(active_num=T * k, expert_num=E, expert_tokens_num_type=1,
               expert_tokens_num_flag=True, active_expert_range=[0, E], quant_mode=-1)
attempt("ok", lambda: moe(a["x"], a["logits"], a["w13"], a["w2"], a["shared"], k))
attempt("ids_int64", lambda: torch_npu.npu_moe_init_routing_v2(a["x"], ids.long(), **routing))
attempt("active_num", lambda: torch_npu.npu_moe_init_routing_v2(
    a["x"], ids, **dict(routing, active_num=T)))
attempt("cumsum_type", lambda: torch_npu.npu_moe_init_routing_v2(
    a["x"], ids, **dict(routing, expert_tokens_num_type=0)))
attempt("split_item_1", lambda: gmm([ex], [a["w13"]], group_list=tpe, group_type=0,
                                    group_list_type=1, split_item=1))
attempt("group_list_int32", lambda: gmm([ex], [a["w13"]], group_list=tpe.int(), group_type=0,
                                        group_list_type=1, split_item=3))
attempt("counts_as_cumsum", lambda: gmm([ex], [a["w13"]], group_list=tpe, group_type=0,
                                        group_list_type=0, split_item=3))
attempt("gmm_float64", lambda: gmm([ex.double()], [a["w13"].double()], group_list=tpe,
                                   group_type=0, group_list_type=1, split_item=3))
attempt("gmm_mixed", lambda: gmm([ex], [a["w13"].float()], group_list=tpe, group_type=0,
                                 group_list_type=1, split_item=3))
wide = torch.zeros(2, 65536, 1, dtype=torch.bfloat16)
attempt("inner_limit", lambda: gmm([torch.zeros(3, 65536, dtype=torch.bfloat16)], [wide],
                                   group_list=torch.tensor([1, 2]), group_type=0,
                                   group_list_type=1, split_item=3))
many = torch.zeros(1025, 16, 2, dtype=torch.bfloat16)
attempt("groups_1025", lambda: gmm([ex], [many], group_list=torch.zeros(1025, dtype=torch.long)
                                   .index_fill_(0, torch.tensor([0]), T * k),
                                   group_type=0, group_list_type=1, split_item=3))
attempt("k_gt_e", lambda: gate(a["logits"], E + 1))
attempt("gating_float64", lambda: gate(a["logits"].double(), k))
attempt("swiglu_int", lambda: torch_npu.npu_swiglu(torch.ones(2, 4, dtype=torch.int32)))
y = torch.randn(T * k, H).to(torch.bfloat16)
fin = torch_npu.npu_moe_finalize_routing
attempt("scales_fp32", lambda: fin(y, None, None, None, weights, eri, None, drop_pad_mode=2))
attempt("skip2_alone", lambda: fin(y, None, a["shared"], None, weights.to(y.dtype), eri, None,
                                   drop_pad_mode=2))
attempt("drop_pad_4", lambda: fin(y, None, None, None, weights.to(y.dtype), eri, None,
                                  drop_pad_mode=4))
out["violations"] = list(emu.CONSTRAINT_VIOLATIONS)
print("RESULT=" + json.dumps(out))
"""


def test_strict_refuses_what_the_device_refuses(stub_root):
    r = run_npu(STRICT, stub_root)
    assert r["ok"] is None, r["ok"]
    for key, fragment in {
        "ids_int64": "npu_moe_init_routing_v2: expert_idx dtype int64 (int32 only)",
        "active_num": "npu_moe_init_routing_v2: active_num=4 must be -1 or NUM_ROWS*K = 8",
        "cumsum_type": "npu_moe_init_routing_v2: expert_tokens_num_type 0 (1, 2 only)",
        "split_item_1": "npu_grouped_matmul: split_item 1 with group_type 0 (2/3 only",
        "group_list_int32": "npu_grouped_matmul: group_list dtype int32 (int64 only)",
        "counts_as_cumsum": "npu_grouped_matmul: group_list (cumsum)",
        "gmm_float64": "npu_grouped_matmul: x dtype float64 (float16/bfloat16/float32 only)",
        "gmm_mixed": "npu_grouped_matmul: weight dtype float32 differs from x dtype bfloat16",
        "inner_limit": "npu_grouped_matmul: x's last dim 65536 must be < InnerLimit 65536",
        "groups_1025": "npu_grouped_matmul: 1025 groups > 1024 (one 3-D weight)",
        "k_gt_e": "npu_moe_gating_top_k_softmax: k=5 must be in 1..4",
        "gating_float64": "npu_moe_gating_top_k_softmax: x dtype float64",
        "swiglu_int": "npu_swiglu: x dtype int32 (float32/float16/bfloat16 only)",
        "scales_fp32": "npu_moe_finalize_routing: scales dtype float32 differs from "
        "expanded_permuted_rows dtype bfloat16",
        "skip2_alone": "npu_moe_finalize_routing: skip2 given without skip1",
        "drop_pad_4": "npu_moe_finalize_routing: drop_pad_mode 4 (0, 1, 2, 3 only)",
    }.items():
        assert r[key] and r[key].startswith("DeviceConstraintError: [npu emulation, A3] "), (
            key,
            r[key],
        )
        assert fragment in r[key], (key, r[key])


def test_strict_opt_out_records_and_still_computes(stub_root):
    r = run_npu(STRICT, stub_root, env_extra={"ASCEND_SCAFFOLD_NPU_STRICT": "0"})
    for key in ("ok", "ids_int64", "gmm_mixed", "scales_fp32", "skip2_alone"):
        assert r[key] is None, (key, r[key])
    text = "\n".join(r["violations"])
    assert "[A3] npu_moe_init_routing_v2: expert_idx dtype int64 (int32 only)" in text
    assert "[A3] npu_grouped_matmul: split_item 1 with group_type 0" in text
    assert "[A3] npu_moe_gating_top_k_softmax: k=5 must be in 1..4" in text
