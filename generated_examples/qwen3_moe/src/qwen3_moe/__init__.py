"""A GQA decoder with mixture-of-experts layers with eager prefill and a graph-compiled decode.

Rendered by ascend-scaffold as qwen3_moe.
"""

from .architecture import ModelArgs
from .modeling import Transformer

__all__ = ["ModelArgs", "Transformer"]
