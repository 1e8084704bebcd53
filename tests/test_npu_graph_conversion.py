"""The GE-conversion tier: every template variant's decode through the real compilers on CPU.

For each variant (dense/MoE x contiguous/paged x qk_norm/attention bias x fused/plain rotary),
a package is rendered and its decode, on the NPU ops, is handed to:

* torchair's FX -> GE conversion with Tensor lengths (torchair's FIA, the ge_graph contract);
* npugraph_ex's FX passes with host-list lengths (torch_npu's FIA, the npugraph_ex contract),

through the runtime's compile seam (``scaffold.npu_emulation.graph_conversion``). The graph
must build, hold the GE op types the variant needs (listed here from the answers, not from
the template), and write each KV cache in place. Then mutations (of a copy of the runtime's
ops/npu.py beside the package) prove the tier: each must fail with a message naming the op.

Runs in the emulation interpreter (ASCEND_SCAFFOLD_NPU_PYTHON); skipped without it, failed
instead where ASCEND_SCAFFOLD_REQUIRE_NPU_EMULATION=1 (CI).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import textwrap
from pathlib import Path

import pytest
from conftest import NPU_PYTHON, require_npu_emulation

REPO = Path(__file__).resolve().parents[1]

SMALL = (
    "--num-hidden-layers 2 --hidden-size 128 --num-attention-heads 2 --num-key-value-heads 1 "
    "--intermediate-size 256 --vocab-size 128 --max-seq-len 256 --dtype bfloat16"
).split()
MOE = "--family moe --num-experts 8 --num-experts-per-tok 2 --moe-intermediate-size 32".split()
VARIANTS = {
    "dense-contiguous-qknorm-ge": [
        *SMALL,
        "--head-dim",
        "64",
        "--qk-norm",
        "--exe-mode",
        "ge_graph",
        "--fa-interface",
        "torchair",
    ],
    "dense-paged-bias-plainrope": [
        *SMALL,
        "--head-dim",
        "96",
        "--attention-bias",
        "--kv-cache",
        "paged",
        "--block-size",
        "128",
    ],
    "moe-contiguous-bias-shared-ge": [
        *SMALL,
        *MOE,
        "--head-dim",
        "64",
        "--attention-bias",
        "--shared-expert-intermediate-size",
        "64",
        "--exe-mode",
        "ge_graph",
        "--fa-interface",
        "torchair",
    ],
    "moe-paged-qknorm": [
        *SMALL,
        *MOE,
        "--head-dim",
        "128",
        "--qk-norm",
        "--kv-cache",
        "paged",
        "--block-size",
        "128",
    ],
}


def expected_ge_ops(variant: str) -> set[str]:
    ops = {"RmsNorm", "FusedInferAttentionScore", "MatMul"}
    ops.add("ScatterNdUpdate" if "paged" in variant else "Scatter")
    if "plainrope" not in variant:
        ops.add("ApplyRotaryPosEmb")
    if variant.startswith("moe"):
        ops |= {
            "MoeGatingTopKSoftmax",
            "MoeInitRoutingV3",
            "GroupedMatmul",
            "SwiGlu",
            "MoeFinalizeRoutingV2",
        }
    return ops


def cache_write(variant: str) -> tuple[str, str]:
    """(the in-place FX op, the GE op) of the variant's KV write."""
    if "paged" in variant:
        return "npu.npu_scatter_nd_update_.default", "ScatterNdUpdate"
    return "npu.scatter_update_.default", "Scatter"


# One subprocess converts every job: (id, src dir, package name); per job the GE op types,
# the npugraph_ex FX targets, what feeds the cache writes, or the conversion error.
DRIVER = """
import importlib, json, sys
from scaffold.npu_emulation import emulation as emu
emu.activate()
import torch
import scaffold.npu_emulation as npu_emulation

JOBS = json.loads(sys.argv[1])
BASE = list(sys.path)  # this checkout (PYTHONPATH) holds ascend_runtime for unmutated jobs
results = {}
for job in JOBS:
    stale = ("conftest", "ascend_runtime", job["pkg"])
    for name in [m for m in sys.modules if m.split(".")[0] in stale]:
        del sys.modules[name]
    sys.path[:] = [job["src"], job["tests"], *BASE]  # a mutant's src holds its own runtime
    importlib.invalidate_caches()
    conftest = importlib.import_module("conftest")
    graph = importlib.import_module("ascend_runtime.graph")
    meta = importlib.import_module("ascend_runtime.metadata")
    out = {}
    for key, tensor_lengths, convert in (("ge", True, npu_emulation.ge_graph),
                                         ("npugraph_ex", False, npu_emulation.npugraph_ex_graph)):
        model = conftest.tiny_model(args=conftest.TINY_NPU, backend="npu", dtype=torch.bfloat16)
        with torch.inference_mode():
            model.prefill(**meta.prefill_inputs(conftest.prompt()).as_kwargs())
        step = meta.decode_inputs(torch.zeros(2, 1, dtype=torch.long), [8, 8], tensor_lengths)
        mode = "ge_graph" if tensor_lengths else "npugraph_ex"
        try:
            g = convert(graph, model, conftest.compile_config(mode, tensor_lengths),
                        step.as_kwargs())
            out[key] = {"ops": list(g.ops), "inputs": [list(i) for i in g.inputs]}
        except npu_emulation.GraphConversionError as exc:
            out[key] = {"error": str(exc)}
    out["layers"] = conftest.TINY_NPU.num_hidden_layers
    results[job["id"]] = out
print("RESULT=" + json.dumps(results))
"""


def convert(jobs: list[dict], strict: bool = True) -> dict:
    """Convert every job in one emulation subprocess. `strict=False` lets the emulated kernels
    record device-limit violations instead of raising, so that a mutant reaches the compiler
    and the compiler's own verdict is what is tested."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = str(REPO)  # this checkout's scaffold.npu_emulation
    env.setdefault("TORCH_DEVICE_BACKEND_AUTOLOAD", "0")
    env["ASCEND_SCAFFOLD_NPU_STRICT"] = "1" if strict else "0"
    env["ASCEND_SCAFFOLD_NPU_PLATFORM"] = "A3"
    proc = subprocess.run(
        [NPU_PYTHON, "-c", textwrap.dedent(DRIVER), json.dumps(jobs)],
        capture_output=True,
        text=True,
        env=env,
        timeout=900,
    )
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT=")]
    assert proc.returncode == 0 and lines, f"rc={proc.returncode}\n{proc.stderr[-5000:]}"
    return json.loads(lines[-1][len("RESULT=") :])


def render(dest: Path, answers: list[str]) -> tuple[Path, str]:
    from typer.testing import CliRunner

    from scaffold.cli import app

    result = CliRunner().invoke(app, ["new", "model", "--defaults", "--yes", *answers, str(dest)])
    assert result.exit_code == 0, result.output
    names = [p.name for p in (dest / "src").iterdir() if (p / "__init__.py").is_file()]
    assert len(names) == 1, names
    return dest, names[0]


def job(job_id: str, dest: Path, pkg: str) -> dict:
    return {"id": job_id, "src": str(dest / "src"), "tests": str(dest / "tests"), "pkg": pkg}


@pytest.fixture(scope="module", autouse=True)
def _needs_emulation():
    require_npu_emulation()


@pytest.fixture(scope="module")
def rendered(tmp_path_factory) -> dict[str, tuple[Path, str]]:
    root = tmp_path_factory.mktemp("variants")
    return {
        v: render(root / v, [*a, "--model-name", v.replace("-", "_")]) for v, a in VARIANTS.items()
    }


@pytest.fixture(scope="module")
def converted(rendered) -> dict:
    return convert([job(v, dest, pkg) for v, (dest, pkg) in rendered.items()])


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_decode_converts_to_a_ge_graph(variant, converted):
    result = converted[variant]["ge"]
    assert "error" not in result, result["error"]
    ops = set(result["ops"])
    assert expected_ge_ops(variant) <= ops, sorted(expected_ge_ops(variant) - ops)
    _, ge_write = cache_write(variant)
    writes = [i for op, i in zip(result["ops"], result["inputs"], strict=True) if op == ge_write]
    # K and V of every layer, each into the cache itself (a graph input), not into a copy
    assert len(writes) == 2 * converted[variant]["layers"], writes
    assert all(w[0] == "Data" for w in writes), writes


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_npugraph_ex_passes_write_the_caches_in_place(variant, converted):
    result = converted[variant]["npugraph_ex"]
    assert "error" not in result, result["error"]
    fx_write, _ = cache_write(variant)
    counts = {op: result["ops"].count(op) for op in set(result["ops"])}
    assert counts.get(fx_write) == 2 * converted[variant]["layers"], counts
    assert fx_write.replace("_.default", ".default") not in counts, counts  # no functional copy
    assert "npu.npu_fused_infer_attention_score.out" in counts, counts  # workspace pass ran


# --------------------------------------------------------------------------------------------
# mutations: each fails the tier, naming the op
# --------------------------------------------------------------------------------------------

MUTATIONS = {
    # the defect this tier was built for: MoeInitRoutingV3 refuses a range left to GE's None
    "moe-no-active-expert-range": (
        "moe-paged-qknorm",
        "        active_expert_range=[0, num_experts],\n",
        "",
        "ge",
        "npu.npu_moe_init_routing_v2.default failed: TypeError: must assign iterable",
    ),
    # a dense converter-level mismatch: the KV write as transformers' StaticCache writes it;
    # aten.index_copy has no GE converter (ge_converter/aten/index_copy.py raises)
    "dense-index-copy-cache-write": (
        "dense-contiguous-qknorm-ge",
        "    torch_npu.scatter_update_(cache, kv_len, update, -2)",
        "    cache.index_copy_(2, kv_len[:1], update)",
        "ge",
        "the converter of aten.index_copy.default failed",
    ),
}


@pytest.fixture(scope="module")
def mutated(rendered, tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("mutants")
    jobs = []
    for mutation, (variant, old, new, _, _) in MUTATIONS.items():
        dest, pkg = rendered[variant]
        copy = root / mutation
        ignore = shutil.ignore_patterns("__pycache__")
        shutil.copytree(dest, copy, ignore=ignore)
        shutil.copytree(REPO / "ascend_runtime", copy / "src" / "ascend_runtime", ignore=ignore)
        npu = copy / "src" / "ascend_runtime" / "ops" / "npu.py"
        text = npu.read_text()
        assert text.count(old) == 1, f"{mutation}: mutation target missing in ops/npu.py"
        npu.write_text(text.replace(old, new))
        jobs.append(job(mutation, copy, pkg))
    # the strict emulated kernels refuse the first mutant on their own (an empty range); here
    # the compilers must refuse both
    return convert(jobs, strict=False)


@pytest.mark.parametrize("mutation", sorted(MUTATIONS))
def test_mutation_fails_the_tier_naming_the_op(mutation, mutated):
    _, _, _, compiler, message = MUTATIONS[mutation]
    result = mutated[mutation][compiler]
    assert "error" in result, f"{mutation} converted: {sorted(set(result['ops']))}"
    assert message in result["error"], result["error"]
