"""The model on vLLM (and vllm-ascend): the same decoder, built from vLLM's layers only.

vllm_plugin.py registers VllmForCausalLM with vLLM under the package's own architecture
name. The checkpoint is read by this package's own loader first
(ascend_runtime.serving.plugin.checkpoint_args), so a model_type, flag or RoPE kind the
package cannot run is refused as `load` refuses it; the sizes are its ModelArgs.
vllm-ascend replaces these layers' kernels with NPU ones (and captures ACL graphs), so
nothing here is NPU-specific. vLLM's names come through
ascend_runtime.serving.vllm_compat, which holds the differences between vLLM releases.
"""

from collections.abc import Iterable

import torch
from ascend_runtime.serving.plugin import checkpoint_args
from ascend_runtime.serving.vllm_compat import (
    IntermediateTensors,
    LogitsProcessor,
    MergedColumnParallelLinear,
    ParallelLMHead,
    QKVParallelLinear,
    RMSNorm,
    RowParallelLinear,
    SiluAndMul,
    VllmConfig,
    VocabParallelEmbedding,
    make_attention,
    make_rope,
    maybe_prefix,
    rope_scaling_params,
    support_torch_compile,
)
from ascend_runtime.serving.vllm_weights import PACKED_MODULES, load_weights
from torch import nn

from . import MODEL
from .weight_map import CHECKPOINT_RENAMES


class Attention(nn.Module):
    """GQA over vLLM's paged KV cache: q/k/v column-parallel by heads (KV heads replicated
    when there are fewer than ranks), o_proj row-parallel (all-reduced)."""

    def __init__(self, args, vllm_config: VllmConfig, prefix: str):
        super().__init__()
        quant, self.head_dim = vllm_config.quant_config, args.head_dim
        self.qkv_proj = QKVParallelLinear(
            args.hidden_size, args.head_dim, args.num_attention_heads,
            args.num_key_value_heads, bias=args.attention_bias, quant_config=quant,
            prefix=f"{prefix}.qkv_proj",
        )  # fmt: skip
        self.o_proj = RowParallelLinear(
            args.num_attention_heads * args.head_dim, args.hidden_size, bias=False,
            quant_config=quant, prefix=f"{prefix}.o_proj",
        )  # fmt: skip
        heads, kv_heads = self.qkv_proj.num_heads, self.qkv_proj.num_kv_heads  # this rank's
        self.sizes = [heads * args.head_dim, kv_heads * args.head_dim, kv_heads * args.head_dim]
        self.qk_norm = args.qk_norm
        if args.qk_norm:  # RMSNorm over each head's q and k, before RoPE (Qwen3)
            self.q_norm = RMSNorm(args.head_dim, eps=args.rms_norm_eps)
            self.k_norm = RMSNorm(args.head_dim, eps=args.rms_norm_eps)
        hf_config = vllm_config.model_config.hf_config
        self.rotary_emb = make_rope(
            args.head_dim, hf_config.max_position_embeddings, args.rope_theta,
            rope_scaling_params(hf_config),
        )  # fmt: skip
        self.attn = make_attention(
            heads, args.head_dim, kv_heads, vllm_config.cache_config, quant, f"{prefix}.attn"
        )

    def forward(self, positions: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self.qkv_proj(x)[0].split(self.sizes, dim=-1)
        if self.qk_norm:
            q = self.q_norm(q.reshape(-1, self.head_dim)).view(q.shape)
            k = self.k_norm(k.reshape(-1, self.head_dim)).view(k.shape)
        q, k = self.rotary_emb(positions, q, k)
        return self.o_proj(self.attn(q, k, v))[0]


class MLP(nn.Module):
    """SwiGLU: gate/up fused and column-parallel, down row-parallel (all-reduced)."""

    def __init__(self, hidden_size: int, intermediate_size: int, quant_config, prefix: str):
        super().__init__()
        self.gate_up_proj = MergedColumnParallelLinear(
            hidden_size, [intermediate_size] * 2, bias=False, quant_config=quant_config,
            prefix=f"{prefix}.gate_up_proj",
        )  # fmt: skip
        self.down_proj = RowParallelLinear(
            intermediate_size, hidden_size, bias=False, quant_config=quant_config,
            prefix=f"{prefix}.down_proj",
        )  # fmt: skip
        self.act_fn = SiluAndMul()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(self.act_fn(self.gate_up_proj(x)[0]))[0]


class DecoderLayer(nn.Module):
    def __init__(self, args, vllm_config: VllmConfig, prefix: str):
        super().__init__()
        quant = vllm_config.quant_config
        self.self_attn = Attention(args, vllm_config, f"{prefix}.self_attn")
        self.mlp = MLP(args.hidden_size, args.intermediate_size, quant, f"{prefix}.mlp")
        self.input_layernorm = RMSNorm(args.hidden_size, eps=args.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(args.hidden_size, eps=args.rms_norm_eps)

    def forward(self, positions, hidden_states, residual):
        # vLLM's RMSNorm(x, residual) adds the residual first and returns both
        if residual is None:
            hidden_states, residual = self.input_layernorm(hidden_states), hidden_states
        else:
            hidden_states, residual = self.input_layernorm(hidden_states, residual)
        hidden_states = self.self_attn(positions, hidden_states)
        hidden_states, residual = self.post_attention_layernorm(hidden_states, residual)
        return self.mlp(hidden_states), residual


# Compiled by vLLM (torch.compile, then CUDA / ACL graphs); the token dimension is dynamic.
@support_torch_compile(dynamic_arg_dims={"input_ids": 0, "positions": 0, "inputs_embeds": 0})
class Model(nn.Module):
    def __init__(self, *, vllm_config: VllmConfig, prefix: str = "", args=None):
        super().__init__()
        self.embed_tokens = VocabParallelEmbedding(
            args.vocab_size, args.hidden_size, quant_config=vllm_config.quant_config,
            prefix=f"{prefix}.embed_tokens",
        )  # fmt: skip
        self.layers = nn.ModuleList(
            DecoderLayer(args, vllm_config, f"{prefix}.layers.{i}")
            for i in range(args.num_hidden_layers)
        )
        self.norm = RMSNorm(args.hidden_size, eps=args.rms_norm_eps)

    def embed_input_ids(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.embed_tokens(input_ids)

    def forward(
        self,
        input_ids: torch.Tensor | None,
        positions: torch.Tensor,
        inputs_embeds: torch.Tensor | None = None,
    ) -> torch.Tensor:
        hidden_states = self.embed_input_ids(input_ids) if inputs_embeds is None else inputs_embeds
        residual = None
        for layer in self.layers:
            hidden_states, residual = layer(positions, hidden_states, residual)
        return self.norm(hidden_states, residual)[0]


class VllmForCausalLM(nn.Module):
    """What vLLM builds for an architecture of vllm_plugin.ARCHITECTURE."""

    packed_modules_mapping = PACKED_MODULES

    def __init__(self, *, vllm_config: VllmConfig, prefix: str = ""):
        super().__init__()
        self.args = args = checkpoint_args(MODEL, vllm_config.model_config.model)
        self.model = Model(vllm_config=vllm_config, prefix=maybe_prefix(prefix, "model"), args=args)
        self.lm_head = ParallelLMHead(
            args.vocab_size, args.hidden_size, quant_config=vllm_config.quant_config,
            prefix=maybe_prefix(prefix, "lm_head"),
        )  # fmt: skip
        if args.tie_word_embeddings:
            self.lm_head = self.lm_head.tie_weights(self.model.embed_tokens)
        self.logits_processor = LogitsProcessor(args.vocab_size)

    def embed_input_ids(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.model.embed_input_ids(input_ids)

    def forward(
        self,
        input_ids: torch.Tensor | None,
        positions: torch.Tensor,
        intermediate_tensors: IntermediateTensors | None = None,
        inputs_embeds: torch.Tensor | None = None,
    ) -> torch.Tensor:
        if intermediate_tensors is not None:
            raise ValueError("pipeline parallelism is not supported by this package")
        return self.model(input_ids, positions, inputs_embeds)

    def compute_logits(self, hidden_states: torch.Tensor) -> torch.Tensor | None:
        return self.logits_processor(self.lm_head, hidden_states)

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> set[str]:
        return load_weights(
            self, weights, CHECKPOINT_RENAMES,
            tied_embeddings=self.args.tie_word_embeddings,
        )  # fmt: skip
