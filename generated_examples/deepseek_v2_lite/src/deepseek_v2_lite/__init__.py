"""An MLA decoder with DeepSeek MoE layers: eager prefill, graph-compiled decode.

Rendered by ascend-scaffold as
deepseek_v2_lite.
The model is this package (architecture.py, modeling.py, layers/, weight_map.py); the
machinery it runs on is ascend_runtime's. The
Python API (README.md): `load(checkpoint)`, `compile_decode(model, yaml_path)` and
`generate(model, decode, prompts, max_new_tokens)`; `MODEL` is what the runtime takes.
"""

from __future__ import annotations

from ascend_runtime.generation import generate
from ascend_runtime.model import ModelSpec

from .architecture import ModelArgs
from .modeling import Transformer
from .weight_map import CHECKPOINT_RENAMES, sources

MODEL = ModelSpec(
    name="deepseek_v2_lite",
    args_class=ModelArgs,
    model_class=Transformer,
    weight_sources=sources,
    checkpoint_renames=CHECKPOINT_RENAMES,
)


def load(path, *, dtype="bfloat16", device=None, batch_size: int = 1, **kwargs) -> Transformer:
    """The checkpoint at `path` (config.json + safetensors, local only) with its KV cache
    allocated: on the NPU with the fused ops when there is one, else on CPU (portable)."""
    import torch
    from ascend_runtime import ops
    from ascend_runtime.weights import load_pretrained

    on_npu = ops.npu_available()
    device = device or ("npu" if on_npu else "cpu")
    backend = ops.load("npu" if torch.device(device).type == "npu" else "portable")
    return load_pretrained(
        MODEL, path, backend, dtype=dtype, device=device, batch_size=batch_size, **kwargs
    )


def compile_decode(model: Transformer, config_path: str):
    """`model.decode` compiled as the YAML's model_config says (exe_mode, dynamic, cache)."""
    from ascend_runtime.config import load_config
    from ascend_runtime.graph import compile_decode as compile_for

    return compile_for(model, load_config(config_path).model_config)


__all__ = ["MODEL", "ModelArgs", "Transformer", "compile_decode", "generate", "load"]
