"""Host time per decode step outside the compiled graph, per exe mode, guards on vs skipped.

A model small enough that compute is negligible (1 layer, hidden 64) runs decode compiled
as each exe mode compiles it on this host (npugraph_ex: host-list lengths, dynamic=True;
ge_graph: Tensor lengths, static; both under the portable aot_eager stand-in, which keeps
every dynamo guard an NPU backend has; and the inductor perf stand-in). Per step, median
of STEPS calls, microseconds:

- inputs: building the step's inputs (metadata.decode_inputs);
- check: stable_decode's host check of the step signature (the KV cache's lookup included);
- guarded / skipped: the decode call with dynamo's guards evaluated / skipped after warm-up
  (stable_decode.StableDecode); their difference is guard evaluation;
- host: inputs + check, the host time a step pays outside the compiled call once guards
  are skipped (the goal: at most 50 us);
- alone: the same two timed in a loop of their own. Interleaved with the decode call they
  run on caches a CPU decode has just filled (the aot_eager stand-in's eager kernels take
  milliseconds at B=8); on an NPU the host thread only launches work, so its host code
  stays warm, closer to this column.

    python benchmarks/bench_host.py [--steps 400]
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import statistics
import sys
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "generated_examples" / "llama_tiny" / "src"))

from ascend_runtime import ops  # noqa: E402
from ascend_runtime.graph import compile_decode  # noqa: E402
from ascend_runtime.metadata import decode_inputs, prefill_inputs  # noqa: E402
from ascend_runtime.stable_decode import _signature  # noqa: E402
from ascend_runtime.testing.kit import compile_config  # noqa: E402

MODES = {
    "npugraph_ex (aot_eager stand-in)": ("npugraph_ex", False, "aot_eager"),
    "ge_graph (aot_eager stand-in)": ("ge_graph", True, "aot_eager"),
    "inductor (perf stand-in)": ("npugraph_ex", False, "inductor"),
}
GOAL_US = 50.0
LAYERS = 8  # as the 58M llama of bench_decode.py: guards grow with the modules, not their size


def tiny_model(batch: int):
    package = importlib.import_module("llama_tiny")
    args = dataclasses.replace(
        package.MODEL.args,
        vocab_size=128,
        hidden_size=64,
        num_hidden_layers=LAYERS,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=32,
        intermediate_size=64,
        max_seq_len=1024,
    )
    torch.manual_seed(0)
    model = package.Transformer(args, ops.load("portable")).eval()
    model.setup_caches(batch)
    return model


def median_us(*fns, steps: int) -> list[float]:
    """Median microseconds of each of `fns`, called in turn (interleaved: the machine's
    noise falls on all of them alike)."""
    times = [[] for _ in fns]
    for _ in range(steps):
        for fn, out in zip(fns, times, strict=True):
            start = time.perf_counter()
            fn()
            out.append(time.perf_counter() - start)
    return [statistics.median(t) * 1e6 for t in times]


@torch.inference_mode()
def measure(mode: str, tensor_lengths: bool, backend: str, batch: int, steps: int) -> dict:
    torch._dynamo.reset()
    model = tiny_model(batch)
    prompt = torch.randint(0, 128, (batch, 8))
    model.prefill(**prefill_inputs(prompt).as_kwargs())
    decode = compile_decode(model, compile_config(mode, tensor_lengths), backend)
    tokens = torch.zeros(batch, 1, dtype=torch.long)
    kv_len = [8] * batch
    kwargs = decode_inputs(tokens, kv_len, tensor_lengths).as_kwargs()
    for _ in range(3):  # warm-up: compiles, then the wrapper starts skipping guards
        decode(**kwargs)
    assert decode.signature is not None, "guards were not skipped after warm-up"
    names = ("inputs", "check", "guarded", "skipped", "alone")
    host_only = median_us(
        lambda: (
            decode_inputs(tokens, kv_len, tensor_lengths).as_kwargs(),
            _signature(kwargs, decode._cache()) == decode.signature,
        ),
        steps=steps,
    )
    figures = median_us(
        lambda: decode_inputs(tokens, kv_len, tensor_lengths).as_kwargs(),
        lambda: _signature(kwargs, decode._cache()) == decode.signature,
        lambda: decode.compiled(**kwargs),
        lambda: decode(**kwargs),
        steps=steps,
    )
    return dict(zip(names, figures + host_only, strict=True))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description="host time per decode step")
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    print(
        f"{'mode':34s} {'B':>2s} {'inputs':>7s} {'check':>6s} {'guarded':>8s} {'skipped':>8s}"
        f" {'guards':>7s} {'host':>6s} {'alone':>6s}  (us/step, median of {args.steps})"
    )
    for label, (mode, tensor_lengths, backend) in MODES.items():
        for batch in (1, 8):
            r = measure(mode, tensor_lengths, backend, batch, args.steps)
            guards = r["guarded"] - r["skipped"]
            host = r["inputs"] + r["check"]
            print(
                f"{label:34s} {batch:2d} {r['inputs']:7.1f} {r['check']:6.1f} "
                f"{r['guarded']:8.1f} {r['skipped']:8.1f} {guards:7.1f} {host:6.1f} "
                f"{r['alone']:6.1f}"
            )
    print(f"host = inputs + check (guards skipped), alone = the same outside the decode loop; "
          f"goal <= {GOAL_US:.0f} us")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
