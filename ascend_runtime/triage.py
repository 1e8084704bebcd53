"""Locate a graph-mode problem stage by stage (the seed guide's 问题定界 flow).

    python -m <package>.triage --config config/<package>.yaml

Decode runs under `aot_eager` (plain dynamo + AOT autograd, no device backend), then
captured but run eagerly (npugraph_ex `force_eager` / GE `run_eagerly`; on a host without
an NPU, dynamo's `eager` backend stands in), then the real backend (`graph.compile_decode`:
the portable one on CPU). Each stage runs a warm-up (1 prefill + 1 decode step) and N more
steps against eager decode; it fails on an exception, a graph break, a recompile after
warm-up or logits off eager. Triage stops at the first failing stage and prints it, the
first graph break, the first recompile reason and the guide's advice for that stage.
Exit 0 when every stage passes, 1 when one fails, 2 on bad input.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch._dynamo.utils import counters

from . import ops
from .config import InferenceConfig, InputError, ModelConfig, load_config
from .generation import generate
from .graph import PORTABLE_BACKENDS, compile_decode, graph_break_count, graph_count
from .model import ModelSpec
from .parallel import on_every_rank
from .runner import _Parser, _positive_int, cache_len, check_budget, print_error, setup_device
from .validate import (
    MAX_REL_ERROR,
    MIN_COSINE,
    compare,
    first_line,
    load_model,
    random_prompts,
    recompile_reasons,
)

FIX_THE_SCRIPT = (
    "修复用户脚本 (fix the model script): the decode fails {where}, so the cause is in the "
    "model code, not in the NPU backend. A graph break: no .item()/.tolist() in decode, no "
    "Python branch on a tensor value, no torch.cat growing the cache (`ascend-scaffold check "
    "src/` finds these). A recompile: whatever changes every step must be a graph input that "
    "is not guarded: a tensor, or List[int] lengths with dynamic=True."
)
ADVICE = {
    "aot_eager": FIX_THE_SCRIPT.format(where="under plain dynamo + aot_eager"),
    "force_eager": FIX_THE_SCRIPT.format(
        where="when captured but run eagerly (force_eager / run_eagerly)"
    ),
    "backend": (
        "图模式问题 (a graph-mode problem): the script is sound, the backend is not. A recompile: "
        "read the LLM guide and the npugraph_ex guide (llm-model-guide.md, npugraph_ex-guide.md; "
        "the FA lengths table: host lists need dynamic=True, GE wants torchair's Tensor "
        "lengths). A graph break: TorchAir's online docs, typical cases. Anything else: the "
        "mode's own guide (npugraph_ex-guide.md or ge-graph-guide.md)."
    ),
}
STAGES = ("aot_eager", "force_eager", "backend")


@dataclass
class StageResult:
    stage: str
    ok: bool
    backend: str
    error: str | None = None
    graph_breaks: list[str] = field(default_factory=list)
    recompile_reasons: list[str] = field(default_factory=list)
    figures: dict = field(default_factory=dict)

    def lines(self) -> list[str]:
        out = [f"stage {self.stage} ({self.backend}): {'pass' if self.ok else 'FAIL'}"]
        if self.ok:
            return out
        if self.error:
            out.append(f"  error: {self.error}")
        out.append(f"  first graph break: {self.graph_breaks[0] if self.graph_breaks else 'none'}")
        first = self.recompile_reasons[0].strip() if self.recompile_reasons else "none"
        out.append(f"  first recompile reason: {' '.join(first.split())[:500]}")
        out.append(f"  advice: {ADVICE[self.stage]}")
        return out


def _compiled(fn: Callable, backend, config: ModelConfig, **kwargs) -> Callable:
    return torch.compile(fn, backend=backend, fullgraph=True, dynamic=config.dynamic, **kwargs)


def stage_decode(stage: str, model, config: ModelConfig, portable_backend: str):
    """(decode, backend label) of one triage stage."""
    on_npu = ops.npu_available()
    if stage == "aot_eager":
        return _compiled(model.decode, "aot_eager", config), "aot_eager"  # graph-ok: npu-backend
    if stage == "force_eager":
        if not on_npu:
            label = "dynamo eager backend (CPU stand-in for force_eager / run_eagerly)"
            return _compiled(model.decode, "eager", config), label
        if config.exe_mode == "ge_graph":
            import torchair

            compiler_config = torchair.CompilerConfig()
            compiler_config.debug.run_eagerly = True
            backend = torchair.get_npu_backend(compiler_config=compiler_config)
            return _compiled(model.decode, backend, config), "torchair run_eagerly"
        options = {"force_eager": True}
        return _compiled(model.decode, "npugraph_ex", config, options=options), "force_eager"
    decode = compile_decode(model, config, portable_backend)
    label = config.exe_mode if on_npu else f"portable {portable_backend} (CPU stand-in)"
    return decode, label


def run_stage(
    stage: str,
    model,
    config: InferenceConfig,
    prompts: list[list[int]],
    steps: int,
    portable_backend: str,
    eager: list[torch.Tensor],
    eager_tokens: list[list[int]],
    make_decode: Callable = stage_decode,
) -> StageResult:
    model_config = config.model_config
    tensor_lengths = model_config.tensor_lengths
    breaks_before = dict(counters["graph_break"])
    breaks0 = graph_break_count()
    result = StageResult(stage, ok=False, backend="?")
    with recompile_reasons() as reasons:
        try:
            decode, result.backend = make_decode(stage, model, model_config, portable_backend)
            generate(model, decode, prompts, 2, tensor_lengths=tensor_lengths)  # warm-up
            warm, warm_reasons = graph_count(), len(reasons)
            replay = iter(zip(*eager_tokens, strict=True))
            graph = generate(
                model,
                decode,
                prompts,
                steps + 1,
                sampler=lambda logits: torch.tensor(next(replay)).view(-1, 1).to(logits.device),
                tensor_lengths=tensor_lengths,
                keep_logits=True,
            )
            result.figures = compare(graph.logits, eager)
            result.figures["recompiles_after_warmup"] = graph_count() - warm
        except InputError:  # lengths or the KV budget: the config's problem, not a stage's
            raise
        except Exception as exc:
            result.error = first_line(exc)
            warm_reasons = 0
            if "graph_break" in str(exc) or isinstance(exc, torch._dynamo.exc.Unsupported):
                result.graph_breaks.append(result.error)
    result.graph_breaks += [
        reason
        for reason, count in counters["graph_break"].items()
        if count > breaks_before.get(reason, 0)
    ]
    result.recompile_reasons = list(reasons[warm_reasons:]) if result.error is None else reasons
    figures = result.figures
    threshold = MAX_REL_ERROR[model_config.dtype]
    result.ok = (
        result.error is None
        and graph_break_count() == breaks0
        and figures["recompiles_after_warmup"] == 0
        and figures["max_rel_error"] < threshold
        and figures["cosine_similarity"] >= MIN_COSINE
        and figures["greedy_tokens_equal"]
    )
    if result.error is None and not result.ok and not result.graph_breaks and not reasons:
        result.error = (
            f"logits off eager: max relative error {figures['max_rel_error']:.3g} "
            f"(threshold {threshold}), cosine {figures['cosine_similarity']:.6f}"
        )
    return result


@torch.inference_mode()
def triage(
    model,
    config: InferenceConfig,
    *,
    steps: int,
    prompt_len: int,
    portable_backend: str = "aot_eager",
    make_decode: Callable = stage_decode,
) -> list[StageResult]:
    """Every stage in order until the first that fails (its result is the last one)."""
    batch = config.scheduler_config.batch_size
    prompts = random_prompts(batch, prompt_len, model.args.vocab_size, config.data_config.seed)
    tensor_lengths = config.model_config.tensor_lengths
    eager = generate(
        model, model.decode, prompts, steps + 1, tensor_lengths=tensor_lengths, keep_logits=True
    )
    results = []
    for stage in STAGES:
        torch._dynamo.reset()  # each stage compiles afresh
        results.append(
            run_stage(
                stage,
                model,
                config,
                prompts,
                steps,
                portable_backend,
                eager.logits,
                eager.tokens,
                make_decode,
            )
        )
        if not results[-1].ok:
            break
    return results


def parser() -> argparse.ArgumentParser:
    parser = _Parser(description=" ".join(__doc__.split("\n\n")[0].split()))
    parser.add_argument("--config", required=True, help="YAML inference config")
    parser.add_argument("--steps", type=_positive_int, default=8, help="decode steps (8)")
    parser.add_argument("--prompt-len", type=_positive_int, help="default: input_truncated_len")
    parser.add_argument("--portable-backend", choices=PORTABLE_BACKENDS, default="aot_eager")
    return parser


def main(spec: ModelSpec, argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        config = load_config(args.config)
        device, parallel = setup_device(config)

        def prepare():
            model = load_model(spec, config, device, parallel=parallel)
            prompt_len = args.prompt_len or min(
                config.data_config.input_truncated_len, cache_len(model) - args.steps
            )
            if prompt_len < 1:
                raise InputError(f"--steps {args.steps} leave no room for a prompt in the cache")
            check_budget(model.args, config, prompt_len + args.steps, what="the prompt + --steps")
            return model, prompt_len

        model, prompt_len = on_every_rank(parallel, prepare)
        results = triage(
            model,
            config,
            steps=args.steps,
            prompt_len=prompt_len,
            portable_backend=args.portable_backend,
        )
    except (InputError, OSError, ImportError) as exc:
        print_error(exc)
        return 2
    if not parallel.is_first:  # every rank ran the same stages; rank 0 prints them
        return 0 if results[-1].ok else 1
    for result in results:
        print("\n".join(result.lines()))
    if results[-1].ok:
        print("every stage passes: decode is sound under aot_eager, eager capture and the backend")
        return 0
    return 1
