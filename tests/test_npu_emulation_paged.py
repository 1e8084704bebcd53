"""NPU emulation of the paged KV cache a generated package uses (kv_cache=paged): the write
``torch_npu.npu_scatter_nd_update_(cache.view(-1, KV_N, D), slot_mapping.view(-1, 1),
new.reshape(-1, KV_N, D))`` into caches ``(num_blocks, block_size, KV_N * D)`` (slot = block id *
block_size + offset), and the decode read through ``npu_fused_infer_attention_score`` (torch_npu,
List[int] lengths) / torchair's ``air::`` variant (Tensor lengths, inside a graph only) with
``block_table`` (int32 ``[B, max_blocks_per_seq]``), ``block_size`` and per-row
``actual_seq_lengths_kv`` (cann-recipes-infer's layout, block 0 the reserved null block).

Like tests/test_npu_emulation_moe.py: every check runs in a subprocess of the emulation
interpreter (ASCEND_SCAFFOLD_NPU_PYTHON, torch-npu==2.13.0); skipped without it, failed instead
where ASCEND_SCAFFOLD_REQUIRE_NPU_EMULATION=1 (CI).
"""

from __future__ import annotations

import textwrap

import pytest
from conftest import require_npu_emulation, run_npu_code


@pytest.fixture(scope="module", autouse=True)
def _needs_emulation():
    require_npu_emulation()


def run_npu(code: str, stub_root: str, *args: str, env_extra: dict | None = None) -> dict:
    """``code`` after the package's calls (PAGED), on A3, in the emulation interpreter."""
    env = {"ASCEND_SCAFFOLD_NPU_PLATFORM": "A3", **(env_extra or {})}
    return run_npu_code(PAGED + textwrap.dedent(code), stub_root, *args, env_extra=env)


# The package's calls (write and decode read), and a block pool as cann-recipes-infer's:
# block 0 the null block (never read: NaN here), the rows' blocks drawn from a shuffled free
# list so that blocks of different rows interleave, table rows padded with the null block.
PAGED = """
emu.activate()  # before `import torch`
import math
import torch
import torch.nn.functional as F
import torch_npu, torchair

def write(cache, slots, new):
    kv_heads, head_dim = new.shape[-2], new.shape[-1]
    torch_npu.npu_scatter_nd_update_(
        cache.view(-1, kv_heads, head_dim), slots.view(-1, 1), new.reshape(-1, kv_heads, head_dim))

def attend(q, k_cache, v_cache, block_table, lens, block_size, n, nkv, layout="BSH", air=False):
    fia = torchair.ops.npu_fused_infer_attention_score if air else (
        torch_npu.npu_fused_infer_attention_score)
    return fia(q, k_cache, v_cache, block_table=block_table, block_size=block_size,
               actual_seq_lengths_kv=lens, num_heads=n, num_key_value_heads=nkv,
               scale=1 / math.sqrt(q.shape[-1] if layout != "BSH" else k_cache.shape[-1] // nkv),
               input_layout=layout, sparse_mode=0)[0]

class Pool:
    def __init__(self, gen, batch, max_blocks, num_blocks, block_size, nkv, d, dt):
        self.bs, self.nkv, self.d = block_size, nkv, d
        self.free = (torch.randperm(num_blocks - 1, generator=gen) + 1).tolist()
        self.table = torch.zeros(batch, max_blocks, dtype=torch.int32)  # null block 0
        self.used = [0] * batch
        self.k = torch.zeros(num_blocks, block_size, nkv * d, dtype=dt)
        self.v = torch.zeros(num_blocks, block_size, nkv * d, dtype=dt)
        self.k[0] = float("nan"); self.v[0] = float("nan")

    def slots(self, row, positions):
        # prepare_slot_mapping: block_table[row][pos // bs] * bs + pos % bs, new blocks on demand
        for p in positions:
            while p // self.bs >= self.used[row]:
                self.table[row, self.used[row]] = self.free.pop()
                self.used[row] += 1
        pos = torch.tensor(positions, dtype=torch.long)
        return self.table[row].long()[pos // self.bs] * self.bs + pos % self.bs

def contiguous(rows, dt):
    # rows[b]: (len_b, KV_N, D) -> BNSD (B, KV_N, max_len, D), zeros past len_b
    longest = max(r.shape[0] for r in rows)
    out = torch.zeros(len(rows), rows[0].shape[1], longest, rows[0].shape[2], dtype=dt)
    for b, r in enumerate(rows):
        out[b, :, : r.shape[0]] = r.transpose(0, 1)
    return out

def sdpa64(q_bnsd, ks, vs, scale):
    # independent reference: float64 softmax attention per row, GQA by repeat_interleave
    outs = []
    for b, (k, v) in enumerate(zip(ks, vs)):
        g = q_bnsd.shape[1] // k.shape[1]
        kk = k.double().transpose(0, 1).repeat_interleave(g, 0)
        vv = v.double().transpose(0, 1).repeat_interleave(g, 0)
        p = torch.softmax(q_bnsd[b].double() @ kk.transpose(-1, -2) * scale, -1)
        outs.append(p @ vv)
    return torch.stack(outs)

def layout_q(q_bnsd, layout):
    if layout == "BNSD":
        return q_bnsd.contiguous()
    q = q_bnsd.transpose(1, 2).contiguous()
    return q if layout == "BSND" else q.reshape(q.shape[0], q.shape[1], -1)

def to_bnsd(o, layout, n):
    if layout == "BNSD":
        return o
    if layout == "BSH":
        o = o.reshape(o.shape[0], o.shape[1], n, -1)
    return o.transpose(1, 2)
"""


EQUALS_CONTIGUOUS = """
dtypes = [getattr(torch, name) for name in sys.argv[1].split(",")]
gen = torch.Generator().manual_seed(1234)
B, N, NKV, D, BS = 3, 8, 2, 64, 128
lens = [5, 130, 257]  # 1, 2 and 3 blocks of 128
res = {"errors": {}, "sdpa": {}, "air": {}, "meta_shapes": True, "finite": True,
       "table_interleaved": False, "null_block_padding": False}
for dt in dtypes:
    pool = Pool(gen, B, 4, 12, BS, NKV, D, dt)
    ks = [torch.randn(L, NKV, D, generator=gen).to(dt) for L in lens]
    vs = [torch.randn(L, NKV, D, generator=gen).to(dt) for L in lens]
    for part in (0, 1):  # two chunks per row, the rows taking turns: their blocks interleave
        for b in range(B):
            lo, hi = (0, lens[b] // 2) if part == 0 else (lens[b] // 2, lens[b])
            if hi > lo:
                s = pool.slots(b, list(range(lo, hi)))
                write(pool.k, s, ks[b][lo:hi]); write(pool.v, s, vs[b][lo:hi])
    ids = [i for b in range(B) for i in pool.table[b, : pool.used[b]].tolist()]
    res["table_interleaved"] |= ids != sorted(ids) and 0 not in ids
    res["null_block_padding"] |= bool((pool.table[0, 1:] == 0).all())
    q_bnsd = torch.randn(B, N, 1, D, generator=gen).to(dt)
    kc, vc = contiguous(ks, dt), contiguous(vs, dt)
    kw = dict(num_heads=N, num_key_value_heads=NKV, scale=1 / math.sqrt(D), sparse_mode=0)
    ref = torch_npu.npu_fused_infer_attention_score(  # the contiguous path, same K/V
        q_bnsd, kc, vc, actual_seq_lengths_kv=lens, input_layout="BNSD", **kw)[0]
    want = sdpa64(q_bnsd, ks, vs, 1 / math.sqrt(D))
    split = lambda c: c.view(c.shape[0], BS, NKV, D).transpose(1, 2).contiguous()  # (nb,N,bs,D)
    errs, serrs, aerrs = [], [], []
    for layout, kv in (("BSH", "3d"), ("BSND", "3d"), ("BNSD", "3d"), ("BNSD", "4d")):
        k_cache = pool.k if kv == "3d" else split(pool.k)
        v_cache = pool.v if kv == "3d" else split(pool.v)
        q = layout_q(q_bnsd, layout)
        o = attend(q, k_cache, v_cache, pool.table, lens, BS, N, NKV, layout)
        res["finite"] &= bool(torch.isfinite(o.float()).all())  # the NaN null block unread
        res["meta_shapes"] &= o.shape == q.shape and o.dtype == dt
        meta = torch.ops.npu.npu_fused_infer_attention_score(
            q.to("meta"), k_cache.to("meta"), v_cache.to("meta"),
            block_table=pool.table.to("meta"), block_size=BS, actual_seq_lengths_kv=lens,
            input_layout=layout, **kw)[0]
        res["meta_shapes"] &= meta.shape == o.shape and meta.dtype == o.dtype
        got = to_bnsd(o, layout, N).float()
        errs.append((got - ref.float()).abs().max().item())
        serrs.append((got.double() - want).abs().max().item())
        # torchair's op (Tensor lengths) inside a graph: aot_eager, the CPU stand-in for GE
        air = torch.compile(lambda *a: attend(*a, BS, N, NKV, layout, air=True),
                            backend="aot_eager", fullgraph=True, dynamic=False)
        oa = air(q, k_cache, v_cache, pool.table, torch.tensor(lens))
        aerrs.append((oa.float() - o.float()).abs().max().item())
    # softmax_lse of the paged read equals the contiguous one
    lse_p = torch_npu.npu_fused_infer_attention_score(
        q_bnsd, pool.k, pool.v, block_table=pool.table, block_size=BS, actual_seq_lengths_kv=lens,
        input_layout="BNSD", softmax_lse_flag=True, **kw)[1]
    lse_c = torch_npu.npu_fused_infer_attention_score(
        q_bnsd, kc, vc, actual_seq_lengths_kv=lens, input_layout="BNSD", softmax_lse_flag=True,
        **kw)[1]
    errs.append((lse_p - lse_c).abs().max().item())
    res["errors"][str(dt)], res["sdpa"][str(dt)], res["air"][str(dt)] = (
        max(errs), max(serrs), max(aerrs))
res["violations"] = list(emu.CONSTRAINT_VIOLATIONS)
print("RESULT=" + json.dumps(res))
"""


def _check_equal(r: dict, dtypes: dict[str, tuple[float, float]]) -> None:
    assert r["finite"], "the paged read touched the NaN null block"
    assert r["meta_shapes"], "the CPU kernel's output differs from the wheel's Meta kernel"
    assert r["table_interleaved"] and r["null_block_padding"], r
    for dt, (tol_fia, tol_sdpa) in dtypes.items():
        assert r["errors"][dt] <= tol_fia, (dt, r["errors"])
        assert r["sdpa"][dt] <= tol_sdpa, (dt, r["sdpa"])
        assert r["air"][dt] == 0.0, (dt, r["air"])


def test_paged_decode_equals_contiguous_fia(stub_root):
    """B=3, lengths 5 / 130 / 257 over block_size 128 (1, 2, 3 blocks, interleaved, padded with
    the NaN null block), GQA 8/2, D 64; query layouts BSH, BSND, BNSD with (blocknum, blocksize,
    H) caches and BNSD with (blocknum, KV_N, blocksize, D); torch_npu and torchair (compiled).
    Tolerances: against the contiguous FIA on the same K/V, the same fp32 maths over another
    (zero-padded) KV length: bfloat16 4e-3 (one bf16 rounding of |out| < 1), float16 1e-3; the
    lse 1e-5 (both within the max). Against float64 attention on the same (rounded) inputs:
    bfloat16 1e-2, float16 2e-3 (the output rounding). torchair's op: identical."""
    r = run_npu(EQUALS_CONTIGUOUS, stub_root, "bfloat16,float16")
    _check_equal(r, {"torch.bfloat16": (4e-3, 1e-2), "torch.float16": (1e-3, 2e-3)})
    assert r["violations"] == [], r["violations"]


def test_paged_decode_equals_contiguous_fia_float32(stub_root):
    """float32 (a CPU override: the device's FIA refuses it, so strict is off and the dtype
    violation only recorded): paged and contiguous agree to 1e-5, float64 attention to 1e-5."""
    r = run_npu(
        EQUALS_CONTIGUOUS,
        stub_root,
        "float32",
        env_extra={"ASCEND_SCAFFOLD_NPU_STRICT": "0"},
    )
    _check_equal(r, {"torch.float32": (1e-5, 1e-5)})
    assert r["violations"], "float32 must be recorded as a violation"
    assert all(" dtype float32 " in v for v in r["violations"]), r["violations"]


DECODE = """
from torch._dynamo.utils import counters
air = sys.argv[1] == "air"
gen = torch.Generator().manual_seed(7)
B, N, NKV, D, BS, STEPS = 3, 8, 2, 64, 128, 8
DT = torch.bfloat16
start = [124, 252, 3]  # rows 0 and 1 cross a block boundary (128, 256) during the steps
layout = "BSND" if air else "BSH"

def step(q, k_new, v_new, k_cache, v_cache, slots, block_table, lens):
    write(k_cache, slots, k_new)
    write(v_cache, slots, v_new)
    return attend(q, k_cache, v_cache, block_table, lens, BS, N, NKV, layout, air=air)

ks0 = [torch.randn(L, NKV, D, generator=gen).to(DT) for L in start]
vs0 = [torch.randn(L, NKV, D, generator=gen).to(DT) for L in start]
qs = [torch.randn(B, N, 1, D, generator=gen).to(DT) for _ in range(STEPS)]
news = [(torch.randn(B, 1, NKV, D, generator=gen).to(DT),
         torch.randn(B, 1, NKV, D, generator=gen).to(DT)) for _ in range(STEPS)]

def run(fn):
    g = torch.Generator().manual_seed(99)  # same block assignment in every run
    pool = Pool(g, B, 4, 16, BS, NKV, D, DT)
    for b, L in enumerate(start):  # prefill (eager, as a package does)
        s = pool.slots(b, list(range(L)))
        write(pool.k, s, ks0[b]); write(pool.v, s, vs0[b])
    ks, vs = [k.clone() for k in ks0], [v.clone() for v in vs0]
    outs, errs = [], []
    for t in range(STEPS):
        pos = [L + t for L in start]
        slots = torch.cat([pool.slots(b, [p]) for b, p in enumerate(pos)])
        slots = slots.to(torch.int32) if air else slots  # int32 and int64 indices
        lens = [p + 1 for p in pos]
        k_new, v_new = news[t]
        o = fn(layout_q(qs[t], layout), k_new, v_new, pool.k, pool.v, slots, pool.table,
               torch.tensor(lens) if air else lens)
        outs.append(o)
        for b in range(B):
            ks[b] = torch.cat([ks[b], k_new[b]]); vs[b] = torch.cat([vs[b], v_new[b]])
        ref = torch_npu.npu_fused_infer_attention_score(
            qs[t], contiguous(ks, DT), contiguous(vs, DT), actual_seq_lengths_kv=lens,
            num_heads=N, num_key_value_heads=NKV, scale=1 / math.sqrt(D), input_layout="BNSD",
            sparse_mode=0)[0]
        errs.append((to_bnsd(o, layout, N).float() - ref.float()).abs().max().item())
    return torch.stack(outs), pool, max(errs)

res = {"error": None}
if not air:
    eager, pool_e, res["eager_vs_contiguous"] = run(step)
torch._dynamo.reset(); counters.clear()
compiled = torch.compile(step, backend="aot_eager", fullgraph=True, dynamic=not air)
try:
    got, pool_c, res["compiled_vs_contiguous"] = run(compiled)
    if not air:
        res["max_diff"] = (got.float() - eager.float()).abs().max().item()
        res["cache_equal"] = torch.equal(pool_c.k.nan_to_num(), pool_e.k.nan_to_num()) and (
            torch.equal(pool_c.v.nan_to_num(), pool_e.v.nan_to_num()))
    res["blocks_per_row"] = pool_c.used
except Exception as exc:
    res["error"] = type(exc).__name__ + ": " + str(exc).splitlines()[0]
res["graphs"] = counters["stats"]["unique_graphs"]
res["breaks"] = sum(counters["graph_break"].values())
print("RESULT=" + json.dumps(res))
"""


def test_paged_decode_compiles_once_across_block_boundaries(stub_root):
    """torch_npu's op, List[int] lengths, dynamic=True: 8 decode steps (write + read), rows
    growing from 124 / 252 / 3 tokens over block_size 128 (new blocks taken mid-run): one
    graph, no breaks, output and caches identical to eager; each step within one bf16
    rounding (4e-3) of the contiguous FIA on the same K/V."""
    r = run_npu(DECODE, stub_root, "torch_npu")
    assert r["error"] is None, r
    assert r["graphs"] == 1 and r["breaks"] == 0, r
    assert r["max_diff"] == 0.0 and r["cache_equal"], r
    assert r["blocks_per_row"] == [2, 3, 1], r
    assert r["eager_vs_contiguous"] <= 4e-3 and r["compiled_vs_contiguous"] <= 4e-3, r


def test_paged_decode_air_op_in_a_static_graph(stub_root):
    """torchair's op (Tensor lengths, the ge_graph decode: dynamic=False, int32 slots): one
    graph over the same 8 steps, each within 4e-3 of the contiguous FIA."""
    r = run_npu(DECODE, stub_root, "air")
    assert r["error"] is None, r
    assert r["graphs"] == 1 and r["breaks"] == 0, r
    assert r["blocks_per_row"] == [2, 3, 1], r
    assert r["compiled_vs_contiguous"] <= 4e-3, r


STRICT = """
out = {}

def attempt(name, fn):
    try:
        fn()
        out[name] = None
    except Exception as exc:
        out[name] = type(exc).__name__ + ": " + str(exc)

gen = torch.Generator().manual_seed(3)
B, N, NKV, D, BS = 2, 4, 2, 64, 128
DT = torch.bfloat16
pool = Pool(gen, B, 2, 6, BS, NKV, D, DT)
lens = [3, 130]
for b, L in enumerate(lens):
    s = pool.slots(b, list(range(L)))
    write(pool.k, s, torch.randn(L, NKV, D, generator=gen).to(DT))
    write(pool.v, s, torch.randn(L, NKV, D, generator=gen).to(DT))
q = torch.randn(B, 1, N * D, generator=gen).to(DT)
new = torch.randn(1, NKV, D).to(DT)
kw = dict(num_heads=N, num_key_value_heads=NKV, scale=0.125, input_layout="BSH", sparse_mode=0)
fia = torch_npu.npu_fused_infer_attention_score
read = lambda **o: fia(q, pool.k, pool.v, **{**dict(block_table=pool.table, block_size=BS,
                                                      actual_seq_lengths_kv=lens), **kw, **o})
nslots = pool.k.shape[0] * BS
attempt("ok", lambda: read())
attempt("ok_write", lambda: write(pool.k, torch.tensor([nslots - 1]), new))
attempt("slot_out_of_range", lambda: write(pool.k, torch.tensor([nslots]), new))
attempt("slot_negative", lambda: write(pool.k, torch.tensor([-1], dtype=torch.int32), new))
attempt("slots_1d", lambda: torch_npu.npu_scatter_nd_update_(
    pool.k.view(-1, NKV, D), torch.tensor([5]), new))
attempt("slots_float", lambda: write(pool.k, torch.tensor([5.0]), new))
attempt("cache_int32", lambda: write(torch.zeros(4, BS, NKV * D, dtype=torch.int32),
                                     torch.tensor([5]), new.to(torch.int32)))
attempt("update_dtype", lambda: write(pool.k, torch.tensor([5]), new.float()))
attempt("table_int64", lambda: read(block_table=pool.table.long()))
attempt("block_size_100", lambda: read(block_size=100))
attempt("block_size_1024", lambda: read(block_size=1024))
attempt("block_size_0", lambda: read(block_size=0))
attempt("no_lengths", lambda: read(actual_seq_lengths_kv=None))
attempt("table_narrow", lambda: read(block_table=pool.table[:, :1].contiguous()))
attempt("table_rows", lambda: read(block_table=pool.table[:1].contiguous()))
bad = pool.table.clone(); bad[0, 1] = pool.k.shape[0]
attempt("block_id", lambda: read(block_table=bad))
neg = pool.table.clone(); neg[0, 1] = -1
attempt("block_id_negative", lambda: read(block_table=neg))
split = lambda c: c.view(c.shape[0], BS, NKV, D).transpose(1, 2).contiguous()
attempt("split_cache_bsh", lambda: fia(q, split(pool.k), split(pool.v), block_table=pool.table,
                                       block_size=BS, actual_seq_lengths_kv=lens, **kw))
wide = torch.zeros(1, 16, 65536, dtype=DT)
attempt("kv_hidden", lambda: fia(torch.zeros(1, 1, 65536, dtype=DT), wide, wide,
                                 block_table=torch.zeros(1, 1, dtype=torch.int32), block_size=16,
                                 actual_seq_lengths_kv=[16], num_heads=256,
                                 num_key_value_heads=256, input_layout="BSH"))
qp = torch.randn(B, 4, N * D).to(DT)
attempt("prefill_block_size_64", lambda: fia(
    qp, pool.k.view(-1, 64, NKV * D), pool.v.view(-1, 64, NKV * D),
    block_table=torch.zeros(B, 4, dtype=torch.int32), block_size=64,
    actual_seq_lengths=[4, 4], actual_seq_lengths_kv=[4, 4], **kw))
def air_eager():
    torchair.ops.npu_fused_infer_attention_score(
        q, pool.k, pool.v, block_table=pool.table, block_size=BS,
        actual_seq_lengths_kv=torch.tensor(lens), **kw)
attempt("air_eager", air_eager)
out["violations"] = list(emu.CONSTRAINT_VIOLATIONS)
print("RESULT=" + json.dumps(out))
"""

STRICT_EXPECTED = {
    "slot_out_of_range": "npu_scatter_nd_update: indices row 0 = [768] is out of range for "
    "input's leading dims (768,)",
    "slot_negative": "npu_scatter_nd_update: indices row 0 = [-1] is out of range",
    "slots_1d": "npu_scatter_nd_update: indices is 1-D (shape (1,)); it must be at least 2-D",
    "slots_float": "npu_scatter_nd_update: indices dtype float32 (int32/int64 only)",
    "cache_int32": "npu_scatter_nd_update: input dtype int32 (float32/float16/bool/bfloat16/"
    "int64/int8 only)",
    "update_dtype": "npu_scatter_nd_update: updates dtype float32 differs from input dtype "
    "bfloat16",
    "table_int64": "npu_fused_infer_attention_score: block_table dtype int64 (int32 only)",
    "block_size_100": "block_size 100 must be a multiple of 16 with bfloat16 KV (Q_S = 1",
    "block_size_1024": "block_size 1024 with block_table (page attention needs 0 < block_size "
    "<= 512)",
    "block_size_0": "block_size 0 with block_table",
    "no_lengths": "page attention (block_table given) needs actual_seq_lengths_kv",
    "table_narrow": "block_table has 1 blocks per row; actual_seq_lengths_kv 130 needs 2",
    "table_rows": "block_table shape (1, 2) must be 2-D [B=2, max_blocks_per_seq]",
    "block_id": "block_table[0, 1] = 6 is not a block id in 0..5",
    "block_id_negative": "block_table[0, 1] = -1 is not a block id in 0..5",
    "split_cache_bsh": "a (blocknum, KV_N, blocksize, D) cache needs query input_layout "
    "BNSD/TND; BSH takes (blocknum, blocksize, H) only",
    "kv_hidden": "KV_N*D = 65536 > 65535 with the (blocknum, blocksize, H) cache layout",
    "prefill_block_size_64": "block_size 64 with Q_S > 1 must be a multiple of 128 in 128..512",
}


def test_strict_refuses_what_the_device_refuses(stub_root):
    r = run_npu(STRICT, stub_root)
    assert r["ok"] is None and r["ok_write"] is None, (r["ok"], r["ok_write"])
    for key, fragment in STRICT_EXPECTED.items():
        assert r[key] and r[key].startswith("DeviceConstraintError: [npu emulation, A3] "), (
            key,
            r[key],
        )
        assert fragment in r[key], (key, r[key])
    assert r["air_eager"].startswith("NotImplementedError"), r["air_eager"]
    assert "runs only inside a GE graph" in r["air_eager"], r["air_eager"]


NON_STRICT = """
gen = torch.Generator().manual_seed(5)
cache = torch.zeros(3, 16, 4 * 8)
new = torch.randn(3, 4, 8)
before = cache.clone()
functional = torch_npu.npu_scatter_nd_update(
    cache.view(-1, 4, 8), torch.tensor([[2], [48], [47]]), new)  # slot 48 is past 3 * 16
res = {
    "untouched": torch.equal(cache, before),
    "written": torch.equal(functional[2], new[0]) and torch.equal(functional[47], new[2]),
    "rest_zero": bool((functional.view(-1)[functional.view(-1) != 0].numel()
                       == 2 * 4 * 8)),
    "violations": list(emu.CONSTRAINT_VIOLATIONS),
}
print("RESULT=" + json.dumps(res))
"""


def test_strict_opt_out_records_and_skips_out_of_range_slots(stub_root):
    """npu_scatter_nd_update (functional: the input untouched) with ASCEND_SCAFFOLD_NPU_STRICT=0:
    the out-of-range slot is recorded and skipped, the others are written."""
    r = run_npu(NON_STRICT, stub_root, env_extra={"ASCEND_SCAFFOLD_NPU_STRICT": "0"})
    assert r["untouched"] and r["written"] and r["rest_zero"], r
    assert len(r["violations"]) == 1, r["violations"]
    want = "[A3] npu_scatter_nd_update: indices row 1 = [48] is out of range"
    assert want in r["violations"][0], r["violations"]
