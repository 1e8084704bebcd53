"""Validate a config on this host and write the test report (the seed guide's 验证测试 and
测试报告: environment, compile, function, performance, compile cache).

    python -m <package>.validate --config config/<package>.yaml [--out DIR]

Writes report.md and report.json into --out (default: model_config.output_path, else
./output). Exit 0 when every check passes, 1 when one fails, 2 on bad input (one `error:`
line, as the runner). Weights are random unless the config names a checkpoint (as the
runner). On a host without an NPU the portable backend stands in for the NPU one, and the
report says so: its figures are CPU figures.

- compile: graphs compiled in warm-up (1 prefill + 1 decode step), graph breaks, graphs
  compiled after warm-up (recompiles) with their reasons from dynamo's recompile log.
- function: eager decode vs the compiled one over 1 prefill + N decode steps, the compiled
  run fed the eager run's greedy tokens so every step compares: max abs error, max relative
  error (max |graph - eager| / max |eager|), cosine similarity, greedy tokens equal. The
  threshold is the recipes' max relative error < 1e-3 in bf16 (and fp16); fp32 uses 1e-5.
- performance: per batch size, prefill ms, decode ms/token (median, p90), tokens/s.
- compile cache: where the backend supports cache_compile (NPU, enable_cache_compile).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import importlib.metadata
import json
import logging
import math
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from . import ops
from .cache_starts import WARMUP_MARK, cache_problem, warm_start_figures
from .config import InferenceConfig, InputError, check_fits, load_config
from .generation import generate
from .graph import PORTABLE_BACKENDS, compile_decode, graph_break_count, graph_count
from .model import ModelSpec
from .parallel import SINGLE, Parallel, on_every_rank
from .parallel_sizes import check_parallel
from .runner import (
    _Parser,
    _positive_int,
    build_model,
    cache_len,
    check_budget,
    check_memory,
    print_error,
    setup_device,
)
from .weights import load_pretrained, model_args_from_hf

# max relative error of the compiled logits against eager: the recipes' bf16 bound
# (model-infer-precision-debug), fp16 the same; fp32, where both sides compute the same
# maths, a tighter one of ours.
MAX_REL_ERROR = {"bfloat16": 1e-3, "float16": 1e-3, "float32": 1e-5}
MIN_COSINE = 0.999
PASS, FAIL, NOT_APPLICABLE = "pass", "fail", "n/a"
RECOMPILE_LOGGER = "torch._dynamo.guards.__recompiles"  # set_logs(recompiles=True) artifact
NPU_BACKENDS = {"npugraph_ex": "npugraph_ex (aclgraph)", "ge_graph": "torchair GE (Ascend IR)"}

DecodeFactory = Callable[..., Callable]


@dataclass
class Check:
    name: str
    status: str
    figures: dict = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


@dataclass
class Report:
    checks: list[Check]
    config: str = ""
    model: str = "model"  # the package's name

    @property
    def ok(self) -> bool:
        return all(check.status != FAIL for check in self.checks)

    def check(self, name: str) -> Check:
        return next(c for c in self.checks if c.name == name)

    def as_dict(self) -> dict:
        return {"ok": self.ok, "config": self.config, "checks": [asdict(c) for c in self.checks]}

    def markdown(self) -> str:
        lines = [
            f"# {self.model} validation report",
            "",
            f"config `{self.config}`: **{'PASS' if self.ok else 'FAIL'}**",
            "",
            "| check | status |",
            "|---|---|",
            *(f"| {c.name} | {c.status} |" for c in self.checks),
        ]
        for c in self.checks:
            lines += ["", f"## {c.name}: {c.status}", ""]
            lines += [f"- {note}" for note in c.notes]
            rows = list(c.figures.values())
            if rows and all(isinstance(row, dict) for row in rows):  # one row per batch size
                columns = list(rows[0])
                lines += [
                    "",
                    "| | " + " | ".join(columns) + " |",
                    "|---" * (len(columns) + 1) + "|",
                ]
                for key, row in c.figures.items():
                    lines.append(f"| {key} | " + " | ".join(_cell(row[k]) for k in columns) + " |")
            elif rows:
                lines += ["", "| figure | value |", "|---|---|"]
                lines += [f"| {k} | {_cell(v)} |" for k, v in c.figures.items()]
        return "\n".join(lines) + "\n"

    def write(self, out: Path) -> None:
        """report.json and report.md into `out` (checked first: check_report_dir). Each is
        written to a new file beside it, then renamed over the name: a link there is
        replaced, never followed, and a failure leaves no half-written report."""
        check_report_dir(out)
        out.mkdir(parents=True, exist_ok=True)
        for name, text in (
            ("report.json", json.dumps(self.as_dict(), indent=2) + "\n"),
            ("report.md", self.markdown()),
        ):
            fd, tmp = tempfile.mkstemp(prefix=f".{name}-", dir=out)
            try:
                with os.fdopen(fd, "w") as file:
                    file.write(text)
                os.replace(tmp, out / name)
            except BaseException:
                Path(tmp).unlink(missing_ok=True)
                raise


REPORT_FILES = ("report.json", "report.md")


def check_report_dir(out: Path) -> None:
    """Refuse, before anything runs, a report location that cannot take the reports:
    InputError naming the path (a file where the directory should be, a path under a file,
    a directory that cannot be written, a report name that is a link or not a file)."""
    existing = out
    while not existing.exists() and not existing.is_symlink():
        existing = existing.parent
    if existing != out and not existing.is_dir():
        raise InputError(f"report directory {out}: {existing} is not a directory")
    if existing == out:
        if not out.is_dir():
            raise InputError(f"report directory {out} exists and is not a directory")
        for name in REPORT_FILES:
            path = out / name
            if path.is_symlink():
                raise InputError(
                    f"{path} is a symbolic link: a report is never written through one"
                )
            if path.exists() and not path.is_file():
                raise InputError(f"{path} exists and is not a regular file")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise InputError(f"report directory {out}: {existing} is not writable")


def _cell(value) -> str:
    if isinstance(value, float):
        return f"{value:.6g}"
    if isinstance(value, list | tuple | dict):
        text = json.dumps(value)
        return text if len(text) < 400 else text[:400] + "..."
    return str(value).replace("|", "\\|").replace("\n", " ")


@contextlib.contextmanager
def recompile_reasons() -> Iterator[list[str]]:
    """Dynamo's recompile log (torch._logging.set_logs(recompiles=True)), captured: each
    message names the function and the guard that failed."""
    reasons: list[str] = []

    class _Handler(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            reasons.append(record.getMessage())

    handler = _Handler()
    logger = logging.getLogger(RECOMPILE_LOGGER)
    torch._logging.set_logs(recompiles=True)
    logger.addHandler(handler)
    try:
        yield reasons
    finally:
        logger.removeHandler(handler)
        torch._logging.set_logs()


def _version(*names: str) -> str | None:
    for name in names:
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def cann_version() -> str | None:
    """The CANN toolkit's version line, from the version.cfg / version.info it installs."""
    roots = [os.environ.get(k) for k in ("ASCEND_HOME_PATH", "ASCEND_TOOLKIT_HOME")]
    roots.append("/usr/local/Ascend/ascend-toolkit/latest")
    for root in filter(None, roots):
        for name in ("version.cfg", "compiler/version.info", "version.info"):
            file = Path(root) / name
            with contextlib.suppress(OSError):
                for line in file.read_text().splitlines():
                    if "version" in line.lower() and "=" in line:
                        return line.split("=", 1)[1].strip()
    return None


def backend_used(config: InferenceConfig, device: torch.device, portable_backend: str) -> str:
    mode = config.model_config.exe_mode
    if mode == "eager":
        return "eager (nothing compiled)"
    if device.type == "npu":
        cached = ", cache_compile" if config.model_config.enable_cache_compile else ""
        return NPU_BACKENDS[mode] + cached
    return f"portable {portable_backend} (CPU stand-in for {mode}, not an NPU graph)"


def environment_check(
    config: InferenceConfig, device: torch.device, portable_backend: str
) -> Check:
    model = config.model_config
    figures = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torch_npu": _version("torch_npu", "torch-npu"),
        "cann": cann_version(),
        "device": str(device),
        "device_name": torch.npu.get_device_name(0) if device.type == "npu" else platform.machine(),
        "platform_version": model.platform_version,
        "exe_mode": model.exe_mode,
        "dynamic": model.dynamic,
        "fa_interface": model.fa_interface,
        "dtype": model.dtype,
        "backend": backend_used(config, device, portable_backend),
        "weights": model.model_path if model.with_ckpt else "random",
    }
    notes = []
    if device.type != "npu":
        notes.append(
            f"no NPU on this host: the portable {portable_backend} backend stood in for "
            f"{model.exe_mode}; every figure below is a CPU figure, not an NPU one"
        )
    return Check("environment", PASS, figures, notes)


def random_prompts(batch: int, length: int, vocab: int, seed: int | None) -> list[list[int]]:
    generator = torch.Generator().manual_seed(seed or 0)
    return torch.randint(0, vocab, (batch, length), generator=generator).tolist()


def _replay(tokens: list[list[int]]) -> Callable[[torch.Tensor], torch.Tensor]:
    """A sampler that returns the given per-row tokens step by step (forced decoding)."""
    steps = iter(zip(*tokens, strict=True))

    def choose(logits: torch.Tensor) -> torch.Tensor:
        return torch.tensor(next(steps), device=logits.device).view(-1, 1)

    return choose


def compare(graph: list[torch.Tensor], eager: list[torch.Tensor]) -> dict:
    """Per-step logits, graph vs eager: max abs, max relative (to max |eager|), cosine."""
    g = torch.cat([t.reshape(t.shape[0], -1) for t in graph], dim=1).double()
    e = torch.cat([t.reshape(t.shape[0], -1) for t in eager], dim=1).double()
    diff = (g - e).abs().max().item()
    scale = e.abs().max().item()
    cosine = torch.nn.functional.cosine_similarity(g.flatten(), e.flatten(), dim=0).item()
    tokens_equal = all(
        torch.equal(a.argmax(-1), b.argmax(-1)) for a, b in zip(graph, eager, strict=True)
    )
    return {
        "max_abs_error": diff,
        "max_rel_error": diff / scale if scale else diff,
        "cosine_similarity": cosine,
        "greedy_tokens_equal": tokens_equal,
    }


def first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0]}" if text else type(exc).__name__


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, math.ceil(q * len(ordered)) - 1)]


def load_model(
    spec: ModelSpec,
    config: InferenceConfig,
    device: torch.device,
    batch: int | None = None,
    parallel: Parallel = SINGLE,
):
    """The runner's choice: the checkpoint with with_ckpt, else random weights (with the
    checkpoint's architecture when model_path is set); this rank's part when split."""
    model_config = config.model_config
    path = model_config.model_path
    args = model_args_from_hf(spec, path) if path else spec.args
    check_parallel(args, config.parallel_config)
    check_memory(spec, args, config, parallel)  # before anything is allocated
    if model_config.with_ckpt:
        return load_pretrained(
            spec,
            model_config.model_path,
            ops.load("npu" if device.type == "npu" else "portable"),
            dtype=model_config.dtype,
            device=device,
            batch_size=batch or config.scheduler_config.batch_size,
            kv_cache_tokens=config.scheduler_config.kv_cache_tokens,
            parallel=parallel,
        )
    return build_model(spec, args, config, device, parallel)


@torch.inference_mode()
def validate(
    model,
    config: InferenceConfig,
    *,
    steps: int,
    prompt_len: int,
    batch_sizes: list[int] | None = None,
    portable_backend: str = "aot_eager",
    decode_factory: DecodeFactory | None = None,
    config_path: str = "",
    name: str = "model",
) -> Report:
    """Run every check on `model` (its cache allocated for scheduler_config.batch_size);
    `decode_factory(model, model_config, portable_backend)` makes the decode under test
    (graph.compile_decode unless given)."""
    decode_factory = decode_factory or compile_decode
    device = model.embed_tokens.weight.device
    model_config = config.model_config
    batch = config.scheduler_config.batch_size
    max_seq_len = cache_len(model)
    check_fits(prompt_len, steps, max_seq_len, "prompt_len", "steps")
    checks = [environment_check(config, device, portable_backend)]
    prompts = random_prompts(batch, prompt_len, model.args.vocab_size, config.data_config.seed)
    tensor_lengths = model_config.tensor_lengths
    compiled = model_config.exe_mode != "eager"

    # compile + function
    graphs0, breaks0 = graph_count(), graph_break_count()
    error = None
    with recompile_reasons() as reasons:
        try:
            start = time.perf_counter()
            decode = decode_factory(model, model_config, portable_backend)
            generate(model, decode, prompts, 2, tensor_lengths=tensor_lengths)
            compile_s = time.perf_counter() - start
            warm_graphs, warm_reasons = graph_count(), len(reasons)
            eager = generate(
                model,
                model.decode,
                prompts,
                steps + 1,
                tensor_lengths=tensor_lengths,
                keep_logits=True,
            )
            graph = generate(
                model,
                decode,
                prompts,
                steps + 1,
                sampler=_replay(eager.tokens),
                tensor_lengths=tensor_lengths,
                keep_logits=True,
            )
        except InputError:  # lengths or the KV budget: the config's problem, not the graph's
            raise
        except Exception as exc:  # a graph break under fullgraph, the recompile limit ...
            error = first_line(exc)
    if error is not None:
        figures = {
            "graphs_compiled": graph_count() - graphs0,
            "graph_breaks": graph_break_count() - breaks0,
            "recompile_reasons": [r.strip() for r in reasons],
        }
        checks.append(Check("compile", FAIL, figures, [error]))
        checks += [Check(name, NOT_APPLICABLE, {}, ["compile failed"]) for name in _LATER]
        return Report(checks, config_path, name)
    recompiles = graph_count() - warm_graphs
    figures = {
        "warmup_s": compile_s,
        "graphs_compiled": graph_count() - graphs0,
        "warmup_graphs": warm_graphs - graphs0,
        "recompiles_after_warmup": recompiles,
        "graph_breaks": graph_break_count() - breaks0,
        "recompile_reasons": [r.strip() for r in reasons[warm_reasons:]],
        "decode_steps": len(graph.decode_ms),
    }
    if not compiled:
        checks.append(Check("compile", NOT_APPLICABLE, figures, ["exe_mode eager: no graph"]))
    else:
        ok = recompiles == 0 and figures["graph_breaks"] == 0 and figures["warmup_graphs"] >= 1
        notes = [f"{figures['warmup_graphs']} graph(s) in warm-up, {recompiles} after it"]
        if recompiles:
            notes.append("decode recompiled after warm-up: " + reasons[warm_reasons].strip()[:300])
        checks.append(Check("compile", PASS if ok else FAIL, figures, notes))

    threshold = MAX_REL_ERROR[model_config.dtype]
    figures = {**compare(graph.logits, eager.logits), "steps": f"1 prefill + {steps} decode"}
    figures.update(max_rel_error_threshold=threshold, min_cosine=MIN_COSINE)
    ok = (
        figures["max_rel_error"] < threshold
        and figures["cosine_similarity"] >= MIN_COSINE
        and figures["greedy_tokens_equal"]
    )
    if not compiled:
        checks.append(Check("function", NOT_APPLICABLE, figures, ["exe_mode eager: no graph"]))
    else:
        notes = [f"{model_config.dtype}: max relative error < {threshold}, cosine >= {MIN_COSINE}"]
        checks.append(Check("function", PASS if ok else FAIL, figures, notes))

    sizes = batch_sizes or [batch]
    try:
        checks.append(
            performance_check(
                model, decode_factory, config, prompt_len, steps, sizes, portable_backend
            )
        )
    except Exception as exc:  # the recompile limit, a backend error at another batch size
        checks.append(Check("performance", FAIL, {}, [first_line(exc)]))
    checks.append(cache_check(config, device, config_path, portable_backend, name))
    return Report(checks, config_path, name)


_LATER = ("function", "performance", "compile cache")


def performance_check(
    model, decode_factory, config, prompt_len, steps, batch_sizes, portable_backend
) -> Check:
    figures, notes, status = {}, [], PASS
    tensor_lengths = config.model_config.tensor_lengths
    budget = model.kv_cache_tokens  # the budget the model was built with, at every batch
    for batch in batch_sizes:
        model.setup_caches(batch, kv_cache_tokens=budget)
        prompts = random_prompts(batch, prompt_len, model.args.vocab_size, 1)
        before = graph_count()
        decode = decode_factory(model, config.model_config, portable_backend)
        generate(model, decode, prompts, 2, tensor_lengths=tensor_lengths)  # warm-up
        graphs = graph_count()
        run = generate(model, decode, prompts, steps + 1, tensor_lengths=tensor_lengths)
        median = statistics.median(run.decode_ms)
        figures[f"batch {batch}"] = {
            "prefill_ms": round(run.prefill_ms, 3),
            "decode_ms_median": round(median, 3),
            "decode_ms_p90": round(_percentile(run.decode_ms, 0.9), 3),
            "tokens_per_s": round(batch * 1e3 / median, 1),
            "decode_steps": len(run.decode_ms),
            "warmup_graphs": graphs - before,
            "recompiles": graph_count() - graphs,
        }
        if graph_count() != graphs:
            status = FAIL
            notes.append(f"batch {batch}: decode recompiled during the timed pass")
    model.setup_caches(config.scheduler_config.batch_size, kv_cache_tokens=budget)
    notes.append(f"prompt {prompt_len} tokens, {steps} decode steps, host wall time, synchronised")
    return Check("performance", status, figures, notes)


def cache_check(
    config: InferenceConfig,
    device: torch.device,
    config_path: str,
    portable_backend: str,
    name: str = "model",
) -> Check:
    """Cold vs warm start from two processes where the backend caches compiles (cache_starts.py)."""
    model = config.model_config
    if config.parallel_config.world_size > 1:
        return Check(
            "compile cache",
            NOT_APPLICABLE,
            {},
            ["checked with world_size 1: the cold and warm starts are single processes"],
        )
    if device.type != "npu":
        return Check(
            "compile cache",
            NOT_APPLICABLE,
            {},
            [
                "not applicable on CPU: cache_compile belongs to the NPU backends "
                "(npugraph_ex, torchair); the portable backend has none"
            ],
        )
    if not model.enable_cache_compile or model.exe_mode == "eager":
        return Check("compile cache", NOT_APPLICABLE, {}, ["enable_cache_compile is off"])
    if not config_path:
        return Check("compile cache", NOT_APPLICABLE, {}, ["no config file to start from"])
    with tempfile.TemporaryDirectory(prefix="compile-cache-") as fresh:
        command = [
            sys.executable,
            "-m",
            f"{name}.validate",
            "--config",
            config_path,
            "--warmup-only",
            "--output-path",
            fresh,
            "--portable-backend",
            portable_backend,
        ]
        figures = warm_start_figures(command, Path(fresh) / "compile_cache")
    problem = cache_problem(figures)
    notes = [problem] if problem else ["two processes, the same fresh cache directory"]
    return Check("compile cache", FAIL if problem else PASS, figures, notes)


def warmup_seconds(
    spec: ModelSpec,
    config: InferenceConfig,
    device: torch.device,
    portable_backend: str,
    parallel: Parallel = SINGLE,
) -> float:
    """One start, as `--warmup-only` times it: build the model, compile decode, prefill a
    prompt and run one decode step."""
    start = time.perf_counter()
    model = load_model(spec, config, device, parallel=parallel)
    decode = compile_decode(model, config.model_config, portable_backend)
    batch = config.scheduler_config.batch_size
    prompts = random_prompts(batch, min(8, cache_len(model) - 1), model.args.vocab_size, 0)
    generate(model, decode, prompts, 2, tensor_lengths=config.model_config.tensor_lengths)
    return time.perf_counter() - start


def _batch_sizes(text: str) -> list[int]:
    return [_positive_int(part) for part in text.split(",") if part.strip()]


def parser() -> argparse.ArgumentParser:
    parser = _Parser(description=" ".join(__doc__.split("\n\n")[0].split()))
    parser.add_argument("--config", required=True, help="YAML inference config")
    parser.add_argument("--out", help="report directory (default: output_path, else ./output)")
    parser.add_argument("--steps", type=_positive_int, help="decode steps (default: 16)")
    parser.add_argument("--prompt-len", type=_positive_int, help="default: input_truncated_len")
    parser.add_argument(
        "--batch-sizes", type=_batch_sizes, help="performance batch sizes, e.g. 1,4"
    )
    parser.add_argument("--portable-backend", choices=PORTABLE_BACKENDS, default="aot_eager")
    parser.add_argument(
        "--warmup-only",
        action="store_true",
        help="time one start (build, compile, first decode step) and print WARMUP_S=<s>",
    )
    parser.add_argument("--output-path", help="override model_config.output_path")
    return parser


def main(spec: ModelSpec, argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        config = load_config(args.config)
        if args.output_path:
            model_config = dataclasses.replace(config.model_config, output_path=args.output_path)
            config = dataclasses.replace(config, model_config=model_config)
        out = Path(args.out or config.model_config.output_path or "output")
        if not args.warmup_only:
            check_report_dir(out)  # before the run, not after it
        device, parallel = setup_device(config)
        if args.warmup_only:
            seconds = warmup_seconds(spec, config, device, args.portable_backend, parallel)
            print(f"{WARMUP_MARK}{seconds:.6f}")
            return 0

        def prepare():
            model = load_model(spec, config, device, parallel=parallel)
            prompt_len = args.prompt_len or min(
                config.data_config.input_truncated_len, cache_len(model) - 1
            )
            steps = args.steps or max(1, min(16, cache_len(model) - prompt_len))
            # the KV budget is the config's: a refusal is bad input (exit 2), not a compile
            # failure
            check_budget(
                model.args, config, prompt_len + steps, args.batch_sizes, "prompt_len + steps"
            )
            return model, prompt_len, steps

        model, prompt_len, steps = on_every_rank(parallel, prepare)
        report = validate(
            model,
            config,
            steps=steps,
            prompt_len=prompt_len,
            batch_sizes=args.batch_sizes,
            portable_backend=args.portable_backend,
            config_path=args.config,
            name=spec.name,
        )
    except (InputError, OSError, ImportError) as exc:
        print_error(exc)
        return 2
    if not parallel.is_first:  # every rank checked the same logits; rank 0 reports them
        return 0 if report.ok else 1
    try:
        report.write(out)
    except (InputError, OSError) as exc:
        print(f"error: cannot write the report into {out}: {exc}", file=sys.stderr)
        return 2
    for check in report.checks:
        print(f"{check.name}: {check.status}" + (f" ({check.notes[0]})" if check.notes else ""))
    print(f"report: {out / 'report.md'}, {out / 'report.json'}")
    return 0 if report.ok else 1
