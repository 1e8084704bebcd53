"""Shared fixtures: a tiny random model on the portable ops, and helpers to drive it."""

import dataclasses
import os

# Where torch-npu is installed without CANN, `import torch` would autoload it and fail;
# the npu_emulated tier imports it explicitly after building stand-in libraries.
os.environ.setdefault("TORCH_DEVICE_BACKEND_AUTOLOAD", "0")

from pathlib import Path

import pytest
import torch

from qwen3_ge import (
    ops,
)
from qwen3_ge.architecture import (
    ModelArgs,
)
from qwen3_ge.inference_config import (
    ModelConfig,
)
from qwen3_ge.metadata import (
    decode_inputs,
    prefill_inputs,
)
from qwen3_ge.modeling import (
    Transformer,
)

CONFIG_DIR = Path(__file__).parents[1] / "config"
CONFIG_PATH = CONFIG_DIR / "qwen3_ge.yaml"
TINY = ModelArgs(
    vocab_size=128,
    hidden_size=64,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=16,
    intermediate_size=128,
    max_seq_len=96,
)
# The emulated NPU tier runs shapes and a dtype the device takes (docs/design.md): bfloat16
# for the fused attention, head_dim 64 for the fused rotary.
TINY_NPU = dataclasses.replace(
    TINY, hidden_size=128, num_attention_heads=2, num_key_value_heads=1, head_dim=64
)
NPU_DTYPE = torch.bfloat16
PROMPT_LEN = 8
BATCH = 2


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


def tiny_model(
    batch: int = BATCH,
    seed: int = 0,
    args: ModelArgs = TINY,
    backend: str = "portable",
    dtype: torch.dtype = torch.float32,
) -> Transformer:
    torch.manual_seed(seed)
    model = Transformer(args, ops.load(backend)).to(dtype).eval()
    setup_test_caches(model, batch)
    return model


def test_cache_tokens(batch: int = BATCH, max_seq_len: int = TINY.max_seq_len) -> int | None:
    """The KV budget for the test shapes (`batch` rows of up to `max_seq_len`); None: a
    contiguous cache has no budget, every row holds max_seq_len positions."""
    del batch, max_seq_len
    return None


test_cache_tokens.__test__ = False  # a helper, not a test


def setup_test_caches(model: Transformer, batch: int = BATCH) -> None:
    """KV caches for the test shapes (test_cache_tokens)."""
    model.setup_caches(batch, kv_cache_tokens=test_cache_tokens(batch, model.args.max_seq_len))


# The compile settings this package was rendered with (config/*.yaml is yours to change;
# the tests check what the template made).
RENDERED_CONFIG = ModelConfig(
    platform_version="A3",
    exe_mode="ge_graph",
    fa_interface="torchair",
    enable_dynamic_graph=False,
)


def compile_config(exe_mode: str, tensor_lengths: bool) -> ModelConfig:
    """A config for the CPU checks: host lists + dynamic=True, or Tensor lengths + static."""
    if tensor_lengths:
        return ModelConfig(exe_mode="ge_graph", fa_interface="torchair", enable_dynamic_graph=False)
    return ModelConfig(exe_mode=exe_mode, fa_interface="torch_npu", enable_dynamic_graph=True)


def prompt(batch: int = BATCH, seed: int = 1) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(0, TINY.vocab_size, (batch, PROMPT_LEN), generator=generator)


@torch.inference_mode()
def greedy(
    model: Transformer,
    decode,
    tokens: torch.Tensor,
    steps: int,
    tensor_lengths: bool,
    forced: list[torch.Tensor] | None = None,
):
    """Prefill eagerly, then `steps` decode calls; returns every step's logits. `forced`
    (another run's logits) feeds that run's greedy tokens instead of this model's own, so
    two runs in low precision compare step by step even where a near-tie flips a token."""
    logits = model.prefill(**prefill_inputs(tokens).as_kwargs())
    outputs = [logits]
    kv_len = [tokens.shape[1]] * tokens.shape[0]
    for index in range(steps):
        previous = forced[index] if forced is not None else logits
        step = decode_inputs(previous.argmax(-1), kv_len, tensor_lengths)
        model.prepare_decode(kv_len)
        logits = decode(**step.as_kwargs())
        outputs.append(logits)
        kv_len = [n + 1 for n in kv_len]
    return outputs
