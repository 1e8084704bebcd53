"""Tensor and expert parallel (ascend_runtime/parallel.py) on two CPU ranks over gloo.

Each case loads a tiny transformers checkpoint split over 2 ranks (every rank reading only
its slices), compiles decode fullgraph as the example package's YAML says (the portable
aot_eager stand-in), and decodes greedily. Every rank must give transformers' greedy
tokens and the single-device package's logits within fp32 tolerance, with 1 decode graph,
0 graph breaks and 0 recompiles, and hold less than the single-device weights:
dense TP=2 (2 KV heads split, and 1 KV head replicated), MoE EP=2, MoE TP=2, and MLA with
attention TP=2 (the latent cache whole on each rank) + EP=2.
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from importlib.util import find_spec
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import yaml

from ascend_runtime.config import ConfigError, ParallelConfig
from ascend_runtime.layers.experts import RoutedExperts
from ascend_runtime.layers.linear import (
    ColumnParallelLinear,
    RowParallelLinear,
    VocabParallelEmbedding,
    qkv_linear,
)
from ascend_runtime.parallel import (
    Group,
    RankFailed,
    init_parallel,
    launch_environment,
    local_kv_heads,
)
from ascend_runtime.parallel_sizes import check_parallel

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "generated_examples"
STEPS = 6
PROMPT = [[5, 17, 99, 3, 250, 41, 8, 77], [12, 200, 6, 6, 31, 150, 2, 90]]
TINY = dict(
    vocab_size=256,
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=64,
    initializer_range=0.1,
)
YARN = {
    "rope_scaling": {
        "rope_type": "yarn",
        "factor": 4.0,
        "original_max_position_embeddings": 4096,
        "beta_fast": 32.0,
        "beta_slow": 1.0,
        "mscale": 1.0,
        "mscale_all_dim": 1.0,
    }
}
TP2 = dict(attn_tp_size=2, dense_tp_size=2, embed_tp_size=2, lmhead_tp_size=2)
# id: (example package, model_type, HF config overrides, sizes)
CASES = {
    "dense-tp2": ("llama_tiny", "llama", {}, TP2),
    "dense-tp2-one-kv-head": ("llama_tiny", "llama", {"num_key_value_heads": 1}, TP2),
    "moe-ep2": ("qwen3_moe", "qwen3_moe", {}, dict(TP2, moe_tp_size=1)),
    "moe-tp2": ("qwen3_moe", "qwen3_moe", {}, dict(moe_tp_size=2, lmhead_tp_size=2)),
    "mla-attn-tp2-ep2": ("deepseek_v3", "deepseek_v3", YARN, dict(TP2, moe_tp_size=1)),
}

needs_hf = pytest.mark.skipif(
    find_spec("transformers") is None or find_spec("safetensors") is None,
    reason="the parallel parity tests need the test-only transformers and safetensors",
)


def _package(name: str):
    src = str(EXAMPLES / name / "src")
    if src not in sys.path:
        sys.path.insert(0, src)
    return importlib.import_module(name)


def _hf_reference(package, model_type: str, overrides: dict, path: Path):
    """Save a tiny random transformers checkpoint; its greedy tokens over STEPS + 1."""
    import transformers

    from ascend_runtime.testing.hf_configs import tiny_hf_configs

    name, extra = tiny_hf_configs(package.ModelArgs())[model_type]
    fields = {**TINY, **extra, **{k: v for k, v in overrides.items() if k != "rope_scaling"}}
    rope = {k: v for k, v in overrides.items() if k == "rope_scaling"}
    torch.manual_seed(0)
    config = getattr(transformers, name)(**fields, **rope)
    model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32).eval()
    model.save_pretrained(path)
    ids = torch.tensor(PROMPT)
    with torch.inference_mode():
        out = model.generate(
            ids,
            attention_mask=torch.ones_like(ids),
            max_new_tokens=STEPS + 1,
            do_sample=False,
            eos_token_id=None,
            pad_token_id=0,
        )
    return out[:, ids.shape[1] :]


def _single_device(package, path: Path, config_path: Path, cache_tokens):
    from ascend_runtime import ops
    from ascend_runtime.config import load_config
    from ascend_runtime.graph import compile_decode
    from ascend_runtime.testing.kit import greedy
    from ascend_runtime.weights import load_pretrained

    model = load_pretrained(
        package.MODEL, path, ops.load("portable"), batch_size=2, kv_cache_tokens=cache_tokens
    )
    model_config = load_config(config_path).model_config
    decode = compile_decode(model, model_config)
    logits = greedy(model, decode, torch.tensor(PROMPT), STEPS, model_config.tensor_lengths)
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    cache = sum(t.numel() * t.element_size() for a in model.attention_modules()
                for t in a.kv_cache.buffers())  # fmt: skip
    return torch.cat(logits, dim=1), weights, cache


@needs_hf
@pytest.mark.parametrize("case", list(CASES))
def test_two_ranks_match_one_device_and_transformers(case, tmp_path):
    from ascend_runtime.testing.distributed import greedy_on_ranks, run_ranks
    from ascend_runtime.testing.kit import ModelKit

    name, model_type, overrides, sizes = CASES[case]
    package = _package(name)
    checkpoint = tmp_path / "ckpt"
    hf_tokens = _hf_reference(package, model_type, overrides, checkpoint)
    config_path = EXAMPLES / name / "config" / f"{name}.yaml"
    cache_tokens = ModelKit(package.MODEL).test_cache_tokens(2, TINY["max_position_embeddings"])
    single, single_weights, single_cache = _single_device(
        package, checkpoint, config_path, cache_tokens
    )
    assert torch.equal(single.argmax(-1), hf_tokens), "the one-device package is off transformers"

    ranks = run_ranks(
        2, greedy_on_ranks, tmp_path / "out", name, str(checkpoint), str(config_path), sizes,
        PROMPT, STEPS, cache_tokens,
    )  # fmt: skip
    for rank in ranks:
        where = f"{case} rank {rank['rank']}"
        assert (rank["graphs"], rank["breaks"]) == (1, 0), where  # 1 graph, 0 recompiles
        torch.testing.assert_close(rank["logits"], single, rtol=1e-4, atol=1e-4, msg=where)
        assert torch.equal(rank["logits"].argmax(-1), hf_tokens), where
        assert single_weights / 2 <= rank["weight_bytes"] < single_weights, where
        heads = overrides.get("num_key_value_heads", TINY["num_key_value_heads"])
        if name == "deepseek_v3" or sizes.get("attn_tp_size", 1) == 1 or heads == 1:
            assert rank["cache_bytes"] == single_cache, where  # latent, replicated or whole
        else:
            assert rank["cache_bytes"] * 2 == single_cache, where  # this rank's KV heads
    assert torch.equal(ranks[0]["logits"], ranks[1]["logits"])


# Sizes the model cannot split: one line naming the size.


def _args(**overrides):
    base = dict(
        family="dense", num_attention_heads=8, num_key_value_heads=4, intermediate_size=256,
        num_hidden_layers=2, vocab_size=128, tie_word_embeddings=False, num_experts=8,
        moe_intermediate_size=32, shared_expert_intermediate_size=0, decoder_sparse_step=1,
        mlp_only_layers=(), n_shared_experts=0, first_k_dense_replace=0, moe_layer_freq=1,
    )  # fmt: skip
    return SimpleNamespace(**{**base, **overrides})


@pytest.mark.parametrize(
    ("args", "sizes", "message"),
    [
        (_args(), dict(world_size=4, attn_tp_size=4), None),
        (_args(num_key_value_heads=2), dict(world_size=4, attn_tp_size=4), None),  # replicated
        (_args(num_attention_heads=6, num_key_value_heads=6), dict(world_size=4, attn_tp_size=4),
         "num_attention_heads (6) is not divisible by attn_tp_size (4)"),
        (_args(num_attention_heads=12, num_key_value_heads=3), dict(world_size=2, attn_tp_size=2),
         "num_key_value_heads (3) must divide attn_tp_size (2)"),
        (_args(vocab_size=127), dict(world_size=2, embed_tp_size=2),
         "vocab_size (127) is not divisible by embed_tp_size (2)"),
        (_args(intermediate_size=100), dict(world_size=8, dense_tp_size=8),
         "intermediate_size (100) is not divisible by dense_tp_size (8)"),
        (_args(family="moe", num_experts=6), dict(world_size=4, moe_tp_size=1),
         "num_experts (6) is not divisible by the expert-parallel size, world_size / "
         "moe_tp_size = 4 / 1 = 4"),
        (_args(family="moe", moe_intermediate_size=30), dict(world_size=4, moe_tp_size=4),
         "moe_intermediate_size (30) is not divisible by moe_tp_size (4)"),
        (_args(family="moe", shared_expert_intermediate_size=6), dict(world_size=4),
         "the shared experts' intermediate size (6) is not divisible by world_size (4)"),
        (_args(tie_word_embeddings=True), dict(world_size=2, embed_tp_size=2),
         "embed_tp_size (2) and lmhead_tp_size (1) must be equal"),
        (_args(), dict(world_size=4, attn_tp_size=3), "attn_tp_size (3) must divide world_size"),
    ],
)  # fmt: skip
def test_sizes_the_model_cannot_split_are_one_line(args, sizes, message):
    if message is None:
        check_parallel(args, ParallelConfig(**sizes))
        return
    with pytest.raises(ConfigError) as caught:
        check_parallel(args, ParallelConfig(**sizes))
    assert message in str(caught.value) and "\n" not in str(caught.value)


# Shards: each rank's part of a checkpoint tensor, read by indexing.


def test_column_row_and_vocab_layers_cut_their_rank_s_part():
    full = torch.arange(8 * 6, dtype=torch.float32).view(8, 6)
    gate_up = ColumnParallelLinear.split(6, (4, 4), Group(2, 1))
    assert [p.local for p in gate_up.parts] == [2, 2]
    pieces = [full[:4], full[4:]]
    assert torch.equal(gate_up.shard("weight", 0, 2, pieces[0]), full[2:4])
    assert torch.equal(gate_up.shard("weight", 1, 2, pieces[1]), full[6:8])
    # the fused form of the same layer: [gate_1 | up_1]
    assert torch.equal(gate_up.local_of("weight", full), torch.cat((full[2:4], full[6:8])))
    row = RowParallelLinear(6, 8, Group(3, 2))
    assert torch.equal(row.shard("weight", 0, 1, full), full[:, 4:6])
    embedding = VocabParallelEmbedding(8, 6, Group(2, 1))
    assert embedding.full_shape("weight", (4, 6)) == (8, 6)
    with torch.no_grad():
        embedding.weight.copy_(embedding.shard("weight", 0, 1, full))
    ids = torch.tensor([[0, 5, 7]])
    expected = torch.stack((torch.zeros(6), full[5], full[7]))  # id 0 is rank 0's row
    assert torch.equal(embedding(ids)[0], expected)


@pytest.mark.parametrize(
    ("kv_heads", "ranks", "rank", "expected"),
    [(4, 2, 1, (2, 2)), (1, 4, 3, (1, 0)), (2, 4, 3, (1, 1)), (2, 4, 1, (1, 0))],
)
def test_kv_heads_are_split_or_replicated(kv_heads, ranks, rank, expected):
    """(KV heads on the rank, its first): a share, or one head shared by ranks / kv ranks."""
    group = Group(ranks, rank)
    assert local_kv_heads(kv_heads, group) == expected
    qkv = qkv_linear(16, 2, 8, kv_heads, group, bias=False)
    k = torch.arange(kv_heads * 2 * 16, dtype=torch.float32).view(kv_heads * 2, 16)
    local, first = expected
    assert torch.equal(qkv.shard("weight", 1, 3, k), k[first * 2 : (first + local) * 2])


def test_experts_keep_their_rank_s_experts_and_width():
    experts = RoutedExperts(4, 3, 6, ep=Group(2, 1), tp=Group(2, 0))
    assert tuple(experts.w13_weight.shape) == (2, 3, 6) and tuple(experts.w2_weight.shape) == (
        2,
        3,
        3,
    )
    gate = torch.arange(6 * 3, dtype=torch.float32).view(6, 3)
    assert experts.shard("w13_weight", 0, 8, gate) is None  # expert 0 is rank 0's
    assert torch.equal(experts.shard("w13_weight", 5, 8, gate), gate[:3])  # expert 2's up
    fused = torch.arange(4 * 12 * 3, dtype=torch.float32).view(4, 12, 3)  # [E, 2I, H]
    got = experts.shard("w13_weight", 0, 1, fused)
    assert torch.equal(got, torch.cat((fused[2:4, 0:3], fused[2:4, 6:9]), dim=1))
    ids = torch.tensor([[0, 2], [3, 1]], dtype=torch.int32)
    weights = torch.tensor([[0.5, 0.5], [0.7, 0.3]])
    local, kept = experts.local_routing(ids, weights)
    assert local.tolist() == [[0, 0], [1, 0]] and local.dtype == torch.int32
    assert kept.tolist() == [[0.0, 0.5], [pytest.approx(0.7), 0.0]]


# The launch: torchrun's variables or cann-recipes-infer's, checked against the YAML.


@pytest.fixture
def clean_env(monkeypatch):
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "RANK_OFFSET", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def test_launch_environment_reads_torchrun_and_the_recipes_launcher(clean_env):
    assert launch_environment() is None
    clean_env.setenv("WORLD_SIZE", "8")
    clean_env.setenv("LOCAL_RANK", "3")
    clean_env.setenv("RANK_OFFSET", "4")
    launch = launch_environment()
    assert (launch.rank, launch.world_size, launch.local_rank) == (7, 8, 3)
    clean_env.setenv("RANK", "5")  # torchrun's global rank wins
    assert launch_environment().rank == 5
    clean_env.setenv("RANK", "9")
    with pytest.raises(ConfigError, match="outside WORLD_SIZE 8"):
        launch_environment()
    clean_env.setenv("RANK", "one")
    with pytest.raises(ConfigError, match="RANK='one' must be an integer"):
        launch_environment()


def test_a_launch_that_disagrees_with_the_yaml_is_one_line(clean_env):
    with pytest.raises(ConfigError, match="torchrun --nproc-per-node 2"):
        init_parallel(ParallelConfig(world_size=2, attn_tp_size=2))
    clean_env.setenv("WORLD_SIZE", "4")
    clean_env.setenv("RANK", "0")
    with pytest.raises(ConfigError, match="world_size is 2 but 4 processes"):
        init_parallel(ParallelConfig(world_size=2))
    with pytest.raises(ConfigError, match="4 processes were launched but .*world_size is 1"):
        init_parallel(ParallelConfig())
    clean_env.setenv("WORLD_SIZE", "2")
    with pytest.raises(ConfigError, match="MASTER_ADDR and MASTER_PORT not set"):
        init_parallel(ParallelConfig(world_size=2))


def _fail_on_rank_one(rank: int) -> dict:
    from ascend_runtime.parallel import init_parallel, on_every_rank
    from ascend_runtime.weights import CheckpointError

    parallel = init_parallel(ParallelConfig(world_size=2))

    def step():
        if rank == 1:
            raise CheckpointError("checkpoint file x.safetensors cannot be read")
        return "loaded"

    try:
        on_every_rank(parallel, step)
    except RankFailed as exc:
        return {"error": str(exc), "rank": exc.rank}
    return {"error": None}


def test_a_failure_on_one_rank_fails_every_rank_with_its_message(tmp_path):
    from ascend_runtime.testing.distributed import run_ranks

    results = run_ranks(2, _fail_on_rank_one, tmp_path)
    for result in results:
        assert result["rank"] == 1
        assert result["error"] == "rank 1: checkpoint file x.safetensors cannot be read"


# The runner and validate under torchrun: rank 0 prints; a bad launch exits non-zero.


def _torchrun(config: Path, module: str, *args: str, timeout: int = 600):
    env = {**os.environ, "PYTHONPATH": str(EXAMPLES / "llama_tiny" / "src")}
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
               "-m", f"llama_tiny.{module}", "--config", str(config), *args]  # fmt: skip
    return subprocess.run(command, capture_output=True, text=True, env=env, timeout=timeout)


def _parallel_yaml(tmp_path: Path, **sizes) -> Path:
    raw = yaml.safe_load((EXAMPLES / "llama_tiny" / "config" / "llama_tiny.yaml").read_text())
    raw["parallel_config"].update(sizes)
    raw["model_config"]["output_path"] = str(tmp_path / "out")
    path = tmp_path / "tp.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def test_runner_under_torchrun_prints_once_and_matches_one_device(tmp_path):
    config = _parallel_yaml(tmp_path, world_size=2, **TP2)
    run = _torchrun(config, "runner", "--steps", "3", "--token-ids", "1,2,3,4")
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.count("row 0 tokens") == 1 and "2 ranks" in run.stdout, run.stdout
    single = subprocess.run(
        [sys.executable, "-m", "llama_tiny.runner", "--config",
         str(EXAMPLES / "llama_tiny" / "config" / "llama_tiny.yaml"),
         "--steps", "3", "--token-ids", "1,2,3,4"],
        capture_output=True, text=True, timeout=600,
        env={**os.environ, "PYTHONPATH": str(EXAMPLES / "llama_tiny" / "src")},
    )  # fmt: skip
    assert single.returncode == 0, single.stderr[-3000:]
    tokens = [line for line in single.stdout.splitlines() if line.startswith("row 0 tokens")]
    assert tokens and tokens[0] in run.stdout  # random weights: the same model on 2 ranks
    assert "recompiles after warm-up 0, graph breaks 0" in run.stdout


def test_validate_under_torchrun_writes_one_report(tmp_path):
    config = _parallel_yaml(tmp_path, world_size=2, **TP2)
    run = _torchrun(config, "validate", "--steps", "2", "--out", str(tmp_path / "report"))
    assert run.returncode == 0, run.stdout + run.stderr[-3000:]
    report = json.loads((tmp_path / "report" / "report.json").read_text())
    statuses = {c["name"]: c["status"] for c in report["checks"]}
    assert statuses["compile"] == "pass" and statuses["function"] == "pass", statuses
    assert run.stdout.count("compile: pass") == 1


def test_a_launch_the_yaml_does_not_describe_stops_every_rank_with_one_line(tmp_path):
    run = _torchrun(_parallel_yaml(tmp_path, world_size=4), "runner", "--steps", "2", timeout=300)
    assert run.returncode != 0
    errors = [line for line in run.stderr.splitlines() if line.startswith("error:")]
    expected = "error: parallel_config.world_size is 4 but 2 processes were launched (WORLD_SIZE)"
    assert errors == [expected], run.stderr[-2000:]  # rank 0 prints it, once
