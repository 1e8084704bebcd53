"""Answers -> a validated model spec. The seed's graph-mode rules live here as errors."""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from typing import Any

from .errors import UserError
from .questions import asked_questions

EXE_MODES = ("eager", "npugraph_ex", "ge_graph")
FA_INTERFACES = ("torch_npu", "torchair")
ROPE_SCALINGS = ("none", "linear", "llama3", "yarn")
_NAME = re.compile(r"^[a-z][a-z0-9_]*$")


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

    def answers(self) -> dict[str, Any]:
        return asdict(self)


def _positive(answers: dict[str, Any], *names: str) -> None:
    for name in names:
        if answers[name] < 1:
            raise UserError(f"{name} must be >= 1, got {answers[name]}")


def _check_rope_scaling(answers: dict[str, Any]) -> None:
    kind = answers["rope_scaling"]
    if kind not in ROPE_SCALINGS:
        raise UserError(f"rope_scaling must be one of {', '.join(ROPE_SCALINGS)}, got {kind!r}")
    if kind == "none":
        return
    factor = answers["rope_scaling_factor"]
    if factor <= 0:
        raise UserError(f"rope_scaling_factor must be > 0, got {factor}")
    if kind == "yarn" and factor < 1:
        raise UserError(
            f"yarn rope_scaling_factor must be >= 1 (YaRN extends the context), got {factor}"
        )
    if kind == "llama3":
        low, high = answers["rope_low_freq_factor"], answers["rope_high_freq_factor"]
        if low <= 0:
            raise UserError(f"rope_low_freq_factor must be > 0, got {low}")
        if high <= low:
            raise UserError(
                f"rope_high_freq_factor ({high}) must be > rope_low_freq_factor ({low})"
            )
    if kind in ("llama3", "yarn"):
        original = answers["rope_original_max_position_embeddings"]
        if original < 1:
            raise UserError(f"rope_original_max_position_embeddings must be >= 1, got {original}")
    if kind == "yarn":
        fast, slow = answers["rope_beta_fast"], answers["rope_beta_slow"]
        if fast <= 0:
            raise UserError(f"rope_beta_fast must be > 0, got {fast}")
        if slow <= 0:
            raise UserError(f"rope_beta_slow must be > 0, got {slow}")
        if slow > fast:
            raise UserError(f"rope_beta_slow ({slow}) must be <= rope_beta_fast ({fast})")
        if answers["rope_attention_factor"] < 0:
            raise UserError(
                "rope_attention_factor must be >= 0 (0: derived), "
                f"got {answers['rope_attention_factor']}"
            )


def validate(answers: dict[str, Any]) -> ModelSpec:
    """Check every rule in a fixed order; the first broken one raises UserError."""
    name = answers["model_name"]
    if not _NAME.match(name):
        raise UserError(
            f"model_name must match ^[a-z][a-z0-9_]*$ (a Python package name), got {name!r}"
        )
    _positive(
        answers,
        "vocab_size",
        "hidden_size",
        "num_hidden_layers",
        "num_attention_heads",
        "num_key_value_heads",
        "intermediate_size",
        "batch_size",
    )
    heads, kv_heads = answers["num_attention_heads"], answers["num_key_value_heads"]
    if heads % kv_heads:
        raise UserError(
            f"num_attention_heads ({heads}) must be divisible by num_key_value_heads ({kv_heads})"
        )
    if answers["head_dim"] < 2 or answers["head_dim"] % 2:
        raise UserError(
            f"head_dim must be an even number >= 2 (RoPE rotates halves), got {answers['head_dim']}"
        )
    for name in ("rope_theta", "rms_norm_eps"):
        if answers[name] <= 0:
            raise UserError(f"{name} must be > 0, got {answers[name]}")
    _check_rope_scaling(answers)
    if answers["max_seq_len"] < 2:
        raise UserError(f"max_seq_len must be >= 2, got {answers['max_seq_len']}")

    mode, fa = answers["exe_mode"], answers["fa_interface"]
    if mode not in EXE_MODES:
        raise UserError(f"exe_mode must be one of {', '.join(EXE_MODES)}, got {mode!r}")
    if fa not in FA_INTERFACES:
        raise UserError(f"fa_interface must be one of {', '.join(FA_INTERFACES)}, got {fa!r}")
    if answers["enable_static_kernel"] and mode != "npugraph_ex":
        raise UserError(
            f"enable_static_kernel is supported only with exe_mode=npugraph_ex, not {mode}"
        )
    if fa == "torchair" and mode != "ge_graph":
        raise UserError(
            f"fa_interface=torchair (Tensor lengths) runs only in ge_graph mode, not {mode}; "
            "use fa_interface=torch_npu"
        )
    if fa == "torch_npu" and mode == "ge_graph":
        raise UserError(
            "ge_graph compiles with dynamic=False, so List[int] lengths from "
            "fa_interface=torch_npu would recompile every decode step; use fa_interface=torchair"
        )
    known = {q.name for q in asked_questions()}
    unknown = sorted(set(answers) - known)
    if unknown:
        raise UserError(f"unknown answer(s): {', '.join(unknown)}")
    return ModelSpec(**{q.name: answers[q.name] for q in asked_questions()})
