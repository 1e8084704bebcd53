"""Run warm-up, eager prefill and compiled decode; report timings.

    python -m <package>.runner --config config/<package>.yaml

(`<package>/runner.py` calls `main(MODEL)` with the package's ModelSpec.)

Weights are random unless model_config.model_path names a local HF checkpoint directory
and model_config.with_ckpt is true (as in cann-recipes-infer); --prompt needs the
checkpoint's tokenizer (transformers or tokenizers installed), --token-ids does not. Both
repeat for rows of different prompts; each row stops at the checkpoint's EOS ids
(generation_config.json / config.json) or after its tokens, and its tokens (and text, with
a tokenizer) are printed per row.

Exits 1 if decode compiled again after warm-up (a recompile on the hot path). Bad input
(flags, config, checkpoint, prompt, lengths that do not fit the KV cache) exits 2 with one
`error:` line on stderr, before the model is built.

With parallel_config.world_size N > 1, one process per device (ascend_runtime/parallel.py):

    torchrun --nproc-per-node N -m <package>.runner --config config/<package>.yaml

Rank 0 prints. A rank that fails before decode (config, checkpoint, memory) fails every
rank with its message (exit 2), before any of them waits in a collective.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from dataclasses import dataclass

import torch

from . import ops
from .block_allocator import BUDGET_KEY, pool_blocks, request_blocks
from .config import (
    NEW_TOKENS_KEY,
    PROMPT_KEY,
    ConfigError,
    InferenceConfig,
    InputError,
    check_fits,
    load_config,
    set_task_queue_env,
)
from .generation import Generation, cache_shape, eos_token_ids, generate
from .graph import PORTABLE_BACKENDS, compile_decode, graph_break_count, graph_count
from .model import CausalLM, ModelSpec
from .parallel import (
    SINGLE,
    Parallel,
    init_parallel,
    launch_environment,
    on_every_rank,
)
from .parallel_sizes import check_parallel
from .sampling import TokenSampler
from .tokenizer import prompt_ids
from .weights import assign_weights, load_pretrained, model_args_from_hf, shard_state

# Model dtypes the fused attention takes on A2 and A3 (npu_fused_infer_attention_score in
# torch_npu/_op_plugin_docs.py; int8 is for quantised KV only).
NPU_DTYPES = ("float16", "bfloat16")


@dataclass
class RunReport:
    compile_s: float
    prefill_ms: float
    decode_ms: list[float]
    warmup_graphs: int
    recompiles: int
    graph_breaks: int
    tokens: list[list[int]]  # per row: the new tokens (prefill's first, then decode's)
    stopped_on_eos: list[bool]

    def summary(self) -> str:
        if self.decode_ms:
            median = statistics.median(self.decode_ms)
            decode = f"decode median {median:.2f} ms/token over {len(self.decode_ms)} steps"
        else:
            decode = "decode: no steps (every row stopped at EOS after prefill)"
        return (
            f"warm-up (compile) {self.compile_s:.2f} s, graphs {self.warmup_graphs}\n"
            f"prefill {self.prefill_ms:.2f} ms\n"
            f"{decode}\n"
            f"recompiles after warm-up {self.recompiles}, graph breaks {self.graph_breaks}"
        )


def build_model(
    spec: ModelSpec,
    args,
    config: InferenceConfig,
    device: torch.device,
    parallel: Parallel = SINGLE,
) -> CausalLM:
    """Random weights from data_config.seed. Split over ranks, every rank builds the
    one-device model on the host from that seed and keeps its shards, so the ranks hold
    one model between them."""
    backend = ops.load("npu" if device.type == "npu" else "portable")
    dtype = getattr(torch, config.model_config.dtype)
    scheduler = config.scheduler_config
    torch.manual_seed(config.data_config.seed or 0)
    if parallel.distributed:
        full = spec.model_class(args, backend)
        with torch.device("meta"):
            model = spec.model_class(args, backend, parallel)
        state = {k: v.to(device=device, dtype=dtype) for k, v in shard_state(model, full).items()}
        del full
        return assign_weights(
            model, state, device, dtype, scheduler.batch_size, scheduler.kv_cache_tokens
        )
    model = spec.model_class(args, backend).to(device=device, dtype=dtype).eval()
    model.setup_caches(scheduler.batch_size, kv_cache_tokens=scheduler.kv_cache_tokens)
    return model


def setup_device(config: InferenceConfig) -> tuple[torch.device, Parallel]:
    """The device this process runs on and its parallel groups: the NPU (this rank's,
    set before HCCL starts) when there is one, else the CPU (gloo between ranks)."""
    on_npu = ops.npu_available()
    parallel = init_parallel(config.parallel_config, "npu" if on_npu else "cpu")
    if on_npu:
        return torch.device("npu", parallel.local_rank), parallel
    return torch.device("cpu"), parallel


def print_error(exc: BaseException) -> None:
    """One `error:` line on stderr, from rank 0 only: every rank reads the same YAML and
    launch (the same error), and a failure of one rank after that reaches every rank as
    RankFailed, naming it (parallel.on_every_rank)."""
    if not _first_rank():
        return
    message = " ".join(str(exc).split()) or type(exc).__name__
    print(f"error: {message}", file=sys.stderr)


MAX_MEMORY_BYTES = 2**40  # the interview's bound on weights + KV cache on one device


def check_memory(
    spec: ModelSpec, args, config: InferenceConfig, parallel: Parallel = SINGLE
) -> None:
    """Weights (counted on the meta device: nothing allocated) plus the KV cache the config
    asks for must fit the interview's bound on one device (this rank's share of both when
    split over ranks); checked before the model is built."""
    element = torch.empty((), dtype=getattr(torch, config.model_config.dtype)).element_size()
    with torch.device("meta"):
        shapes = spec.model_class(args, ops.load("portable"), parallel)
    weights = sum(p.numel() for p in shapes.parameters()) * element
    per_position = shapes.kv_elements_per_token() * element
    scheduler = config.scheduler_config
    if args.kv_cache == "paged":
        tokens, block = scheduler.kv_cache_tokens or args.kv_cache_tokens, args.block_size
        positions, sized_by = pool_blocks(tokens, block) * block, f"{BUDGET_KEY} {tokens:,}"
    else:
        positions = scheduler.batch_size * (args.max_seq_len + 1)
        sized_by = f"scheduler_config.batch_size {scheduler.batch_size:,} x max_seq_len"
    total = weights + positions * per_position
    if total > MAX_MEMORY_BYTES:
        raise ConfigError(
            f"weights {weights / 2**30:,.1f} GiB + KV cache {positions * per_position / 2**30:,.1f}"
            f" GiB ({sized_by}) exceed the {MAX_MEMORY_BYTES / 2**30:,.0f} GiB one device holds"
        )


def check_budget(
    args,
    config: InferenceConfig,
    tokens_per_row: int,
    batch_sizes: list[int] | None = None,
    what: str = f"{PROMPT_KEY} + {NEW_TOKENS_KEY}",
) -> None:
    """The KV budget must hold every row's worst case (`tokens_per_row` positions) at
    scheduler_config.batch_size (and each of `batch_sizes`): checked when the config is
    read, before anything is built. ConfigError names the YAML key to change."""
    scheduler = config.scheduler_config
    if args.kv_cache != "paged":  # a contiguous row owns max_seq_len positions
        if scheduler.kv_cache_tokens is not None:
            raise ConfigError(
                f"{BUDGET_KEY} sets a paged KV cache's budget; this package's cache is "
                "contiguous (batch_size x max_seq_len positions): remove the key"
            )
        return
    tokens, block = scheduler.kv_cache_tokens or args.kv_cache_tokens, args.block_size
    budget = pool_blocks(tokens, block) - 1
    for batch in [scheduler.batch_size, *(batch_sizes or [])]:
        need = request_blocks([tokens_per_row] * batch, block)
        if need > budget:
            raise ConfigError(
                f"{BUDGET_KEY} ({tokens} tokens: {budget} KV blocks of {block}) cannot hold "
                f"{batch} rows of {what} = {tokens_per_row} tokens ({need} blocks): raise it to "
                f"at least {need * block} in the YAML, or shorten the batch"
            )


def decode_steps(config: InferenceConfig) -> int:
    """Decode steps for scheduler_config.max_new_tokens new tokens: the prefill picks the
    first, each step one more (as generation.generate counts them)."""
    new_tokens = config.scheduler_config.max_new_tokens
    if new_tokens < 2:
        raise ConfigError(
            f"{NEW_TOKENS_KEY} ({new_tokens}): the runner times decode, which needs at least 2 "
            "new tokens (the prefill's and one decode step's)"
        )
    return new_tokens - 1


def cache_len(model: CausalLM) -> int:
    """Positions the KV cache (and RoPE table) hold: host ints from shapes, no device sync."""
    return cache_shape(model)[1]


@torch.inference_mode()
def run(
    model: CausalLM,
    config: InferenceConfig,
    prompt_len: int,
    steps: int,
    portable_backend: str = "aot_eager",
    prompt: torch.Tensor | None = None,
    prompts: list[list[int]] | None = None,
    eos_token_ids: set[int] | frozenset[int] = frozenset(),
) -> RunReport:
    """Generation (generation.generate: greedy, or sampled on the host as data_config asks):
    one warm-up pass (compiles decode), then a timed pass of up to `steps` decode steps.

    `prompts` (one token list per cache row, lengths may differ) or `prompt` (batch, len)
    or, with neither, random ids of `prompt_len`. Row b's prefill writes cache positions
    [0, len_b), decode step i position len_b + i, so the longest prompt + steps must be
    <= max_seq_len; else InputError before anything runs. A row stops early at one of
    `eos_token_ids` (the warm-up pass ignores them, so decode always compiles there).
    """
    batch = config.scheduler_config.batch_size
    if prompts is None and prompt is not None:
        prompts = prompt.tolist()
    if prompts is not None:
        prompt_len = max(len(p) for p in prompts)
    max_seq_len = cache_len(model)
    if prompt_len < 1 or steps < 1:
        raise InputError(f"prompt_len ({prompt_len}) and steps ({steps}) must be >= 1")
    check_fits(prompt_len, steps, max_seq_len, "prompt_len", "steps")
    if prompts is None:
        ids = torch.randint(0, model.args.vocab_size, (batch, prompt_len))
        prompts = ids.tolist()
    decode = compile_decode(model, config.model_config, portable_backend)

    def passes(new_tokens: int, eos) -> Generation:
        return generate(
            model,
            decode,
            prompts,
            max_new_tokens=new_tokens,
            eos_token_ids=eos,
            sampler=TokenSampler.from_config(config.data_config),  # the same seed every pass
            tensor_lengths=config.model_config.tensor_lengths,
        )

    graphs_before, breaks_before = graph_count(), graph_break_count()
    start = time.perf_counter()
    passes(2, frozenset())  # prefill and one decode step: compiles decode
    compile_s = time.perf_counter() - start
    warmup_graphs = graph_count() - graphs_before

    result = passes(steps + 1, eos_token_ids)
    return RunReport(
        compile_s=compile_s,
        prefill_ms=result.prefill_ms,
        decode_ms=result.decode_ms,
        warmup_graphs=warmup_graphs,
        recompiles=graph_count() - graphs_before - warmup_graphs,
        graph_breaks=graph_break_count() - breaks_before,
        tokens=result.tokens,
        stopped_on_eos=result.stopped_on_eos,
    )


class _Parser(argparse.ArgumentParser):
    """argparse whose errors are one `error:` line on stderr (exit 2), like every other
    bad input of the runner."""

    def error(self, message: str):
        self.exit(2, f"error: {message} (see --help)\n")


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def parser() -> argparse.ArgumentParser:
    parser = _Parser(description=" ".join(__doc__.split("\n\n")[0].split()))
    parser.add_argument("--config", required=True, help="YAML inference config")
    parser.add_argument(
        "--steps", type=_positive_int, help="decode steps (default: max_new_tokens)"
    )
    parser.add_argument("--prompt-len", type=_positive_int, help="default: input_truncated_len")
    parser.add_argument("--portable-backend", choices=PORTABLE_BACKENDS, default="aot_eager")
    source = parser.add_mutually_exclusive_group()
    source.add_argument(
        "--prompt",
        action="append",
        help="text prompt (needs the checkpoint's tokenizer); repeat it for rows of different "
        "prompts (the batch cycles through them)",
    )
    source.add_argument(
        "--token-ids",
        action="append",
        help="prompt token ids, e.g. 1,15043,29892; repeatable like --prompt",
    )
    return parser


def batch_prompts(
    texts: list[str] | None,
    token_ids: list[str] | None,
    model_path: str,
    batch_size: int,
    vocab_size: int,
):
    """(rows, tokenizer): one token list per batch row, cycling through the prompts given
    (their lengths may differ: generation.py prefills them row by row); rows None when no
    prompt was given."""
    given = texts if texts is not None else token_ids
    if given is not None and len(given) > batch_size:
        raise InputError(
            f"{len(given)} prompts for scheduler_config.batch_size {batch_size} (one per row)"
        )
    encoded, tokenizer = [], None
    for entry in given or [None]:
        ids, tokenizer = prompt_ids(
            model_path=model_path,
            prompt=entry if texts is not None else None,
            token_ids=entry if token_ids is not None else None,
            batch_size=1,
            vocab_size=vocab_size,
        )
        if ids is not None:
            encoded.append(ids[0].tolist())
    if not encoded:
        return None, tokenizer
    return [encoded[row % len(encoded)] for row in range(batch_size)], tokenizer


def main(spec: ModelSpec, argv: list[str] | None = None) -> int:
    """Run the config; bad input of any kind -> one `error:` line on stderr, exit 2."""
    args = parser().parse_args(argv)
    try:
        config = load_config(args.config)
        device, parallel = setup_device(config)
        return _main(spec, args, config, device, parallel)
    except (InputError, OSError, ImportError) as exc:
        print_error(exc)
        return 2


def _main(
    spec: ModelSpec,
    args: argparse.Namespace,
    config: InferenceConfig,
    device: torch.device,
    parallel: Parallel,
) -> int:
    prepared = on_every_rank(parallel, lambda: _prepare(spec, args, config, device, parallel))
    model, prompts, tokenizer, prompt_len, steps = prepared
    say = print if parallel.is_first else _silent
    mode = config.model_config.exe_mode
    if device.type == "cpu" and mode != "eager":
        mode += f" (portable {args.portable_backend} backend on CPU, not an NPU graph)"
    ranks = f", {parallel.world.size} ranks" if parallel.distributed else ""
    say(f"device {device}{ranks}, exe_mode {mode}, dynamic={config.model_config.dynamic}")
    report = run(
        model,
        config,
        prompt_len=prompt_len,
        steps=steps,
        portable_backend=args.portable_backend,
        prompts=prompts,
        eos_token_ids=eos_token_ids(config.model_config.model_path),
    )
    say(report.summary())
    for row, generated in enumerate(report.tokens):
        stop = " (EOS)" if report.stopped_on_eos[row] else ""
        say(f"row {row} tokens {generated}{stop}")
        if tokenizer is not None:
            say(f"row {row} text {tokenizer.decode(generated)!r}")
    if report.recompiles:
        if parallel.is_first:
            print("error: decode recompiled after warm-up", file=sys.stderr)
        return 1
    return 0


def _first_rank() -> bool:
    try:
        launch = launch_environment()
    except InputError:
        return True
    return launch is None or launch.rank == 0


def _silent(*_args, **_kwargs) -> None:
    return None


def _prepare(spec: ModelSpec, args, config: InferenceConfig, device, parallel: Parallel):
    """Everything before decode, each rank on its own (no collective): the checks, then
    the model. (model, prompts, tokenizer, prompt_len, steps)."""
    model_config = config.model_config
    # the architecture first (config.json only): lengths and prompt are checked against it
    # before any weight is loaded or memory allocated
    if model_config.model_path:
        model_args = model_args_from_hf(spec, model_config.model_path)
    else:
        model_args = spec.args
    prompts, tokenizer = batch_prompts(
        args.prompt,
        args.token_ids,
        model_config.model_path,
        config.scheduler_config.batch_size,
        model_args.vocab_size,
    )
    if prompts is not None:
        prompt_len = max(len(p) for p in prompts)
        prompt_key = "--prompt" if args.prompt is not None else "--token-ids"
        prompt_key += " length"
    elif args.prompt_len is not None:
        prompt_len, prompt_key = args.prompt_len, "--prompt-len"
    else:
        prompt_len, prompt_key = config.data_config.input_truncated_len, PROMPT_KEY
    if args.steps is not None:
        steps, steps_key = args.steps, "--steps"
    else:
        steps = decode_steps(config)
        steps_key = f"{NEW_TOKENS_KEY} ({steps + 1}) - 1"
    check_fits(prompt_len, steps, model_args.max_seq_len, prompt_key, steps_key)
    check_budget(model_args, config, prompt_len + steps, what=f"{prompt_key} + {steps_key}")
    check_parallel(model_args, config.parallel_config)
    check_memory(spec, model_args, config, parallel)

    set_task_queue_env(model_config)
    if device.type == "npu" and model_config.dtype not in NPU_DTYPES:
        raise ConfigError(
            f"model_config.dtype {model_config.dtype} runs on CPU only: the fused attention on "
            f"{model_config.platform_version} takes {'/'.join(NPU_DTYPES)}"
        )
    if model_config.with_ckpt:  # config validation: with_ckpt needs a model_path
        model = load_pretrained(
            spec,
            model_config.model_path,
            ops.load("npu" if device.type == "npu" else "portable"),
            dtype=model_config.dtype,
            device=device,
            batch_size=config.scheduler_config.batch_size,
            kv_cache_tokens=config.scheduler_config.kv_cache_tokens,
            parallel=parallel,
        )
    else:  # random weights; the architecture from config.json when model_path is set
        model = build_model(spec, model_args, config, device, parallel)
    return model, prompts, tokenizer, prompt_len, steps
