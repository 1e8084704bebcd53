"""Each graph-mode rule: one valid and one invalid case, in the CLI's spec and in
copier.yml's validators (so a plain `copier copy` refuses the same answers)."""

import copier
import pytest

from scaffold.errors import UserError
from scaffold.interview import collect_answers
from scaffold.spec import validate
from scaffold.template import template_root

RULES = [
    # (valid overrides, invalid overrides, message)
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
