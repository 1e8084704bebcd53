import pytest
import torch
from ascend_runtime.graph import (
    compile_decode,
)
from ascend_runtime.metadata import (
    prefill_inputs,
)
from conftest import compile_config, greedy, prompt, tiny_model

STEPS = 8


@pytest.mark.parametrize("tensor_lengths", [False, True], ids=["host-lists", "tensor-lengths"])
def test_compiled_decode_matches_eager(tensor_lengths):
    eager_model, graph_model = tiny_model(), tiny_model()
    decode = compile_decode(graph_model, compile_config("npugraph_ex", tensor_lengths))
    expected = greedy(eager_model, eager_model.decode, prompt(), STEPS, tensor_lengths)
    actual = greedy(graph_model, decode, prompt(), STEPS, tensor_lengths)
    assert len(actual) == STEPS + 1
    for step, (a, e) in enumerate(zip(actual, expected, strict=True)):
        torch.testing.assert_close(a, e, rtol=1e-5, atol=1e-5, msg=f"step {step}")


@torch.inference_mode()
def test_cached_decode_matches_full_recompute():
    model = tiny_model()
    logits = greedy(model, model.decode, prompt(), STEPS, tensor_lengths=False)
    tokens = torch.cat([prompt()] + [step.argmax(-1) for step in logits[:-1]], dim=1)
    for step in range(1, STEPS + 1):
        reference = tiny_model()
        prefix = tokens[:, : prompt().shape[1] + step]
        full = reference.prefill(**prefill_inputs(prefix).as_kwargs())
        torch.testing.assert_close(logits[step], full, rtol=1e-4, atol=1e-4, msg=f"step {step}")


def test_prefill_logits_depend_on_the_prompt():
    model = tiny_model()
    with torch.inference_mode():
        a = model.prefill(**prefill_inputs(prompt(seed=1)).as_kwargs())
        b = model.prefill(**prefill_inputs(prompt(seed=2)).as_kwargs())
    assert not torch.allclose(a, b)
