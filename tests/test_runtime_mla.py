"""The runtime's MLA and DeepSeek MoE pieces, against transformers' own modules: the router
(every topk_method), the latent cache's attention (contiguous = paged = expanded K/V), and
the Hugging Face reader for deepseek_v3, kimi_k2 and deepseek_v2 configs."""

import json

import pytest
import torch

from ascend_runtime.hf_config import HFConfigError, read_hf_config
from ascend_runtime.layers.deepseek_router import Routing, route
from ascend_runtime.ops import portable

transformers = pytest.importorskip("transformers", reason="needs the test-only transformers")

EXPERTS, HIDDEN, TOKENS = 16, 32, 64


def hf_router(kind: str, **fields):
    """transformers' router of `kind` with random weights (and correction bias)."""
    common = dict(
        hidden_size=HIDDEN, n_routed_experts=EXPERTS, num_experts_per_tok=4,
        routed_scaling_factor=2.5, **fields,
    )  # fmt: skip
    torch.manual_seed(0)
    if kind == "v3":
        from transformers.models.deepseek_v3.modeling_deepseek_v3 import DeepseekV3TopkRouter

        router = DeepseekV3TopkRouter(transformers.DeepseekV3Config(**common))
        router.e_score_correction_bias.uniform_(-0.3, 0.3)
    else:
        from transformers.models.deepseek_v2.modeling_deepseek_v2 import DeepseekV2TopkRouter

        router = DeepseekV2TopkRouter(transformers.DeepseekV2Config(**common))
    router.weight.data.normal_()
    return router


CASES = {
    "noaux_tc": ("v3", dict(n_group=4, topk_group=2, norm_topk_prob=True)),
    "noaux_tc-not-renormalised": ("v3", dict(n_group=4, topk_group=2, norm_topk_prob=False)),
    "noaux_tc-one-group": ("v3", dict(n_group=1, topk_group=1, norm_topk_prob=True)),  # Kimi-K2
    "greedy": ("v2", dict(topk_method="greedy")),
    "group_limited_greedy": (
        "v2",
        dict(topk_method="group_limited_greedy", n_group=4, topk_group=2),
    ),
}


@pytest.mark.parametrize("case", CASES)
def test_router_matches_transformers(case):
    kind, fields = CASES[case]
    router = hf_router(kind, **fields)
    method = fields.get("topk_method", "noaux_tc")
    routing = Routing(
        method, 4, fields.get("n_group") or 1, fields.get("topk_group") or 1,
        fields.get("norm_topk_prob", False) if kind == "v3" else False, 2.5,
    )  # fmt: skip
    tokens = torch.randn(TOKENS, HIDDEN, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        _, ref_weights, ref_ids = router(tokens)
        logits = torch.nn.functional.linear(tokens, router.weight)
        bias = getattr(router, "e_score_correction_bias", None)
        weights, ids = route(logits, bias, routing)
    assert ids.dtype == torch.int32
    ours = {
        (t, e): w
        for t in range(TOKENS)
        for e, w in zip(ids[t].tolist(), weights[t].tolist(), strict=True)
    }
    theirs = {
        (t, e): w
        for t in range(TOKENS)
        for e, w in zip(ref_ids[t].tolist(), ref_weights[t].tolist(), strict=True)
    }
    assert ours.keys() == theirs.keys()  # the same experts for every token
    for key, value in theirs.items():
        assert ours[key] == pytest.approx(value, rel=1e-5, abs=1e-6), key


def test_router_is_one_graph_while_the_experts_change():
    routing = Routing("noaux_tc", 4, 4, 2, True, 2.5)
    bias = torch.zeros(EXPERTS)
    compiled = torch.compile(lambda x: route(x, bias, routing), backend="aot_eager", fullgraph=True)
    seen = set()
    for seed in range(6):
        logits = torch.randn(8, EXPERTS, generator=torch.Generator().manual_seed(seed))
        weights, ids = compiled(logits)
        seen.add(tuple(ids.flatten().tolist()))
        expected = route(logits, bias, routing)
        assert torch.equal(ids, expected[1]) and torch.allclose(weights, expected[0])
    assert len(seen) == 6
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] >= 1


def _latent(batch, positions, width, seed):
    return torch.randn(batch, 1, positions, width, generator=torch.Generator().manual_seed(seed))


def test_absorbed_attention_equals_expanded_keys_and_values():
    """Over a latent cache, q_latent.latent + q_pe.rope then the latent as value, projected
    by W_UV, equals plain attention over the expanded per-head K and V: absorption's
    identity, with rows of different lengths."""
    heads, nope, rope, v_dim, latent_dim, positions = 3, 8, 4, 6, 10, 12
    lengths = [12, 5]
    nope_cache, rope_cache = _latent(2, positions, latent_dim, 1), _latent(2, positions, rope, 2)
    w_kv = torch.randn(
        heads * (nope + v_dim), latent_dim, generator=torch.Generator().manual_seed(3)
    )
    w_uk, w_uv = w_kv.view(heads, -1, latent_dim).split([nope, v_dim], dim=1)
    q_nope = torch.randn(2, heads, 1, nope, generator=torch.Generator().manual_seed(4))
    q_pe = torch.randn(2, heads, 1, rope, generator=torch.Generator().manual_seed(5))
    scale = 0.3
    out = portable.mla_attention(
        torch.matmul(q_nope, w_uk), q_pe, nope_cache, rope_cache, lengths, lengths,
        num_heads=heads, scale=scale,
    )  # fmt: skip
    absorbed = torch.matmul(out, w_uv.transpose(1, 2))
    for row, length in enumerate(lengths):
        kv = (nope_cache[row, 0, :length] @ w_kv.t()).view(length, heads, -1)
        keys = torch.cat(
            (kv[..., :nope], rope_cache[row, 0, :length, None].expand(-1, heads, -1)), -1
        )
        query = torch.cat((q_nope[row], q_pe[row]), -1)  # (heads, 1, nope + rope)
        probs = (torch.einsum("hqd,khd->hqk", query, keys) * scale).softmax(-1)
        expected = torch.einsum("hqk,khd->hqd", probs, kv[..., nope:])
        torch.testing.assert_close(absorbed[row], expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("tensor_lengths", [False, True], ids=["host-lists", "tensors"])
def test_paged_latent_attention_equals_contiguous(tensor_lengths):
    """The same tokens in blocks scattered over the pool read as the contiguous rows."""
    block, blocks_per_row, latent_dim, rope = 4, 3, 10, 4
    nope_rows, rope_rows = (
        _latent(2, block * blocks_per_row, latent_dim, 1),
        _latent(2, 12, rope, 2),
    )
    table = torch.tensor([[5, 2, 7], [1, 6, 3]], dtype=torch.int32)
    nope_pool, rope_pool = torch.zeros(8, block, latent_dim), torch.zeros(8, block, rope)
    for row in range(2):
        for i, b in enumerate(table[row].tolist()):
            nope_pool[b] = nope_rows[row, 0, i * block : (i + 1) * block]
            rope_pool[b] = rope_rows[row, 0, i * block : (i + 1) * block]
    q_latent, q_pe = _latent(2, 2, latent_dim, 3), _latent(2, 2, rope, 4)  # 2 heads
    q_latent, q_pe = q_latent.transpose(1, 2), q_pe.transpose(1, 2)
    lengths = [9, 12]
    as_given = torch.tensor(lengths) if tensor_lengths else lengths
    contiguous = portable.mla_attention(
        q_latent, q_pe, nope_rows, rope_rows, as_given, as_given, num_heads=2, scale=0.5
    )
    paged = portable.paged_mla_attention(
        q_latent, q_pe, nope_pool, rope_pool, table, as_given, as_given,
        num_heads=2, scale=0.5, block_size=block,
    )  # fmt: skip
    torch.testing.assert_close(paged, contiguous)


def _saved_config(tmp_path, cls: str, model_type: str | None = None, **fields):
    getattr(transformers, cls)(**fields).save_pretrained(tmp_path)
    path = tmp_path / "config.json"
    config = json.loads(path.read_text())
    if model_type:
        config["model_type"] = model_type
    path.write_text(json.dumps(config))
    return config


def test_reader_takes_deepseek_v3_and_kimi_k2(tmp_path):
    _saved_config(tmp_path, "DeepseekV3Config", "kimi_k2", n_group=1, topk_group=1)
    arch = read_hf_config(tmp_path).architecture
    assert arch["family"] == "mla" and arch["topk_method"] == "noaux_tc"
    assert (arch["kv_lora_rank"], arch["qk_rope_head_dim"], arch["q_lora_rank"]) == (512, 64, 1536)
    assert (arch["n_group"], arch["first_k_dense_replace"], arch["norm_topk_prob"]) == (1, 3, True)
    assert "num_key_value_heads" not in arch and "head_dim" not in arch


def test_reader_takes_deepseek_v2_lite(tmp_path):
    _saved_config(
        tmp_path, "DeepseekV2Config", q_lora_rank=None, num_experts_per_tok=6,
        norm_topk_prob=True,
    )  # fmt: skip
    arch = read_hf_config(tmp_path).architecture
    assert arch["q_lora_rank"] == 0  # null: q_proj, not the class default 1536
    assert arch["topk_method"] == "greedy" and arch["n_group"] == 1
    assert arch["norm_topk_prob"] is False  # DeepseekV2TopkRouter never renormalises
    assert arch["rope_interleave"] is True


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        (dict(topk_method="greedy"), "topk_method 'greedy' is not supported for deepseek_v3"),
        (dict(scoring_func="softmax"), "scoring_func 'softmax' does not go with noaux_tc"),
        (dict(n_group=3), r"n_routed_experts \(256\) must split into n_group \(3\)"),
        (dict(first_k_dense_replace=70), "no layer is MoE"),
        (dict(qk_rope_head_dim=7), "qk_rope_head_dim must be even"),
        # a wrong type names its field first, before the checks that combine fields
        (dict(kv_lora_rank="512", first_k_dense_replace=99), "kv_lora_rank must be a positive"),
        (dict(n_shared_experts=True), "n_shared_experts must be an integer >= 0, got True"),
        (dict(routed_scaling_factor=float("nan")), "routed_scaling_factor must be a finite"),
    ],
)
def test_reader_refuses_what_the_package_cannot_run(tmp_path, fields, message):
    config = _saved_config(tmp_path, "DeepseekV3Config")
    (tmp_path / "config.json").write_text(json.dumps({**config, **fields}))
    with pytest.raises(HFConfigError, match=message):
        read_hf_config(tmp_path)


def test_an_fp8_checkpoint_is_read_and_its_weights_refused(tmp_path):
    """DeepSeek-V3's own config.json (fp8 blocks): the architecture renders; the loader's
    one line says to dequantise first."""
    from ascend_runtime.hf_config import quantized_refusal

    config = _saved_config(tmp_path, "DeepseekV3Config")
    fp8 = {"quant_method": "fp8", "fmt": "e4m3", "weight_block_size": [128, 128]}
    (tmp_path / "config.json").write_text(json.dumps({**config, "quantization_config": fp8}))
    hf = read_hf_config(tmp_path)
    assert hf.architecture["family"] == "mla" and hf.quantization == "fp8"
    message = quantized_refusal(hf.file, hf.quantization)
    assert "quantization_config (fp8) is not supported" in message and "dequantise" in message
