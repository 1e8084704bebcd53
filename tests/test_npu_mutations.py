"""Mutation suite for the NPU emulation: each check proves itself by a mutation it catches.

A package is rendered once (``new model --defaults``; or ``$ASCEND_SCAFFOLD_MUTATION_PACKAGE``,
an already rendered package to test instead), copied once per mutation with this checkout's
ascend_runtime beside it, and each copy gets one small deterministic text change (in the
runtime's NPU ops, compile seam or step inputs) a device run would reject. The checks run
batched in the emulation interpreter (``ASCEND_SCAFFOLD_NPU_PYTHON``): one subprocess runs the
static checks (``check_npu_calls``, ``check_compile_seam``: import only) over every copy, one
the runtime mutations (a tiny bf16 / head_dim 64 model: eager prefill, then decode compiled as
npugraph_ex and as ge_graph under aot_eager, against the portable ops). Every mutant must fail
with a message naming its problem; the unmutated control must pass both.

Skipped without ASCEND_SCAFFOLD_NPU_PYTHON; a failure instead where
ASCEND_SCAFFOLD_REQUIRE_NPU_EMULATION=1 (CI).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import NPU_PYTHON, require_npu_emulation

REPO = Path(__file__).resolve().parents[1]
PACKAGE_ENV = "ASCEND_SCAFFOLD_MUTATION_PACKAGE"


@pytest.fixture(scope="module", autouse=True)
def _needs_emulation():
    require_npu_emulation()


# --------------------------------------------------------------------------------------------
# mutations
# --------------------------------------------------------------------------------------------


def replace_once(old: str, new: str) -> Callable[[str], str]:
    def apply(text: str) -> str:
        assert text.count(old) == 1, f"mutation target {old!r} found {text.count(old)} times"
        return text.replace(old, new)

    return apply


def regex_once(pattern: str, new: str) -> Callable[[str], str]:
    def apply(text: str) -> str:
        out, n = re.subn(pattern, new, text, count=1, flags=re.DOTALL)
        assert n == 1, f"mutation target /{pattern}/ not found"
        return out

    return apply


def uncontiguous_rotary(text: str) -> str:
    """Drop the .contiguous() that ops/npu.py gives the fused rotary's inputs."""
    start = text.index("def apply_rotary(")
    end = text.find("\ndef ", start + 1)
    end = len(text) if end == -1 else end
    body = text[start:end]
    assert "npu_apply_rotary_pos_emb" in body, "the package does not use the fused rotary"
    assert ".contiguous()" in body, (
        "mutation target missing: the fused apply_rotary passes no contiguous q/k "
        "(the op writes into its inputs and returns them, see docs/npu-emulation.md)"
    )
    return text[:start] + body.replace(".contiguous()", "") + text[end:]


@dataclass(frozen=True)
class Mutation:
    id: str
    what: str
    path: str  # inside src/ of the copy: the package and ascend_runtime/ beside it
    apply: Callable[[str], str]
    kind: str  # "static" (schema / compile-seam check) or "runtime" (forward pass)
    expect: tuple[str, ...]  # fragments the failure message must contain


MUTATIONS = [
    Mutation(
        "a-aliased-keyword",
        "an attention keyword changed in the call through the local alias `fia`",
        "ascend_runtime/ops/npu.py",
        replace_once(
            "actual_seq_lengths=actual_seq_lengths_q", "actual_seq_qlen=actual_seq_lengths_q"
        ),
        "static",
        (
            "fia (= torch_npu.npu_fused_infer_attention_score): unknown keyword 'actual_seq_qlen'",
            "fia (= torchair.ops.npu_fused_infer_attention_score): unknown keyword "
            "'actual_seq_qlen'",
        ),
    ),
    Mutation(
        "b-npugraph-ex-option",
        "an npugraph_ex option key misspelt",
        "ascend_runtime/graph.py",
        replace_once('"input_inplace_pass": True', '"input_inplace_passes": True'),
        "static",
        (
            "NPUGRAPH_EX_OPTIONS: npugraph_ex option 'input_inplace_passes'=True: ValueError: "
            "Invalid option 'input_inplace_passes'",
            "npugraph_ex: npugraph_ex option 'input_inplace_passes'",
        ),
    ),
    Mutation(
        "c-compiler-config-attribute",
        "a torchair CompilerConfig attribute misspelt",
        "ascend_runtime/graph.py",
        replace_once(".tiling_schedule_optimize = True", ".tiling_schedule_optimise = True"),
        "static",
        ("ge_graph: compile_decode raised ValueError", "no option tiling_schedule_optimise"),
    ),
    Mutation(
        "d-torchair-cache-compile-keyword",
        "torchair.inference.cache_compile: cache_dir= misspelt cache_path=",
        "ascend_runtime/graph.py",
        regex_once(r"(torchair\.inference\.cache_compile\([^)]*?)cache_dir=", r"\1cache_path="),
        "static",
        ("ge_graph+cache_compile: torchair.inference.cache_compile(..., cache_path=...)",),
    ),
    Mutation(
        "d-npugraph-ex-cache-compile-keyword",
        "torch.npu.npugraph_ex.inference.cache_compile: cache_dir= misspelt cache_path=",
        "ascend_runtime/graph.py",
        regex_once(r"(npugraph_ex\.inference\.cache_compile\([^)]*?)cache_dir=", r"\1cache_path="),
        "static",
        ("npugraph_ex+cache_compile: npugraph_ex.inference.cache_compile(..., cache_path=...)",),
    ),
    Mutation(
        "e-layout-value",
        'input_layout="BNSD" -> "BNDS" (a value the device does not take)',
        "ascend_runtime/ops/npu.py",
        replace_once('input_layout="BNSD"', 'input_layout="BNDS"'),
        "static",
        ("argument 'input_layout'='BNDS' is not accepted on A3",),
    ),
    Mutation(
        "e-layout-value-at-run-time",
        "the same, seen by the CPU kernel",
        "ascend_runtime/ops/npu.py",
        replace_once('input_layout="BNSD"', 'input_layout="BNDS"'),
        "runtime",
        ("prefill: DeviceConstraintError", "input_layout 'BNDS' is not accepted"),
    ),
    Mutation(
        "f-non-contiguous-attention-input",
        "the .contiguous() on the attention query removed (BNSD is a transposed view)",
        "ascend_runtime/ops/npu.py",
        replace_once("query.contiguous(),", "query,"),
        "runtime",
        ("prefill: DeviceConstraintError", "query is not contiguous", "strides"),
    ),
    Mutation(
        "g-rotary-fresh-tensors",
        "the fused rotary relied on to return new tensors (its inputs left strided views)",
        "ascend_runtime/ops/npu.py",
        uncontiguous_rotary,
        "runtime",
        (
            "decode npugraph_ex: DeviceConstraintError",
            "npu_apply_rotary_pos_emb: query is a strided view",
            "the op writes into it and returns it",
        ),
    ),
    Mutation(
        "h-torchair-attention-eager",
        "prefill given Tensor lengths: torchair's attention called outside a GE graph",
        "ascend_runtime/metadata.py",
        regex_once(
            r"actual_seq_lengths_q=\[seq_len\] \* bsz,(\s*)"
            r"actual_seq_lengths_kv=\[seq_len\] \* bsz,",
            r"actual_seq_lengths_q=torch.tensor([seq_len] * bsz, device=device),\1"
            r"actual_seq_lengths_kv=torch.tensor([seq_len] * bsz, device=device),",
        ),
        "runtime",
        (
            "prefill: NotImplementedError",
            "torchair.ops.npu_fused_infer_attention_score (air::) runs only inside a GE graph",
        ),
    ),
]
CONTROL = "control"


# --------------------------------------------------------------------------------------------
# drivers (run in the emulation interpreter)
# --------------------------------------------------------------------------------------------

PRELUDE = """
import importlib, json, sys, traceback
from pathlib import Path
from scaffold.npu_emulation import emulation
emulation.activate()
import torch

PKG, JOBS = sys.argv[1], json.loads(sys.argv[2])


def use(src):
    for name in [m for m in sys.modules if m.split(".")[0] in (PKG, "ascend_runtime")]:
        del sys.modules[name]
    sys.path[:] = [src] + [p for p in sys.path if p not in SRCS]
    importlib.invalidate_caches()
    return importlib.import_module(PKG)


def first_line(exc):
    lines = str(exc).strip().splitlines()
    return type(exc).__name__ + ": " + (lines[0] if lines else "")


SRCS = [job["src"] for job in JOBS]
results = {}
"""

STATIC = """
from scaffold.npu_emulation import check_compile_seam, check_npu_calls
for job in JOBS:
    use(job["src"])
    try:
        schema = check_npu_calls(sorted(Path(job["src"]).rglob("*.py")))
        seam = check_compile_seam(importlib.import_module("ascend_runtime.graph"))
        results[job["id"]] = {"problems": schema + seam}
    except Exception as exc:
        results[job["id"]] = {"problems": ["driver: " + first_line(exc)],
                              "trace": traceback.format_exc()[-3000:]}
print("RESULT=" + json.dumps(results))
"""

RUNTIME = """
import dataclasses
torch.manual_seed(0)
TOKENS = torch.randint(0, 128, (2, 8), generator=torch.Generator().manual_seed(1))
STEPS = torch.randint(0, 128, (3, 2), generator=torch.Generator().manual_seed(2))
TOL = 2e-2  # bf16 against the same maths in plain torch
MODES = (("npugraph_ex", False), ("ge_graph", True))


def tiny(pkg, backend):
    from importlib import import_module
    ModelArgs = import_module(PKG + ".architecture").ModelArgs
    Transformer = import_module(PKG + ".modeling").Transformer
    names = {f.name for f in dataclasses.fields(ModelArgs)}
    args = dict(vocab_size=128, hidden_size=128, num_hidden_layers=2, num_attention_heads=2,
                num_key_value_heads=1, head_dim=64, intermediate_size=256, max_seq_len=64)
    torch.manual_seed(0)
    model = Transformer(ModelArgs(**{k: v for k, v in args.items() if k in names}),
                        import_module("ascend_runtime.ops").load(backend))
    model = model.to(torch.bfloat16).eval()
    model.setup_caches(2)
    return model


def run(pkg, backend, mode, tensor_lengths, compiled):
    meta = importlib.import_module("ascend_runtime.metadata")
    graph = importlib.import_module("ascend_runtime.graph")
    config_cls = importlib.import_module("ascend_runtime.config").ModelConfig
    model = tiny(pkg, backend)
    outs = []
    with torch.inference_mode():
        PHASE[0] = "prefill"
        outs.append(model.prefill(**meta.prefill_inputs(TOKENS).as_kwargs()))
        PHASE[0] = "decode " + mode
        decode = model.decode
        if compiled:
            config = config_cls(exe_mode=mode, fa_interface="torchair" if tensor_lengths
                                else "torch_npu", enable_dynamic_graph=not tensor_lengths)
            decode = graph.compile_decode(model, config)
        for step, tokens in enumerate(STEPS):
            kv_len = [TOKENS.shape[1] + step] * 2
            outs.append(decode(**meta.decode_inputs(tokens.view(2, 1), kv_len,
                                                    tensor_lengths).as_kwargs()))
    return outs


PHASE = ["prefill"]
reference = None
for job in JOBS:
    pkg = use(job["src"])
    torch._dynamo.reset()
    problems = []
    try:
        if reference is None:  # the control comes first: portable ops imported once
            reference = {m: run(pkg, "portable", m, t, False) for m, t in MODES}
        for mode, tensor_lengths in MODES:
            try:
                outs = run(pkg, "npu", mode, tensor_lengths, True)
            except Exception as exc:
                problems.append(PHASE[0] + ": " + first_line(exc))
                break
            for step, (a, e) in enumerate(zip(outs, reference[mode])):
                diff = (a.float() - e.float()).abs().max().item()
                if diff > TOL:
                    problems.append(f"decode {mode}: step {step} differs from the portable "
                                    f"ops by {diff:.3g} (> {TOL})")
                    break
    except Exception as exc:
        problems.append("driver: " + first_line(exc))
    results[job["id"]] = {"problems": problems}
print("RESULT=" + json.dumps(results))
"""


def run_driver(code: str, package: str, jobs: list[dict]) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = str(REPO)  # this checkout's scaffold.npu_emulation
    env.setdefault("TORCH_DEVICE_BACKEND_AUTOLOAD", "0")
    env.pop("ASCEND_SCAFFOLD_NPU_STRICT", None)  # the default (strict) is what is tested
    env.pop("ASCEND_SCAFFOLD_NPU_PLATFORM", None)
    proc = subprocess.run(
        [
            NPU_PYTHON,
            "-c",
            textwrap.dedent(PRELUDE) + textwrap.dedent(code),
            package,
            json.dumps(jobs),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT=")]
    assert proc.returncode == 0 and lines, (
        f"rc={proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
    )
    return json.loads(lines[-1][len("RESULT=") :])


# --------------------------------------------------------------------------------------------
# fixtures
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def rendered(tmp_path_factory) -> tuple[Path, str]:
    """(package dir, package name): rendered once for the module."""
    given = os.environ.get(PACKAGE_ENV)
    if given:
        dest = Path(given)
    else:
        from typer.testing import CliRunner

        from scaffold.cli import app

        dest = tmp_path_factory.mktemp("render") / "pkg"
        result = CliRunner().invoke(app, ["new", "model", "--defaults", "--yes", str(dest)])
        assert result.exit_code == 0, result.output
    names = [p.name for p in (dest / "src").iterdir() if (p / "__init__.py").is_file()]
    assert len(names) == 1, names
    return dest, names[0]


@pytest.fixture(scope="module")
def mutants(rendered, tmp_path_factory) -> dict[str, str]:
    """Mutation id (and "control") -> the src/ directory of its copy, or why the mutation
    could not be applied (the template changed under it)."""
    dest, name = rendered
    root = tmp_path_factory.mktemp("mutants")
    out = {}
    for mutation in [None, *MUTATIONS]:
        label = CONTROL if mutation is None else mutation.id
        src = root / label / "src"
        ignore = shutil.ignore_patterns("__pycache__")
        shutil.copytree(dest / "src", src, ignore=ignore)
        shutil.copytree(REPO / "ascend_runtime", src / "ascend_runtime", ignore=ignore)
        out[label] = str(src)
        if mutation is not None:
            target = src / mutation.path
            try:
                text = mutation.apply(target.read_text())
            except (AssertionError, ValueError) as exc:
                out[label] = f"not applied to {mutation.path}: {exc}"
                continue
            target.write_text(text)
    return out


def _jobs(mutants: dict[str, str], kind: str) -> list[dict]:
    wanted = [CONTROL] + [m.id for m in MUTATIONS if m.kind == kind]
    return [{"id": k, "src": mutants[k]} for k in wanted if not mutants[k].startswith("not ")]


@pytest.fixture(scope="module")
def static_results(rendered, mutants) -> dict:
    return run_driver(STATIC, rendered[1], _jobs(mutants, "static"))


@pytest.fixture(scope="module")
def runtime_results(rendered, mutants) -> dict:
    return run_driver(RUNTIME, rendered[1], _jobs(mutants, "runtime"))


# --------------------------------------------------------------------------------------------
# tests
# --------------------------------------------------------------------------------------------


def test_control_passes_the_static_checks(static_results):
    assert static_results[CONTROL]["problems"] == [], static_results[CONTROL]


def test_control_passes_the_forward_checks(runtime_results):
    assert runtime_results[CONTROL]["problems"] == [], runtime_results[CONTROL]


@pytest.mark.parametrize("mutation", MUTATIONS, ids=[m.id for m in MUTATIONS])
def test_mutation_is_caught(mutation, mutants, request):
    assert not mutants[mutation.id].startswith("not "), mutants[mutation.id]
    results = request.getfixturevalue(f"{mutation.kind}_results")
    problems = results[mutation.id]["problems"]
    text = "\n".join(problems)
    assert problems, f"{mutation.id} ({mutation.what}) passed every check"
    assert not text.startswith("driver:"), results[mutation.id]
    for fragment in mutation.expect:
        assert fragment in text, f"{mutation.what}: {fragment!r} not in\n{text}"
