"""CPU decode latency: generated package (eager, compiled) vs transformers `generate`.

    python benchmarks/bench_decode.py                     # ~58M-param llama, fp32, B=1
    python benchmarks/bench_decode.py --portable-backend aot_eager --steps 32

One process, one set of random weights (saved as a HF checkpoint, loaded by both sides),
greedy decoding. Prints the median per-token decode latency of each variant, the ratios
to transformers `generate` (eager), and whether the greedy tokens are identical. Compare
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

from scaffold.interview import collect_answers
from scaffold.hf_config import answers_from_hf_config
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


def make_checkpoint(path: Path):
    import transformers

    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**CONFIG)).eval()
    model.save_pretrained(path)
    return model


def load_package(ckpt: Path, dest: Path):
    given = answers_from_hf_config(ckpt)
    given.update(model_name=NAME)  # rendered for the device (bf16); run here in fp32
    render(validate(collect_answers(given, defaults=True)), dest)
    sys.path.insert(0, str(dest / "src"))
    return {m: importlib.import_module(f"{NAME}.{m}") for m in ("graph", "inference_config", "metadata")} | {
        "ops": importlib.import_module(f"{NAME}.ops"),
        "weights": importlib.import_module(f"{NAME}.weights"),
    }


@torch.inference_mode()
def package_generate(pkg, model, decode, prompt, steps):
    """Greedy: eager prefill, then `steps` decode calls; per-step ms and the tokens."""
    meta = pkg["metadata"]
    logits = model.prefill(**meta.prefill_inputs(prompt).as_kwargs())
    tokens, times = [logits.argmax(-1)], []
    kv_len = [prompt.shape[1]] * prompt.shape[0]
    for _ in range(steps):
        start = time.perf_counter()
        step = meta.decode_inputs(tokens[-1], kv_len, tensor_lengths=False)
        logits = decode(**step.as_kwargs())
        tokens.append(logits.argmax(-1))
        times.append((time.perf_counter() - start) * 1e3)
        kv_len = [n + 1 for n in kv_len]
    return times, torch.cat(tokens, dim=1)


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
    return times, out[:, prompt.shape[1] :]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=64, help="decode steps timed")
    parser.add_argument("--prompt-len", type=int, default=128)
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument(
        "--portable-backend", default="inductor", choices=("inductor", "aot_eager", "eager")
    )
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory(prefix="bench-decode-") as tmp:
        ckpt = Path(tmp) / "ckpt"
        hf = make_checkpoint(ckpt)
        pkg = load_package(ckpt, Path(tmp) / "pkg")
        params = sum(p.numel() for p in hf.parameters())
        print(
            f"llama {params / 1e6:.1f}M params, fp32, B={args.batch}, prompt {args.prompt_len}, "
            f"{args.steps} decode steps, {torch.get_num_threads()} threads, torch "
            f"{torch.__version__}"
        )
        prompt = torch.randint(0, CONFIG["vocab_size"], (args.batch, args.prompt_len))
        model = pkg["weights"].load_pretrained(
            ckpt, pkg["ops"].load("portable"), dtype=torch.float32, batch_size=args.batch
        )
        config = pkg["inference_config"].ModelConfig(
            exe_mode="npugraph_ex", fa_interface="torch_npu", enable_dynamic_graph=True
        )
        results = {}
        package_generate(pkg, model, model.decode, prompt, 4)  # warm-up
        results["package eager"] = package_generate(pkg, model, model.decode, prompt, args.steps)

        decode = pkg["graph"].compile_decode(model, config, args.portable_backend)
        start = time.perf_counter()
        package_generate(pkg, model, decode, prompt, 2)  # compiles
        compile_s = time.perf_counter() - start
        label = f"package compiled ({args.portable_backend})"
        results[label] = package_generate(pkg, model, decode, prompt, args.steps)

        hf_generate(hf, prompt, 4)  # warm-up
        results["transformers generate (eager)"] = hf_generate(hf, prompt, args.steps)

    base = statistics.median(results["transformers generate (eager)"][0])
    reference = results["transformers generate (eager)"][1]
    print(f"compile (cold, incl. 2 steps): {compile_s:.1f} s")
    print(f"{'variant':<34} {'median ms/token':>16} {'vs HF generate':>15} tokens==HF")
    for label, (times, tokens) in results.items():
        median = statistics.median(times)
        same = torch.equal(tokens, reference)
        print(f"{label:<34} {median:>16.2f} {median / base:>14.2f}x {same}")
    return 0 if all(torch.equal(t, reference) for _, t in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
