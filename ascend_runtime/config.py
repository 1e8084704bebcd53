"""The runtime YAML config (how the model runs), with cann-recipes-infer's sections and checks;
the architecture is in architecture.py.

Validation follows ModelConfig._validate's order: platform_version, exe_mode,
enable_static_kernel, then the FA-interface pairing this package adds; a ge_graph
config asking for a dynamic graph only warns (GE always compiles static).

Every problem with the file (unreadable, not YAML, a wrong type, a bad value) raises
ConfigError, one line naming the file or the `section.key`; the runner prints it and
exits 2.
"""

from __future__ import annotations

import logging
import math
import os
import types
import typing
from dataclasses import dataclass, field, fields
from pathlib import Path

import yaml

log = logging.getLogger(__name__)

EXE_MODES = ("eager", "ge_graph", "npugraph_ex")
PLATFORMS = ("A2", "A3", "950")
FA_INTERFACES = ("torch_npu", "torchair")
DTYPES = ("bfloat16", "float16", "float32")
PROMPT_KEY = "data_config.input_truncated_len"
NEW_TOKENS_KEY = "scheduler_config.max_new_tokens"


class InputError(ValueError):
    """Bad user input (config, checkpoint, prompt, lengths): the runner prints the message
    as one `error:` line and exits 2, without a traceback."""


class ConfigError(InputError):
    """The YAML inference config is unreadable or invalid; the message names the file or key."""


# The interview's bounds (ascend-scaffold's copier.yml), applied again when the YAML is read:
# a typo fails here, in one line, not as an allocation the host cannot make.
MAX_BATCH = 4096
MAX_POSITIONS = 1_048_576  # max_seq_len's bound: prompt and new tokens each fit in it
MAX_KV_CACHE_TOKENS = 1_073_741_824
MAX_TOP_K = 2_097_152  # vocab_size's bound
MAX_SEED = 2**63 - 1  # an int64: what torch.Generator.manual_seed and numpy take


def _bounded(key: str, value, low, high) -> None:
    if not low <= value <= high:
        raise ConfigError(f"{key} must be in [{low:,}, {high:,}], got {value:,}")


def check_fits(
    prompt_len: int,
    new_tokens: int,
    max_seq_len: int,
    prompt_key: str = PROMPT_KEY,
    new_tokens_key: str = NEW_TOKENS_KEY,
) -> None:
    """Prefill writes cache positions [0, prompt_len) and each decode step one more, so
    prompt_len + new_tokens decode steps must be <= max_seq_len (the KV cache length)."""
    if prompt_len + new_tokens > max_seq_len:
        raise ConfigError(
            f"{prompt_key} ({prompt_len}) + {new_tokens_key} ({new_tokens}) = "
            f"{prompt_len + new_tokens} exceeds the model's max_seq_len ({max_seq_len}): "
            f"prefill fills {prompt_len} KV-cache positions and each decode step one more"
        )


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
            raise ConfigError(
                f"model_config.platform_version must be one of {PLATFORMS}, "
                f"got {self.platform_version!r}"
            )
        if self.exe_mode not in EXE_MODES:
            raise ConfigError(
                f"model_config.exe_mode must be one of {EXE_MODES}, got {self.exe_mode!r}"
            )
        if self.enable_static_kernel and self.exe_mode != "npugraph_ex":
            raise ConfigError(
                "model_config.enable_static_kernel is supported only with exe_mode=npugraph_ex, "
                f"got exe_mode={self.exe_mode!r}"
            )
        if self.fa_interface not in FA_INTERFACES:
            raise ConfigError(
                f"model_config.fa_interface must be one of {FA_INTERFACES}, "
                f"got {self.fa_interface!r}"
            )
        if self.fa_interface == "torchair" and self.exe_mode != "ge_graph":
            raise ConfigError(
                "model_config.fa_interface=torchair (Tensor lengths) runs only in ge_graph mode, "
                f"got exe_mode={self.exe_mode!r}"
            )
        if self.fa_interface == "torch_npu" and self.exe_mode == "ge_graph":
            raise ConfigError(
                "model_config.fa_interface=torch_npu passes List[int] lengths, which recompile "
                "every step under ge_graph (dynamic=False); use fa_interface=torchair"
            )
        if self.dtype not in DTYPES:
            raise ConfigError(f"model_config.dtype must be one of {DTYPES}, got {self.dtype!r}")
        if self.with_ckpt and not self.model_path:
            raise ConfigError(
                "model_config.with_ckpt is true but model_path is empty "
                "(set model_path to a local HF checkpoint directory, or with_ckpt: false)"
            )
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
        _bounded("data_config.input_truncated_len", self.input_truncated_len, 1, MAX_POSITIONS)
        if self.temperature < 0:
            raise ConfigError(f"data_config.temperature must be >= 0, got {self.temperature}")
        if not 0 <= self.top_p <= 1:
            raise ConfigError(f"data_config.top_p must be in [0, 1], got {self.top_p}")
        _bounded("data_config.top_k", self.top_k, 0, MAX_TOP_K)
        if self.seed is not None:
            _bounded("data_config.seed", self.seed, 0, MAX_SEED)


@dataclass
class ParallelConfig:
    """cann-recipes-infer's parallel sizes (ascend_runtime/parallel.py uses them): ranks,
    and how many of them split attention heads, dense MLPs, the experts' intermediate size
    (expert parallel = world_size / moe_tp_size), the embedding and the lm_head."""

    world_size: int = 1
    attn_tp_size: int = 1
    moe_tp_size: int = 1
    embed_tp_size: int = 1
    lmhead_tp_size: int = 1
    dense_tp_size: int = 1

    def validate(self) -> None:
        _bounded("parallel_config.world_size", self.world_size, 1, MAX_BATCH)
        for f in fields(self):
            size = getattr(self, f.name)
            if f.name != "world_size" and (size <= 0 or self.world_size % size):
                raise ConfigError(
                    f"parallel_config.{f.name} ({size}) must divide world_size ({self.world_size})"
                )


@dataclass
class SchedulerConfig:
    batch_size: int = 1
    max_new_tokens: int = 32
    # paged KV cache: the token budget of every row together (null: the rendered one)
    kv_cache_tokens: int | None = None

    def validate(self) -> None:
        _bounded("scheduler_config.batch_size", self.batch_size, 1, MAX_BATCH)
        _bounded("scheduler_config.max_new_tokens", self.max_new_tokens, 1, MAX_POSITIONS)
        if self.kv_cache_tokens is not None:
            _bounded(
                "scheduler_config.kv_cache_tokens", self.kv_cache_tokens, 1, MAX_KV_CACHE_TOKENS
            )


@dataclass
class InferenceConfig:
    model_config: ModelConfig = field(default_factory=ModelConfig)
    data_config: DataConfig = field(default_factory=DataConfig)
    parallel_config: ParallelConfig = field(default_factory=ParallelConfig)
    scheduler_config: SchedulerConfig = field(default_factory=SchedulerConfig)

    def validate(self, max_seq_len: int | None = None) -> None:
        """Each section's checks; with `max_seq_len` (the model's KV-cache length), also that
        the prompt and the new tokens fit in it."""
        for f in fields(self):
            getattr(self, f.name).validate()
        if max_seq_len is not None:
            check_fits(
                self.data_config.input_truncated_len,
                self.scheduler_config.max_new_tokens,
                max_seq_len,
            )


_SECTIONS = {
    "model_config": ModelConfig,
    "data_config": DataConfig,
    "parallel_config": ParallelConfig,
    "scheduler_config": SchedulerConfig,
}


def _allowed(hint) -> tuple[type, ...]:
    """The plain types a field annotation admits (`int | None` -> (int, NoneType))."""
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        return tuple(t for arg in typing.get_args(hint) for t in _allowed(arg))
    return (hint,)


_TYPE_NAMES = {bool: "a boolean", int: "an integer", float: "a number", str: "a string"}


def _check_type(name: str, value, hint) -> None:
    """`value` read from YAML must be of the field's annotated type; floats also finite."""
    allowed = _allowed(hint)
    if value is None:
        ok = type(None) in allowed
    elif isinstance(value, bool):  # YAML true/false: only for bool fields
        ok = bool in allowed
    elif isinstance(value, int):
        ok = int in allowed or float in allowed
    else:
        ok = isinstance(value, tuple(t for t in allowed if t is not type(None)))
    if ok and isinstance(value, float) and not math.isfinite(value):
        raise ConfigError(f"{name} must be a finite number, got {value}")
    if not ok:
        wanted = " or ".join(
            "null" if t is type(None) else _TYPE_NAMES.get(t, t.__name__) for t in allowed
        )
        raise ConfigError(f"{name} must be {wanted}, got {value!r}")


def _names(keys) -> str:
    return ", ".join(sorted(map(str, keys)))


def _section(cls, name: str, raw: dict):
    values = raw.get(name)
    values = {} if values is None else values
    if not isinstance(values, dict):
        raise ConfigError(f"{name} must be a mapping, got {type(values).__name__}")
    known = {f.name for f in fields(cls)}
    unknown = set(values) - known
    if unknown:  # stricter than cann-recipes-infer, which ignores them: catches typos
        raise ConfigError(f"{name}: unknown key(s) {_names(unknown)}")
    hints = typing.get_type_hints(cls)
    for key, value in values.items():
        _check_type(f"{name}.{key}", value, hints[key])
    return cls(**values)


MAX_CONFIG_BYTES = 1 << 24  # a config is a few kilobytes: refuse what cannot be one


def _read_yaml(path: Path):
    try:
        if path.exists() and not path.is_file():  # a FIFO or a device would never end
            raise ConfigError(f"config file {path} is not a regular file")
        if path.stat().st_size > MAX_CONFIG_BYTES:
            raise ConfigError(f"config file {path} is larger than {MAX_CONFIG_BYTES:,} bytes")
        text = path.read_text()
    except FileNotFoundError:
        raise ConfigError(f"config file {path} does not exist") from None
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
        raise ConfigError(f"cannot read config file {path}: {reason}") from None
    try:
        return yaml.safe_load(text)
    except RecursionError:
        raise ConfigError(f"{path}: nested too deeply to be a config") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ConfigError(f"{path}: invalid YAML{where}: {problem}") from None


def load_config(path: str | Path, max_seq_len: int | None = None) -> InferenceConfig:
    """Read and validate a YAML config; any problem raises ConfigError naming the file or
    the `section.key`. With `max_seq_len`, the prompt and new tokens must fit in it."""
    path = Path(path)
    raw = _read_yaml(path)
    raw = {} if raw is None else raw
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: top level must be a mapping of sections")
    unknown = set(raw) - set(_SECTIONS)
    if unknown:
        raise ConfigError(f"{path}: unknown section(s) {_names(unknown)}")
    config = InferenceConfig(**{name: _section(cls, name, raw) for name, cls in _SECTIONS.items()})
    config.validate(max_seq_len)
    return config


def set_task_queue_env(config: ModelConfig) -> None:
    """TASK_QUEUE_ENABLE=1 for npugraph_ex or Ascend 950 (npugraph_ex accepts only 0/1),
    else 2 (eager's host-side optimisation), as cann-recipes-infer sets it."""
    one = config.exe_mode == "npugraph_ex" or config.platform_version == "950"
    os.environ["TASK_QUEUE_ENABLE"] = "1" if one else "2"
