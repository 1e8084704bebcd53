"""NPU emulation on CPU: real torch_npu/torchair with stand-in CANN libraries + CPU kernels.

Tests ``scaffold.npu_emulation`` of this checkout (put first on the subprocess's PYTHONPATH).
Needs an interpreter with torch==2.13.0 and torch-npu==2.13.0 installed, given by
ASCEND_SCAFFOLD_NPU_PYTHON (see .ci/npu_emulation.sh); skipped otherwise. Every check runs in a
subprocess of that interpreter, so this test process never imports torch_npu.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
NPU_PYTHON = os.environ.get("ASCEND_SCAFFOLD_NPU_PYTHON")

pytestmark = pytest.mark.skipif(
    not NPU_PYTHON,
    reason="set ASCEND_SCAFFOLD_NPU_PYTHON to a python with torch-npu==2.13.0 installed "
    "(.ci/npu_emulation.sh creates one)",
)


@pytest.fixture(scope="module")
def stub_root(tmp_path_factory) -> str:
    return os.environ.get("ASCEND_SCAFFOLD_NPU_STUBS") or str(tmp_path_factory.mktemp("stubs"))


def run_npu(code: str, stub_root: str, *args: str, timeout: int = 600) -> dict:
    """Run ``code`` in the emulation interpreter; it prints one ``RESULT=<json>`` line."""
    env = {k: v for k, v in os.environ.items() if k != "TORCH_DEVICE_BACKEND_AUTOLOAD"}
    env["ASCEND_SCAFFOLD_NPU_STUBS"] = stub_root
    env["PYTHONPATH"] = str(REPO)  # this checkout's scaffold.npu_emulation
    prelude = "import json, sys\nfrom scaffold.npu_emulation import emulation as emu\n"
    proc = subprocess.run(
        [NPU_PYTHON, "-c", prelude + textwrap.dedent(code), *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
    )
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT=")]
    assert proc.returncode == 0 and lines, f"rc={proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return json.loads(lines[-1][len("RESULT=") :])


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
o_bsnd = torch_npu.npu_fused_infer_attention_score(
    q.transpose(1, 2), kc.transpose(1, 2), vc.transpose(1, 2), actual_seq_lengths_kv=lens,
    input_layout="BSND", **kw)[0]
out["fia_decode_bsnd"] = (o_bsnd.float() - ref.transpose(1, 2)).abs().max().item()
# keys beyond actual_seq_lengths_kv are ignored
kc2 = kc.clone(); kc2[0, :, lens[0]:] = 1e4
o2 = torch_npu.npu_fused_infer_attention_score(
    q, kc2, vc, actual_seq_lengths_kv=lens, input_layout="BNSD", **kw)[0]
out["fia_ignores_tail"] = (o2.float() - o.float()).abs().max().item()
# torchair (GE) interface, tensor lengths
o_air = torchair.ops.npu_fused_infer_attention_score(
    q, kc, vc, actual_seq_lengths=torch.ones(B, dtype=torch.int64),
    actual_seq_lengths_kv=torch.tensor(lens), input_layout="BNSD", **kw)[0]
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
out["rotary_inplace"] = torch.allclose(q_in, ref_q, atol=1e-6) and torch.allclose(
    k_in, ref_k, atol=1e-6)
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
    assert r["fia_prefill_padded_rows"] == 0.0
    assert r["bad_mask_rejected"]
    assert r["scatter_functional_untouched"] and r["scatter_functional"]
    assert r["scatter_inplace"] and r["scatter_multi_token"]
    assert r["rms_norm"] < tol
    assert r["rms_norm_rstd_shape"] == [2, 5, 1, "torch.float32"]
    assert r["rotary"] < 1e-5
    assert r["rotary_inplace"]


DECODE = """
emu.activate()
import math
import torch
import torch_npu
from torch._dynamo.utils import counters

dynamic = sys.argv[1] == "dynamic"
B, H, N, NKV, D, SMAX, STEPS = 2, 64, 4, 2, 16, 48, 32
torch.manual_seed(0)
w_norm = torch.randn(H)
wq, wk, wv = (torch.randn(H, n * D) * 0.1 for n in (N, NKV, NKV))

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

xs = [torch.randn(B, 1, H) for _ in range(STEPS)]
start = [3, 7]

def run(fn):
    kc, vc = torch.zeros(B, NKV, SMAX, D), torch.zeros(B, NKV, SMAX, D)
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
"""

BAD = """
import torch_npu as tn


def f(x, w, q, k, v, lens):
    tn.npu_rms_norm(x, w, eps=1e-6)
    tn.npu_prompt_flash_attention(q, k, v, actual_seq_lengths=lens, num_heads=8)
    tn.npu_prompt_flash_attention(q, k, v, actual_seq_lengths=[4, 4], num_heads=8)
"""


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
    assert len(r["bad"]) == 2, r["bad"]
    assert "unknown keyword 'eps'" in bad_text and "bad.py:6" in bad_text
    assert "actual_seq_lengths" in bad_text and "int[]" in bad_text and "bad.py:7" in bad_text
    assert "bad.py:8" not in bad_text  # a literal constant is fine


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

    from scaffold.npu_emulate_cmd import npu_emulate

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
