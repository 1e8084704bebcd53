"""Compiled decode without dynamo's guard evaluation once warm-up has compiled its graph.

Before every call of a compiled function dynamo evaluates its guards: on this CPU about
0.2-0.3 ms a step, host time that on an NPU sits in front of every graph replay. The seed
guide's recompile table answers a graph whose inputs are stable with
`skip_guard_eval_unsafe` (torch.compiler.set_stance): guards are not evaluated, the compiled
graph is run as it is. That is safe only while nothing the guards checked has changed, so:

- the first calls (WARMUP_CALLS) run with every guard, and guards stay on for good if the
  last of them still compiled a graph (the inputs are not stable yet: a recompile shows);
- after warm-up, what the guards checked that can change between steps is held by the
  package itself: the shapes, dtypes and devices of the step's tensors, the lengths of its
  host lists, and the identity of the model's KV cache (setup_caches allocates a new one).
  A check of those (a few microseconds) runs before each call; anything else is refused
  with StepSignatureError, one line, and nothing runs. Values (positions, lengths) change
  every step and are graph inputs: they are not checked, as the guards do not check them.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from .config import InputError

WARMUP_CALLS = 2


class StepSignatureError(InputError):
    """A decode call after warm-up whose inputs are not the ones the graph was compiled for."""


def _signature(kwargs: dict, cache: torch.Tensor) -> tuple:
    return (
        tuple(
            (name, value.shape, value.dtype, value.device)
            if isinstance(value, torch.Tensor)
            else (name, len(value))
            for name, value in kwargs.items()
        ),
        cache.data_ptr(),
        cache.shape,
    )


def _describe(signature: tuple) -> str:
    parts, ptr, shape = signature
    described = [
        f"{p[0]} {tuple(p[1])} {str(p[2]).removeprefix('torch.')}"
        if len(p) == 4
        else f"{p[0]} list of {p[1]}"
        for p in parts
    ]
    return ", ".join(described) + f"; KV cache {tuple(shape)} at {ptr:#x}"


class StableDecode:
    """`compiled(**step)`, with guards skipped after warm-up (see the module docstring).
    `cache` is one of the model's KV-cache tensors: setup_caches replaces it."""

    def __init__(self, compiled: Callable, model: torch.nn.Module, graph_count: Callable):
        self.compiled = compiled
        self.model = model
        self.graph_count = graph_count
        self.calls = 0
        self.signature: tuple | None = None  # set when warm-up has compiled the one graph
        self.guarded = False  # warm-up still compiled on its last call: guards stay on
        self._attention = None  # the module whose kv_cache is checked

    def _cache(self) -> torch.Tensor:
        """Layer 0's K (or MLA latent) buffer, read from its cache module each call:
        setup_caches may have replaced the module (the identity is what is checked)."""
        if self._attention is None:
            self._attention = next(iter(self.model.attention_modules()))
        return next(iter(self._attention.kv_cache._buffers.values()))

    def __call__(self, **kwargs):
        if self.signature is None:
            self.calls += 1
            before = self.graph_count()
            out = self.compiled(**kwargs)
            if self.calls >= WARMUP_CALLS and not self.guarded:
                if self.graph_count() != before:
                    self.guarded = True  # still compiling: keep every guard, show recompiles
                else:
                    self.signature = _signature(kwargs, self._cache())
            return out
        signature = _signature(kwargs, self._cache())
        if signature != self.signature:
            raise StepSignatureError(
                "decode inputs differ from the ones its graph was compiled and warmed up for "
                f"(now {_describe(signature)}; then {_describe(self.signature)}): compile "
                "decode again for a new batch size, dtype or KV cache"
            )
        with torch.compiler.set_stance("default", skip_guard_eval_unsafe=True):
            return self.compiled(**kwargs)
