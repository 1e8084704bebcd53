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
class PagedAttentionLimits:
    """npu_fused_infer_attention_score (torch_npu and torchair) with ``block_table`` (the docs'
    "page attention场景"); the contiguous path's limits (attention) apply as well."""

    # docs (block_table): "数据类型支持int32"
    block_table_dtypes: tuple[str, ...] = ("int32",)
    # docs, 当Q_S等于1时: "支持key、value数据类型为float16、bfloat16、int8"
    kv_dtypes: tuple[str, ...] = ("float16", "bfloat16", "int8")
    # docs, 当Q_S大于1时: "page attention场景下, 不支持输入query为int8的场景" (Q_S = 1: "query、
    # key、value输入类型均为int8的场景暂不支持")
    query_int8: bool = False
    # docs, Q_S = 1: "block_size需要传入非0值，且最大不超过512"; Q_S > 1: "最大为512"
    max_block_size: int = 512
    # docs, Q_S = 1: "key、value输入类型为float16、bfloat16时需要16对齐, ... int8时需要32对齐,
    # 推荐使用128"
    block_size_multiple: int = 16
    int8_block_size_multiple: int = 32
    recommended_block_size: int = 128
    # docs, Q_S > 1: "block_size最小为128, 最大为512, 且要求是128的倍数"
    prefill_min_block_size: int = 128
    prefill_block_size_multiple: int = 128
    # docs: "kv cache排布为(blocknum, blocksize, H) ... 且KV_N*D超过65535时 ... 会被拦截报错"
    # (the Q_S = 1 text: "numKvHeads * headDim 超过64k"); (blocknum, KV_N, blocksize, D) has no
    # such limit
    max_kv_hidden: int = 65_535
    # docs: "当query的input_layout为BNSD、TND时, kv cache排布支持(blocknum, blocksize, H)和
    # (blocknum, KV_N, blocksize, D)两种格式, 当query的input_layout为BSH、BSND时, kv cache排布只
    # 支持(blocknum, blocksize, H)一种格式" (BNSD_BSND is not listed)
    query_layouts: tuple[str, ...] = ("BSH", "BSND", "BNSD", "TND")
    split_head_query_layouts: tuple[str, ...] = ("BNSD", "TND")
    # docs: "page attention场景下, 必须传入actual_seq_lengths_kv"
    needs_actual_seq_lengths_kv: bool = True
    # docs: "blockTable必须为二维, 第一维长度需等于B, 第二维长度不能小于maxBlockNumPerSeq" and
    # "blocknum不能小于根据actual_seq_lengths_kv和blockSize计算的每个batch的block数量之和"
    block_table_rank: int = 2
    # docs: "参数key、value各自对应tensor的shape所有维度相乘不能超过int32的表示范围"
    max_kv_numel: int = 2**31 - 1
    # docs: "block_table中填充的是blockid, 当前不会对blockid的合法性进行校验, 需用户自行保证":
    # the device reads whatever an id points at; the emulation refuses ids outside 0..blocknum-1
    # (every entry, padding included: cann-recipes-infer pads with the null block 0)
    legal_block_ids: bool = True


@dataclass(frozen=True)
class ScatterNdUpdateLimits:
    """torch_npu.npu_scatter_nd_update_ / npu_scatter_nd_update (the paged KV-cache write)."""

    # docs (input/updates, A2 and A3): "数据类型支持float32、float16、bool、bfloat16、int64、int8"
    # (no int32); "数据类型需要与updates一致"
    dtypes: tuple[str, ...] = ("float32", "float16", "bool", "bfloat16", "int64", "int8")
    # docs (indices): "数据类型支持int32、int64"
    index_dtypes: tuple[str, ...] = ("int32", "int64")
    # docs (input): "维度只能是1~8维"
    min_rank: int = 1
    max_rank: int = 8
    # docs 约束说明: "indices至少是2维，其最后1维的大小不能超过input的维度大小"
    min_index_rank: int = 2
    # docs (indices): "indices中的索引数据不支持越界" (not checked on the device: the emulation
    # refuses an out-of-range or negative index)
    index_in_range: bool = True


@dataclass(frozen=True)
class MoeLimits:
    """What the MoE chain as a whole takes (copier.yml's ``moe``: the render-time checks read it):
    npu_moe_gating_top_k_softmax, npu_moe_init_routing_v2, npu_grouped_matmul, npu_swiglu,
    npu_moe_finalize_routing. Each op's own enums are in the per-op limits below."""

    # npu_grouped_matmul, group_type 0 with one 3-D weight (单单单): "group_list第1维最大支持1024,
    # 即最多支持1024个group" (E groups); npu_moe_init_routing_v2 alone takes expert_num <= 10240
    max_experts: int = 1_024
    # npu_moe_gating_top_k_softmax (k): "大小为0<k<=x的-1轴大小, k<=1024"
    max_top_k: int = 1_024
    # npu_grouped_matmul 约束说明: "内轴限制InnerLimit为65536. x和weight中每一组tensor的最后一维大小
    # 都应小于InnerLimit" (strictly less: hidden size and 2 * moe_intermediate_size)
    inner_limit: int = 65_536
    # The package dtypes the chain is rendered for (copier.yml's value). Every op's docs also take
    # float32 (the CPU kernels check each op's own dtypes below, so a float32 run passes).
    dtypes: tuple[str, ...] = ("float16", "bfloat16")


@dataclass(frozen=True)
class MoeGatingLimits:
    """torch_npu.npu_moe_gating_top_k_softmax (k: MoeLimits.max_top_k)."""

    # docs (x): "数据类型支持float16、bfloat16、float32"
    dtypes: tuple[str, ...] = ("float16", "bfloat16", "float32")
    # docs (x): "要求是一个2D/3D的Tensor"
    min_rank: int = 2
    max_rank: int = 3


@dataclass(frozen=True)
class MoeInitRoutingLimits:
    """torch_npu.npu_moe_init_routing_v2 (CANN MoeInitRoutingV3)."""

    # docs (x): "数据类型支持float16、bfloat16、float32、int8"
    dtypes: tuple[str, ...] = ("float16", "bfloat16", "float32", "int8")
    # docs (expert_idx): "要求是2D的Tensor ... 数据类型支持int32"
    index_dtypes: tuple[str, ...] = ("int32",)
    # docs (expert_num): "expert_tokens_num_type为key_value模式时，取值范围为(0, 5120]；其他模式取值
    # 范围为(0, 10240]"
    max_experts: int = 10_240
    max_experts_key_value: int = 5_120
    # docs (drop_pad_mode): "取值为0和1 ... 当前仅支持0"
    drop_pad_modes: tuple[int, ...] = (0,)
    # docs (expert_tokens_num_type): "取值为0、1和2 ... 当前仅支持1和2"
    expert_tokens_num_types: tuple[int, ...] = (1, 2)
    # docs (expert_tokens_num_flag): "默认False表示不输出。当前仅支持True"
    expert_tokens_num_flag_required: bool = True
    # docs (quant_mode): "支持取值为0、1、-1 ... 当前仅支持-1和1"
    quant_modes: tuple[int, ...] = (-1, 1)
    # docs (row_idx_type): "支持取值0和1 ... 0表示gather类型的索引；1表示scatter类型的索引"
    row_idx_types: tuple[int, ...] = (0, 1)
    # CANN aclnnMoeInitRoutingV3 约束说明: "activeNum 当前未使用，校验需等于NUM_ROWS*K" (its tiling:
    # -1 or NUM_ROWS*K); the wheel's docs: "-1和0均表示按全部tokens处理"
    active_num_is_rows_k: bool = True


@dataclass(frozen=True)
class GroupedMatmulLimits:
    """torch_npu.npu_grouped_matmul, unquantised, group_list a Tensor (groups and inner dims:
    MoeLimits)."""

    # docs 表1 非量化: "x: torch.float16, torch.bfloat16, torch.float32", weight the same
    dtypes: tuple[str, ...] = ("float16", "bfloat16", "float32")
    # docs (group_list): "数据类型支持torch.int64"
    group_list_dtypes: tuple[str, ...] = ("int64",)
    # docs (group_type, A2): "当前支持取-1、0"
    group_types: tuple[int, ...] = (-1, 0)
    # docs (group_list_type): "可取值0或1, 0代表...cumsum结果(累积和), 1代表...每组大小"
    group_list_types: tuple[int, ...] = (0, 1)
    # docs, 场景限制 group_type 0: "仅支持split_item为2或3"
    split_items: tuple[int, ...] = (2, 3)
    # docs (x, weight): "列表最大长度为128"
    max_list_len: int = 128
    # docs: "仅per-token量化场景支持激活函数计算" (unquantised: act_type 0)
    act_types: tuple[int, ...] = (0,)


@dataclass(frozen=True)
class SwigluLimits:
    """torch_npu.npu_swiglu."""

    # docs: "dtype支持FP32、FP16或BF16类型"
    dtypes: tuple[str, ...] = ("float32", "float16", "bfloat16")
    # docs: "shape支持1-8维"
    min_rank: int = 1
    max_rank: int = 8


@dataclass(frozen=True)
class MoeFinalizeRoutingLimits:
    """torch_npu.npu_moe_finalize_routing (CANN MoeFinalizeRoutingV2 unless skip1, bias, scales and
    export_for_source_row are all given with drop_pad_mode 0)."""

    # docs (expanded_permuted_rows): "数据类型支持float16、bfloat16、float32"; skip1/skip2/bias/
    # scales: "数据类型要求与expanded_permuted_rows一致"
    dtypes: tuple[str, ...] = ("float16", "bfloat16", "float32")
    # docs (expanded_src_to_dst_row, export_for_source_row): "数据类型支持int32"
    index_dtypes: tuple[str, ...] = ("int32",)
    # docs: "drop_pad_mode ... 取值范围为0" (the V1 text); MoeFinalizeRoutingV2, which torch-npu
    # calls (and its meta reads), takes "range [0,3]": 0 / 2 dropless with expanded_row_idx in
    # column (k * NUM_ROWS + i) / row (i * K + k) order; 1 / 3 drop-pad (3-D rows)
    drop_pad_modes: tuple[int, ...] = (0, 1, 2, 3)


@dataclass(frozen=True)
class MlaAttentionLimits:
    """npu_fused_infer_attention_score in its MLA mode (query_rope and key_rope given): the
    absorbed decode of DeepSeek-V2/V3 over the latent (copier.yml's ``mla_attention``: the
    render-time choice reads it)."""

    # docs (query_rope/key_rope 参数约束): "query_rope配置时要求query的S为1-16、N为32、64、128,
    # D为512 ... D为64. key_rope配置时要求key的N为1, D为512 ... D为64"
    query_heads: tuple[int, ...] = (32, 64, 128)
    latent_dim: int = 512
    rope_dim: int = 64
    max_query_len: int = 16
    # docs: "query_rope和key_rope要求同时配置或同时不配置"; "该场景下, 必须开启PageAttention, 此时
    # block_size支持16、128"
    block_sizes: tuple[int, ...] = (16, 128)
    # docs: "Q_S等于1时支持sparse=0且不传mask或sparse=4且传入mask"
    decode_sparse_modes: tuple[int, ...] = (0,)
    # docs (query_rope/key_rope): "数据类型支持float16、bfloat16"
    dtypes: tuple[str, ...] = ("float16", "bfloat16")


@dataclass(frozen=True)
class MoeGatingTopKLimits:
    """torch_npu.npu_moe_gating_top_k (DeepSeek-V3's grouped sigmoid routing; copier.yml's
    ``moe_gating_top_k``)."""

    # docs (x): "数据类型支持float16、bfloat16、float32 ... 最后一维的大小（即专家数）要求不大于
    # 2048"
    dtypes: tuple[str, ...] = ("float16", "bfloat16", "float32")
    max_experts: int = 2_048
    # docs (group_count): "x_shape[-1]能够被group_count整除且整除后的结果大于2，并且整除的结果
    # 按照32个数对齐后乘group_count的结果不大于2048"
    min_group_size: int = 3
    group_align: int = 32
    # docs (renorm): "当前仅支持0"; (norm_type) "1表示使用Sigmoid函数，0表示Softmax函数";
    # (group_select_mode) "0表示组内取最大值 ... 1表示取组内Top2的专家进行得分累加"
    renorms: tuple[int, ...] = (0,)
    norm_types: tuple[int, ...] = (0, 1)
    group_select_modes: tuple[int, ...] = (0, 1)


@dataclass(frozen=True)
class DeviceLimits:
    attention: AttentionLimits = AttentionLimits()
    rotary: RotaryLimits = RotaryLimits()
    rms_norm: RmsNormLimits = RmsNormLimits()
    scatter_update: ScatterUpdateLimits = ScatterUpdateLimits()
    paged_attention: PagedAttentionLimits = PagedAttentionLimits()
    scatter_nd_update: ScatterNdUpdateLimits = ScatterNdUpdateLimits()
    moe: MoeLimits = MoeLimits()
    moe_gating: MoeGatingLimits = MoeGatingLimits()
    moe_init_routing: MoeInitRoutingLimits = MoeInitRoutingLimits()
    grouped_matmul: GroupedMatmulLimits = GroupedMatmulLimits()
    swiglu: SwigluLimits = SwigluLimits()
    moe_finalize_routing: MoeFinalizeRoutingLimits = MoeFinalizeRoutingLimits()
    mla_attention: MlaAttentionLimits = MlaAttentionLimits()
    moe_gating_top_k: MoeGatingTopKLimits = MoeGatingTopKLimits()


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
    "MoE ops: the wheel's 支持的型号 lists Atlas A2 only for npu_moe_gating_top_k_softmax, "
    "npu_swiglu, npu_grouped_matmul and npu_moe_finalize_routing (A2/A3 for "
    "npu_moe_init_routing_v2); their A3 and 950 limits are A2's. torchair warns that "
    "npu_moe_gating_top_k_softmax 'will no longer be supported on Ascend950' (use _v2).",
    "npu_moe_finalize_routing: the wheel's docs say drop_pad_mode '取值范围为0' and "
    "'skip2参数为None时, skip1参数必须也为None'; MoeFinalizeRoutingV2 (called by op-plugin and "
    "torchair) takes 0-3 and refuses skip2 without skip1 (the reverse): skip1 alone is accepted.",
    "npu_moe_init_routing_v2 + npu_moe_finalize_routing: row_idx_type 0 gives "
    "expanded_row_idx[t*K + k] = the row of (t, k) in expanded_x (token-major), which "
    "finalize reads with drop_pad_mode=2; drop_pad_mode=0 reads index k*NUM_ROWS + t (the v1 "
    "npu_moe_init_routing layout).",
    "npu_grouped_matmul: group_list_type=1 'group_list必须为非负数列, 且长度不能为1' (one expert "
    "is refused).",
    "npu_fused_infer_attention_score with block_table: block_size differs by branch: Q_S = 1 "
    "(decode) 'block_size需要传入非0值，且最大不超过512, ... float16、bfloat16时需要16对齐, "
    "int8时需要32对齐, 推荐使用128'; Q_S > 1 'block_size最小为128, 最大为512, "
    "且要求是128的倍数'. A package whose prefill reads the cache too needs a multiple of 128 "
    "(128 fits both).",
    "npu_fused_infer_attention_score with block_table: the input_layout text says TND does 'not "
    "support ... page attention' (不支持...page attention), the page-attention text lists TND with "
    "both KV layouts; BNSD_BSND is not listed for page attention (the emulation refuses it).",
    "npu_fused_infer_attention_score: 'actual_seq_qlen和actual_seq_kvlen的元素个数不大于4096' is "
    "in the _v2 docs' TND/NTD_TND clause only; the v1 op's batch limit is B <= 65536 (both "
    "branches). copier.yml's batch_size validator caps the decode batch at 4096 anyway.",
    "npu_fused_infer_attention_score MLA mode: the v1 op's docs take query N 32/64/128 only; "
    "the _v2 op's take 1/2/4/.../128 (vllm-ascend pads heads to a power of two for older CANN). "
    "The package calls v1, so DeepSeek-V2-Lite's 16 heads take the plain-torch decode.",
    "npu_moe_gating_top_k: the docs do not say how y_out is normalised for norm_type=1; "
    "cann-recipes-infer's models/deepseek_r1 uses it as the final weights for noaux_tc with "
    "norm_topk_prob (renormalised by their sum + eps, times routed_scaling_factor), and the "
    "package calls it only there.",
    "npu_interleave_rope and npu_kv_rmsnorm_rope_cache(_v2) have schemas, meta kernels and GE "
    "converters in the wheel but no docs (no layout or limits), and torchair converts "
    "npu_kv_rmsnorm_rope_cache_v2 through its _functional form with a TensorMove of both "
    "caches (a copy of every layer's cache per step in a GE graph): the package keeps the "
    "unfused chain (npu_rms_norm, RoPE in torch, the in-place cache writes the GE tier checks).",
    "npu_scatter_nd_update(_): 支持的型号 lists Atlas A2/A3 (and training/inference cards), not "
    "950; its 950 limits are A3's. Duplicate indices are not addressed by the docs (the "
    "emulation writes them in order, the last wins).",
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
