"""Answers -> a validated model spec. The seed's graph-mode rules live here as errors.

Each rule names the answers it reads, so the interview can check it the moment the last
of them is given (and ask again), while `validate` checks every rule, in order, at the end.
"""

from __future__ import annotations

import keyword
import sys
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from types import SimpleNamespace
from typing import Any

from ascend_runtime.config import ConfigError, ParallelConfig
from ascend_runtime.hf_config import moe_layers as runtime_moe_layers
from ascend_runtime.hf_config import parse_layer_list
from ascend_runtime.parallel_sizes import check_parallel

from .errors import UserError
from .questions import asked_questions, load_questions, question, with_computed

DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4}
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
MAX_MEMORY_BYTES = 2**40  # weights + KV cache on the one device this package runs on


@dataclass(frozen=True)
class ModelSpec:
    model_name: str
    family: str
    vocab_size: int
    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    intermediate_size: int
    q_lora_rank: int
    kv_lora_rank: int
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int
    num_experts: int
    num_experts_per_tok: int
    moe_intermediate_size: int
    norm_topk_prob: bool
    decoder_sparse_step: int
    mlp_only_layers: str
    shared_expert_intermediate_size: int
    shared_expert_gate: bool
    n_shared_experts: int
    first_k_dense_replace: int
    moe_layer_freq: int
    topk_method: str
    n_group: int
    topk_group: int
    routed_scaling_factor: float
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
    rope_mscale_all_dim: float
    rope_interleave: bool
    rms_norm_eps: float
    tie_word_embeddings: bool
    qk_norm: bool
    attention_bias: bool
    max_seq_len: int
    platform: str
    dtype: str
    exe_mode: str
    fa_interface: str
    batch_size: int
    world_size: int
    attn_tp_size: int
    dense_tp_size: int
    moe_tp_size: int
    embed_tp_size: int
    lmhead_tp_size: int
    kv_cache: str
    block_size: int
    kv_cache_tokens: int
    enable_cache_compile: bool
    enable_static_kernel: bool

    @property
    def enable_dynamic_graph(self) -> bool:
        """copier.yml's computed value (the seed's FA table): host List[int] lengths need
        dynamic=True under npugraph_ex; torchair's Tensor lengths compile static."""
        return self.computed["enable_dynamic_graph"]

    @property
    def computed(self) -> dict[str, Any]:
        """The answers with copier.yml's computed values (what the template sees)."""
        return with_computed(self.answers())

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

    def copier_data(self) -> dict[str, Any]:
        """The answers of the questions that apply: copier checks the validator of every
        answer it is given, also of a question whose `when` is false (a contiguous cache's
        `block_size`); it renders those with their defaults."""
        known: dict[str, Any] = {}
        data: dict[str, Any] = {}
        answers = self.answers()
        for item in load_questions():
            value = answers[item.name] if item.asked else item.default_for(known)
            known[item.name] = value
            if item.asked and item.applies(known):
                data[item.name] = value
        return data


def _as_model_args(a: Mapping[str, Any]) -> SimpleNamespace:
    """The answers as the runtime's checks read a ModelArgs (attributes; mlp_only_layers
    parsed from the interview's text), for the runtime functions the scaffold shares."""
    return SimpleNamespace(
        **{**a, "mlp_only_layers": parse_layer_list(a.get("mlp_only_layers", ""))}
    )


def moe_layers(a: Mapping[str, Any]) -> tuple[int, ...]:
    """The MoE layers of family moe or mla answers (none for dense): the runtime's rule
    (ascend_runtime.hf_config.moe_layers), on the answers."""
    return runtime_moe_layers(_as_model_args(a))


def _swiglu(hidden: int, intermediate: int) -> int:
    return 3 * hidden * intermediate


PARALLEL_SIZES = (
    "world_size", "attn_tp_size", "dense_tp_size", "moe_tp_size", "embed_tp_size",
    "lmhead_tp_size",
)  # fmt: skip


def _size(a: Mapping[str, Any], name: str) -> int:
    """A parallel size of the answers (1 for answers from before they were asked)."""
    return a.get(name, 1)


def local_kv_heads(a: Mapping[str, Any]) -> int:
    """KV heads one rank holds under attention TP (ascend_runtime.parallel.local_kv_heads):
    its share, or one replicated head when there are fewer KV heads than ranks."""
    return max(a["num_key_value_heads"] // _size(a, "attn_tp_size"), 1)


def _mla_parameter_count(a: Mapping[str, Any]) -> int:
    """Weights of the MLA decoder (DeepSeek) these answers describe, on one rank: the head-
    sharded projections split over attn_tp_size, the latent ones whole on every rank."""
    hidden, tp = a["hidden_size"], _size(a, "attn_tp_size")
    heads = a["num_attention_heads"] // tp
    qk = a["qk_nope_head_dim"] + a["qk_rope_head_dim"]
    latent, rank = a["kv_lora_rank"], a["q_lora_rank"]
    query = hidden * heads * qk if not rank else hidden * rank + rank + rank * heads * qk
    attention = (
        query
        + hidden * (latent + a["qk_rope_head_dim"])
        + latent
        + latent * heads * (a["qk_nope_head_dim"] + a["v_head_dim"])
        + heads * a["v_head_dim"] * hidden
    )
    return _decoder_parameter_count(a, attention)


def parameter_count(a: Mapping[str, Any]) -> int:
    """Weights of the decoder (dense, MoE or MLA) these answers describe, on one rank of
    the parallel sizes (ascend_runtime/parallel.py's split; all of them with world_size 1)."""
    if a["family"] == "mla":
        return _mla_parameter_count(a)
    hidden, head_dim, tp = a["hidden_size"], a["head_dim"], _size(a, "attn_tp_size")
    q, kv = a["num_attention_heads"] * head_dim // tp, local_kv_heads(a) * head_dim
    attention = hidden * (q + 2 * kv) + q * hidden
    if a["attention_bias"]:
        attention += q + 2 * kv
    if a["qk_norm"]:
        attention += 2 * head_dim
    return _decoder_parameter_count(a, attention)


def _decoder_parameter_count(a: Mapping[str, Any], attention: int) -> int:
    """Everything but attention, on one rank: dense MLPs over dense_tp_size, routed and
    shared experts over every rank (experts over EP, their width over moe_tp_size), the
    router whole, the vocabulary over embed_tp_size / lmhead_tp_size."""
    hidden, world = a["hidden_size"], _size(a, "world_size")
    dense = _swiglu(hidden, a["intermediate_size"]) // _size(a, "dense_tp_size")
    moe = 0
    if a["family"] == "mla":
        moe_width = a["moe_intermediate_size"]
        moe = a["num_experts"] * _swiglu(hidden, moe_width) // world + a["num_experts"] * hidden
        moe += _swiglu(hidden, moe_width * a["n_shared_experts"]) // world
        if a["topk_method"] == "noaux_tc":
            moe += a["num_experts"]  # e_score_correction_bias
    elif a["family"] == "moe":
        experts = a["num_experts"]
        moe = experts * _swiglu(hidden, a["moe_intermediate_size"]) // world + experts * hidden
        shared = a["shared_expert_intermediate_size"]
        if shared:
            moe += _swiglu(hidden, shared) // world + (hidden if a["shared_expert_gate"] else 0)
    layers, n_moe = a["num_hidden_layers"], len(moe_layers(a))
    blocks = layers * (attention + 2 * hidden) + (layers - n_moe) * dense + n_moe * moe
    vocab = a["vocab_size"] * hidden
    embeddings = vocab // _size(a, "embed_tp_size")
    if not a["tie_word_embeddings"]:
        embeddings += vocab // _size(a, "lmhead_tp_size")
    return blocks + embeddings + hidden


def paged_blocks(a: Mapping[str, Any]) -> int:
    """Blocks of a paged cache's budget, the null block not included
    (ascend_runtime.block_allocator.pool_blocks adds it)."""
    return -(-a["kv_cache_tokens"] // a["block_size"])


# The contiguous cache's spare position per row, past max_seq_len, that decode never writes
# (ascend_runtime.kv_cache.SPARE_POSITIONS, which says why: it keeps the step that fills
# the cache from recompiling).
CACHE_SPARE_POSITIONS = 1


def kv_cache_tokens(a: Mapping[str, Any]) -> int:
    """Token positions the KV cache holds: batch x (max_seq_len + the spare) (contiguous),
    or the paged pool's blocks, the null block included."""
    if a.get("kv_cache") == "paged":
        return (paged_blocks(a) + 1) * a["block_size"]
    return a["batch_size"] * (a["max_seq_len"] + CACHE_SPARE_POSITIONS)


def kv_widths(a: Mapping[str, Any]) -> tuple[int, ...]:
    """Elements cached per token per layer on one rank, per cache tensor (what
    ascend_runtime.model.CausalLM.kv_elements_per_token counts on the model): K and V of
    the rank's KV heads x head_dim, or MLA's latent and rope key (whole on every rank)."""
    if a["family"] == "mla":
        return (a["kv_lora_rank"], a["qk_rope_head_dim"])
    width = local_kv_heads(a) * a["head_dim"]
    return (width, width)


def kv_bytes_per_token(a: Mapping[str, Any]) -> int:
    return a["num_hidden_layers"] * sum(kv_widths(a)) * DTYPE_BYTES[a["dtype"]]


def gqa_equivalent_kv_bytes_per_token(a: Mapping[str, Any]) -> int:
    """What MLA's heads would cache as plain K and V (every head's qk and v dims)."""
    per_head = a["qk_nope_head_dim"] + a["qk_rope_head_dim"] + a["v_head_dim"]
    return a["num_hidden_layers"] * a["num_attention_heads"] * per_head * DTYPE_BYTES[a["dtype"]]


def kv_cache_bytes(a: Mapping[str, Any]) -> int:
    """The cache buffers of every layer, kv_widths elements per token position."""
    return kv_cache_tokens(a) * kv_bytes_per_token(a)


def gib(n_bytes: int) -> str:
    return f"{n_bytes / 2**30:.2f} GiB" if n_bytes >= 2**30 else f"{n_bytes / 2**20:.1f} MiB"


# --- rules ---------------------------------------------------------------------------------
# The graph-mode and range rules are copier.yml's validators (questions.Question.problem).
# Here only what Jinja cannot say: names that shadow installed modules, and memory.


@dataclass(frozen=True)
class Rule:
    fields: tuple[str, ...]  # the answers it reads
    check: Callable[[Mapping[str, Any]], str | None]  # the error message, or None


def name_problem(name: str) -> str | None:
    """Why `name`, already a valid identifier (copier.yml's validator), would shadow
    something or fail to import as the generated package's name; None when it is safe."""
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


def _memory(a: Mapping[str, Any]) -> str | None:
    """Weights + KV cache on one device; a paged cache is checked once its budget is known."""
    if a["kv_cache"] == "paged" and "kv_cache_tokens" not in a:
        return None
    weights = parameter_count(a) * DTYPE_BYTES[a["dtype"]]
    cache = kv_cache_bytes(a)
    if weights + cache > MAX_MEMORY_BYTES:
        sized_by = (
            f"kv_cache_tokens {a['kv_cache_tokens']:,}"
            if a["kv_cache"] == "paged"
            else f"batch_size {a['batch_size']}, max_seq_len {a['max_seq_len']:,}"
        )
        return (
            f"these answers need {gib(weights)} of weights and {gib(cache)} of KV cache "
            f"({sized_by}){_per_rank(a)}, more than the {gib(MAX_MEMORY_BYTES)} one device "
            "could hold"
        )
    return None


def _per_rank(a: Mapping[str, Any]) -> str:
    return f" on each of {a['world_size']} ranks" if a.get("world_size", 1) > 1 else ""


def _moe_layers_problem(a: Mapping[str, Any]) -> str | None:
    if a["family"] == "moe" and not moe_layers(a):
        return (
            f"no layer is MoE (decoder_sparse_step {a['decoder_sparse_step']}, mlp_only_layers "
            f"'{a['mlp_only_layers']}'): choose family dense for a model without experts"
        )
    return None


def _parallel_problem(size: str) -> Callable[[Mapping[str, Any]], str | None]:
    """The model must split as the sizes say: the runtime's own check at load time
    (ascend_runtime.parallel_sizes.check_parallel), run on the answers once `size` is known (the
    sizes after it still 1), so a problem is reported at the size that causes it."""
    known = PARALLEL_SIZES[: PARALLEL_SIZES.index(size) + 1]

    def check(a: Mapping[str, Any]) -> str | None:
        if a["world_size"] == 1:
            return None
        sizes = ParallelConfig(**{k: a[k] for k in known})
        try:
            check_parallel(_as_model_args(a), sizes)
        except ConfigError as exc:
            return str(exc)
        return None

    return check


_MODEL_FIELDS = (
    "vocab_size", "num_attention_heads", "num_key_value_heads", "intermediate_size",
    "num_hidden_layers", "tie_word_embeddings",
)  # fmt: skip


_MOE_FIELDS = (
    "family", "num_experts", "num_experts_per_tok", "moe_intermediate_size",
    "decoder_sparse_step", "mlp_only_layers", "shared_expert_intermediate_size",
    "shared_expert_gate", "q_lora_rank", "kv_lora_rank", "qk_nope_head_dim",
    "qk_rope_head_dim", "v_head_dim", "n_shared_experts", "first_k_dense_replace",
    "moe_layer_freq", "topk_method",
)  # fmt: skip
_MEMORY_FIELDS = (
    *_MOE_FIELDS,
    "vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
    "num_key_value_heads", "head_dim", "intermediate_size", "attention_bias", "qk_norm",
    "tie_word_embeddings", "max_seq_len", "dtype", "batch_size", *PARALLEL_SIZES, "kv_cache",
)  # fmt: skip
_PAGED_MEMORY_FIELDS = (*_MEMORY_FIELDS, "block_size", "kv_cache_tokens")
RULES = (
    Rule(("model_name",), lambda a: name_problem(a["model_name"])),
    Rule(("family", "num_hidden_layers", "decoder_sparse_step", "mlp_only_layers"),
         _moe_layers_problem),
    *(Rule((*_MOE_FIELDS, *_MODEL_FIELDS, *PARALLEL_SIZES[: i + 1]), _parallel_problem(size))
      for i, size in enumerate(PARALLEL_SIZES[1:], start=1)),
    Rule(_MEMORY_FIELDS, _memory),
    Rule(_PAGED_MEMORY_FIELDS, _memory),
)  # fmt: skip


def check_answered(answers: Mapping[str, Any], name: str) -> None:
    """Check the rules that `name`'s answer decides, given the answers before it: its
    copier.yml validator, then the rules here whose answers are all known now."""
    message = question(name).problem(dict(answers))
    if message:
        raise UserError(message)
    for item in RULES:
        if name in item.fields and all(f in answers for f in item.fields):
            message = item.check(answers)
            if message:
                raise UserError(message)


def validate(answers: dict[str, Any]) -> ModelSpec:
    """Check every rule in question order (as the interview does); the first broken one
    raises UserError."""
    missing = sorted({q.name for q in asked_questions()} - set(answers))
    if missing:
        raise UserError(f"missing answer(s): {', '.join(missing)}")
    so_far: dict[str, Any] = {}
    for item in load_questions():
        if not item.asked:
            so_far[item.name] = item.default_for(so_far)
            continue
        so_far[item.name] = answers[item.name]
        if item.applies(so_far):
            check_answered(so_far, item.name)
    unknown = sorted(str(name) for name in set(answers) - set(so_far))
    if unknown:
        raise UserError(f"unknown answer(s): {', '.join(unknown)}")
    return ModelSpec(**{q.name: so_far[q.name] for q in asked_questions()})
