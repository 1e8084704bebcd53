"""Each graph-mode rule: one valid and one invalid case, in the CLI's spec and in
copier.yml's validators (so a plain `copier copy` refuses the same answers)."""

import copier
import pytest

from scaffold.errors import UserError
from scaffold.interview import collect_answers
from scaffold.spec import validate
from scaffold.template import template_root

MOE = {"family": "moe", "num_hidden_layers": 4}
RULES = [
    # (valid overrides, invalid overrides, message)
    (
        {**MOE, "num_experts": 8, "num_experts_per_tok": 8},
        {**MOE, "num_experts": 8, "num_experts_per_tok": 9},
        "num_experts_per_tok \\(top-k\\) must be between 1 and num_experts \\(8\\), got 9",
    ),
    ({**MOE, "num_experts": 2}, {**MOE, "num_experts": 1}, "num_experts must be >= 2"),
    (
        {**MOE, "moe_intermediate_size": 1},
        {**MOE, "moe_intermediate_size": 0},
        "moe_intermediate_size must be >= 1",
    ),
    (
        {**MOE, "mlp_only_layers": "0, 3"},
        {**MOE, "mlp_only_layers": "0;3"},
        "mlp_only_layers must be layer indices separated by commas or spaces",
    ),
    (
        {**MOE, "mlp_only_layers": "3"},
        {**MOE, "mlp_only_layers": "1,4"},
        "mlp_only_layers: layer 4 does not exist \\(num_hidden_layers is 4: indices 0..3\\)",
    ),
    (
        {**MOE, "decoder_sparse_step": 4},
        {**MOE, "decoder_sparse_step": 5},
        "decoder_sparse_step must be between 1 and num_hidden_layers \\(4\\), got 5",
    ),
    (
        {**MOE, "shared_expert_intermediate_size": 0},
        {**MOE, "shared_expert_intermediate_size": -1},
        "shared_expert_intermediate_size must be >= 0",
    ),
    (  # the grouped matmul's limits on the platform
        {**MOE, "num_experts": 1024, "num_experts_per_tok": 8},
        {**MOE, "num_experts": 1025, "num_experts_per_tok": 8},
        "num_experts 1025: npu_grouped_matmul on A3 takes at most 1024 experts",
    ),
    (
        {**MOE, "moe_intermediate_size": 32767},
        {**MOE, "moe_intermediate_size": 32768},
        "needs 2 \\* moe_intermediate_size < 65536",
    ),
    ({"num_attention_heads": 8, "num_key_value_heads": 2}, {"num_key_value_heads": 3}, "divisible"),
    (
        {"exe_mode": "npugraph_ex", "enable_static_kernel": True},
        {"exe_mode": "ge_graph", "fa_interface": "torchair", "enable_static_kernel": True},
        "enable_static_kernel is supported only with exe_mode=npugraph_ex",
    ),
    (
        {"exe_mode": "ge_graph", "fa_interface": "torchair"},
        {"exe_mode": "npugraph_ex", "fa_interface": "torchair"},
        "runs only in ge_graph mode",
    ),
    (
        {"exe_mode": "npugraph_ex", "fa_interface": "torch_npu"},
        {"exe_mode": "ge_graph", "fa_interface": "torch_npu"},
        "recompile every decode step",
    ),
    ({"head_dim": 64}, {"head_dim": 63}, "head_dim must be an even number"),
    ({"model_name": "ok_name2"}, {"model_name": "2bad"}, "model_name must match"),
    (
        {"rope_scaling": "llama3", "rope_low_freq_factor": 1.0, "rope_high_freq_factor": 4.0},
        {"rope_scaling": "llama3", "rope_low_freq_factor": 4.0, "rope_high_freq_factor": 4.0},
        "must be > rope_low_freq_factor",
    ),
    (
        {"rope_scaling": "linear", "rope_scaling_factor": 2.0},
        {"rope_scaling": "linear", "rope_scaling_factor": -2.0},
        "rope_scaling_factor must be > 0",
    ),
    (
        {"rope_scaling": "yarn", "rope_scaling_factor": 1.0},
        {"rope_scaling": "yarn", "rope_scaling_factor": 0.5},
        "yarn rope_scaling_factor must be >= 1",
    ),
    (
        {"rope_scaling": "yarn", "rope_beta_fast": 32.0, "rope_beta_slow": 32.0},
        {"rope_scaling": "yarn", "rope_beta_fast": 16.0, "rope_beta_slow": 32.0},
        "rope_beta_slow \\(32.0\\) must be <= rope_beta_fast \\(16.0\\)",
    ),
    (
        {"rope_scaling": "yarn", "rope_attention_factor": 0.0},
        {"rope_scaling": "yarn", "rope_attention_factor": -1.0},
        "rope_attention_factor must be >= 0",
    ),
]


def answers(check=False, **overrides):
    return collect_answers(overrides, defaults=True, check=check)


@pytest.mark.parametrize(("valid", "invalid", "message"), RULES)
def test_rule(valid, invalid, message):
    validate(answers(**valid))
    with pytest.raises(UserError, match=message):
        validate(answers(**invalid))


@pytest.mark.parametrize(("valid", "invalid", "message"), RULES)
def test_copier_validators_agree(tmp_path, invalid, valid, message):
    data = answers(**invalid)
    with pytest.raises(ValueError, match=message):
        copier.run_copy(
            str(template_root()),
            tmp_path / "out",
            data=data,
            defaults=True,
            quiet=True,
            vcs_ref="HEAD",  # this checkout, not the newest release tag
        )


@pytest.mark.parametrize(
    ("exe_mode", "fa_interface", "dynamic"),
    [
        ("npugraph_ex", "torch_npu", True),
        ("ge_graph", "torchair", False),
        ("eager", "torch_npu", False),
    ],
)
def test_dynamic_follows_the_fa_table(exe_mode, fa_interface, dynamic):
    spec = validate(answers(exe_mode=exe_mode, fa_interface=fa_interface))
    assert spec.enable_dynamic_graph is dynamic


def test_fa_interface_default_follows_mode():
    assert answers(exe_mode="ge_graph")["fa_interface"] == "torchair"
    assert answers(exe_mode="npugraph_ex")["fa_interface"] == "torch_npu"


def test_moe_needs_a_moe_layer():
    """Which layers are MoE is transformers' rule; answers that leave none are refused."""
    spec = validate(answers(**MOE, decoder_sparse_step=2, mlp_only_layers="3"))
    assert spec.family == "moe"
    with pytest.raises(UserError, match="no layer is MoE .*choose family dense"):
        validate(answers(**MOE, decoder_sparse_step=2, mlp_only_layers="1,3"))


def test_moe_questions_apply_only_to_the_moe_family():
    with pytest.raises(UserError, match="num_experts applies only when family is 'moe'"):
        answers(check=True, num_experts=8)
    with pytest.raises(UserError, match="shared_expert_gate applies only when"):
        answers(check=True, **MOE, shared_expert_gate=False)


def test_moe_parameter_count_counts_experts_in_moe_layers_only():
    """4 layers, layer 1 dense: 3 MoE layers of 8 experts (+ router) and one dense MLP."""
    base = dict(
        hidden_size=64, intermediate_size=96, vocab_size=100, num_hidden_layers=4, head_dim=16
    )
    moe = dict(
        family="moe", num_experts=8, moe_intermediate_size=32, mlp_only_layers="1",
        num_experts_per_tok=2,
    )  # fmt: skip
    dense = validate(answers(**base)).parameter_count
    sparse = validate(answers(**base, **moe)).parameter_count
    per_moe_layer = 8 * (3 * 64 * 32 + 64)  # experts + the router's row per expert
    assert sparse - dense == 3 * (per_moe_layer - 3 * 64 * 96)
    shared = validate(answers(**base, **moe, shared_expert_intermediate_size=16)).parameter_count
    assert shared - sparse == 3 * (3 * 64 * 16 + 64)  # shared expert + its gate
