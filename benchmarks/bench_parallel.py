"""Tensor parallel on CPU: per-rank weights, load memory and decode latency, 1 rank vs 2.

    python benchmarks/bench_parallel.py            # ~58M-param llama, fp32, B=1, 48 steps
    python benchmarks/bench_parallel.py --quick    # smoke run: 8 steps

One random HF checkpoint (bench_decode.py's LlamaForCausalLM, saved once), loaded by the
example package generated_examples/llama_tiny through `load_pretrained(parallel=...)` on 1
gloo rank and on 2 (attention, MLP, embedding and lm_head split), every rank with one
thread. Per rank: the
parameter bytes it holds, the peak resident memory the load and the decode added (peak
RSS at the end minus RSS before the load: each rank reads only its own safetensors
slices), and the compiled decode's median ms per token. It prints the ratios from this
run and whether the greedy tokens of both runs are the same. On 2 cores gloo's all_reduce
over loopback dominates a model this small: the latency says what the collectives cost
here, not what HCCL costs on a device; the memory is what carries over.
"""

from __future__ import annotations

import argparse
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).parent))
from bench_decode import CONFIG, make_checkpoint  # noqa: E402  (bench_decode's 58M llama)

PACKAGE = "llama_tiny"
SPLIT = dict(attn_tp_size=2, dense_tp_size=2, embed_tp_size=2, lmhead_tp_size=2)
PROMPT_LEN = 16


def rss_mib() -> float:
    """This process's resident memory now (/proc/self/statm: pages)."""
    pages = int(Path("/proc/self/statm").read_text().split()[1])
    return pages * resource.getpagesize() / 2**20


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def decode_on_rank(rank: int, checkpoint: str, world: int, steps: int) -> dict:
    """run_ranks' worker: load this rank's shards, compile decode, time greedy steps."""
    import importlib

    from ascend_runtime import ops
    from ascend_runtime.config import ModelConfig, ParallelConfig
    from ascend_runtime.graph import compile_decode
    from ascend_runtime.metadata import decode_inputs, prefill_inputs
    from ascend_runtime.parallel import init_parallel
    from ascend_runtime.weights import load_pretrained

    spec = importlib.import_module(PACKAGE).MODEL
    parallel = init_parallel(ParallelConfig(world_size=world, **(SPLIT if world > 1 else {})))
    before = rss_mib()
    model = load_pretrained(spec, checkpoint, ops.load("portable"), parallel=parallel)
    weight_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    decode = compile_decode(model, ModelConfig(exe_mode="npugraph_ex", fa_interface="torch_npu"))
    generator = torch.Generator().manual_seed(1)
    prompt = torch.randint(0, CONFIG["vocab_size"], (1, PROMPT_LEN), generator=generator)
    times, tokens = [], []
    with torch.inference_mode():
        logits = model.prefill(**prefill_inputs(prompt).as_kwargs())
        kv_len = [PROMPT_LEN]
        for _ in range(steps):
            token = logits.argmax(-1)
            tokens.append(int(token))
            step = decode_inputs(token, kv_len, tensor_lengths=False)
            start = time.perf_counter()
            model.prepare_decode(kv_len)
            logits = decode(**step.as_kwargs())
            times.append(time.perf_counter() - start)
            kv_len = [kv_len[0] + 1]
    warm = times[4:]  # the first steps compile
    return {
        "weight_mib": weight_bytes / 2**20,
        "peak_mib": peak_rss_mib() - before,  # the load and the decode, not the imports
        "ms_per_token": 1e3 * statistics.median(warm),
        "tokens": tokens,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="8 decode steps")
    parser.add_argument("--steps", type=int, default=48)
    options = parser.parse_args(argv)
    steps = 12 if options.quick else max(options.steps, 8)
    sys.path[:0] = [str(REPO), str(REPO / "generated_examples" / PACKAGE / "src")]
    from ascend_runtime.testing.distributed import run_ranks

    with tempfile.TemporaryDirectory() as tmp:
        checkpoint = Path(tmp) / "checkpoint"
        make_checkpoint(checkpoint)
        runs = {
            world: run_ranks(
                world, decode_on_rank, Path(tmp) / f"w{world}", str(checkpoint), world, steps
            )
            for world in (1, 2)
        }
    one, two = runs[1][0], runs[2]
    print(f"llama {CONFIG['hidden_size']}x{CONFIG['num_hidden_layers']} fp32, B=1, "
          f"{steps} steps, 1 thread per rank")  # fmt: skip
    print(f"{'ranks':>5} {'rank':>4} {'weights MiB':>12} {'peak +RSS MiB':>14} {'ms/token':>9}")
    for world, results in runs.items():
        for rank, r in enumerate(results):
            print(f"{world:>5} {rank:>4} {r['weight_mib']:>12.1f} {r['peak_mib']:>14.1f} "
                  f"{r['ms_per_token']:>9.2f}")  # fmt: skip
    print(f"weights per rank, 2 ranks / 1: {two[0]['weight_mib'] / one['weight_mib']:.2f}")
    print(f"peak memory per rank, 2 ranks / 1: {two[0]['peak_mib'] / one['peak_mib']:.2f}")
    print(f"decode ms/token, 2 ranks / 1: {two[0]['ms_per_token'] / one['ms_per_token']:.2f}")
    same = all(r["tokens"] == one["tokens"] for r in two)
    print(f"greedy tokens equal on 1 and 2 ranks: {same}")


if __name__ == "__main__":
    main()
