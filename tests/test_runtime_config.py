"""ascend_runtime.config: bad YAML values name their field, lengths that do not fit the KV
cache name both keys, dynamic GE warns, the task-queue environment per mode."""

import logging
import os

import pytest
import yaml

from ascend_runtime.config import (
    NEW_TOKENS_KEY,
    PROMPT_KEY,
    ConfigError,
    ModelConfig,
    check_fits,
    load_config,
    set_task_queue_env,
)

MAX_SEQ_LEN = 2048


def write_config(tmp_path, **sections):
    raw = {"model_config": {"exe_mode": "npugraph_ex"}, "scheduler_config": {"batch_size": 1}}
    for section, values in sections.items():
        raw.setdefault(section, {}).update(values)
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


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
        ("scheduler_config", {"max_new_tokens": None}, "max_new_tokens"),
        ("data_config", {"seed": "abc"}, "seed"),
        ("data_config", {"temperature": float("nan")}, "temperature must be a finite number"),
        ("data_config", {"top_p": float("inf")}, "top_p must be a finite number"),
        (
            "model_config",
            {"with_ckpt": True, "model_path": ""},
            "with_ckpt is true but model_path is empty",
        ),
    ],
)
def test_bad_values_name_their_field(tmp_path, section, values, field):
    with pytest.raises(ConfigError, match=field):
        load_config(write_config(tmp_path, **{section: values}))


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("model_config: [unclosed\n  a: b: c\n", "invalid YAML at line 2"),
        ("- a list\n", "top level must be a mapping"),
        ("model_config:\n  exe_mode: eager\n\tbad: tab\n", "invalid YAML"),
    ],
)
def test_unparsable_yaml_names_the_file(tmp_path, text, message):
    path = tmp_path / "broken.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=message) as error:
        load_config(path)
    assert "broken.yaml" in str(error.value) and "\n" not in str(error.value)


def test_missing_file_names_it(tmp_path):
    with pytest.raises(ConfigError, match="missing.yaml does not exist"):
        load_config(tmp_path / "missing.yaml")


@pytest.mark.parametrize(("prompt_len", "new_tokens"), [(60, 4), (64, 0), (1, 63)])
def test_prompt_and_new_tokens_fill_the_cache_exactly(prompt_len, new_tokens):
    check_fits(prompt_len, new_tokens, 64)  # prefill [0, prompt_len) + one position a step
    with pytest.raises(ConfigError, match=f"{PROMPT_KEY} .* {NEW_TOKENS_KEY} .* max_seq_len"):
        check_fits(prompt_len, new_tokens + 1, 64)


def test_lengths_beyond_max_seq_len_name_both_keys(tmp_path):
    max_seq_len = MAX_SEQ_LEN
    path = write_config(
        tmp_path,
        data_config={"input_truncated_len": max_seq_len},
        scheduler_config={"max_new_tokens": 1},
    )
    load_config(path)  # without the model's length nothing to check
    with pytest.raises(ConfigError) as error:
        load_config(path, max_seq_len=max_seq_len)
    assert PROMPT_KEY in str(error.value) and NEW_TOKENS_KEY in str(error.value)
    assert f"max_seq_len ({max_seq_len})" in str(error.value)


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
