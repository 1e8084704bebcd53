"""Helpers a model's tests share: a tiny random model on the portable ops, its KV caches
sized for the test shapes, compile configs for the CPU checks, and greedy stepping.

A package's tests/conftest.py makes one `ModelKit` from its ModelSpec; so do the runtime's
own tests (this repository's tests/runtime_suite/), against the example packages.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch

from .. import ops
from ..config import ModelConfig
from ..metadata import decode_inputs, prefill_inputs
from ..model import ModelSpec

PROMPT_LEN = 8
BATCH = 2
NPU_DTYPE = torch.bfloat16  # what the fused attention takes (float16 too)


def tiny_args(args_class: type):
    """A tiny ModelArgs of the package's class: its variant flags as rendered, sizes small.
    MoE: layer 0 MoE, layer 1 dense, so both kinds are in every test."""
    rendered = args_class()
    if rendered.family == "mla":
        sizes = dict(_TINY_MLA)
        if rendered.q_lora_rank:
            sizes["q_lora_rank"] = 32
        if rendered.topk_method != "greedy":
            sizes.update(n_group=2, topk_group=1)
        return dataclasses.replace(rendered, **sizes)
    sizes = dict(
        vocab_size=128,
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        intermediate_size=128,
        max_seq_len=96,
    )
    if rendered.family == "moe":
        sizes.update(
            num_experts=8,
            num_experts_per_tok=2,
            moe_intermediate_size=32,
            decoder_sparse_step=1,
            mlp_only_layers=(1,),
        )
        if rendered.shared_expert_intermediate_size:
            sizes["shared_expert_intermediate_size"] = 48
    return dataclasses.replace(rendered, **sizes)


# MLA: layer 0 dense, layer 1 MoE (first_k_dense_replace 1); 2 groups of 4 experts; the
# query latent only where the rendered model has one (DeepSeek-V2-Lite has none).
_TINY_MLA = dict(
    vocab_size=128,
    hidden_size=64,
    num_hidden_layers=2,
    num_attention_heads=4,
    kv_lora_rank=32,
    qk_nope_head_dim=24,
    qk_rope_head_dim=8,
    v_head_dim=16,
    intermediate_size=128,
    num_experts=8,
    num_experts_per_tok=2,
    moe_intermediate_size=32,
    first_k_dense_replace=1,
    moe_layer_freq=1,
    max_seq_len=96,
)


def npu_args(tiny):
    """Shapes the device takes (docs/design.md): head_dim 64 for the fused rotary. MLA: the
    fused attention's MLA mode (latent 512, rope 64, 32 query heads; prefill's head dim 128,
    qk 64 + 64 with v padded to it), so a paged package's decode runs it."""
    if tiny.family == "mla":
        return dataclasses.replace(
            tiny, hidden_size=128, num_attention_heads=32, kv_lora_rank=512,
            qk_nope_head_dim=64, qk_rope_head_dim=64, v_head_dim=64,
        )  # fmt: skip
    return dataclasses.replace(
        tiny, hidden_size=128, num_attention_heads=2, num_key_value_heads=1, head_dim=64
    )


def compile_config(exe_mode: str, tensor_lengths: bool) -> ModelConfig:
    """A config for the CPU checks: host lists + dynamic=True, or Tensor lengths + static."""
    if tensor_lengths:
        return ModelConfig(exe_mode="ge_graph", fa_interface="torchair", enable_dynamic_graph=False)
    return ModelConfig(exe_mode=exe_mode, fa_interface="torch_npu", enable_dynamic_graph=True)


@torch.inference_mode()
def greedy(model, decode, tokens: torch.Tensor, steps: int, tensor_lengths: bool, forced=None):
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


@dataclass
class ModelKit:
    """The test helpers bound to one model package."""

    spec: ModelSpec

    def __post_init__(self):
        self.tiny = tiny_args(self.spec.args_class)
        self.tiny_npu = npu_args(self.tiny)
        self.block_size = self.spec.args.block_size
        self.paged = self.spec.args.kv_cache == "paged"

    def tiny_model(
        self,
        batch: int = BATCH,
        seed: int = 0,
        args=None,
        backend: str = "portable",
        dtype: torch.dtype = torch.float32,
    ):
        torch.manual_seed(seed)
        model = self.spec.model_class(args or self.tiny, ops.load(backend)).to(dtype).eval()
        self.setup_test_caches(model, batch)
        return model

    def test_cache_tokens(self, batch: int = BATCH, max_seq_len: int | None = None) -> int | None:
        """The KV budget for the test shapes (`batch` rows of up to `max_seq_len`): every
        row's worst case in whole blocks, not the rendered budget (sized for the real
        model's rows, it may hold fewer rows of the tiny model than the tests run)."""
        if not self.paged:
            return None
        max_seq_len = max_seq_len or self.tiny.max_seq_len
        return batch * -(-max_seq_len // self.block_size) * self.block_size

    test_cache_tokens.__test__ = False  # a helper, not a test

    def setup_test_caches(self, model, batch: int = BATCH) -> None:
        """KV caches for the test shapes (test_cache_tokens)."""
        model.setup_caches(
            batch, kv_cache_tokens=self.test_cache_tokens(batch, model.args.max_seq_len)
        )

    def prompt(self, batch: int = BATCH, seed: int = 1) -> torch.Tensor:
        generator = torch.Generator().manual_seed(seed)
        return torch.randint(0, self.tiny.vocab_size, (batch, PROMPT_LEN), generator=generator)
