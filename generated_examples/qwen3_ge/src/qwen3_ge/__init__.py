"""qwen3_ge: a dense GQA decoder with eager prefill and a graph-compiled decode."""

from .configuration import ModelArgs
from .modeling import Transformer

__all__ = ["ModelArgs", "Transformer"]
