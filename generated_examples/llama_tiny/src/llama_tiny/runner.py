"""Run warm-up, eager prefill and compiled decode; report timings.

    python -m llama_tiny.runner --config config/llama_tiny.yaml

Weights are random unless model_config.model_path names a local HF checkpoint directory
and model_config.with_ckpt is true (as in cann-recipes-infer); --prompt needs the
checkpoint's tokenizer (transformers or tokenizers installed), --token-ids does not.

Exits 1 if decode compiled again after warm-up (a recompile on the hot path).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from dataclasses import dataclass

import torch

from . import ops
from .config import InferenceConfig, load_config, set_task_queue_env
from .configuration import ModelArgs
from .graph import PORTABLE_BACKENDS, compile_decode, graph_break_count, graph_count
from .metadata import decode_inputs, prefill_inputs
from .modeling import Transformer
from .tokenizer import prompt_ids
from .weights import load_pretrained, model_args_from_hf


@dataclass
class RunReport:
    compile_s: float
    prefill_ms: float
    decode_ms: list[float]
    warmup_graphs: int
    recompiles: int
    graph_breaks: int
    tokens: torch.Tensor

    def summary(self) -> str:
        median = statistics.median(self.decode_ms)
        return (
            f"warm-up (compile) {self.compile_s:.2f} s, graphs {self.warmup_graphs}\n"
            f"prefill {self.prefill_ms:.2f} ms\n"
            f"decode median {median:.2f} ms/token over {len(self.decode_ms)} steps\n"
            f"recompiles after warm-up {self.recompiles}, graph breaks {self.graph_breaks}"
        )


def build_model(args: ModelArgs, config: InferenceConfig, device: torch.device) -> Transformer:
    backend = "npu" if device.type == "npu" else "portable"
    dtype = getattr(torch, config.model_config.dtype)
    torch.manual_seed(config.data_config.seed or 0)
    model = Transformer(args, ops.load(backend)).to(device=device, dtype=dtype).eval()
    model.setup_caches(config.scheduler_config.batch_size)
    return model


def _sync(device: torch.device) -> None:
    if device.type == "npu":
        torch.npu.synchronize()


def _timed(fn, device):
    _sync(device)
    start = time.perf_counter()
    out = fn()
    _sync(device)
    return out, (time.perf_counter() - start) * 1e3


@torch.inference_mode()
def run(
    model: Transformer,
    config: InferenceConfig,
    prompt_len: int,
    steps: int,
    portable_backend: str = "aot_eager",
    prompt: torch.Tensor | None = None,
) -> RunReport:
    """Greedy generation: one warm-up pass (compiles decode), then a timed pass."""
    device = model.embed_tokens.weight.device
    batch = config.scheduler_config.batch_size
    if prompt is not None:
        prompt_len = prompt.shape[1]
    if prompt_len + steps + 1 > model.args.max_seq_len:
        raise ValueError(
            f"prompt_len ({prompt_len}) + steps ({steps}) + 1 exceeds "
            f"max_seq_len ({model.args.max_seq_len})"
        )
    tensor_lengths = config.model_config.tensor_lengths
    if prompt is None:
        prompt = torch.randint(0, model.args.vocab_size, (batch, prompt_len), device=device)
    prompt = prompt.to(device)
    decode = compile_decode(model, config.model_config, portable_backend)

    def generate(n_steps: int, timings: list[float] | None = None):
        logits = model.prefill(**prefill_inputs(prompt).as_kwargs())
        tokens = [logits.argmax(-1)]
        kv_len = [prompt_len] * batch
        for _ in range(n_steps):
            step = decode_inputs(tokens[-1], kv_len, tensor_lengths)
            logits, ms = _timed(lambda s=step: decode(**s.as_kwargs()), device)
            if timings is not None:
                timings.append(ms)
            tokens.append(logits.argmax(-1))
            kv_len = [n + 1 for n in kv_len]
        return torch.cat(tokens, dim=1)

    graphs_before, breaks_before = graph_count(), graph_break_count()
    start = time.perf_counter()
    generate(1)
    compile_s = time.perf_counter() - start
    warmup_graphs = graph_count() - graphs_before

    _, prefill_ms = _timed(lambda: model.prefill(**prefill_inputs(prompt).as_kwargs()), device)
    decode_ms: list[float] = []
    tokens = generate(steps, decode_ms)
    return RunReport(
        compile_s=compile_s,
        prefill_ms=prefill_ms,
        decode_ms=decode_ms,
        warmup_graphs=warmup_graphs,
        recompiles=graph_count() - graphs_before - warmup_graphs,
        graph_breaks=graph_break_count() - breaks_before,
        tokens=tokens,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", required=True, help="YAML inference config")
    parser.add_argument("--steps", type=int, help="decode steps (default: max_new_tokens)")
    parser.add_argument("--prompt-len", type=int, help="default: input_truncated_len")
    parser.add_argument("--portable-backend", choices=PORTABLE_BACKENDS, default="aot_eager")
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--prompt", help="text prompt (needs the checkpoint's tokenizer)")
    source.add_argument("--token-ids", help="prompt token ids, e.g. 1,15043,29892")
    args = parser.parse_args(argv)
    try:
        config = load_config(args.config)
    except (OSError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    set_task_queue_env(config.model_config)
    device = torch.device("npu" if ops.npu_available() else "cpu")
    model_config = config.model_config
    try:
        if model_config.model_path and model_config.with_ckpt:
            model = load_pretrained(
                model_config.model_path,
                ops.load("npu" if device.type == "npu" else "portable"),
                dtype=model_config.dtype,
                device=device,
                batch_size=config.scheduler_config.batch_size,
            )
        elif model_config.model_path:  # architecture from config.json, random weights
            model = build_model(model_args_from_hf(model_config.model_path), config, device)
        else:
            model = build_model(ModelArgs(), config, device)
        prompt, tokenizer = prompt_ids(
            model_path=model_config.model_path,
            prompt=args.prompt,
            token_ids=args.token_ids,
            batch_size=config.scheduler_config.batch_size,
            vocab_size=model.args.vocab_size,
        )
    except (OSError, ValueError, ImportError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    mode = config.model_config.exe_mode
    if device.type == "cpu" and mode != "eager":
        mode += f" (portable {args.portable_backend} backend on CPU, not an NPU graph)"
    print(f"device {device}, exe_mode {mode}, dynamic={config.model_config.dynamic}")
    report = run(
        model,
        config,
        prompt_len=args.prompt_len or config.data_config.input_truncated_len,
        steps=args.steps or config.scheduler_config.max_new_tokens,
        portable_backend=args.portable_backend,
        prompt=prompt,
    )
    print(report.summary())
    generated = report.tokens[0].tolist()
    print(f"tokens {generated}")
    if tokenizer is not None:
        print(f"text {tokenizer.decode(generated)!r}")
    if report.recompiles:
        print("error: decode recompiled after warm-up", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
