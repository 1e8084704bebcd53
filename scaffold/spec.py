"""Answers -> a validated model spec. The seed's graph-mode rules live here as errors.

Each rule names the answers it reads, so the interview can check it the moment the last
of them is given (and ask again), while `validate` checks every rule, in order, at the end.
"""

from __future__ import annotations

import keyword
import re
import sys
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

from .errors import UserError
from .questions import asked_questions

EXE_MODES = ("eager", "npugraph_ex", "ge_graph")
FA_INTERFACES = ("torch_npu", "torchair")
ROPE_SCALINGS = ("none", "linear", "llama3", "yarn")
DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4}
_NAME = re.compile(r"^[a-z][a-z0-9_]*$")
MAX_NAME_LEN = 64
# sys.stdlib_module_names leaves out the standard library's own `test` package.
_STDLIB = frozenset(sys.stdlib_module_names) | {"test"}
# Distributions a generated package imports, tests with or sits beside: a package of the
# same name would shadow (or be installed over) the real one.
ECOSYSTEM_NAMES = frozenset(
    {
        "torch", "torch_npu", "torchair", "torchvision", "torchaudio", "triton", "transformers",
        "tokenizers", "safetensors", "sentencepiece", "accelerate", "huggingface_hub",
        "numpy", "scipy", "sympy", "networkx", "filelock", "fsspec", "jinja2", "markupsafe",
        "yaml", "pyyaml", "pytest", "hypothesis", "ruff", "typer", "click", "copier", "packaging",
        "setuptools", "pip", "wheel", "hatchling", "vllm", "vllm_ascend", "mindspore", "acl",
        "scaffold", "ascend_scaffold", "conftest", "tests", "src", "build", "dist", "docs",
    }
)  # fmt: skip
# Upper bounds on sizes: far above any released dense decoder, low enough that a typo
# (an extra three zeros) is caught here instead of as a petabyte allocation later.
LIMITS = {
    "vocab_size": 2_097_152,
    "hidden_size": 65_536,
    "num_hidden_layers": 1_024,
    "num_attention_heads": 1_024,
    "num_key_value_heads": 1_024,
    "head_dim": 1_024,
    "intermediate_size": 524_288,
    "max_seq_len": 1_048_576,
    "batch_size": 4_096,
    "rope_original_max_position_embeddings": 1_048_576,
}
MAX_MEMORY_BYTES = 2**40  # weights + KV cache on the one device this package runs on


@dataclass(frozen=True)
class ModelSpec:
    model_name: str
    vocab_size: int
    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    intermediate_size: int
    rope_theta: float
    rope_scaling: str
    rope_scaling_factor: float
    rope_low_freq_factor: float
    rope_high_freq_factor: float
    rope_original_max_position_embeddings: int
    rope_beta_fast: float
    rope_beta_slow: float
    rope_attention_factor: float
    rope_truncate: bool
    rms_norm_eps: float
    tie_word_embeddings: bool
    qk_norm: bool
    attention_bias: bool
    max_seq_len: int
    dtype: str
    exe_mode: str
    fa_interface: str
    batch_size: int
    enable_cache_compile: bool
    enable_static_kernel: bool

    @property
    def enable_dynamic_graph(self) -> bool:
        """The seed's FA table: host List[int] lengths need dynamic=True under npugraph_ex
        (SymInt lengths, one graph); ge_graph with torchair's Tensor lengths compiles static."""
        return self.exe_mode == "npugraph_ex" and self.fa_interface == "torch_npu"

    @property
    def parameter_count(self) -> int:
        return parameter_count(asdict(self))

    @property
    def weight_bytes(self) -> int:
        return self.parameter_count * DTYPE_BYTES[self.dtype]

    @property
    def kv_cache_bytes(self) -> int:
        return kv_cache_bytes(asdict(self))

    def answers(self) -> dict[str, Any]:
        return asdict(self)


def parameter_count(a: Mapping[str, Any]) -> int:
    """Weights of the dense GQA decoder these answers describe."""
    hidden, head_dim = a["hidden_size"], a["head_dim"]
    q, kv = a["num_attention_heads"] * head_dim, a["num_key_value_heads"] * head_dim
    attention = hidden * (q + 2 * kv) + q * hidden
    if a["attention_bias"]:
        attention += q + 2 * kv
    if a["qk_norm"]:
        attention += 2 * head_dim
    layer = attention + 3 * hidden * a["intermediate_size"] + 2 * hidden
    embeddings = a["vocab_size"] * hidden * (1 if a["tie_word_embeddings"] else 2)
    return a["num_hidden_layers"] * layer + embeddings + hidden


def kv_cache_bytes(a: Mapping[str, Any]) -> int:
    """K and V buffers of every layer: (batch, kv_heads, max_seq_len, head_dim) each."""
    per_layer = 2 * a["batch_size"] * a["num_key_value_heads"] * a["max_seq_len"] * a["head_dim"]
    return a["num_hidden_layers"] * per_layer * DTYPE_BYTES[a["dtype"]]


def gib(n_bytes: int) -> str:
    return f"{n_bytes / 2**30:.2f} GiB" if n_bytes >= 2**30 else f"{n_bytes / 2**20:.1f} MiB"


# --- rules -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Rule:
    fields: tuple[str, ...]  # the answers it reads
    check: Callable[[Mapping[str, Any]], str | None]  # the error message, or None


RULES: list[Rule] = []


def rule(*fields: str):
    def register(check: Callable[[Mapping[str, Any]], str | None]):
        RULES.append(Rule(fields, check))
        return check

    return register


def name_problem(name: str) -> str | None:
    """Why `name` cannot be the generated package's import name, or None."""
    if not _NAME.match(name):
        return f"model_name must match ^[a-z][a-z0-9_]*$ (a Python package name), got {name!r}"
    if len(name) > MAX_NAME_LEN:
        return f"model_name must be at most {MAX_NAME_LEN} characters, got {len(name)}"
    if keyword.iskeyword(name):
        return f"model_name {name!r} is a Python keyword: the package could not be imported"
    if name in _STDLIB:
        return f"model_name {name!r} is a standard-library module: the package would shadow it"
    if name in ECOSYSTEM_NAMES:
        return (
            f"model_name {name!r} is the name of a package the generated one depends on or "
            "sits beside: installing it would shadow the real one"
        )
    return None


rule("model_name")(lambda a: name_problem(a["model_name"]))


def _bounded(name: str) -> None:
    limit = LIMITS[name]

    @rule(name)
    def check(a: Mapping[str, Any]) -> str | None:
        if a[name] < 1:
            return f"{name} must be >= 1, got {a[name]}"
        if a[name] > limit:
            return f"{name} must be <= {limit:,}, got {a[name]:,}"
        return None


for _name in ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads"):
    _bounded(_name)


@rule("num_attention_heads", "num_key_value_heads")
def _gqa(a: Mapping[str, Any]) -> str | None:
    heads, kv_heads = a["num_attention_heads"], a["num_key_value_heads"]
    if kv_heads < 1 or heads % kv_heads:
        return (
            f"num_attention_heads ({heads}) must be divisible by num_key_value_heads ({kv_heads})"
        )
    return None


@rule("head_dim")
def _head_dim(a: Mapping[str, Any]) -> str | None:
    head_dim = a["head_dim"]
    if head_dim < 2 or head_dim % 2:
        return f"head_dim must be an even number >= 2 (RoPE rotates halves), got {head_dim}"
    if head_dim > LIMITS["head_dim"]:
        return f"head_dim must be <= {LIMITS['head_dim']:,}, got {head_dim:,}"
    return None


_bounded("intermediate_size")


def _positive_float(name: str, below: float | None = None) -> None:
    @rule(name)
    def check(a: Mapping[str, Any]) -> str | None:
        if a[name] <= 0:
            return f"{name} must be > 0, got {a[name]}"
        if below is not None and a[name] >= below:
            return f"{name} must be < {below}, got {a[name]}"
        return None


@rule("rope_theta")
def _rope_theta(a: Mapping[str, Any]) -> str | None:
    if a["rope_theta"] <= 1:
        theta = a["rope_theta"]
        return f"rope_theta must be > 1 (RoPE's base; 1 makes every frequency equal), got {theta}"
    return None


@rule("rope_scaling", "rope_scaling_factor")
def _scaling_factor(a: Mapping[str, Any]) -> str | None:
    kind, factor = a["rope_scaling"], a["rope_scaling_factor"]
    if kind not in ROPE_SCALINGS:
        return f"rope_scaling must be one of {', '.join(ROPE_SCALINGS)}, got {kind!r}"
    if kind == "none":
        return None
    if factor <= 0:
        return f"rope_scaling_factor must be > 0, got {factor}"
    if kind == "yarn" and factor < 1:
        return f"yarn rope_scaling_factor must be >= 1 (YaRN extends the context), got {factor}"
    return None


@rule("rope_scaling", "rope_low_freq_factor", "rope_high_freq_factor")
def _llama3_bands(a: Mapping[str, Any]) -> str | None:
    if a["rope_scaling"] != "llama3":
        return None
    low, high = a["rope_low_freq_factor"], a["rope_high_freq_factor"]
    if low <= 0:
        return f"rope_low_freq_factor must be > 0, got {low}"
    if high <= low:
        return f"rope_high_freq_factor ({high}) must be > rope_low_freq_factor ({low})"
    return None


@rule("rope_scaling", "rope_original_max_position_embeddings")
def _original_context(a: Mapping[str, Any]) -> str | None:
    if a["rope_scaling"] not in ("llama3", "yarn"):
        return None
    name, limit = (
        "rope_original_max_position_embeddings",
        LIMITS["rope_original_max_position_embeddings"],
    )
    if not 1 <= a[name] <= limit:
        return f"{name} must be in [1, {limit:,}], got {a[name]:,}"
    return None


@rule("rope_scaling", "rope_beta_fast", "rope_beta_slow", "rope_attention_factor")
def _yarn(a: Mapping[str, Any]) -> str | None:
    if a["rope_scaling"] != "yarn":
        return None
    fast, slow = a["rope_beta_fast"], a["rope_beta_slow"]
    if fast <= 0:
        return f"rope_beta_fast must be > 0, got {fast}"
    if slow <= 0:
        return f"rope_beta_slow must be > 0, got {slow}"
    if slow > fast:
        return f"rope_beta_slow ({slow}) must be <= rope_beta_fast ({fast})"
    if a["rope_attention_factor"] < 0:
        return f"rope_attention_factor must be >= 0 (0: derived), got {a['rope_attention_factor']}"
    return None


_positive_float("rms_norm_eps", below=1.0)


@rule("max_seq_len")
def _max_seq_len(a: Mapping[str, Any]) -> str | None:
    if a["max_seq_len"] < 3:  # a prompt token and two decode steps
        length = a["max_seq_len"]
        return f"max_seq_len must be >= 3 (a prompt token and two decode steps), got {length}"
    if a["max_seq_len"] > LIMITS["max_seq_len"]:
        return f"max_seq_len must be <= {LIMITS['max_seq_len']:,}, got {a['max_seq_len']:,}"
    return None


@rule("exe_mode", "fa_interface")
def _fa_interface(a: Mapping[str, Any]) -> str | None:
    mode, fa = a["exe_mode"], a["fa_interface"]
    if mode not in EXE_MODES:
        return f"exe_mode must be one of {', '.join(EXE_MODES)}, got {mode!r}"
    if fa not in FA_INTERFACES:
        return f"fa_interface must be one of {', '.join(FA_INTERFACES)}, got {fa!r}"
    if fa == "torchair" and mode != "ge_graph":
        return (
            f"fa_interface=torchair (Tensor lengths) runs only in ge_graph mode, not {mode}; "
            "use fa_interface=torch_npu"
        )
    if fa == "torch_npu" and mode == "ge_graph":
        return (
            "ge_graph compiles with dynamic=False, so List[int] lengths from "
            "fa_interface=torch_npu would recompile every decode step; use fa_interface=torchair"
        )
    return None


_bounded("batch_size")


@rule("exe_mode", "enable_static_kernel")
def _static_kernel(a: Mapping[str, Any]) -> str | None:
    if a["enable_static_kernel"] and a["exe_mode"] != "npugraph_ex":
        return (
            f"enable_static_kernel is supported only with exe_mode=npugraph_ex, not {a['exe_mode']}"
        )
    return None


_MEMORY_FIELDS = (
    "vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
    "num_key_value_heads", "head_dim", "intermediate_size", "attention_bias", "qk_norm",
    "tie_word_embeddings", "max_seq_len", "dtype", "batch_size",
)  # fmt: skip


@rule(*_MEMORY_FIELDS)
def _memory(a: Mapping[str, Any]) -> str | None:
    weights = parameter_count(a) * DTYPE_BYTES[a["dtype"]]
    cache = kv_cache_bytes(a)
    if weights + cache > MAX_MEMORY_BYTES:
        return (
            f"these answers need {gib(weights)} of weights and {gib(cache)} of KV cache "
            f"(batch_size {a['batch_size']}, max_seq_len {a['max_seq_len']:,}), more than the "
            f"{gib(MAX_MEMORY_BYTES)} one device could hold"
        )
    return None


def check_answered(answers: Mapping[str, Any], name: str) -> None:
    """Check every rule that reads `name` and whose answers are all known now."""
    for item in RULES:
        if name in item.fields and all(f in answers for f in item.fields):
            message = item.check(answers)
            if message:
                raise UserError(message)


def validate(answers: dict[str, Any]) -> ModelSpec:
    """Check every rule in a fixed order; the first broken one raises UserError."""
    known = {q.name for q in asked_questions()}
    missing = sorted(known - set(answers))
    if missing:
        raise UserError(f"missing answer(s): {', '.join(missing)}")
    for item in RULES:
        message = item.check(answers)
        if message:
            raise UserError(message)
    unknown = sorted(str(name) for name in set(answers) - known)
    if unknown:
        raise UserError(f"unknown answer(s): {', '.join(unknown)}")
    return ModelSpec(**{name: answers[name] for name in known})
