"""KV memory and decode latency: contiguous vs paged cache, one ragged batch, one process.

    python benchmarks/bench_paged.py            # prompts of 16, 64, 256 and 1024 tokens
    python benchmarks/bench_paged.py --quick    # 8 new tokens

Renders one package with `kv_cache: paged` (random weights, fp32 on CPU), then runs the same
prompts through it twice: over the paged cache with the budget the batch needs, and over
the contiguous cache (kv_cache.py's KVCache, which reserves max_seq_len for every row).
Prints the KV bytes each holds, per-token decode latency (median over --rounds rounds, each
timing the paged run and then the contiguous one, so a noisy stretch of the machine falls
on both; compiled decode on the portable inductor backend, compiled afresh in each run) and
whether both generate the same greedy tokens; ratios from this run only.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import tempfile
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from bench_decode import runtime_modules  # noqa: E402

from scaffold.interview import collect_answers
from scaffold.render import render
from scaffold.spec import validate

NAME = "bench_paged"
ANSWERS = dict(
    model_name=NAME,
    vocab_size=32000,
    hidden_size=512,
    intermediate_size=1536,
    num_hidden_layers=4,
    num_attention_heads=8,
    num_key_value_heads=4,
    head_dim=64,
    kv_cache="paged",
    block_size=128,
)


def load_package(dest: Path, max_seq_len: int, batch: int):
    answers = {**ANSWERS, "max_seq_len": max_seq_len, "batch_size": batch}
    render(validate(collect_answers(answers, defaults=True)), dest)
    sys.path.insert(0, str(dest / "src"))
    return runtime_modules(NAME, ("generation", "graph", "inference_config", "kv_cache", "ops"))


def cache_bytes(model) -> int:
    caches = [layer.self_attn.kv_cache for layer in model.layers]
    return sum(t.numel() * t.element_size() for c in caches for t in (c.k_cache, c.v_cache))


def use_contiguous(pkg, model, batch: int, max_seq_len: int) -> None:
    for layer in model.layers:
        attn = layer.self_attn
        attn.kv_cache = pkg["kv_cache"].KVCache(
            batch, attn.num_kv_heads, max_seq_len, attn.head_dim, attn.ops, torch.float32
        )


def run(pkg, model, prompts, new_tokens):
    config = pkg["inference_config"].ModelConfig(
        exe_mode="npugraph_ex", fa_interface="torch_npu", enable_dynamic_graph=True
    )
    torch._dynamo.reset()
    decode = pkg["graph"].compile_decode(model, config, "inductor")
    generate = pkg["generation"].generate
    generate(model, decode, prompts, 4)  # warm-up (compiles)
    graphs = pkg["graph"].graph_count()
    result = generate(model, decode, prompts, new_tokens)
    return result, pkg["graph"].graph_count() - graphs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", default="16,64,256,1024", help="prompt lengths, one a row")
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--quick", action="store_true", help="8 new tokens")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    new_tokens = 8 if args.quick else args.new_tokens
    lengths = [int(n) for n in args.lengths.split(",")]
    batch, max_seq_len = len(lengths), max(lengths) + new_tokens
    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory(prefix="bench-paged-") as tmp:
        pkg = load_package(Path(tmp) / "pkg", max_seq_len, batch)
        block = ANSWERS["block_size"]
        needed = sum(math.ceil((n + new_tokens) / block) * block for n in lengths)
        torch.manual_seed(0)
        args_ = pkg["spec"].args
        model = pkg["spec"].model_class(args_, pkg["ops"].load("portable")).eval()
        generator = torch.Generator().manual_seed(1)
        prompts = [torch.randint(0, 32000, (n,), generator=generator).tolist() for n in lengths]

        paged_ms, contiguous_ms = [], []
        paged_recompiles = contiguous_recompiles = 0
        for _ in range(max(args.rounds, 1)):
            model.setup_caches(batch, kv_cache_tokens=needed)
            paged_bytes = cache_bytes(model)
            paged, recompiles = run(pkg, model, prompts, new_tokens)
            paged_ms, paged_recompiles = paged_ms + paged.decode_ms, paged_recompiles + recompiles
            use_contiguous(pkg, model, batch, max_seq_len)
            contiguous_bytes = cache_bytes(model)
            contiguous, recompiles = run(pkg, model, prompts, new_tokens)
            contiguous_ms += contiguous.decode_ms
            contiguous_recompiles += recompiles

    print(
        f"{args_.num_hidden_layers} layers, {args_.num_key_value_heads} KV heads x head_dim "
        f"{args_.head_dim}, fp32; prompts {lengths} + {new_tokens} new tokens; blocks of {block}"
    )
    med = {
        "contiguous": statistics.median(contiguous_ms),
        "paged": statistics.median(paged_ms),
    }
    print(f"{'cache':<12} {'KV MiB':>8} {'decode ms/token':>16} {'recompiles':>11}")
    for label, held, recompiles in (
        ("contiguous", contiguous_bytes, contiguous_recompiles),
        ("paged", paged_bytes, paged_recompiles),
    ):
        print(f"{label:<12} {held / 2**20:>8.1f} {med[label]:>16.2f} {recompiles:>11}")
    same = paged.tokens == contiguous.tokens
    print(
        f"paged/contiguous: memory {paged_bytes / contiguous_bytes:.2f}x, decode "
        f"{med['paged'] / med['contiguous']:.2f}x; greedy tokens equal: {same}"
    )
    return 0 if same and paged_recompiles == contiguous_recompiles == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
