"""YAML inference config with cann-recipes-infer's sections and checks.

Validation follows ModelConfig._validate's order: platform_version, exe_mode,
enable_static_kernel, then the FA-interface pairing this package adds; a ge_graph
config asking for a dynamic graph only warns (GE always compiles static).
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field, fields
from pathlib import Path

import yaml

log = logging.getLogger(__name__)

EXE_MODES = ("eager", "ge_graph", "npugraph_ex")
PLATFORMS = ("A2", "A3", "950")
FA_INTERFACES = ("torch_npu", "torchair")
DTYPES = ("bfloat16", "float16", "float32")


@dataclass
class ModelConfig:
    model_name: str = "model"
    model_path: str = ""
    output_path: str = ""
    dtype: str = "bfloat16"
    with_ckpt: bool = False
    platform_version: str = "A3"
    exe_mode: str = "eager"
    fa_interface: str = "torch_npu"
    enable_cache_compile: bool = False
    enable_static_kernel: bool = False
    enable_dynamic_graph: bool = True

    def validate(self) -> None:
        if self.platform_version not in PLATFORMS:
            raise ValueError(
                f"model_config.platform_version must be one of {PLATFORMS}, "
                f"got {self.platform_version!r}"
            )
        if self.exe_mode not in EXE_MODES:
            raise ValueError(
                f"model_config.exe_mode must be one of {EXE_MODES}, got {self.exe_mode!r}"
            )
        if self.enable_static_kernel and self.exe_mode != "npugraph_ex":
            raise ValueError(
                "model_config.enable_static_kernel is supported only with exe_mode=npugraph_ex, "
                f"got exe_mode={self.exe_mode!r}"
            )
        if self.fa_interface not in FA_INTERFACES:
            raise ValueError(
                f"model_config.fa_interface must be one of {FA_INTERFACES}, "
                f"got {self.fa_interface!r}"
            )
        if self.fa_interface == "torchair" and self.exe_mode != "ge_graph":
            raise ValueError(
                "model_config.fa_interface=torchair (Tensor lengths) runs only in ge_graph mode, "
                f"got exe_mode={self.exe_mode!r}"
            )
        if self.fa_interface == "torch_npu" and self.exe_mode == "ge_graph":
            raise ValueError(
                "model_config.fa_interface=torch_npu passes List[int] lengths, which recompile "
                "every step under ge_graph (dynamic=False); use fa_interface=torchair"
            )
        if self.dtype not in DTYPES:
            raise ValueError(f"model_config.dtype must be one of {DTYPES}, got {self.dtype!r}")
        if self.exe_mode == "ge_graph" and self.enable_dynamic_graph:
            log.warning(
                "model_config.enable_dynamic_graph is ignored by ge_graph (static graph only)"
            )

    @property
    def tensor_lengths(self) -> bool:
        """Decode passes Tensor lengths (torchair FIA) instead of host lists."""
        return self.fa_interface == "torchair"

    @property
    def dynamic(self) -> bool:
        """The `dynamic` passed to torch.compile for decode."""
        return self.exe_mode == "npugraph_ex" and self.enable_dynamic_graph


@dataclass
class DataConfig:
    dataset: str = "default"
    input_truncated_len: int = 256
    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 0
    seed: int | None = None

    def validate(self) -> None:
        if self.input_truncated_len < 1:
            raise ValueError(
                f"data_config.input_truncated_len must be >= 1, got {self.input_truncated_len}"
            )
        if self.temperature < 0:
            raise ValueError(f"data_config.temperature must be >= 0, got {self.temperature}")
        if not 0 <= self.top_p <= 1:
            raise ValueError(f"data_config.top_p must be in [0, 1], got {self.top_p}")
        if self.top_k < 0:
            raise ValueError(f"data_config.top_k must be >= 0, got {self.top_k}")


@dataclass
class ParallelConfig:
    world_size: int = 1
    attn_tp_size: int = 1
    moe_tp_size: int = 1
    embed_tp_size: int = 1
    lmhead_tp_size: int = 1
    dense_tp_size: int = 1

    def validate(self) -> None:
        if self.world_size <= 0:
            raise ValueError(f"parallel_config.world_size must be > 0, got {self.world_size}")
        for f in fields(self):
            size = getattr(self, f.name)
            if f.name != "world_size" and (size <= 0 or self.world_size % size):
                raise ValueError(
                    f"parallel_config.{f.name} ({size}) must divide world_size ({self.world_size})"
                )
        if self.world_size != 1:
            raise ValueError(
                f"parallel_config.world_size={self.world_size}: this package runs on one device"
            )


@dataclass
class SchedulerConfig:
    batch_size: int = 1
    max_new_tokens: int = 32

    def validate(self) -> None:
        if self.batch_size < 1:
            raise ValueError(f"scheduler_config.batch_size must be >= 1, got {self.batch_size}")
        if self.max_new_tokens < 1:
            raise ValueError(
                f"scheduler_config.max_new_tokens must be >= 1, got {self.max_new_tokens}"
            )


@dataclass
class InferenceConfig:
    model_config: ModelConfig = field(default_factory=ModelConfig)
    data_config: DataConfig = field(default_factory=DataConfig)
    parallel_config: ParallelConfig = field(default_factory=ParallelConfig)
    scheduler_config: SchedulerConfig = field(default_factory=SchedulerConfig)

    def validate(self) -> None:
        for f in fields(self):
            getattr(self, f.name).validate()


_SECTIONS = {
    "model_config": ModelConfig,
    "data_config": DataConfig,
    "parallel_config": ParallelConfig,
    "scheduler_config": SchedulerConfig,
}


def _check_type(name: str, value, default) -> None:
    if default is None or value is None:
        return
    expected = float if isinstance(default, float) else type(default)
    ok = isinstance(value, expected) and not (expected is int and isinstance(value, bool))
    if expected is float and isinstance(value, int) and not isinstance(value, bool):
        ok = True
    if not ok:
        raise ValueError(f"{name} must be {expected.__name__}, got {value!r}")


def _section(cls, name: str, raw: dict):
    values = raw.get(name) or {}
    if not isinstance(values, dict):
        raise ValueError(f"{name} must be a mapping, got {type(values).__name__}")
    defaults = cls()
    known = {f.name for f in fields(cls)}
    unknown = sorted(set(values) - known)
    if unknown:  # stricter than cann-recipes-infer, which ignores them: catches typos
        raise ValueError(f"{name}: unknown key(s) {', '.join(unknown)}")
    for key, value in values.items():
        _check_type(f"{name}.{key}", value, getattr(defaults, key))
    return cls(**values)


def load_config(path: str | Path) -> InferenceConfig:
    """Read and validate a YAML config; a bad value raises ValueError naming its field."""
    raw = yaml.safe_load(Path(path).read_text()) or {}
    if not isinstance(raw, dict):
        raise ValueError(f"{path}: top level must be a mapping of sections")
    unknown = sorted(set(raw) - set(_SECTIONS))
    if unknown:
        raise ValueError(f"{path}: unknown section(s) {', '.join(unknown)}")
    config = InferenceConfig(**{name: _section(cls, name, raw) for name, cls in _SECTIONS.items()})
    config.validate()
    return config


def set_task_queue_env(config: ModelConfig) -> None:
    """TASK_QUEUE_ENABLE=1 for npugraph_ex or Ascend 950 (npugraph_ex accepts only 0/1),
    else 2 (eager's host-side optimisation), as cann-recipes-infer sets it."""
    one = config.exe_mode == "npugraph_ex" or config.platform_version == "950"
    os.environ["TASK_QUEUE_ENABLE"] = "1" if one else "2"
