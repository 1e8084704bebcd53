"""Dynamo-level checks of the decode graph on CPU: the same as on the NPU, with the
portable ops standing in for the fused ones."""

import pytest
import torch
from ascend_runtime.graph import (
    compile_decode,
    graph_break_count,
    graph_count,
    with_trace_settings,
)
from ascend_runtime.metadata import (
    decode_inputs,
    prefill_inputs,
)
from conftest import TINY, compile_config, greedy, prompt, tiny_model

DECODE_STEPS = 32
LENGTH_FORMS = {
    "host-lists+dynamic": False,
    "tensor-lengths+static": True,
}


@pytest.mark.parametrize("tensor_lengths", LENGTH_FORMS.values(), ids=LENGTH_FORMS.keys())
def test_decode_is_one_graph_without_breaks(tensor_lengths):
    model = tiny_model()
    with torch.inference_mode():
        model.prefill(**prefill_inputs(prompt()).as_kwargs())
        step = decode_inputs(torch.zeros(2, 1, dtype=torch.long), [8, 8], tensor_lengths)
        explanation = torch._dynamo.explain(model.decode)(**step.as_kwargs())
    assert explanation.graph_break_count == 0, explanation.break_reasons
    assert explanation.graph_count == 1


@pytest.mark.parametrize("tensor_lengths", LENGTH_FORMS.values(), ids=LENGTH_FORMS.keys())
def test_no_recompiles_after_warmup(tensor_lengths):
    model = tiny_model()
    decode = compile_decode(model, compile_config("npugraph_ex", tensor_lengths))
    greedy(model, decode, prompt(), steps=1, tensor_lengths=tensor_lengths)  # warm-up
    graphs, breaks = graph_count(), graph_break_count()
    assert graphs >= 1
    greedy(model, decode, prompt(seed=2), steps=DECODE_STEPS, tensor_lengths=tensor_lengths)
    assert graph_count() == graphs, "decode recompiled after warm-up"
    assert graph_break_count() == breaks


@pytest.mark.parametrize("settings", [with_trace_settings, None], ids=["settings", "bare"])
def test_no_python_float_of_the_model_becomes_a_decode_input(settings):
    """Under dynamic=True (npugraph_ex) dynamo turns each float it reads (every norm's eps,
    every attention scale) into a graph input rebuilt on the host each step, unless
    `with_trace_settings` (what compile_decode wraps the compiled decode in) keeps them
    constants; the bare compile shows the hazard, so the check can fail."""
    model = tiny_model()
    inputs = []

    def recording(gm, example_inputs):
        inputs.extend(example_inputs)
        return gm.forward

    compiled = torch.compile(  # graph-ok: the recording backend under test
        model.decode, backend=recording, fullgraph=True, dynamic=True
    )
    greedy(model, settings(compiled) if settings else compiled, prompt(), 1, tensor_lengths=False)
    floats = [x for x in inputs if isinstance(x, torch.Tensor) and x.dim() == 0]
    floats += [x for x in inputs if isinstance(x, (float, torch.SymFloat))]
    if settings:
        assert floats == [], f"{len(floats)} Python floats traced as decode inputs"
    else:
        assert len(floats) >= 2 * TINY.num_hidden_layers


def test_only_the_perf_backend_drops_module_guards():
    """inductor (the CPU perf stand-in) skips dynamo's per-call guards on the frozen weights
    and caches; aot_eager (the checking stand-in) keeps every guard."""
    from ascend_runtime.graph import (
        portable_compile_kwargs,
        skip_module_guards_but_frozen_identity,
    )

    config = compile_config("npugraph_ex", tensor_lengths=False)
    inductor = portable_compile_kwargs(config, "inductor")
    assert inductor["options"]["guard_filter_fn"] is skip_module_guards_but_frozen_identity
    assert inductor["dynamic"] is True
    assert portable_compile_kwargs(config, "aot_eager") == {"dynamic": True}


def test_host_lists_with_static_graph_recompile():
    """The hazard the FA table warns about, so the check above can fail: List[int]
    lengths under dynamic=False specialise on each step's values."""
    model = tiny_model()
    static = {"backend": "aot_eager", "fullgraph": True, "dynamic": False}
    decode = torch.compile(model.decode, **static)  # graph-ok: the hazard under test
    greedy(model, decode, prompt(), steps=1, tensor_lengths=False)
    graphs = graph_count()
    greedy(model, decode, prompt(), steps=3, tensor_lengths=False)
    assert graph_count() > graphs


def test_routing_changes_while_decode_stays_one_graph(monkeypatch):
    """The MoE decode graph is static in the routing: over DECODE_STEPS steps whose selected
    experts change, compiled decode keeps one graph (no recompile, no break) and equals eager
    decode, whose routing is recorded step by step."""
    from deepseek_v2_lite.layers.moe import Router

    model = tiny_model()
    routes: list[torch.Tensor] = []
    route = Router.route

    def recording(self, tokens):
        weights, expert_ids = route(self, tokens)
        routes.append(expert_ids.clone())
        return weights, expert_ids

    monkeypatch.setattr(Router, "route", recording)
    eager = greedy(model, model.decode, prompt(), DECODE_STEPS, tensor_lengths=False)
    moe_layers = len(model.args.moe_layers)
    per_step = [torch.cat(routes[i : i + moe_layers]) for i in range(0, len(routes), moe_layers)]
    decode_routes = per_step[1:]  # after the prefill
    assert len(decode_routes) == DECODE_STEPS
    pairs = zip(decode_routes, decode_routes[1:], strict=False)
    changed = sum(not torch.equal(a, b) for a, b in pairs)
    assert changed >= DECODE_STEPS // 4, f"routing changed in only {changed} steps"
    monkeypatch.setattr(Router, "route", route)

    decode = compile_decode(model, compile_config("npugraph_ex", tensor_lengths=False))
    greedy(model, decode, prompt(), steps=1, tensor_lengths=False)  # warm-up
    graphs, breaks = graph_count(), graph_break_count()
    compiled = greedy(model, decode, prompt(), DECODE_STEPS, tensor_lengths=False)
    assert graph_count() == graphs, "decode recompiled while the routing changed"
    assert graph_break_count() == breaks
    for step, (a, e) in enumerate(zip(compiled, eager, strict=True)):
        torch.testing.assert_close(a, e, rtol=1e-4, atol=1e-4, msg=f"step {step}")
