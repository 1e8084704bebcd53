"""A dense GQA decoder with eager prefill and a graph-compiled decode.

Rendered by ascend-scaffold as qwen3_moe.
"""

from .architecture import ModelArgs
from .modeling import Transformer

__all__ = ["ModelArgs", "Transformer"]
