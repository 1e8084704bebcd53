"""CPU decode latency: generated package (eager, compiled) vs transformers, per batch size.

    python benchmarks/bench_decode.py                      # ~58M-param llama, fp32, B=1 and B=8
    python benchmarks/bench_decode.py --quick              # smoke run: few steps
    python benchmarks/bench_decode.py --batch 1 --portable-backend aot_eager --steps 32
    python benchmarks/bench_decode.py --profile            # + torch.profiler of compiled decode

One process, one set of random weights (saved as a HF checkpoint, loaded by both sides),
greedy decoding. For every batch size it times, per decode token (median):

- package eager, package compiled (the portable backend `graph.compile_decode` picks);
- transformers `generate` (eager, dynamic cache);
- transformers static cache + `torch.compile` of `forward` (compiled here, inductor);
- the floor: only the `F.linear` calls of one decode step over the package's weights, and
  the packed floor: the same linears compiled by inductor with the weights frozen and
  packed, as the compiled decode runs them (no attention, norms or cache writes in either);
- the memory-bandwidth bound: the weights' bytes over the bandwidth this host reads at
  (a 1 GiB fp32 sum with the benchmark's threads), printed once, and compiled decode's
  ratio to it per batch size;

All variants are warmed (and compiled) first, then timed interleaved in `--rounds` rounds,
so that a noisy stretch of the machine falls on every variant alike. It prints ratios (to
the floor, compiled vs eager, vs transformers static+compile), a per-step breakdown of
the package loop (host time building the step inputs vs time in the decode call), the
nodes per layer of the captured decode graph (dynamo FX graph and the aten graph after
AOT), and whether every variant's greedy tokens equal HF `generate` (fp32). Compare
variants only as ratios from the same run: CPU noise between runs is 10-20%.
Needs transformers and safetensors (test-only dependencies of the scaffold).
"""

from __future__ import annotations

import argparse
import importlib
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from scaffold.hf_config import answers_from_hf_config
from scaffold.interview import collect_answers
from scaffold.render import render
from scaffold.spec import validate

NAME = "bench_llama"
CONFIG = dict(
    vocab_size=32000,
    hidden_size=512,
    intermediate_size=1536,
    num_hidden_layers=8,
    num_attention_heads=8,
    num_key_value_heads=4,
    head_dim=64,
    max_position_embeddings=512,
)
HF_EAGER = "transformers generate (eager)"
HF_STATIC = "transformers static+compile"
PKG_EAGER = "package eager"
FLOOR = "floor (F.linear only)"
BOUND_MS: list[float] = []  # the memory-bandwidth bound of a step, measured once in main
FLOOR_PACKED = "floor (linears, inductor-packed)"


def make_checkpoint(path: Path):
    import transformers

    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**CONFIG)).eval()
    model.save_pretrained(path)
    return model


def runtime_modules(name: str, modules: tuple[str, ...]) -> dict:
    """The rendered package's spec ("spec") and, by their former package-module names, the
    ascend_runtime modules it runs on (inference_config is ascend_runtime.config)."""
    out = {"spec": importlib.import_module(name).MODEL}
    for module in modules:
        runtime = "config" if module == "inference_config" else module
        out[module] = importlib.import_module(f"ascend_runtime.{runtime}")
    return out


def load_package(ckpt: Path, dest: Path, name: str = NAME):
    given = answers_from_hf_config(ckpt)
    given.update(model_name=name)  # rendered for the device (bf16); run here in fp32
    render(validate(collect_answers(given, defaults=True)), dest)
    sys.path.insert(0, str(dest / "src"))
    return runtime_modules(
        name, ("graph", "inference_config", "metadata", "ops", "sampling", "weights")
    )


# --------------------------------------------------------------------------- package


@torch.inference_mode()
def package_generate(pkg, model, decode, prompt, steps):
    """Greedy: eager prefill, then `steps` decode calls.

    Returns per-step total ms, the tokens, and the per-step split: host ms building the
    step inputs (`metadata.decode_inputs`) and ms in the decode call.
    """
    meta, greedy = pkg["metadata"], pkg["sampling"].greedy
    logits = model.prefill(**meta.prefill_inputs(prompt).as_kwargs())
    tokens, times, host, call = [greedy(logits)], [], [], []
    kv_len = [prompt.shape[1]] * prompt.shape[0]
    for _ in range(steps):
        start = time.perf_counter()
        step = meta.decode_inputs(tokens[-1], kv_len, tensor_lengths=False).as_kwargs()
        built = time.perf_counter()
        logits = decode(**step)
        called = time.perf_counter()
        tokens.append(greedy(logits))
        times.append((time.perf_counter() - start) * 1e3)
        host.append((built - start) * 1e3)
        call.append((called - built) * 1e3)
        kv_len = [n + 1 for n in kv_len]
    return times, torch.cat(tokens, dim=1), {"host": host, "call": call}


def count_decode_nodes(pkg, model, config, prompt):
    """Nodes of the captured decode graph, as compile_decode captures it (same dynamic
    setting): the dynamo FX graph and the aten graph after AOT (functionalised)."""
    from torch._functorch.aot_autograd import aot_module_simplified, make_boxed_func

    counts: dict[str, int] = {}
    compute = ("call_function", "call_method", "call_module")

    def backend(gm, example_inputs):
        counts["fx"] = sum(n.op in compute for n in gm.graph.nodes)
        counts["inputs"] = sum(n.op == "placeholder" for n in gm.graph.nodes)

        def fw(aten_gm, _inputs):
            counts["aten"] = sum(n.op == "call_function" for n in aten_gm.graph.nodes)
            counts["aten_copy"] = sum(
                n.op == "call_function" and "copy" in str(n.target) for n in aten_gm.graph.nodes
            )
            counts["aten_scatter"] = sum(
                n.op == "call_function" and "scatter" in str(n.target) for n in aten_gm.graph.nodes
            )
            return make_boxed_func(aten_gm.forward)

        # as inductor does: the cache writes stay in the graph (copy_ back into a buffer)
        return aot_module_simplified(
            gm, example_inputs, fw_compiler=fw, keep_inference_input_mutations=True
        )

    kwargs_of = getattr(pkg["graph"], "portable_compile_kwargs", None)
    dynamic = kwargs_of(config)["dynamic"] if kwargs_of else config.dynamic
    decode = torch.compile(model.decode, backend=backend, fullgraph=True, dynamic=dynamic)
    settings = getattr(pkg["graph"], "with_trace_settings", None)  # floats traced as constants
    package_generate(pkg, model, settings(decode) if settings else decode, prompt, 2)
    torch._dynamo.reset()
    return counts


PROFILE_ROWS = {
    "TorchDynamo Cache Lookup": "dynamo guards",
    "Pregraph bytecode": "dynamo input prologue",
    "aten::mm": "aten::mm",
    "fused_infer_attention": "attention op (total)",
    "aten::scaled_dot_product_attention": "  of which SDPA",
}


@torch.inference_mode()
def profile_decode(pkg, model, decode, prompt, steps, rows):
    """torch.profiler over `steps` warm decode calls (inputs built beforehand); prints the
    top ops and a per-step summary of the host-side pieces of the compiled call."""
    from torch.profiler import ProfilerActivity, profile

    meta = pkg["metadata"]
    model.prefill(**meta.prefill_inputs(prompt).as_kwargs())
    batch, start = prompt.shape
    tokens = prompt[:, -1:].contiguous()
    inputs = [
        meta.decode_inputs(tokens, [start + i] * batch, tensor_lengths=False).as_kwargs()
        for i in range(steps)
    ]
    for kwargs in inputs:  # warm: the same inputs the profile sees
        decode(**kwargs)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for kwargs in inputs:
            decode(**kwargs)
    averages = prof.key_averages()
    print(averages.table(sort_by="self_cpu_time_total", row_limit=rows))
    total = sum(e.self_cpu_time_total for e in averages) / steps
    print(f"  profiled decode step (B={batch}): {total / 1e3:.2f} ms CPU")
    for key, label in PROFILE_ROWS.items():
        events = [e for e in averages if key in e.key]
        if events:
            us = sum(e.cpu_time_total for e in events) / steps
            calls = sum(e.count for e in events) / steps
            print(f"    {label:<24} {us:>8.0f} us/step ({calls:.0f} calls/step)")


# --------------------------------------------------------------------------- transformers


class _StepClock:
    """A generate() streamer: a timestamp per new token (the first put is the prompt)."""

    def __init__(self):
        self.stamps: list[float] = []

    def put(self, value):
        self.stamps.append(time.perf_counter())

    def end(self):
        pass


@torch.inference_mode()
def hf_generate(model, prompt, steps):
    clock = _StepClock()
    out = model.generate(
        prompt,
        attention_mask=torch.ones_like(prompt),
        max_new_tokens=steps + 1,
        min_new_tokens=steps + 1,
        do_sample=False,
        eos_token_id=None,
        pad_token_id=0,
        streamer=clock,
    )
    stamps = clock.stamps[1:]  # [0] is the prompt, [1] the prefill's token
    times = [(b - a) * 1e3 for a, b in zip(stamps, stamps[1:], strict=False)]
    return times, out[:, prompt.shape[1] :], None


@torch.inference_mode()
def hf_static_generate(model, forward, prompt, steps):
    """Greedy over transformers' StaticCache: eager prefill, `forward` (compiled) decode.
    transformers 5.x: the cache keyword is `cache=`; positions follow the cache's length."""
    from transformers import StaticCache

    cache = StaticCache(config=model.config, max_cache_len=prompt.shape[1] + steps + 8)
    out = model(input_ids=prompt, cache=cache, use_cache=True, logits_to_keep=1)
    tokens, times = [out.logits[:, -1:].argmax(-1)], []
    for _ in range(steps):
        start = time.perf_counter()
        out = forward(input_ids=tokens[-1], cache=cache, use_cache=True)
        tokens.append(out.logits[:, -1:].argmax(-1))
        times.append((time.perf_counter() - start) * 1e3)
    return times, torch.cat(tokens, dim=1), None


# --------------------------------------------------------------------------- floor


def memory_bandwidth(gib: float = 1.0, repeats: int = 5) -> float:
    """Bytes/s this host reads: the best of `repeats` sums of a `gib` GiB fp32 tensor with
    the benchmark's threads. Decode reads every weight once a step, so weights / this is the
    physical floor of a step (`bound_ms`)."""
    x = torch.ones(int(gib * 2**30) // 4, dtype=torch.float32)
    x.sum()  # touch every page first
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        x.sum()
        best = min(best, time.perf_counter() - start)
    return x.numel() * x.element_size() / best


def bound_ms(model, bandwidth: float) -> float:
    """ms a decode step needs at least to read the model's weights once (tied ones once)."""
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    return weights / bandwidth * 1e3


def step_linears(model):
    """(weight, bias, in_features) of every linear one decode step runs, in order."""
    weights = []
    for layer in model.layers:
        attn, mlp = layer.self_attn, layer.mlp
        weights += [
            (attn.qkv_proj.weight, attn.qkv_proj.bias, attn.qkv_proj.in_features),
            (attn.o_proj.weight, None, attn.o_proj.in_features),
            (mlp.gate_up_proj.weight, None, mlp.gate_up_proj.in_features),
            (mlp.down_proj.weight, None, mlp.down_proj.in_features),
        ]
    weights.append((model.lm_head.weight, None, model.lm_head.in_features))
    return weights


@torch.inference_mode()
def linear_floor(model, batch, steps):
    """Only the F.linear calls of one decode step, over the package's (fused) weights."""
    weights = step_linears(model)
    inputs = {n: torch.randn(batch, 1, n) for n in {w[2] for w in weights}}
    times = []
    for _ in range(steps + 4):
        start = time.perf_counter()
        for weight, bias, n in weights:
            F.linear(inputs[n], weight, bias)
        times.append((time.perf_counter() - start) * 1e3)
    return times[4:], None, None


class _StepLinears(torch.nn.Module):
    """The same linears as one module (sharing the package's weights), for compiling."""

    def __init__(self, model):
        super().__init__()
        self.linears = torch.nn.ModuleList()
        for weight, bias, n in step_linears(model):
            linear = torch.nn.Linear(n, weight.shape[0], bias=bias is not None)
            linear.weight, linear.bias = weight, bias
            self.linears.append(linear)

    def forward(self, inputs: dict[int, torch.Tensor]):
        return tuple(linear(inputs[linear.in_features]) for linear in self.linears)


def packed_linear_floor(pkg, model, batch):
    """The floor as the compiled decode runs its linears: inductor with the weights frozen
    and packed (the package's own trace settings), outputs kept so none is eliminated.
    Returns a timing callable, warmed (compiled)."""
    graph = pkg["graph"]
    options = dict(getattr(graph, "PORTABLE_INDUCTOR_OPTIONS", {}))
    compiled = torch.compile(_StepLinears(model), backend="inductor", options=options)
    run = graph.with_trace_settings(compiled, freeze=True)
    inputs = {n: torch.randn(batch, 1, n) for n in {w[2] for w in step_linears(model)}}

    @torch.inference_mode()
    def timed(steps):
        times = []
        for _ in range(steps):
            start = time.perf_counter()
            run(inputs)
            times.append((time.perf_counter() - start) * 1e3)
        return times, None, None

    timed(2)  # compiles
    return timed


# --------------------------------------------------------------------------- main


def merge_rounds(runs):
    """One (times, tokens, split) from a variant's rounds: times and split joined in order,
    the last round's tokens (every round decodes the same prompt)."""
    times = [t for run_times, _, _ in runs for t in run_times]
    keys = runs[0][2] or {}
    split = {key: [v for *_, run_split in runs for v in run_split[key]] for key in keys} or None
    return times, runs[-1][1], split


def bench_batch(args, pkg, hf, ckpt, batch):
    """Warm (and compile) every variant, then time them interleaved: `args.rounds` rounds,
    each running every variant for steps/rounds decode steps in turn, so that machine
    noise (frequency, other processes) lands on all of them alike and the ratios hold."""
    torch.manual_seed(batch)
    prompt = torch.randint(0, CONFIG["vocab_size"], (batch, args.prompt_len))
    model = pkg["weights"].load_pretrained(
        pkg["spec"], ckpt, pkg["ops"].load("portable"), dtype=torch.float32, batch_size=batch
    )
    config = pkg["inference_config"].ModelConfig(
        exe_mode="npugraph_ex", fa_interface="torch_npu", enable_dynamic_graph=True
    )
    compile_s = {}
    torch._dynamo.reset()

    decode = pkg["graph"].compile_decode(model, config, args.portable_backend)
    start = time.perf_counter()
    package_generate(pkg, model, decode, prompt, 3)  # compiles
    compile_s["package"] = time.perf_counter() - start
    pkg_compiled = f"package compiled ({args.portable_backend})"
    variants = {
        FLOOR: lambda n: linear_floor(model, batch, n),
        PKG_EAGER: lambda n: package_generate(pkg, model, model.decode, prompt, n),
        pkg_compiled: lambda n: package_generate(pkg, model, decode, prompt, n),
        HF_EAGER: lambda n: hf_generate(hf, prompt, n),
    }
    if hasattr(pkg["graph"], "with_trace_settings"):
        variants[FLOOR_PACKED] = packed_linear_floor(pkg, model, batch)
    if not args.skip_hf_compile:
        forward = torch.compile(hf.forward, backend="inductor", fullgraph=True)
        start = time.perf_counter()
        hf_static_generate(hf, forward, prompt, 3)  # compiles
        compile_s["transformers"] = time.perf_counter() - start
        variants[HF_STATIC] = lambda n: hf_static_generate(hf, forward, prompt, n)
    for run in variants.values():
        run(4)  # warm-up
    graphs = pkg["graph"].graph_count()

    per_round = max(1, args.steps // args.rounds)
    rounds = {label: [] for label in variants}
    for _ in range(args.rounds):
        for label, run in variants.items():
            rounds[label].append(run(per_round))
    results = {label: merge_rounds(runs) for label, runs in rounds.items()}
    recompiles = pkg["graph"].graph_count() - graphs
    if args.profile:
        profile_decode(pkg, model, decode, prompt, min(args.steps, 12), args.profile_rows)
    torch._dynamo.reset()

    nodes = count_decode_nodes(pkg, model, config, prompt)
    return results, compile_s, recompiles, nodes, pkg_compiled


def report(batch, results, compile_s, recompiles, nodes, pkg_compiled, layers):
    med = {label: statistics.median(r[0]) for label, r in results.items()}
    reference = results[HF_EAGER][1]
    # the table's floor is F.linear's; inductor's packed linears beat it on some CPUs
    # (oneDNN with AVX-512), so compiled decode is also given against the packed floor
    floor, packed = med[FLOOR], med.get(FLOOR_PACKED)
    eager, compiled = med[PKG_EAGER], med[pkg_compiled]
    static = med.get(HF_STATIC)
    print(f"\n== B={batch} ==")
    print(f"{'variant':<34} {'ms/token':>9} {'/floor':>7} {'/HF eager':>10} tokens==HF")
    ok = True
    for label, (_, tokens, _) in results.items():
        same = "-" if tokens is None else str(torch.equal(tokens, reference))
        ok &= same != "False"
        print(
            f"{label:<34} {med[label]:>9.2f} {med[label] / floor:>6.2f}x "
            f"{med[label] / med[HF_EAGER]:>9.2f}x {same}"
        )
    line = f"compiled/eager {compiled / eager:.2f}x, compiled/floor {compiled / floor:.2f}x"
    if BOUND_MS:
        line += f", compiled/bandwidth bound {compiled / BOUND_MS[0]:.2f}x"
    if packed is not None:
        line += f", compiled/packed floor {compiled / packed:.2f}x"
    if static is not None:
        line += f", compiled/HF static+compile {compiled / static:.2f}x"
    print(line)
    for label in (PKG_EAGER, pkg_compiled):
        split = results[label][2]
        host, call = statistics.median(split["host"]), statistics.median(split["call"])
        print(
            f"  {label}: host step inputs {host * 1e3:.0f} us/step, decode call {call:.2f} ms, "
            f"rest (argmax, loop) {med[label] - host - call:.2f} ms"
        )
    print(
        f"  decode graph: {nodes.get('fx', 0) / layers:.1f} FX nodes/layer "
        f"({nodes.get('fx')} total), {nodes.get('aten', 0) / layers:.1f} aten nodes/layer "
        f"({nodes.get('aten')} total: {nodes.get('aten_copy')} copy, {nodes.get('aten_scatter')} "
        f"scatter), {nodes.get('inputs')} graph inputs; "
        f"recompiles after warm-up: {recompiles}"
    )
    print(
        "  cold compile (incl. 3 steps): "
        + ", ".join(f"{k} {v:.1f} s" for k, v in compile_s.items())
    )
    return ok and recompiles == 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=48, help="decode steps timed")
    parser.add_argument("--quick", action="store_true", help="smoke run: 8 steps, 2 rounds")
    parser.add_argument(
        "--rounds", type=int, default=6, help="interleaved timing rounds (steps split over them)"
    )
    parser.add_argument("--prompt-len", type=int, default=128)
    parser.add_argument("--batch", default="1,8", help="comma-separated batch sizes")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument(
        "--portable-backend", default="inductor", choices=("inductor", "aot_eager", "eager")
    )
    parser.add_argument("--skip-hf-compile", action="store_true")
    parser.add_argument("--profile", action="store_true", help="torch.profiler table")
    parser.add_argument("--profile-rows", type=int, default=25)
    args = parser.parse_args(argv)
    if args.steps < 1 or args.rounds < 1:
        parser.error("--steps and --rounds must be at least 1")
    if args.quick:
        args.steps, args.rounds = min(args.steps, 8), min(args.rounds, 2)
    batches = [int(b) for b in args.batch.split(",")]
    torch.set_num_threads(args.threads)
    ok = True
    with tempfile.TemporaryDirectory(prefix="bench-decode-") as tmp:
        ckpt = Path(tmp) / "ckpt"
        hf = make_checkpoint(ckpt)
        pkg = load_package(ckpt, Path(tmp) / "pkg")
        params = sum(p.numel() for p in hf.parameters())
        print(
            f"llama {params / 1e6:.1f}M params, fp32, B={batches}, prompt {args.prompt_len}, "
            f"{args.steps} decode steps, {torch.get_num_threads()} threads, torch "
            f"{torch.__version__}"
        )
        bandwidth = memory_bandwidth()
        BOUND_MS[:] = [bound_ms(hf, bandwidth)]
        print(
            f"memory bandwidth {bandwidth / 1e9:.1f} GB/s (a 1 GiB fp32 sum): reading the "
            f"weights once bounds a decode step at {BOUND_MS[0]:.2f} ms"
        )
        for batch in batches:
            out = bench_batch(args, pkg, hf, ckpt, batch)
            ok &= report(batch, *out, CONFIG["num_hidden_layers"])
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
