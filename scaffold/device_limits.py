"""What the Ascend fused ops accept, per platform: the one table the render-time choices
and the strict NPU emulation both read.

The table is copier.yml's ``device_limits`` (copier's validators and computed values need it at
render time); this module parses it into typed limits and adds the documented limits copier.yml
does not list (yet), with their defaults here. Every value is from the torch-npu 2.13.0 wheel's
op docs, ``torch_npu/_op_plugin_docs.py`` (cited per field as "docs: ..."), for the ops a
generated package emits; ``DOC_NOTES`` keeps what the docs leave open.

Standard library only at import time (copier.yml is read with PyYAML, which ascend-scaffold
depends on, on first use; without it, or without copier.yml, the defaults here apply).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, fields, replace
from functools import cache
from typing import Any

PLATFORMS = ("A2", "A3", "950")
DEFAULT_PLATFORM = "A3"
PLATFORM_ENV = "ASCEND_SCAFFOLD_NPU_PLATFORM"  # the strict emulation's platform


@dataclass(frozen=True)
class AttentionLimits:
    """torch_npu.npu_fused_infer_attention_score (and torchair's variant, same kernel)."""

    # docs: "query: ... 数据类型支持float16、bfloat16、int8, 不支持非连续的Tensor"
    dtypes: tuple[str, ...] = ("float16", "bfloat16", "int8")
    # docs (num_key_value_heads): "num_heads与num_key_value_heads的比值不能大于64"
    max_group: int = 64
    # docs, 当Q_S等于1时: "支持S轴小于等于262144" (decode reads the whole KV cache)
    max_kv_len: int = 262_144
    # docs, 当Q_S大于1时: "S支持小于等于20971520(20M)"
    max_prefill_seq_len: int = 20_971_520
    # docs, both branches: "支持D轴小于等于512"
    max_head_dim: int = 512
    # docs, both branches: "支持N轴小于等于256"
    max_heads: int = 256
    # docs, both branches: "支持B轴小于等于65536"
    max_batch: int = 65_536
    # docs, 当Q_S大于1时: "输入类型全为float16、bfloat16时, D轴需16对齐"
    prefill_head_dim_multiple: int = 16
    # docs (input_layout, A2/A3): "支持BSH、BSND、BNSD、BNSD_BSND、TND"
    input_layouts: tuple[str, ...] = ("BSH", "BSND", "BNSD", "TND", "BNSD_BSND")
    # docs: "其中BNSD_BSND含义指当输入为BNSD, 输出格式为BSND, 仅支持Q_S大于1"
    prefill_only_layouts: tuple[str, ...] = ("BNSD_BSND",)
    # docs (sparse_mode): "当前仅支持取值0、1、2、3、4、9 ... 5、6、7、8 ... 暂未实现";
    # 9 (treeMask) "仅MLA场景(query_rope和key_rope不为空)支持"
    sparse_modes: tuple[int, ...] = (0, 1, 2, 3, 4)
    mla_sparse_modes: tuple[int, ...] = (9,)
    # docs: "sparse_mode为2、3、4时，shape输入支持(2048,2048)或(1,2048,2048)或(1,1,2048,2048)"
    compressed_mask_size: int = 2048
    # docs: query/key/value (and atten_mask, pse_shift, query_rope, key_rope) "不支持非连续的
    # Tensor"; the wrapper adds no .contiguous()
    contiguous: bool = True
    contiguous_args: tuple[str, ...] = (
        "query",
        "key",
        "value",
        "atten_mask",
        "pse_shift",
        "query_rope",
        "key_rope",
    )
    # docs, 支持的芯片型号: "Atlas A2 训练系列产品/Atlas 800I A2 推理产品, Atlas A3 训练系列产品"
    # only: for 950 the values are A3's, undocumented
    documented: bool = True


@dataclass(frozen=True)
class RotaryLimits:
    """torch_npu.npu_apply_rotary_pos_emb."""

    # docs (query/key/cos/sin, A2/A3): "shape最后一维（D）必须等于128或者64";
    # Atlas 350: "shape最后一维（D）小于等于1024" (head_dims None: any D up to max_head_dim)
    head_dims: tuple[int, ...] | None = (64, 128)
    max_head_dim: int = 128
    # docs (layout, A2/A3): "支持BSND的4维Tensor、TND的3维Tensor"
    layouts: tuple[str, ...] = ("BSND", "TND")
    # docs (rotary_mode, A2/A3): "支持"half"模式"
    rotary_modes: tuple[str, ...] = ("half",)
    # docs (cos/sin): "shape第3维（N）必须等于1"
    cos_heads: int = 1
    # docs: "数据类型支持bfloat16、float16、float32";
    # 约束 3: "query、key、cos、sin的数据类型必须相同"
    dtypes: tuple[str, ...] = ("float16", "bfloat16", "float32")
    # docs 返回值: "query_out (Tensor): 原地更新后的query张量" (op-plugin returns
    # std::tie(query, key)); the schema declares fresh outputs `-> (Tensor, Tensor)`
    in_place: bool = True


@dataclass(frozen=True)
class RmsNormLimits:
    """torch_npu.npu_rms_norm."""

    # docs: "输入数据类型仅支持float16、bfloat16和float32"
    dtypes: tuple[str, ...] = ("float16", "bfloat16", "float32")
    # docs (gamma): "数据类型需要和self保持一致"
    gamma_dtype_equals_input: bool = True
    # docs (self): "输入shape支持2-8维"
    min_rank: int = 2
    max_rank: int = 8


@dataclass(frozen=True)
class ScatterUpdateLimits:
    """torch_npu.scatter_update_ / scatter_update."""

    # docs (data/updates, A2/A3): "数据类型支持int8、float16、float32、bfloat16、int32"
    dtypes: tuple[str, ...] = ("int8", "float16", "float32", "bfloat16", "int32")
    # docs (indices): "数据类型支持int32、int64; 目前仅支持一维跟二维"
    index_dtypes: tuple[str, ...] = ("int32", "int64")
    # docs (data): "data只支持2-8维, 且维度大小需要与updates一致"
    min_rank: int = 2
    max_rank: int = 8
    # docs: "不支持索引越界, 索引越界不校验"
    checks_bounds: bool = False


@dataclass(frozen=True)
class DeviceLimits:
    attention: AttentionLimits = AttentionLimits()
    rotary: RotaryLimits = RotaryLimits()
    rms_norm: RmsNormLimits = RmsNormLimits()
    scatter_update: ScatterUpdateLimits = ScatterUpdateLimits()


# The docs' own values per platform, before copier.yml's table is laid over them.
_A2_A3 = DeviceLimits()
DOC_DEFAULTS: dict[str, DeviceLimits] = {
    "A2": _A2_A3,
    "A3": _A2_A3,
    # "Atlas 350 加速卡" (Ascend 950PR) in the rotary docs; the FIA docs do not list it.
    "950": replace(
        _A2_A3,
        attention=replace(_A2_A3.attention, documented=False),
        rotary=replace(
            _A2_A3.rotary,
            head_dims=None,
            max_head_dim=1024,  # docs: "Atlas 350 加速卡：... shape最后一维（D）小于等于1024"
            # docs: "Atlas 350 加速卡：支持BSND、SBND、BNSD的4维Tensor，TND的3维Tensor"
            layouts=("BSND", "SBND", "BNSD", "TND"),
            # docs: "Atlas 350 加速卡：支持"half"、"interleave"、"quarter"模式"
            rotary_modes=("half", "interleave", "quarter"),
        ),
    ),
}

DOC_NOTES = (
    "npu_fused_infer_attention_score lists Atlas A2/A3 only (支持的芯片型号); its 950 limits "
    "are A3's and unverified.",
    "input_layout TND: 'not supported with tiling_schedule_optimize=True' (graph mode), and "
    "bfloat16 only with Q_D = K_D = 192 (TND场景下...综合限制).",
    "npu_apply_rotary_pos_emb on Atlas 350: rotary_mode half/interleave need D % 2 == 0, "
    "quarter D % 4 == 0; cos/sin B may be 1.",
    "npu_rms_norm: gamma 'shape支持2-8维, 通常为self的最后一维' (the example passes 1-D gamma).",
)


def _coerce(value: Any, like: Any) -> Any:
    if isinstance(like, tuple) or (like is None and isinstance(value, list)):
        return tuple(str(v) if isinstance(v, str) else v for v in value)
    return value


def _overlay(base: Any, table: dict[str, Any], where: str) -> Any:
    known = {f.name: f for f in fields(base)}
    changes = {}
    for key, value in (table or {}).items():
        if key not in known:
            raise ValueError(f"copier.yml device_limits.{where}.{key}: unknown limit")
        changes[key] = _coerce(value, getattr(base, key))
    return replace(base, **changes)


def _copier_table() -> dict[str, Any] | None:
    try:
        from .questions import copier_config  # parsed once, shared with the interview
    except ImportError:  # no PyYAML/Jinja where the emulation runs: the docs' defaults
        return None
    try:
        entry = copier_config().get("device_limits") or {}
    except FileNotFoundError:
        return None
    return entry.get("default") if isinstance(entry, dict) else None


@cache
def limits_table() -> dict[str, DeviceLimits]:
    """Every platform's limits: copier.yml's ``device_limits`` over :data:`DOC_DEFAULTS`."""
    table = _copier_table() or {}
    out = {}
    for platform in PLATFORMS:
        base = DOC_DEFAULTS[platform]
        given = table.get(platform) or {}
        ops = {f.name for f in fields(base)}
        unknown = set(given) - ops
        if unknown:
            raise ValueError(
                f"copier.yml device_limits.{platform}: unknown op(s) {sorted(unknown)}"
            )
        out[platform] = replace(
            base,
            **{op: _overlay(getattr(base, op), given[op], f"{platform}.{op}") for op in given},
        )
    return out


class _Limits(dict):
    """``LIMITS[platform]``: read copier.yml on first use, not on import."""

    def __missing__(self, platform: str) -> DeviceLimits:
        table = limits_table()
        if platform not in table:
            raise KeyError(f"unknown platform {platform!r}; one of {', '.join(PLATFORMS)}")
        self.update(table)
        return table[platform]


LIMITS: dict[str, DeviceLimits] = _Limits()


def resolve_platform(platform: str | None = None) -> str:
    """`platform`, else ``$ASCEND_SCAFFOLD_NPU_PLATFORM``, else A3; refused if unknown."""
    name = platform or os.environ.get(PLATFORM_ENV) or DEFAULT_PLATFORM
    if name not in PLATFORMS:
        raise ValueError(f"unknown Ascend platform {name!r}; one of {', '.join(PLATFORMS)}")
    return name
