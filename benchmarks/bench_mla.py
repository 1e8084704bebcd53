"""CPU decode latency of a generated MLA package (DeepSeek-V3-shaped) vs transformers, and
its KV bytes per token against a GQA cache of the same heads.

    python benchmarks/bench_mla.py              # ~80M-param DeepSeek-V3 shape, fp32, B=1 and B=8
    python benchmarks/bench_mla.py --quick      # smoke run: 8 steps

One process, one set of random weights saved as a HF checkpoint (DeepseekV3ForCausalLM,
per-expert keys as `save_pretrained` writes them) and loaded by both sides, greedy decoding.
Per decode token (median and ratios from this run): the package eager and compiled (the
portable backend; decode absorbed over the latent cache), transformers `generate` (eager:
it caches the latent too and expands K/V through kv_b_proj every step); whether every
variant's greedy tokens equal transformers'; the graphs compiled after warm-up (0 expected
while the routing changes). The timing loops are bench_decode.py's.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from bench_decode import load_package  # noqa: E402
from bench_moe import HF_EAGER, PKG_EAGER, time_package_and_hf  # noqa: E402

NAME = "bench_deepseek_v3"
CONFIG = dict(
    vocab_size=32000,
    hidden_size=512,
    intermediate_size=1536,
    num_hidden_layers=6,
    num_attention_heads=8,
    num_key_value_heads=8,
    q_lora_rank=256,
    kv_lora_rank=128,
    qk_nope_head_dim=64,
    qk_rope_head_dim=32,
    v_head_dim=64,
    n_routed_experts=16,
    num_experts_per_tok=4,
    n_group=4,
    topk_group=2,
    moe_intermediate_size=256,
    n_shared_experts=1,
    first_k_dense_replace=1,
    routed_scaling_factor=2.5,
    max_position_embeddings=512,
)


def make_checkpoint(path: Path):
    import transformers

    torch.manual_seed(0)
    model = transformers.DeepseekV3ForCausalLM(transformers.DeepseekV3Config(**CONFIG)).eval()
    with torch.no_grad():  # zeros as initialised: let the bias change which experts win
        for name, buffer in model.named_buffers():
            if name.endswith("e_score_correction_bias"):
                buffer.uniform_(-0.5, 0.5)
    model.save_pretrained(path)
    return model


def kv_bytes_per_token(element: int = 2) -> tuple[int, int]:
    """(MLA's latent + rope key, K and V of every head) per token over every layer."""
    c, layers = CONFIG, CONFIG["num_hidden_layers"]
    mla = layers * (c["kv_lora_rank"] + c["qk_rope_head_dim"]) * element
    per_head = c["qk_nope_head_dim"] + c["qk_rope_head_dim"] + c["v_head_dim"]
    return mla, layers * c["num_attention_heads"] * per_head * element


def bench_batch(args, pkg, hf, ckpt, batch):
    results, compile_s, recompiles, compiled, _ = time_package_and_hf(
        args, pkg, hf, ckpt, batch, CONFIG["vocab_size"]
    )
    return results, compile_s, recompiles, compiled


def report(batch, results, compile_s, recompiles, compiled):
    med = {label: statistics.median(r[0]) for label, r in results.items()}
    reference = results[HF_EAGER][1]
    print(f"\n== B={batch} ==")
    print(f"{'variant':<34} {'ms/token':>9} {'/HF eager':>10} tokens==HF")
    ok = True
    for label, (_, tokens, _) in results.items():
        same = str(torch.equal(tokens, reference))
        ok &= same == "True"
        print(f"{label:<34} {med[label]:>9.2f} {med[label] / med[HF_EAGER]:>9.2f}x {same}")
    print(
        f"compiled/HF eager {med[compiled] / med[HF_EAGER]:.2f}x, compiled/eager "
        f"{med[compiled] / med[PKG_EAGER]:.2f}x, eager/HF eager "
        f"{med[PKG_EAGER] / med[HF_EAGER]:.2f}x; recompiles after warm-up {recompiles}; "
        f"cold compile (incl. 3 steps) {compile_s:.1f} s"
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
    if args.steps < 1:
        parser.error("--steps must be >= 1")
    if args.quick:
        args.steps = min(args.steps, 8)
    batches = [int(b) for b in args.batch.split(",")]
    torch.set_num_threads(args.threads)
    mla, gqa = kv_bytes_per_token()
    ok = True
    with tempfile.TemporaryDirectory(prefix="bench-mla-") as tmp:
        ckpt = Path(tmp) / "ckpt"
        hf = make_checkpoint(ckpt)
        pkg = load_package(ckpt, Path(tmp) / "pkg", NAME)
        params = sum(p.numel() for p in hf.parameters())
        print(
            f"deepseek_v3 shape {params / 1e6:.1f}M params ({CONFIG['n_routed_experts']} experts"
            f" in {CONFIG['n_group']} groups, top-{CONFIG['num_experts_per_tok']}), fp32, "
            f"B={batches}, prompt {args.prompt_len}, {args.steps} decode steps, "
            f"{torch.get_num_threads()} threads, torch {torch.__version__}\n"
            f"KV bytes per token (bf16, {CONFIG['num_hidden_layers']} layers): MLA latent "
            f"{mla:,} vs K/V of {CONFIG['num_attention_heads']} heads {gqa:,} "
            f"({gqa / mla:.1f}x less)"
        )
        for batch in batches:
            ok &= report(batch, *bench_batch(args, pkg, hf, ckpt, batch))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
