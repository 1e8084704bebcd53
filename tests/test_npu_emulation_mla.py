"""NPU emulation of what an MLA package's ops/npu.py calls beyond the GQA and MoE ops: the
fused attention's MLA mode (query_rope / key_rope over the paged latent) and
npu_moe_gating_top_k (DeepSeek-V3's grouped sigmoid routing). Each reference kernel equals
float64 maths and the portable ops, and refuses what the device's docs refuse.

Like tests/test_npu_emulation.py: every check runs in a subprocess of the emulation interpreter
(ASCEND_SCAFFOLD_NPU_PYTHON, torch-npu==2.13.0); skipped without it, failed instead where
ASCEND_SCAFFOLD_REQUIRE_NPU_EMULATION=1 (CI).
"""

from __future__ import annotations

import pytest
from conftest import require_npu_emulation, run_npu_code


@pytest.fixture(scope="module", autouse=True)
def _needs_emulation():
    require_npu_emulation()


SETUP = """
emu.activate()  # before `import torch`
import torch
import torch_npu
from ascend_runtime.layers.deepseek_router import Routing, route
from ascend_runtime.ops import npu, portable

gen = torch.Generator().manual_seed(7)
r = lambda *s: torch.randn(*s, generator=gen)

def caches(blocks=6, block=16, latent=512, rope=64, dt=torch.bfloat16):
    return r(blocks, block, latent).to(dt), r(blocks, block, rope).to(dt)

def mla(q, qr, nope, rope, table, lengths, **kw):
    args = dict(query_rope=qr, key_rope=rope, block_table=table, block_size=nope.shape[1],
                actual_seq_lengths_kv=lengths, num_heads=q.shape[2], num_key_value_heads=1,
                scale=0.1, input_layout="BSND", sparse_mode=0)
    args.update(kw)
    return torch_npu.npu_fused_infer_attention_score(q, nope, nope, **args)[0]

def refused(fn):
    try:
        fn()
    except (emu.DeviceConstraintError, ValueError, NotImplementedError) as exc:
        return str(exc)
    return None
"""


def test_mla_mode_equals_plain_maths_and_the_portable_op(stub_root):
    result = run_npu_code(
        SETUP
        + """
nope, rope = caches()
table = torch.tensor([[3, 1, 5], [2, 4, 0]], dtype=torch.int32)
lengths = [37, 20]
q, qr = r(2, 1, 32, 512).bfloat16(), r(2, 1, 32, 64).bfloat16()
out = mla(q, qr, nope, rope, table, lengths)
# float64: row b reads blocks table[b] in order, its first lengths[b] tokens
err = 0.0
for b, n in enumerate(lengths):
    rows = lambda c: c[table[b].long()].reshape(-1, c.shape[-1])[:n].double()
    scores = (q[b, 0].double() @ rows(nope).t() + qr[b, 0].double() @ rows(rope).t()) * 0.1
    ref = scores.softmax(-1) @ rows(nope)
    err = max(err, (out[b, 0].double() - ref).abs().max().item())
portable_out = portable.paged_mla_attention(  # in float32 on the same (bf16) values
    q.float().transpose(1, 2), qr.float().transpose(1, 2), nope.float(), rope.float(), table,
    lengths, lengths,
    num_heads=32, scale=0.1, block_size=16).transpose(1, 2)
package = npu.paged_mla_attention(
    q.transpose(1, 2), qr.transpose(1, 2), nope, rope, table, lengths, lengths,
    num_heads=32, scale=0.1, block_size=16).transpose(1, 2)
meta = torch.ops.npu.npu_fused_infer_attention_score(
    q.to("meta"), nope.to("meta"), nope.to("meta"), query_rope=qr.to("meta"),
    key_rope=rope.to("meta"), block_table=table.to("meta"), block_size=16,
    actual_seq_lengths_kv=lengths, num_heads=32, num_key_value_heads=1, scale=0.1,
    input_layout="BSND", sparse_mode=0)[0]
print("RESULT=" + json.dumps({
    "err": err,
    "portable": (out.float() - portable_out.float()).abs().max().item(),
    "package": (out.float() - package.float()).abs().max().item(),
    "meta": [list(meta.shape), str(meta.dtype)] == [list(out.shape), str(out.dtype)],
}))
""",
        stub_root,
    )
    assert result["err"] < 2e-2, result  # bf16 output of fp32 maths
    assert result["portable"] < 2e-2, result  # the bf16 rounding of the fused output
    assert result["package"] == 0.0, result  # ops/npu.py calls the fused mode on these shapes
    assert result["meta"], result


def test_mla_mode_refuses_what_the_device_refuses(stub_root):
    result = run_npu_code(
        SETUP
        + """
nope, rope = caches()
table = torch.tensor([[3, 1, 5]], dtype=torch.int32)
q, qr = r(1, 1, 32, 512).bfloat16(), r(1, 1, 32, 64).bfloat16()
small_nope, small_rope = caches(latent=256)
print("RESULT=" + json.dumps({
    "heads": refused(lambda: mla(r(1, 1, 16, 512).bfloat16(), r(1, 1, 16, 64).bfloat16(),
                                 nope, rope, table, [30])),
    "kv_heads": refused(lambda: mla(q, qr, nope, rope, table, [30], num_key_value_heads=2)),
    "latent": refused(lambda: mla(r(1, 1, 32, 256).bfloat16(), qr, small_nope, rope, table,
                                  [30])),
    "block": refused(lambda: mla(q, qr, *caches(block=32), table, [30])),
    "no_table": refused(lambda: mla(q, qr, nope, rope, None, [30])),
    "rope_alone": refused(lambda: torch_npu.npu_fused_infer_attention_score(
        q, nope, nope, query_rope=qr, block_table=table, block_size=16,
        actual_seq_lengths_kv=[30], num_heads=32, num_key_value_heads=1,
        input_layout="BSND")),
    "float32": refused(lambda: mla(q.float(), qr.float(), nope.float(), rope.float(), table,
                                   [30])),
}))
""",
        stub_root,
    )
    assert "num_heads 16" in result["heads"], result
    assert "num_key_value_heads must be 1" in result["kv_heads"], result
    assert "D must be 512" in result["latent"], result
    assert "block_size 32" in result["block"], result
    assert "page attention (block_table) is mandatory" in result["no_table"], result
    assert "query_rope and key_rope are given together" in result["rope_alone"], result
    assert result["float32"] and "float32" in result["float32"], result


def test_gating_top_k_equals_the_runtime_router(stub_root):
    """noaux_tc with renormalised weights, as the package calls it: the same experts and
    weights as ascend_runtime's router (which equals transformers', tests/test_runtime_mla.py);
    over many tokens the choice depends on the bias and the groups."""
    result = run_npu_code(
        SETUP
        + """
res = {"ids": True, "err": 0.0, "package": True, "fits": []}
for experts, groups, topk_group, k in ((256, 8, 4, 8), (64, 4, 2, 6), (384, 1, 1, 8)):
    routing = Routing("noaux_tc", k, groups, topk_group, True, 2.5)
    logits, bias = r(96, experts), r(experts) * 0.2
    y, ids, norm = torch_npu.npu_moe_gating_top_k(
        logits, k, bias=bias, k_group=topk_group, group_count=groups, group_select_mode=1,
        renorm=0, norm_type=1, routed_scaling_factor=2.5, eps=1e-20)
    weights, expected = route(logits, bias, routing)
    ours, theirs = ids.long().sort(-1), expected.long().sort(-1)
    res["ids"] &= ids.dtype == torch.int32 and torch.equal(ours.values, theirs.values)
    res["err"] = max(res["err"], (y.gather(1, ours.indices) - weights.gather(1, theirs.indices))
                     .abs().max().item())
    w2, i2 = npu.deepseek_gating(logits, bias, routing)
    res["package"] &= torch.equal(i2, ids) and torch.equal(w2, y)
    res["fits"].append(npu.gating_top_k_fits(routing, experts))
print("RESULT=" + json.dumps(res))
""",
        stub_root,
    )
    assert result["ids"] and result["package"], result
    assert result["err"] < 1e-5, result
    assert result["fits"] == [True, True, True], result


def test_gating_top_k_refuses_what_the_device_refuses(stub_root):
    result = run_npu_code(
        SETUP
        + """
gate = lambda x, k, **kw: torch_npu.npu_moe_gating_top_k(
    x, k, **{"bias": None, "k_group": 1, "group_count": 1, "norm_type": 1, **kw})
small = Routing("noaux_tc", 2, 4, 2, True, 1.0)
print("RESULT=" + json.dumps({
    "group_of_two": refused(lambda: gate(r(4, 8), 2, group_count=4, k_group=2)),
    "experts": refused(lambda: gate(r(4, 4096), 2)),
    "renorm": refused(lambda: gate(r(4, 64), 2, renorm=1)),
    "bias_dtype": refused(lambda: gate(r(4, 64), 2, bias=r(64).bfloat16())),
    "k": refused(lambda: gate(r(4, 64), 40, group_count=4, k_group=2)),
    "fallback": npu.gating_top_k_fits(small, 8),
}))
""",
        stub_root,
    )
    assert "groups of more than 2" in result["group_of_two"], result
    assert "4096 experts > 2048" in result["experts"], result
    assert "renorm 1" in result["renorm"], result
    assert "bias dtype bfloat16" in result["bias_dtype"], result
    assert "k 40 not in 1..32" in result["k"], result
    assert result["fallback"] is False, result  # the package routes these in torch instead
