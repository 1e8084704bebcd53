"""Property over the whole answer space: `new model` either exits 0 with a package that
imports and runs prefill plus two decode steps, or exits 2 with one line and writes
nothing. No third outcome."""

import importlib
import math
import sys

import pytest
import yaml
from conftest import tree_state
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

torch = pytest.importorskip("torch")

BAD_VALUES = {
    "model_name": st.sampled_from(["torch", "class", "Bad-Name", "", "1x", "os", "é", "a" * 80]),
    "vocab_size": st.sampled_from([0, -1, 10**12, 2**63]),
    "hidden_size": st.sampled_from([0, -8, 7, 10**6]),
    "num_hidden_layers": st.sampled_from([0, -1, 10**5]),
    "num_attention_heads": st.sampled_from([0, -1, 3, 5, 10**4]),
    "num_key_value_heads": st.sampled_from([0, -1, 3, 64]),
    "head_dim": st.sampled_from([0, 3, 7, 8, 4096]),
    "intermediate_size": st.sampled_from([0, -1, 10**7]),
    "rope_theta": st.sampled_from([0.0, -1.0, math.nan, math.inf, -math.inf, "x"]),
    "rms_norm_eps": st.sampled_from([0.0, -1.0, math.nan, math.inf, 1.0, 5.0]),
    "max_seq_len": st.sampled_from([0, 1, 2, -5, 10**10]),
    "batch_size": st.sampled_from([0, -1, 10**6]),
    "exe_mode": st.sampled_from(["max", "", 3]),
    "dtype": st.sampled_from(["float32", "float64", "int8", None]),
    "rope_scaling": st.sampled_from(["dynamic", "longrope", 1]),
    "rope_scaling_factor": st.sampled_from([0.0, -2.0, math.nan]),
    "fa_interface": st.sampled_from(["flash", "torchair"]),
    "enable_static_kernel": st.just(True),
    "unknown_answer": st.just(1),
    "family": st.sampled_from(["sparse", "", 1]),
    "kv_cache": st.sampled_from(["pages", None]),
    "num_experts": st.sampled_from([0, -1, 10**6]),
    "num_experts_per_tok": st.sampled_from([0, 99]),
    "moe_intermediate_size": st.sampled_from([0, -4]),
    "mlp_only_layers": st.sampled_from(["0 3", "a", "-1", "0,,1", "99"]),
    "block_size": st.sampled_from([0, 17, 1024, -16]),
    "kv_cache_tokens": st.sampled_from([0, -1, 10**12, 2]),
    "kv_lora_rank": st.sampled_from([0, -1, 10**6]),
    "qk_rope_head_dim": st.sampled_from([0, 3, 7]),
    "n_group": st.sampled_from([0, 3]),
    "topk_method": st.sampled_from(["sigmoid", ""]),
    "first_k_dense_replace": st.sampled_from([-1, 99]),
    "routed_scaling_factor": st.sampled_from([0.0, math.nan, math.inf]),
}


@st.composite
def answer_sets(draw):
    """Valid answers for a tiny model, then zero to two of them replaced by hostile ones."""
    heads = draw(st.sampled_from([1, 2, 4, 8]))
    head_dim = draw(st.sampled_from([16, 32, 64]))  # the fused attention's 16-alignment
    answers = {
        "model_name": f"prop_{draw(st.integers(0, 10**9))}",
        "vocab_size": draw(st.integers(2, 300)),
        "hidden_size": heads * head_dim * draw(st.sampled_from([1, 2])),
        "num_hidden_layers": draw(st.integers(1, 2)),
        "num_attention_heads": heads,
        "num_key_value_heads": draw(st.sampled_from([k for k in (1, 2, 4, 8) if heads % k == 0])),
        "head_dim": head_dim,
        "intermediate_size": draw(st.integers(1, 96)),
        "rope_theta": draw(st.floats(2.0, 1e7)),
        "rms_norm_eps": draw(st.floats(1e-8, 1e-2)),
        "max_seq_len": draw(st.integers(3, 40)),
        "batch_size": draw(st.integers(1, 3)),
        "qk_norm": draw(st.booleans()),
        "attention_bias": draw(st.booleans()),
        "tie_word_embeddings": draw(st.booleans()),
        "exe_mode": draw(st.sampled_from(["eager", "npugraph_ex", "ge_graph"])),
        "dtype": draw(st.sampled_from(["bfloat16", "float16"])),
    }
    if draw(st.booleans()):
        del answers["head_dim"]  # derived from hidden_size // num_attention_heads
    family = draw(st.sampled_from(["dense", "moe", "mla"]))
    if family == "mla":  # MLA has no KV heads, head_dim, QK-norm or q/k/v bias
        for gqa_only in ("num_key_value_heads", "head_dim", "qk_norm", "attention_bias"):
            answers.pop(gqa_only, None)
        method = draw(st.sampled_from(["noaux_tc", "greedy", "group_limited_greedy"]))
        experts = draw(st.sampled_from([4, 8]))
        answers.update(
            family="mla",
            q_lora_rank=draw(st.sampled_from([0, 16])),
            kv_lora_rank=draw(st.sampled_from([16, 32])),
            qk_nope_head_dim=draw(st.sampled_from([8, 24])),  # + rope 8: 16-aligned (prefill)
            qk_rope_head_dim=8,
            v_head_dim=draw(st.sampled_from([8, 16])),
            num_experts=experts,
            num_experts_per_tok=draw(st.integers(1, 2)),
            moe_intermediate_size=draw(st.integers(1, 48)),
            n_shared_experts=draw(st.integers(0, 1)),
            first_k_dense_replace=draw(st.integers(0, answers["num_hidden_layers"] - 1)),
            topk_method=method,
            routed_scaling_factor=draw(st.floats(0.5, 3.0)),
            rope_interleave=draw(st.booleans()),
            norm_topk_prob=draw(st.booleans()),
        )
        if method != "greedy":
            answers.update(n_group=2, topk_group=draw(st.integers(1, 2)))
    if family == "moe":
        answers.update(
            family="moe",
            num_experts=draw(st.integers(2, 8)),
            num_experts_per_tok=draw(st.integers(1, 2)),
            moe_intermediate_size=draw(st.integers(1, 48)),
            decoder_sparse_step=draw(st.integers(1, 2)),
            mlp_only_layers=draw(st.sampled_from(["", "0", "1", "0, 1"])),
            shared_expert_intermediate_size=draw(st.sampled_from([0, 16])),
            norm_topk_prob=draw(st.booleans()),
        )
    if draw(st.booleans()):
        answers.update(
            kv_cache="paged",
            block_size=draw(st.sampled_from([16, 32, 128])),
            kv_cache_tokens=draw(st.integers(1, 200)),
        )
    kind = draw(st.sampled_from(["none", "linear", "llama3", "yarn"]))
    if kind != "none":
        answers["rope_scaling"] = kind
    for name in draw(st.lists(st.sampled_from(sorted(BAD_VALUES)), max_size=2, unique=True)):
        answers[name] = draw(BAD_VALUES[name])
    return answers


def _run_package(dest, name: str, batch: int, max_seq_len: int) -> None:
    """Import the rendered package and run prefill plus two eager decode steps."""
    sys.path.insert(0, str(dest / "src"))
    try:
        for module in [m for m in sys.modules if m == name or m.startswith(name + ".")]:
            del sys.modules[module]
        ops = importlib.import_module("ascend_runtime.ops")
        architecture = importlib.import_module(f"{name}.architecture")
        metadata = importlib.import_module("ascend_runtime.metadata")
        modeling = importlib.import_module(f"{name}.modeling")
        args = architecture.ModelArgs()
        model = modeling.Transformer(args, ops.load("portable")).eval()
        if args.kv_cache == "paged":  # a budget for this run's rows
            block = args.block_size
            model.setup_caches(batch, kv_cache_tokens=batch * -(-max_seq_len // block) * block)
        else:
            model.setup_caches(batch)
        prompt_len = max_seq_len - 2  # room for two decode steps
        tokens = torch.randint(0, model.args.vocab_size, (batch, prompt_len))
        with torch.inference_mode():
            logits = model.prefill(**metadata.prefill_inputs(tokens).as_kwargs())
            kv_len = [prompt_len] * batch
            for _ in range(2):
                step = metadata.decode_inputs(logits.argmax(-1), kv_len, False)
                logits = model.decode(**step.as_kwargs())
                kv_len = [n + 1 for n in kv_len]
        assert logits.shape == (batch, 1, model.args.vocab_size)
        assert torch.isfinite(logits.float()).all()
    finally:
        sys.path.remove(str(dest / "src"))


@settings(
    max_examples=80,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(answers=answer_sets())
def test_exit_0_and_runs_or_exit_2_and_nothing_written(cli, tmp_path_factory, answers):
    root = tmp_path_factory.mktemp("prop")
    data = root / "answers.yml"
    data.write_text(yaml.safe_dump(answers))
    before = tree_state(root)
    dest = root / "pkg"
    result = cli("new", "model", "--defaults", "--data-file", data, dest)
    assert "Traceback" not in result.output
    event(f"family {answers.get('family', 'dense')}: exit {result.exit_code}")
    if result.exit_code == 2:
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
        assert tree_state(root) == before
        return
    assert result.exit_code == 0, (result.exit_code, result.output, result.exception)
    _run_package(dest, answers["model_name"], answers["batch_size"], answers["max_seq_len"])
