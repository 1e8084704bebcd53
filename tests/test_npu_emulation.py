"""NPU emulation on CPU: real torch_npu/torchair with stand-in CANN libraries + CPU kernels.

Tests ``scaffold.npu_emulation`` of this checkout (put first on the subprocess's PYTHONPATH).
Needs an interpreter with torch==2.13.0 and torch-npu==2.13.0 installed, given by
ASCEND_SCAFFOLD_NPU_PYTHON (see .ci/npu_emulation.sh); skipped otherwise, and failed instead
where ASCEND_SCAFFOLD_REQUIRE_NPU_EMULATION=1 (CI). Every check runs in a subprocess of that
interpreter, so this test process never imports torch_npu.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from conftest import NPU_PYTHON, require_npu_emulation, run_npu_code

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module", autouse=True)
def _needs_emulation():
    require_npu_emulation()


run_npu = run_npu_code


def test_activate_imports_torch_npu_and_torchair(stub_root):
    res = run_npu(
        """
        import os
        assert "torch" not in sys.modules
        reason = emu.unavailable_reason()
        assert reason is None, reason
        assert emu.activate() is True and emu.activate() is True  # idempotent
        import torch, torch_npu, torchair
        d1 = emu.build_stubs(); mtime = (d1 / "libascendcl.so").stat().st_mtime_ns
        d2 = emu.build_stubs()
        m = emu.stub_manifest(d1)
        print("RESULT=" + json.dumps(dict(
            npu=torch.npu.is_available(), same=d1 == d2,
            mtime_same=(d2 / "libascendcl.so").stat().st_mtime_ns == mtime,
            symbols=m["symbol_count"], libs=m["libs"], dir=str(d1),
            autoload=os.environ.get("TORCH_DEVICE_BACKEND_AUTOLOAD"),
            ld=os.environ.get("LD_LIBRARY_PATH", ""),
            air=hasattr(torch.ops.air, "npu_fused_infer_attention_score"),
        )))
        """,
        stub_root,
    )
    assert res["npu"] is False
    assert res["same"] and res["mtime_same"]
    assert res["symbols"] > 50
    assert {"libascendcl.so", "libhccl.so", "libge_runner.so"} <= set(res["libs"])
    assert "libatb.so" not in res["libs"]
    assert res["dir"].startswith(stub_root)
    assert res["autoload"] == "0"
    assert res["dir"] not in res["ld"]  # preloaded via ctypes, no LD_LIBRARY_PATH needed
    assert res["air"]


KERNELS = """
emu.activate()  # before `import torch`: it sets TORCH_DEVICE_BACKEND_AUTOLOAD=0
import math
import torch
import torch.nn.functional as F
import torch_npu, torchair
torch.manual_seed(0)
out = {}

def sdpa(q, k, v, scale, causal_offset=None):
    # independent reference: per-row F.scaled_dot_product_attention on sliced tensors
    mask = None
    if causal_offset is not None:
        sq, skv = q.shape[-2], k.shape[-2]
        i = torch.arange(sq)[:, None]; j = torch.arange(skv)[None, :]
        mask = j <= i + causal_offset
    return F.scaled_dot_product_attention(
        q.float(), k.float(), v.float(), attn_mask=mask, scale=scale, enable_gqa=True)

# --- FIA decode, GQA, varying actual_seq_lengths_kv, BNSD / BSND / BSH ----------------------
B, N, NKV, D, SMAX = 3, 8, 2, 64, 40
scale = 1 / math.sqrt(D)
q = torch.randn(B, N, 1, D, dtype=torch.float16)
kc = torch.randn(B, NKV, SMAX, D, dtype=torch.float16)
vc = torch.randn(B, NKV, SMAX, D, dtype=torch.float16)
lens = [5, 17, 40]
kw = dict(num_heads=N, num_key_value_heads=NKV, scale=scale, sparse_mode=0)
o = torch_npu.npu_fused_infer_attention_score(
    q, kc, vc, actual_seq_lengths=[1] * B, actual_seq_lengths_kv=lens, input_layout="BNSD", **kw)[0]
ref = torch.cat([sdpa(q[b:b+1], kc[b:b+1, :, :lens[b]], vc[b:b+1, :, :lens[b]], scale)
                 for b in range(B)])
out["fia_decode_bnsd"] = (o.float() - ref).abs().max().item()
bsh = lambda t: t.transpose(1, 2).reshape(t.shape[0], t.shape[2], -1)
o_bsh = torch_npu.npu_fused_infer_attention_score(
    bsh(q), bsh(kc), bsh(vc), actual_seq_lengths_kv=lens, input_layout="BSH", **kw)[0]
out["fia_decode_bsh"] = (o_bsh.float() - bsh(ref)).abs().max().item()
bsnd = lambda t: t.transpose(1, 2).contiguous()  # the op takes no strided views
o_bsnd = torch_npu.npu_fused_infer_attention_score(
    bsnd(q), bsnd(kc), bsnd(vc), actual_seq_lengths_kv=lens, input_layout="BSND", **kw)[0]
out["fia_decode_bsnd"] = (o_bsnd.float() - ref.transpose(1, 2)).abs().max().item()
# keys beyond actual_seq_lengths_kv are ignored
kc2 = kc.clone(); kc2[0, :, lens[0]:] = 1e4
o2 = torch_npu.npu_fused_infer_attention_score(
    q, kc2, vc, actual_seq_lengths_kv=lens, input_layout="BNSD", **kw)[0]
out["fia_ignores_tail"] = (o2.float() - o.float()).abs().max().item()
# torchair (GE) interface, tensor lengths: only inside a graph; eagerly it raises, as torchair
def air(q, kc, vc, lq, lkv):
    return torchair.ops.npu_fused_infer_attention_score(
        q, kc, vc, actual_seq_lengths=lq, actual_seq_lengths_kv=lkv, input_layout="BNSD", **kw)[0]
air_args = (q, kc, vc, torch.ones(B, dtype=torch.int64), torch.tensor(lens))
try:
    air(*air_args)
    out["fia_air_eager"] = "no error"
except NotImplementedError as exc:
    out["fia_air_eager"] = str(exc)
o_air = torch.compile(air, backend="aot_eager", fullgraph=True, dynamic=False)(*air_args)
out["fia_air"] = (o_air.float() - o.float()).abs().max().item()

# --- FIA prefill, sparse_mode=3 right-down causal, padded rows -----------------------------
S = 12
qp = torch.randn(B, N, S, D, dtype=torch.float16)
kp = torch.randn(B, NKV, S, D, dtype=torch.float16)
vp = torch.randn(B, NKV, S, D, dtype=torch.float16)
plens = [12, 7, 3]
mask = torch.triu(torch.ones(2048, 2048, dtype=torch.bool), diagonal=1)
op = torch_npu.npu_fused_infer_attention_score(
    qp, kp, vp, atten_mask=mask, actual_seq_lengths=plens, actual_seq_lengths_kv=plens,
    num_heads=N, num_key_value_heads=NKV, scale=scale, input_layout="BNSD", sparse_mode=3)[0]
err, pad = 0.0, 0.0
for b, L in enumerate(plens):
    r = sdpa(qp[b:b+1, :, :L], kp[b:b+1, :, :L], vp[b:b+1, :, :L], scale, causal_offset=0)
    err = max(err, (op[b:b+1, :, :L].float() - r).abs().max().item())
    pad = max(pad, op[b, :, L:].abs().max().item() if L < S else 0.0)
out["fia_prefill_causal"] = err
out["fia_prefill_padded_rows"] = pad
# right-down: 4 new queries against 10 cached keys (query i sees j <= i + 6)
kq = torch.randn(1, NKV, 10, D, dtype=torch.float16)
qq = torch.randn(1, N, 4, D, dtype=torch.float16)
orr = torch_npu.npu_fused_infer_attention_score(
    qq, kq, kq, atten_mask=mask, num_heads=N, num_key_value_heads=NKV, scale=scale,
    input_layout="BNSD", sparse_mode=3)[0]
out["fia_right_down"] = (orr.float() - sdpa(qq, kq, kq, scale, causal_offset=6)).abs().max().item()
try:
    torch_npu.npu_fused_infer_attention_score(
        qp, kp, vp, atten_mask=mask[:S, :S], num_heads=N, num_key_value_heads=NKV,
        input_layout="BNSD", sparse_mode=3)
    out["bad_mask_rejected"] = False
except (ValueError, RuntimeError):
    out["bad_mask_rejected"] = True

# --- scatter_update_: axis -2, per-row positions --------------------------------------------
cache = torch.randn(B, NKV, SMAX, D)
upd = torch.randn(B, NKV, 1, D)
pos = torch.tensor([0, 9, 39])
expect = cache.clone()
for b in range(B):
    expect[b, :, pos[b]] = upd[b, :, 0]
before = cache.clone()
functional = torch_npu.scatter_update(cache, pos, upd, -2)
out["scatter_functional_untouched"] = torch.equal(cache, before)
out["scatter_functional"] = torch.equal(functional, expect)
ret = torch_npu.scatter_update_(cache, pos, upd, -2)
out["scatter_inplace"] = torch.equal(cache, expect) and ret.data_ptr() == cache.data_ptr()
upd3 = torch.randn(B, NKV, 3, D)
c3 = before.clone(); torch_npu.scatter_update_(c3, pos.clamp(max=SMAX - 3), upd3, -2)
e3 = before.clone()
for b, p in enumerate(pos.clamp(max=SMAX - 3).tolist()):
    e3[b, :, p:p + 3] = upd3[b]
out["scatter_multi_token"] = torch.equal(c3, e3)

# --- rms_norm ------------------------------------------------------------------------------
x = torch.randn(2, 5, 64, dtype=torch.float16)
w = torch.randn(64, dtype=torch.float16)
y, rstd = torch_npu.npu_rms_norm(x, w, epsilon=1e-5)
xf = x.float()
ref_y = (xf / torch.sqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-5) * w.float()).half()
out["rms_norm"] = (y.float() - ref_y.float()).abs().max().item()
out["rms_norm_rstd_shape"] = list(rstd.shape) + [str(rstd.dtype)]

# --- rotary, half mode, BSND ---------------------------------------------------------------
S2 = 6
qr = torch.randn(2, S2, 8, 64); kr = torch.randn(2, S2, 2, 64)
inv = 1.0 / (10000 ** (torch.arange(0, 64, 2).float() / 64))
fr = torch.outer(torch.arange(S2).float(), inv); emb = torch.cat((fr, fr), -1)
cos = emb.cos()[None, :, None, :].expand(2, S2, 1, 64).contiguous()
sin = emb.sin()[None, :, None, :].expand(2, S2, 1, 64).contiguous()
def rotate_half(t):
    return torch.cat((-t[..., 32:], t[..., :32]), -1)
ref_q = qr * cos + rotate_half(qr) * sin
ref_k = kr * cos + rotate_half(kr) * sin
q_in, k_in = qr.clone(), kr.clone()
qo, ko = torch_npu.npu_apply_rotary_pos_emb(q_in, k_in, cos, sin, layout="BSND")
out["rotary"] = max((qo - ref_q).abs().max().item(), (ko - ref_k).abs().max().item())
# as on the device: written into query/key, and those same tensors returned
out["rotary_inplace"] = torch.allclose(q_in, ref_q, atol=1e-6) and torch.allclose(
    k_in, ref_k, atol=1e-6)
out["rotary_returns_inputs"] = qo is q_in and ko is k_in
print("RESULT=" + json.dumps(out))
"""


def test_reference_kernels(stub_root):
    r = run_npu(KERNELS, stub_root)
    tol = 2e-3  # fp16 outputs
    for key in (
        "fia_decode_bnsd",
        "fia_decode_bsh",
        "fia_decode_bsnd",
        "fia_prefill_causal",
        "fia_right_down",
    ):
        assert r[key] < tol, (key, r[key])
    assert r["fia_ignores_tail"] == 0.0
    assert r["fia_air"] == 0.0
    assert "runs only inside a GE graph" in r["fia_air_eager"], r["fia_air_eager"]
    assert r["fia_prefill_padded_rows"] == 0.0
    assert r["bad_mask_rejected"]
    assert r["scatter_functional_untouched"] and r["scatter_functional"]
    assert r["scatter_inplace"] and r["scatter_multi_token"]
    assert r["rms_norm"] < tol
    assert r["rms_norm_rstd_shape"] == [2, 5, 1, "torch.float32"]
    assert r["rotary"] < 1e-5
    assert r["rotary_inplace"] and r["rotary_returns_inputs"]


DECODE = """
emu.activate()
import math
import torch
import torch_npu
from torch._dynamo.utils import counters

dynamic = sys.argv[1] == "dynamic"
B, H, N, NKV, D, SMAX, STEPS = 2, 64, 4, 2, 64, 48, 32
DT = torch.bfloat16  # what the device's FIA takes (strict emulation)
torch.manual_seed(0)
w_norm = torch.randn(H, dtype=DT)
wq, wk, wv = ((torch.randn(H, n * D) * 0.1).to(DT) for n in (N, NKV, NKV))

def step(x, k_cache, v_cache, pos, lens_kv):
    h = torch_npu.npu_rms_norm(x, w_norm, epsilon=1e-6)[0]
    q = (h @ wq).view(B, 1, N, D).transpose(1, 2)
    k = (h @ wk).view(B, 1, NKV, D).transpose(1, 2)
    v = (h @ wv).view(B, 1, NKV, D).transpose(1, 2)
    torch_npu.scatter_update_(k_cache, pos, k, -2)
    torch_npu.scatter_update_(v_cache, pos, v, -2)
    return torch_npu.npu_fused_infer_attention_score(
        q, k_cache, v_cache, actual_seq_lengths=[1] * B, actual_seq_lengths_kv=lens_kv,
        num_heads=N, num_key_value_heads=NKV, scale=1 / math.sqrt(D), input_layout="BNSD",
        sparse_mode=0)[0]

xs = [torch.randn(B, 1, H, dtype=DT) for _ in range(STEPS)]
start = [3, 7]

def run(fn):
    kc, vc = torch.zeros(B, NKV, SMAX, D, dtype=DT), torch.zeros(B, NKV, SMAX, D, dtype=DT)
    outs = []
    for t in range(STEPS):
        p = [s + t for s in start]
        outs.append(fn(xs[t], kc, vc, torch.tensor(p), [v + 1 for v in p]))
    return torch.stack(outs), kc

torch._dynamo.reset(); counters.clear()
eager, kc_eager = run(step)
compiled = torch.compile(step, backend="aot_eager", fullgraph=True, dynamic=dynamic)
res = dict(error=None)
try:
    got, kc_got = run(compiled)
    res["max_diff"] = (got - eager).abs().max().item()
    res["cache_equal"] = torch.equal(kc_got, kc_eager)
except Exception as exc:
    res["error"] = type(exc).__name__ + ": " + str(exc).splitlines()[0]
res["graphs"] = counters["stats"]["unique_graphs"]
res["breaks"] = sum(counters["graph_break"].values())
res["ops_captured"] = counters["stats"]["calls_captured"]
print("RESULT=" + json.dumps(res))
"""


def test_decode_step_compiles_once_with_dynamic_true(stub_root):
    r = run_npu(DECODE, stub_root, "dynamic")
    assert r["error"] is None, r
    assert r["graphs"] == 1, r
    assert r["breaks"] == 0, r
    assert r["max_diff"] == 0.0 and r["cache_equal"], r


def test_decode_step_recompiles_with_dynamic_false(stub_root):
    r = run_npu(DECODE, stub_root, "static")
    # list[int] lengths change every step: static shapes specialise on them
    assert r["graphs"] > 1 or "RecompileLimit" in (r["error"] or ""), r


CONTRACT = """
import math
import torch
import torch_npu
import torchair


def layer(x, weight, eps, q, k, cos, sin, k_cache, v_cache, kv_len, k_new, mask, lens_q, lens_kv,
          n_heads, n_kv_heads, t_q, t_kv, D):
    x = torch_npu.npu_rms_norm(x, weight, epsilon=eps)[0]
    q, k = torch_npu.npu_apply_rotary_pos_emb(q, k, cos, sin, layout="BSND")
    torch_npu.scatter_update_(k_cache, kv_len, k_new, -2)
    o = torch_npu.npu_fused_infer_attention_score(
        q, k, k, atten_mask=mask, actual_seq_lengths=lens_q, actual_seq_lengths_kv=lens_kv,
        num_heads=n_heads, num_key_value_heads=n_kv_heads, scale=1 / math.sqrt(D),
        input_layout="BNSD", sparse_mode=3,
    )[0]
    o2 = torchair.ops.npu_fused_infer_attention_score(
        q, k_cache, v_cache, actual_seq_lengths=t_q, actual_seq_lengths_kv=t_kv,
        num_heads=n_heads, num_key_value_heads=n_kv_heads, scale=0.125, input_layout="BNSD",
        sparse_mode=0,
    )[0]
    return o, o2, torch.ops.npu.npu_rms_norm.default(x, weight, 1e-6)


def aliased(q, k, v, lens_q, lens_kv, n_heads, causal, tensor_lengths):
    if tensor_lengths:
        fia = torchair.ops.npu_fused_infer_attention_score
    else:
        fia = torch_npu.npu_fused_infer_attention_score
    other = torch_npu.npu_fused_infer_attention_score if causal else fia
    o = fia(q, k, v, actual_seq_lengths=lens_q, actual_seq_lengths_kv=lens_kv,
            num_heads=n_heads, input_layout="BNSD", sparse_mode=3 if causal else 0)[0]
    return o, other(q, k, v, num_heads=n_heads, input_layout="BSND")
"""

BAD = """
import torch_npu as tn


def f(x, w, q, k, v, lens):
    tn.npu_rms_norm(x, w, eps=1e-6)
    tn.npu_prompt_flash_attention(q, k, v, actual_seq_lengths=lens, num_heads=8)
    tn.npu_prompt_flash_attention(q, k, v, actual_seq_lengths=[4, 4], num_heads=8)

import torchair


def g(q, k, v, cos, sin, lens, c):
    fia = torchair.ops.npu_fused_infer_attention_score if c else tn.npu_fused_infer_attention_score
    fia(q, k, v, actual_seq_qlen=lens)
    tn.npu_fused_infer_attention_score(q, k, v, input_layout="BNDS", sparse_mode=5 if c else 0)
    tn.npu_apply_rotary_pos_emb(q, k, cos, sin, "BNSD", rotary_mode="interleave")
"""


# int[] arguments: values fixed when the model is built pass, per-step values are flagged.
INT_LISTS = """
import torch_npu

EXPERTS = 8
RANGE = [0, EXPERTS]
KW = dict(active_num=4, expert_tokens_num_type=1, expert_tokens_num_flag=True, quant_mode=-1)


def experts(x, ids, w13, kv_len):
    num_experts = w13.shape[0]
    first, last = 0, num_experts
    span = [0, int(kv_len)]
    route = torch_npu.npu_moe_init_routing_v2
    route(x, ids, expert_num=8, active_expert_range=[0, num_experts], **KW)  # fixed: a shape
    route(x, ids, expert_num=8, active_expert_range=RANGE, **KW)  # fixed: a module constant
    route(x, ids, expert_num=8, active_expert_range=[first, last], **KW)  # fixed: unpacked
    route(x, ids, expert_num=8, active_expert_range=[0, x.size(0) * 2], **KW)  # fixed
    route(x, ids, expert_num=8, active_expert_range=[0, kv_len], **KW)  # per-step: a parameter
    route(x, ids, expert_num=8, active_expert_range=span, **KW)  # per-step: from a parameter


class Block:
    def forward(self, x, ids, lens):
        local = self.expert_range
        torch_npu.npu_moe_init_routing_v2(x, ids, active_expert_range=self.expert_range)  # fixed
        torch_npu.npu_moe_init_routing_v2(x, ids, active_expert_range=local)  # fixed: self's
        torch_npu.npu_moe_init_routing_v2(x, ids, active_expert_range=list(lens))  # per-step
        for step in lens:
            torch_npu.npu_moe_init_routing_v2(x, ids, active_expert_range=[0, step])  # per-step
"""


def test_schema_check_tells_fixed_int_lists_from_per_step_ones(stub_root, tmp_path):
    """An `int[]` argument recompiles whenever its value changes: a value fixed when the model
    is built (the MoE call's `active_expert_range=[0, num_experts]`) is fine, a per-step one
    (a parameter, or computed from one) is flagged, each at its own line."""
    source = tmp_path / "int_lists.py"
    source.write_text(INT_LISTS)
    r = run_npu(
        """
        from scaffold.npu_emulation import check_npu_calls
        print("RESULT=" + json.dumps(check_npu_calls([sys.argv[1]])))
        """,
        stub_root,
        str(source),
    )
    lines = INT_LISTS.splitlines()
    per_step = {i for i, line in enumerate(lines, 1) if "# per-step" in line}
    fixed = {i for i, line in enumerate(lines, 1) if "# fixed" in line}
    flagged = {int(p.split(":")[1]) for p in r}
    assert flagged == per_step, "\n".join(r)
    assert not flagged & fixed
    assert all("active_expert_range" in p and "may change per step" in p for p in r), r


def test_schema_check(stub_root, tmp_path):
    good, bad = tmp_path / "good.py", tmp_path / "bad.py"
    good.write_text(CONTRACT)
    bad.write_text(BAD)
    r = run_npu(
        """
        from scaffold.npu_emulation import check_npu_calls
        print("RESULT=" + json.dumps(dict(
            good=check_npu_calls([sys.argv[1]]), bad=check_npu_calls([sys.argv[2]]))))
        """,
        stub_root,
        str(good),
        str(bad),
    )
    assert r["good"] == [], r["good"]
    bad_text = "\n".join(r["bad"])
    assert len(r["bad"]) == 8, r["bad"]
    assert "unknown keyword 'eps'" in bad_text and "bad.py:6" in bad_text
    assert "actual_seq_lengths" in bad_text and "int[]" in bad_text and "bad.py:7" in bad_text
    assert "bad.py:8" not in bad_text  # a literal constant is fine
    # through the local alias: checked against both ops the name may hold
    for op in ("torchair.ops", "torch_npu"):
        assert (
            f"bad.py:15: fia (= {op}.npu_fused_infer_attention_score): unknown keyword "
            "'actual_seq_qlen'" in bad_text
        ), bad_text
    # accepted values (scaffold.device_limits, A3), both arms of a conditional expression
    assert "bad.py:16" in bad_text and "'input_layout'='BNDS' is not accepted on A3" in bad_text
    assert "'sparse_mode'=5 is not accepted on A3" in bad_text
    assert "'sparse_mode'=0" not in bad_text
    assert "bad.py:17" in bad_text and "'layout'='BNSD' is not accepted on A3" in bad_text
    assert "'rotary_mode'='interleave' is not accepted on A3" in bad_text


def test_no_env_leak_plain_torch_keeps_working(stub_root):
    """After activation in the torch-npu interpreter, a child `import torch` in this (plain)
    interpreter still works: no LD_LIBRARY_PATH or other leak breaks it."""
    pytest.importorskip("torch")
    r = run_npu(
        """
        import os, subprocess
        emu.activate()
        import torch_npu
        child = subprocess.run([sys.argv[1], "-c", "import torch; print(torch.__version__)"],
                               capture_output=True, text=True, env=dict(os.environ))
        print("RESULT=" + json.dumps(dict(rc=child.returncode, err=child.stderr[-500:])))
        """,
        stub_root,
        sys.executable,
    )
    assert r["rc"] == 0, r["err"]


def test_cli_npu_emulate_reports_env(stub_root, tmp_path):
    typer = pytest.importorskip("typer")
    from typer.testing import CliRunner

    from scaffold.npu_emulation.cli import npu_emulate

    venv_dir = Path(NPU_PYTHON).parents[1]
    if not (venv_dir / "pyvenv.cfg").is_file():
        pytest.skip(f"{NPU_PYTHON} is not inside a venv")
    app = typer.Typer()
    app.command("npu-emulate")(npu_emulate)
    app.command("noop")(lambda: None)  # keep npu-emulate a subcommand
    result = CliRunner().invoke(
        app, ["npu-emulate", "--venv", str(venv_dir), "--cache-dir", stub_root]
    )
    assert result.exit_code == 0, result.output
    assert "export TORCH_DEVICE_BACKEND_AUTOLOAD=0" in result.output
    assert f"export ASCEND_SCAFFOLD_NPU_STUBS={stub_root}" in result.output
    not_a_venv = tmp_path / "plain"
    not_a_venv.mkdir()
    bad = CliRunner().invoke(app, ["npu-emulate", "--venv", str(not_a_venv)])
    assert bad.exit_code == 2


STRICT = """
emu.activate()
import torch, torch_npu
out = {"strict": emu.strict(), "platform": emu.current_platform()}


def attempt(name, fn):
    try:
        fn()
        out[name] = None
    except Exception as exc:
        out[name] = type(exc).__name__ + ": " + str(exc)


B, N, S, D = 1, 2, 4, 64
q = torch.randn(B, N, S, D, dtype=torch.bfloat16)
view = torch.randn(B, S, N, D, dtype=torch.bfloat16).transpose(1, 2)  # BNSD, strided
fia = torch_npu.npu_fused_infer_attention_score
kw = dict(num_heads=N, input_layout="BNSD")
attempt("ok", lambda: fia(q, q, q, **kw))
attempt("fp32", lambda: fia(q.float(), q.float(), q.float(), **kw))
attempt("strided_key", lambda: fia(q, view, q, **kw))
attempt("layout", lambda: fia(q, q, q, num_heads=N, input_layout="BNDS"))
attempt("sparse5", lambda: fia(q, q, q, sparse_mode=5, **kw))
cos = torch.randn(B, S, 1, 96)
attempt("rotary_d96", lambda: torch_npu.npu_apply_rotary_pos_emb(
    torch.randn(B, S, N, 96), torch.randn(B, S, N, 96), cos, cos))
cos = torch.randn(B, S, 1, D)
attempt("rotary_mode", lambda: torch_npu.npu_apply_rotary_pos_emb(
    torch.randn(B, S, N, D), torch.randn(B, S, N, D), cos, cos, rotary_mode="quarter"))
out["violations"] = list(emu.CONSTRAINT_VIOLATIONS)
print("RESULT=" + json.dumps(out))
"""


def test_strict_by_default_raises_what_the_device_refuses(stub_root):
    r = run_npu(STRICT, stub_root)
    assert r["strict"] is True and r["platform"] == "A3"
    assert r["ok"] is None
    for key, fragment in {
        "fp32": "query dtype float32 (the device takes float16/bfloat16/int8)",
        "strided_key": "key is not contiguous (shape (1, 2, 4, 64), strides (512, 64, 128, 1))",
        "layout": "input_layout 'BNDS' is not accepted (accepted: BSH, BSND, BNSD, TND",
        "sparse5": "sparse_mode 5 is not accepted (accepted: 0, 1, 2, 3, 4)",
        "rotary_d96": "head dim D=96, the op takes D = 64 or 128",
        "rotary_mode": "rotary_mode 'quarter' is not accepted (accepted: half)",
    }.items():
        assert r[key] and r[key].startswith("DeviceConstraintError: [npu emulation, A3]"), r[key]
        assert fragment in r[key], (key, r[key])


def test_strict_opt_out_records_and_platform_is_chosen(stub_root):
    r = run_npu(
        STRICT,
        stub_root,
        env_extra={"ASCEND_SCAFFOLD_NPU_STRICT": "0", "ASCEND_SCAFFOLD_NPU_PLATFORM": "A2"},
    )
    assert r["strict"] is False and r["platform"] == "A2"
    assert all(r[k] is None for k in ("ok", "fp32", "strided_key", "rotary_d96")), r
    assert r["layout"].startswith("NotImplementedError")  # recorded, then not emulated
    text = "\n".join(r["violations"])
    assert "[A2] npu_fused_infer_attention_score: query dtype float32" in text
    assert "[A2] npu_fused_infer_attention_score: key is not contiguous" in text
    assert "[A2] npu_apply_rotary_pos_emb: head dim D=96" in text


ALIASING = """
emu.activate()
import warnings
import torch, torch_npu, torchair
B, S, N, D = 2, 3, 2, 64
torch.manual_seed(0)
x = torch.randn(B, S, 2 * N * D)
cos, sin = torch.randn(B, S, 1, D), torch.randn(B, S, 1, D)


def step(x, cos, sin, contiguous):
    q, k = x.split(N * D, dim=-1)
    q, k = q.view(B, S, N, D), k.view(B, S, N, D)  # strided views of one projection
    if contiguous:
        q, k = q.contiguous(), k.contiguous()
    q, k = torch_npu.npu_apply_rotary_pos_emb(q, k, cos, sin)
    return q.transpose(1, 2).contiguous(), k.transpose(1, 2).contiguous()


out = {"pinned": torch._functorch.config.error_on_custom_op_aliasing}
eager = step(x.clone(), cos, sin, False)
for contiguous in (False, True):
    torch._dynamo.reset()
    fn = torch.compile(step, backend="aot_eager", fullgraph=True)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            got = fn(x.clone(), cos, sin, contiguous)
        out[str(contiguous)] = max((a - e).abs().max().item() for a, e in zip(got, eager))
        out["warned"] = any("must not also be an input" in str(w.message) for w in caught)
    except Exception as exc:
        out[str(contiguous)] = type(exc).__name__ + ": " + str(exc)
print("RESULT=" + json.dumps(out))
"""


def test_rotary_returns_its_inputs_and_compiled_graphs_must_not_rely_on_new_tensors(stub_root):
    """As on the device the op writes into q/k and returns them; a graph traced with the
    schema's new outputs then sees other strides at run time: strided inputs are refused in a
    compiled graph, contiguous ones work. torch's aliasing check only warns, also with $CI."""
    r = run_npu(ALIASING, stub_root, env_extra={"CI": "1"})
    assert r["pinned"] is False
    assert r["False"].startswith("DeviceConstraintError"), r["False"]
    assert "npu_apply_rotary_pos_emb: query is a strided view" in r["False"]
    assert "the op writes into it and returns it" in r["False"]
    assert r["True"] == 0.0, r
    assert r["warned"]  # torch 2.13: "deprecated and will become an error"


SEAM = """
from dataclasses import dataclass

import torch

NPUGRAPH_EX_OPTIONS = {"frozen_parameter": True, "@OPT@": True}


def npu_available():
    return False


@dataclass
class ModelConfig:
    exe_mode: str = "eager"
    enable_cache_compile: bool = False
    output_path: str = ""


def compile_decode(model, config):
    if not npu_available():
        return torch.compile(model.decode, backend="aot_eager")
    if config.exe_mode == "npugraph_ex":
        if config.enable_cache_compile:
            return torch.npu.npugraph_ex.inference.cache_compile(
                model.decode, @NGX_KW@=config.output_path, dynamic=True, options=NPUGRAPH_EX_OPTIONS
            )
        return torch.compile(
            model.decode, backend="npugraph_ex", dynamic=True, options=NPUGRAPH_EX_OPTIONS
        )
    import torchair

    cfg = torchair.CompilerConfig()
    cfg.experimental_config.@ATTR@ = True
    cfg.experimental_config.topology_sorting_strategy = "@STRATEGY@"
    if config.enable_cache_compile:
        return torchair.inference.cache_compile(
            model.decode, config=cfg, @GE_KW@=config.output_path, dynamic=False, ge_cache=True
        )
    backend = torchair.get_npu_backend(@BACKEND_KW@=cfg)
    return torch.compile(model.decode, backend=backend, @COMPILE_KW@=True, dynamic=False)
"""
SEAM_GOOD = {
    "OPT": "inplace_pass",
    "NGX_KW": "cache_dir",
    "ATTR": "frozen_parameter",
    "STRATEGY": "StableRDFS",
    "GE_KW": "cache_dir",
    "BACKEND_KW": "compiler_config",
    "COMPILE_KW": "fullgraph",
}
SEAM_BAD = {
    ("OPT", "inplace_passs"): [
        "NPUGRAPH_EX_OPTIONS: npugraph_ex option 'inplace_passs'=True: ValueError: "
        "Invalid option 'inplace_passs'",
        "npugraph_ex: npugraph_ex option 'inplace_passs'=True",
        "npugraph_ex+cache_compile: compile_decode raised ValueError: Invalid option "
        "'inplace_passs'",
    ],
    ("NGX_KW", "cache_path"): [
        "npugraph_ex+cache_compile: npugraph_ex.inference.cache_compile(..., cache_path=...): "
        "swallowed by **kwargs and never used",
    ],
    ("ATTR", "frozen_paramter"): [
        "ge_graph: compile_decode raised ValueError: _ExperimentalConfig has no option "
        "frozen_paramter",
    ],
    ("STRATEGY", "Stable"): [
        "ge_graph: compile_decode raised ValueError: Value 'Stable'",
        "not in optional list ['BFS', 'DFS', 'RDFS', 'StableRDFS']",
    ],
    ("GE_KW", "cache_path"): [
        "ge_graph+cache_compile: torchair.inference.cache_compile(..., cache_path=...): "
        "swallowed by **kwargs and never used",
    ],
    ("BACKEND_KW", "compiler_cfg"): [
        "ge_graph: compile_decode raised TypeError: get_npu_backend() got an unexpected "
        "keyword argument 'compiler_cfg'",
    ],
    ("COMPILE_KW", "fullgraf"): [
        "ge_graph: torch.compile: got an unexpected keyword argument 'fullgraf'",
    ],
}


def test_compile_seam_check(stub_root, tmp_path):
    cases = {"good": dict(SEAM_GOOD)}
    for key, value in SEAM_BAD:
        cases[f"{key}={value}"] = {**SEAM_GOOD, key: value}
    paths = {}
    for name, values in cases.items():
        text = SEAM
        for key, value in values.items():
            text = text.replace(f"@{key}@", value)
        paths[name] = tmp_path / f"seam_{len(paths)}.py"
        paths[name].write_text(text)
    r = run_npu(
        """
        import importlib.util
        emu.activate()  # before the module's `import torch`
        from scaffold.npu_emulation import check_compile_seam
        out = {}
        for name, path in json.loads(sys.argv[1]).items():
            spec = importlib.util.spec_from_file_location(f"seam{len(out)}", path)
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            out[name] = check_compile_seam(module)
            out[name + ":restored"] = module.npu_available() is False
        print("RESULT=" + json.dumps(out))
        """,
        stub_root,
        json.dumps({k: str(v) for k, v in paths.items()}),
    )
    assert r["good"] == [], r["good"]
    for (key, value), fragments in SEAM_BAD.items():
        found = "\n".join(r[f"{key}={value}"])
        assert r[f"{key}={value}:restored"]
        for fragment in fragments:
            assert fragment in found, (key, value, found)
