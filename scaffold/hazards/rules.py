"""Rule table for ``ascend-scaffold check``: graph-mode hazards in decode-path model code.

Each rule is stable: its id (``GM0xx``) and slug never change meaning.  ``effect`` is one of
``graph break`` | ``recompile`` | ``capture failure``; ``why`` and ``fix`` follow the
cann-recipes-infer graph-mode adaptation guide.  ``detects`` documents the static heuristic.
"""

from __future__ import annotations

from dataclasses import dataclass

GRAPH_BREAK = "graph break"
RECOMPILE = "recompile"
CAPTURE_FAILURE = "capture failure"
EFFECTS = (GRAPH_BREAK, RECOMPILE, CAPTURE_FAILURE)


@dataclass(frozen=True)
class Rule:
    id: str
    slug: str
    title: str
    effect: str
    why: str
    fix: str
    detects: str


_RULES = (
    Rule(
        "GM001",
        "kv-cat",
        "KV cache grown with torch.cat",
        RECOMPILE,
        "The cache shape changes every decode step, so every step is a new graph.",
        "Preallocate a fixed-size cache once (max batch x max seq) and write the new token in "
        "place with torch_npu.scatter_update_ / index_copy_ / index_put_ at kv_len; do not "
        "return the cache from the graph.",
        "torch.cat/concat/concatenate in forward scope or in a cache-update method (name "
        "contains 'update' or 'cache'; never __init__/prefill) where an input's base name "
        "mentions past/cache/present/key_value/kv, or module state is re-assigned with itself "
        "(self.x = torch.cat([self.x, ...])).",
    ),
    Rule(
        "GM002",
        "host-sync",
        "Tensor value pulled to the host in forward",
        GRAPH_BREAK,
        ".item()/.tolist()/.cpu()/.numpy()/.to('cpu') force a device-to-host copy: dynamo "
        "breaks the graph and aclgraph capture cannot record it.",
        "Keep the value as a tensor, or compute it outside the graph and pass it in as an input.",
        "Calls of .item(), .tolist(), .cpu(), .numpy(), .to('cpu'); int()/float()/bool() of a "
        "tensor value; numpy.asarray/array of one; print(...) (a graph break itself). Forward "
        "scope, which includes module-level helpers forward calls by name.",
    ),
    Rule(
        "GM003",
        "tensor-if",
        "Python control flow on a tensor value",
        GRAPH_BREAK,
        "if/while/assert/ternary on a tensor value needs the value on the host: graph break "
        "under dynamo, 'dynamic control flow unsupported' under capture.",
        "Replace with tensor ops (torch.where, masking, clamp) or a Python mode argument such as "
        "is_prefill passed from outside.",
        "Heuristic: the test calls a reducing tensor method (.any .all .sum .max .min .mean .item "
        ".norm .argmax ...) or torch.any/all/equal/allclose/isnan/eq/gt/...; tests such as "
        "'x is None', 'self.config.flag', shape checks and builtins any()/all()/max() are not "
        "flagged. Also a comparison or truth test of a known tensor (a Tensor-annotated or "
        "well-known parameter such as input_ids, a torch call's result, a row of a loop over a "
        "tensor: `if row[0] > 0`). Forward scope only, not under 'if self.training'.",
    ),
    Rule(
        "GM004",
        "random-op",
        "Random op or dropout in the inference path",
        CAPTURE_FAILURE,
        "Random number generation (randn, rand, randint, randperm, bernoulli, multinomial, "
        "dropout, uniform_/normal_ ...) is not supported by graph capture.",
        "Remove it from the inference forward (dropout is identity at inference), or pass a "
        "precomputed tensor in as an input.",
        "torch random functions, in-place random tensor methods and F.dropout in forward scope "
        "(except code under 'if self.training', or after an 'if not training: return' such as "
        "drop_path's). Dropout that is off in eval mode is not "
        "flagged: nn.Dropout modules, F.dropout(..., training=self.training / module.training / "
        "training / False); F.dropout with training left at its default (True) is.",
    ),
    Rule(
        "GM005",
        "dynamic-shape",
        "Data-dependent output shape",
        GRAPH_BREAK,
        "nonzero / one-argument torch.where / masked_select / unique / boolean-mask indexing "
        "produce shapes that depend on tensor values: graph breaks and recompiles, no capture.",
        "Use fixed-shape masking (torch.where(cond, x, y), masked_fill, multiply by a mask, "
        "nonzero_static, fixed-size top-k) so that every output shape is static.",
        "torch.nonzero/argwhere/masked_select/unique/unique_consecutive/bincount and their tensor "
        "methods, torch.where(cond) with one argument, x[mask] reads where the index is a "
        "comparison, ~x, a & / | of those, or a name ending in 'mask'; a slice bound that is a "
        "tensor value (x[:, : t.argmax()]). Forward scope only.",
    ),
    Rule(
        "GM006",
        "forward-shape",
        "Sequence facts computed inside forward",
        RECOMPILE,
        "position_ids = torch.arange(seq_len) or seq_len = hidden_states.size(1) inside forward "
        "ties the graph to the current length: a new graph per length, and the values the "
        "decode graph needs (write position, lengths) are not inputs.",
        "Pass them in: position_ids, kv_len, actual_seq_lengths_kv/_q, is_prefill and "
        "precomputed cos/sin are forward inputs prepared outside the graph.",
        "torch.arange in forward scope whose argument involves .shape[i]/.size(i) with i != 0, "
        "len(), .numel() or a length-like name (seq, len, past, kv, cache, step, token, offset, "
        "start, end); the fallback 'if X is None: X = torch.arange(...)' is exempt. Also a "
        "length-like variable set from .size(1)/.shape[1]/.size(-2)/.shape[-2] (or unpacked at "
        "position 1 of .shape/.size()) that is later used as a slice bound, an arange argument "
        "or a seq/len/pos/kv/cache keyword argument.",
    ),
    Rule(
        "GM007",
        "buffer-realloc",
        "Buffer or parameter (re)allocated in forward",
        RECOMPILE,
        "register_buffer / self.x = torch.zeros(...) inside forward gives the module state a "
        "new address every call: guard failures, recompiles and stale captured addresses.",
        "Allocate at the maximum size in __init__ (register_buffer once) and update in place "
        "with copy_() / fill_() / index_copy_().",
        "self.register_buffer/register_parameter calls, and assignments self.x = <torch.* call | "
        ".clone() | .to() | .new_*()>, in forward scope.",
    ),
    Rule(
        "GM008",
        "npu-backend",
        "torch.compile backend not usable on Ascend NPU",
        CAPTURE_FAILURE,
        "aot_eager / inductor / cudagraphs do not produce NPU graphs (and torch.compile without "
        "backend= defaults to inductor).",
        "Use backend='npugraph_ex' (aclgraph) or torchair.get_npu_backend(compiler_config=...) "
        "(GE). A labelled host-only fallback can be kept with '# graph-ok: GM008'.",
        "torch.compile(...) / torch._dynamo.optimize(...) with a string literal backend "
        "aot_eager|inductor|cudagraphs, torch.compile(...) without backend=, bare @torch.compile.",
    ),
    Rule(
        "GM009",
        "stream-sync",
        "Stream or device synchronisation in forward",
        CAPTURE_FAILURE,
        "torch.npu/cuda.synchronize(), stream.synchronize(), wait_stream/wait_event are not "
        "supported inside npugraph_ex capture.",
        "Move synchronisation out of the captured forward (into the runner, between steps).",
        "Calls of .synchronize(), .wait_stream(), .wait_event() in forward scope.",
    ),
    Rule(
        "GM010",
        "fa-list-static",
        "actual_seq_lengths as a list with dynamic=False",
        RECOMPILE,
        "A Python list of lengths is baked into the graph as constants; with dynamic=False every "
        "new length list recompiles.",
        "npugraph_ex + torch_npu FA (list[int] lengths): compile with dynamic=True. GE: use the "
        "torchair FA interface with Tensor lengths and keep dynamic=False.",
        "torch.compile(..., dynamic=False) when any checked file passes actual_seq_lengths[_kv] "
        "as a list (list literal/comprehension, .tolist(), list(...), a list[...]-annotated "
        "parameter, or any torch_npu.* call).",
    ),
)

RULES: dict[str, Rule] = {r.id: r for r in _RULES}
SLUGS: dict[str, str] = {r.slug: r.id for r in _RULES}


def resolve(name: str) -> str | None:
    """Map a rule id or slug (case-insensitive) to its id; None if unknown."""
    key = name.strip()
    if key.upper() in RULES:
        return key.upper()
    return SLUGS.get(key.lower())
