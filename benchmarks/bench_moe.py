"""CPU decode latency of a generated MoE package (Qwen3-MoE) vs transformers, per batch size.

    python benchmarks/bench_moe.py              # ~94M-param Qwen3-MoE, fp32, B=1 and B=8
    python benchmarks/bench_moe.py --quick      # smoke run: 8 steps

One process, one set of random weights saved as a HF checkpoint (per-expert keys, as
`save_pretrained` writes them) and loaded by both sides, greedy decoding. Per decode token
(median and ratios from this run): the package eager and compiled (the portable backend,
the routed experts as one grouped-matmul custom op per projection), and transformers
`generate` (eager, its default experts implementation); whether every variant's greedy
tokens equal transformers'; the floor: the step's GEMMs alone (attention and router
projections, each routed expert's gate|up and down over its tokens, the dense MLPs, the
lm_head; bench_decode.py's linear floor for MoE); and the graphs compiled after warm-up
(0 expected while the routing changes). The timing loops are bench_decode.py's.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from bench_decode import hf_generate, load_package, package_generate  # noqa: E402

NAME = "bench_qwen3_moe"
CONFIG = dict(
    vocab_size=32000,
    hidden_size=512,
    intermediate_size=1536,
    num_hidden_layers=6,
    num_attention_heads=8,
    num_key_value_heads=4,
    head_dim=64,
    num_experts=12,
    num_experts_per_tok=2,
    moe_intermediate_size=512,
    norm_topk_prob=True,
    max_position_embeddings=512,
)
HF_EAGER = "transformers generate (eager)"
PKG_EAGER = "package eager"


def make_checkpoint(path: Path):
    import transformers

    torch.manual_seed(0)
    config = transformers.Qwen3MoeConfig(**CONFIG)
    model = transformers.Qwen3MoeForCausalLM(config).eval()
    model.save_pretrained(path)
    return model


FLOOR = "floor (GEMMs only)"


def step_gemms(model, batch: int, seed: int = 0):
    """(input, weight) of every matmul one decode step of `batch` tokens runs: per layer
    q/k/v and o, then the router and, for the experts the step routes to (each token's
    top-k, drawn uniformly), each expert's gate|up and down over its tokens; the dense MLP
    on the other layers; the lm_head. Weights are the package's, in their stacked layout."""
    generator = torch.Generator().manual_seed(seed)
    hidden = model.args.hidden_size
    gemms = []

    def x(rows: int, width: int) -> torch.Tensor:
        return torch.randn(rows, width, generator=generator)

    for layer in model.layers:
        attn, mlp = layer.self_attn, layer.mlp
        gemms += [(x(batch, hidden), attn.qkv_proj.weight.t())]
        gemms += [(x(batch, attn.o_proj.in_features), attn.o_proj.weight.t())]
        if hasattr(mlp, "experts"):
            gemms += [(x(batch, hidden), mlp.gate.weight.t())]
            experts = mlp.experts
            num_experts, _, inner = experts.w2_weight.shape
            routed = torch.stack(
                [
                    torch.randperm(num_experts, generator=generator)[: mlp.top_k]
                    for _ in range(batch)
                ]
            )
            for expert, tokens in zip(*torch.unique(routed, return_counts=True), strict=True):
                rows = int(tokens)
                gemms += [(x(rows, hidden), experts.w13_weight[expert])]
                gemms += [(x(rows, inner), experts.w2_weight[expert])]
        else:
            gemms += [(x(batch, hidden), mlp.gate_up_proj.weight.t())]
            gemms += [(x(batch, mlp.down_proj.in_features), mlp.down_proj.weight.t())]
    gemms += [(x(batch, hidden), model.lm_head.weight.t())]
    return gemms


def gemm_floor(model, batch: int, steps: int):
    """ms/step of `step_gemms` alone (torch.mm each): what decode cannot go below."""
    gemms = step_gemms(model, batch)
    times = []
    for _ in range(steps + 4):
        start = time.perf_counter()
        for inputs, weight in gemms:
            torch.mm(inputs, weight)
        times.append((time.perf_counter() - start) * 1e3)
    return times[4:], None, None


def time_package_and_hf(args, pkg, hf, ckpt, batch: int, vocab_size: int):
    """One batch's timings, in one process: the package eager and compiled (portable
    backend), transformers `generate` eager. Returns (results, cold compile s, recompiles
    after warm-up, the compiled variant's label, the package model)."""
    torch.manual_seed(batch)
    prompt = torch.randint(0, vocab_size, (batch, args.prompt_len))
    model = pkg["weights"].load_pretrained(
        pkg["spec"], ckpt, pkg["ops"].load("portable"), dtype=torch.float32, batch_size=batch
    )
    config = pkg["inference_config"].ModelConfig(
        exe_mode="npugraph_ex", fa_interface="torch_npu", enable_dynamic_graph=True
    )
    results = {}
    torch._dynamo.reset()
    package_generate(pkg, model, model.decode, prompt, 4)  # warm-up
    results[PKG_EAGER] = package_generate(pkg, model, model.decode, prompt, args.steps)

    decode = pkg["graph"].compile_decode(model, config, args.portable_backend)
    start = time.perf_counter()
    package_generate(pkg, model, decode, prompt, 3)  # compiles
    compile_s = time.perf_counter() - start
    graphs = pkg["graph"].graph_count()
    compiled = f"package compiled ({args.portable_backend})"
    results[compiled] = package_generate(pkg, model, decode, prompt, args.steps)
    recompiles = pkg["graph"].graph_count() - graphs

    hf_generate(hf, prompt, 4)  # warm-up
    results[HF_EAGER] = hf_generate(hf, prompt, args.steps)
    torch._dynamo.reset()
    return results, compile_s, recompiles, compiled, model


def bench_batch(args, pkg, hf, ckpt, batch):
    results, compile_s, recompiles, compiled, model = time_package_and_hf(
        args, pkg, hf, ckpt, batch, CONFIG["vocab_size"]
    )
    with torch.inference_mode():
        results[FLOOR] = gemm_floor(model, batch, args.steps)
    return results, compile_s, recompiles, compiled


def report(batch, results, compile_s, recompiles, compiled):
    med = {label: statistics.median(r[0]) for label, r in results.items()}
    reference = results[HF_EAGER][1]
    print(f"\n== B={batch} ==")
    print(f"{'variant':<34} {'ms/token':>9} {'/HF eager':>10} tokens==HF")
    ok = True
    for label, (_, tokens, _) in results.items():
        same = "-" if tokens is None else str(torch.equal(tokens, reference))
        ok &= same != "False"
        print(f"{label:<34} {med[label]:>9.2f} {med[label] / med[HF_EAGER]:>9.2f}x {same}")
    print(
        f"compiled/floor {med[compiled] / med[FLOOR]:.2f}x (goal <= 1.30x), "
        f"compiled/eager {med[compiled] / med[PKG_EAGER]:.2f}x, "
        f"compiled/HF eager {med[compiled] / med[HF_EAGER]:.2f}x, "
        f"eager/HF eager {med[PKG_EAGER] / med[HF_EAGER]:.2f}x; "
        f"recompiles after warm-up {recompiles}; cold compile (incl. 3 steps) {compile_s:.1f} s"
    )
    return ok and recompiles == 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=32, help="decode steps timed")
    parser.add_argument("--quick", action="store_true", help="smoke run: 8 steps")
    parser.add_argument("--prompt-len", type=int, default=64)
    parser.add_argument("--batch", default="1,8", help="comma-separated batch sizes")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument(
        "--portable-backend", default="inductor", choices=("inductor", "aot_eager", "eager")
    )
    args = parser.parse_args(argv)
    if args.quick:
        args.steps = min(args.steps, 8)
    batches = [int(b) for b in args.batch.split(",")]
    torch.set_num_threads(args.threads)
    ok = True
    with tempfile.TemporaryDirectory(prefix="bench-moe-") as tmp:
        ckpt = Path(tmp) / "ckpt"
        hf = make_checkpoint(ckpt)
        pkg = load_package(ckpt, Path(tmp) / "pkg", NAME)
        params = sum(p.numel() for p in hf.parameters())
        print(
            f"qwen3_moe {params / 1e6:.1f}M params ({CONFIG['num_experts']} experts, top-"
            f"{CONFIG['num_experts_per_tok']}), fp32, B={batches}, prompt {args.prompt_len}, "
            f"{args.steps} decode steps, {torch.get_num_threads()} threads, torch "
            f"{torch.__version__}"
        )
        for batch in batches:
            ok &= report(batch, *bench_batch(args, pkg, hf, ckpt, batch))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
