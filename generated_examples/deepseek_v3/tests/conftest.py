"""Shared fixtures: the runtime's test kit (ascend_runtime.testing.kit) bound to this model.

TINY is this package's ModelArgs with its flags as rendered and small sizes; TINY_NPU the
shapes the emulated NPU tier runs (head_dim 64 for the fused rotary, in bfloat16).
"""

import os

# Where torch-npu is installed without CANN, `import torch` would autoload it and fail;
# the npu_emulated tier imports it explicitly after building stand-in libraries.
os.environ.setdefault("TORCH_DEVICE_BACKEND_AUTOLOAD", "0")

from pathlib import Path

import pytest
import torch
from ascend_runtime.config import (
    ModelConfig,
)
from ascend_runtime.testing.kit import (  # noqa: F401 (the tests import them from here)
    BATCH,
    NPU_DTYPE,
    PROMPT_LEN,
    ModelKit,
    compile_config,
    greedy,
)

from deepseek_v3 import (
    MODEL,
)

KIT = ModelKit(MODEL)
TINY, TINY_NPU, BLOCK_SIZE = KIT.tiny, KIT.tiny_npu, KIT.block_size
tiny_model, setup_test_caches, prompt = KIT.tiny_model, KIT.setup_test_caches, KIT.prompt
CONFIG_DIR = Path(__file__).parents[1] / "config"
CONFIG_PATH = CONFIG_DIR / "deepseek_v3.yaml"

# The compile settings this package was rendered with (config/*.yaml is yours to change;
# the tests check what the template made).
RENDERED_CONFIG = ModelConfig(
    platform_version="A3",
    exe_mode="npugraph_ex",
    fa_interface="torch_npu",
    enable_dynamic_graph=True,
)

NPU_EMULATION_MISSING = (
    "ascend-scaffold's NPU emulation is not installed (pip install ascend-scaffold) "
    "— it provides the npu_emulated tier"
)


@pytest.fixture(scope="session")
def npu_emulation():
    """torch_npu/torchair imported on CPU with stand-in CANN libraries and CPU reference
    kernels on the real npu:: ops, from ascend-scaffold's versioned `scaffold.npu_emulation`
    (a test dependency); also gives `check_npu_calls`, the op-schema check."""
    emulation = pytest.importorskip("scaffold.npu_emulation", reason=NPU_EMULATION_MISSING)
    reason = emulation.unavailable_reason(platform="A3")
    if reason:
        pytest.skip(f"NPU emulation unavailable: {reason}")
    return emulation


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()
