"""The YAML config: yours loads and fits the KV cache; the rendered settings are as asked.

The config's validation itself is ascend_runtime.config's (tested with the runtime)."""

import copy

import yaml
from ascend_runtime.config import (
    load_config,
)
from conftest import CONFIG_PATH

from deepseek_v3.architecture import (
    ModelArgs,
)

# What the package's YAML config held when it was rendered. That file is yours to edit
# (`update` never touches it), so these tests build on this copy and only validate yours.
RENDERED = {
    "model_config": {
        "dtype": "bfloat16",
        "exe_mode": "npugraph_ex",
        "fa_interface": "torch_npu",
        "enable_dynamic_graph": True,
    },
    "scheduler_config": {"batch_size": 8},
}


def write_config(tmp_path, **sections):
    raw = copy.deepcopy(RENDERED)
    for section, values in sections.items():
        raw.setdefault(section, {}).update(values)
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def test_your_config_is_valid_and_fits_the_kv_cache():
    load_config(CONFIG_PATH, max_seq_len=ModelArgs().max_seq_len)  # the runner's own check


def test_rendered_config_is_valid(tmp_path):
    config = load_config(write_config(tmp_path))
    model = config.model_config
    assert model.exe_mode == "npugraph_ex"
    assert model.fa_interface == "torch_npu"
    assert model.dynamic is True
    assert config.scheduler_config.batch_size == 8
