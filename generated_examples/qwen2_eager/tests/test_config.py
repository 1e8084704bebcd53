import logging
import os

import pytest
import yaml
from conftest import CONFIG_PATH

from qwen2_eager.config import ModelConfig, load_config, set_task_queue_env


def write_config(tmp_path, **sections):
    raw = yaml.safe_load(CONFIG_PATH.read_text())
    for section, values in sections.items():
        raw.setdefault(section, {}).update(values)
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def test_shipped_config_is_valid():
    config = load_config(CONFIG_PATH)
    model = config.model_config
    assert model.exe_mode == "eager"
    assert model.fa_interface == "torch_npu"
    assert model.enable_dynamic_graph is False
    assert config.scheduler_config.batch_size == 1


@pytest.mark.parametrize(
    ("section", "values", "field"),
    [
        ("model_config", {"exe_mode": "max-autotune"}, "exe_mode"),
        ("model_config", {"platform_version": "A1"}, "platform_version"),
        (
            "model_config",
            {"exe_mode": "eager", "enable_static_kernel": True},
            "enable_static_kernel",
        ),
        ("model_config", {"exe_mode": "npugraph_ex", "fa_interface": "torchair"}, "fa_interface"),
        ("model_config", {"exe_mode": "ge_graph", "fa_interface": "torch_npu"}, "fa_interface"),
        ("model_config", {"dtype": "float64"}, "dtype"),
        ("model_config", {"exe_mod": "eager"}, "exe_mod"),
        ("model_config", {"enable_cache_compile": "yes"}, "enable_cache_compile"),
        ("data_config", {"temperature": -0.5}, "temperature"),
        ("data_config", {"top_p": 1.5}, "top_p"),
        ("data_config", {"top_k": -1}, "top_k"),
        ("parallel_config", {"world_size": 0}, "world_size"),
        ("parallel_config", {"world_size": 4, "attn_tp_size": 3}, "attn_tp_size"),
        ("scheduler_config", {"batch_size": 0}, "batch_size"),
        ("scheduler_config", {"max_new_tokens": "many"}, "max_new_tokens"),
    ],
)
def test_bad_values_name_their_field(tmp_path, section, values, field):
    with pytest.raises(ValueError, match=field):
        load_config(write_config(tmp_path, **{section: values}))


def test_ge_graph_dynamic_only_warns(caplog):
    config = ModelConfig(exe_mode="ge_graph", fa_interface="torchair", enable_dynamic_graph=True)
    with caplog.at_level(logging.WARNING):
        config.validate()
    assert "ignored by ge_graph" in caplog.text
    assert config.dynamic is False


@pytest.mark.parametrize(
    ("exe_mode", "platform", "expected"),
    [
        ("npugraph_ex", "A3", "1"),
        ("eager", "950", "1"),
        ("eager", "A2", "2"),
        ("ge_graph", "A3", "2"),
    ],
)
def test_task_queue_env(monkeypatch, exe_mode, platform, expected):
    monkeypatch.delenv("TASK_QUEUE_ENABLE", raising=False)
    set_task_queue_env(ModelConfig(exe_mode=exe_mode, platform_version=platform))
    assert os.environ["TASK_QUEUE_ENABLE"] == expected
