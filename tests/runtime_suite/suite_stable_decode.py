"""Compiled decode with dynamo's guards skipped after warm-up (stable_decode.py): the same
tokens as with guards, guards skipped only once the one graph is compiled, and what the
guards checked still refused (a new batch size, a new KV cache) with one line."""

import pytest
import torch
from runtime_suite.current import (
    TINY,
    compile_config,
    setup_test_caches,
    tiny_model,
)

from ascend_runtime import stable_decode
from ascend_runtime.generation import generate
from ascend_runtime.graph import compile_decode, graph_count
from ascend_runtime.metadata import decode_inputs, prefill_inputs
from ascend_runtime.stable_decode import StableDecode, StepSignatureError

SUITE_KINDS = ("contiguous", "paged")  # run against these examples (runtime_suite/loader.py)
LENGTH_FORMS = {"host-lists": False, "tensors": True}


def prompts(batch: int = 2, length: int = 6) -> list[list[int]]:
    generator = torch.Generator().manual_seed(5)
    return torch.randint(0, TINY.vocab_size, (batch, length), generator=generator).tolist()


@pytest.mark.parametrize("tensor_lengths", LENGTH_FORMS.values(), ids=LENGTH_FORMS.keys())
def test_skipped_guards_give_the_tokens_of_eager_without_recompiles(tensor_lengths, monkeypatch):
    stances = []
    real = torch.compiler.set_stance
    monkeypatch.setattr(
        torch.compiler, "set_stance", lambda *a, **k: stances.append(k) or real(*a, **k)
    )
    model = tiny_model(batch=2)
    eager = generate(model, model.decode, prompts(), 12)
    decode = compile_decode(model, compile_config("npugraph_ex", tensor_lengths))
    assert isinstance(decode, StableDecode)
    graphs = graph_count()
    compiled = generate(model, decode, prompts(), 12, tensor_lengths=tensor_lengths)
    assert compiled.tokens == eager.tokens
    assert graph_count() - graphs == 1, "one decode graph, compiled in warm-up"
    assert decode.signature is not None and not decode.guarded
    skipped = [k for k in stances if k.get("skip_guard_eval_unsafe")]
    assert len(skipped) == 11 - stable_decode.WARMUP_CALLS  # every step after warm-up


def test_a_new_batch_size_after_warm_up_is_refused_in_one_line():
    model = tiny_model(batch=2)
    decode = compile_decode(model, compile_config("npugraph_ex", False))
    generate(model, decode, prompts(), 4)  # warmed up at batch 2
    setup_test_caches(model, 3)
    with torch.inference_mode():
        model.prefill(**prefill_inputs(torch.tensor(prompts(3))).as_kwargs())
        step = decode_inputs(torch.zeros(3, 1, dtype=torch.long), [6, 6, 6], False)
        model.prepare_decode([6, 6, 6])
        with pytest.raises(StepSignatureError) as error:
            decode(**step.as_kwargs())
    message = str(error.value)
    assert "\n" not in message and "input_ids (3, 1) int64" in message, message
    assert "input_ids (2, 1) int64" in message and "compile decode again" in message


def test_a_new_kv_cache_after_warm_up_is_refused():
    """setup_caches allocates new buffers: the graph was warmed up on the old ones."""
    model = tiny_model(batch=2)
    decode = compile_decode(model, compile_config("npugraph_ex", False))
    generate(model, decode, prompts(), 4)
    model.setup_caches(2, kv_cache_tokens=model.kv_cache_tokens)
    with pytest.raises(StepSignatureError, match="KV cache"):
        generate(model, decode, prompts(), 4)
    fresh = compile_decode(model, compile_config("npugraph_ex", False))
    assert generate(model, fresh, prompts(), 4).tokens  # compiled again: runs


def test_guards_stay_on_while_warm_up_still_compiles():
    """A decode whose inputs are not stable yet (a static graph fed host lists whose values
    change: each step recompiles) never skips its guards, so every recompile shows."""
    model = tiny_model(batch=2)
    static = torch.compile(model.decode, backend="aot_eager", fullgraph=True, dynamic=False)
    decode = StableDecode(static, model, graph_count)
    graphs = graph_count()
    generate(model, decode, prompts(), 5)
    assert decode.guarded and decode.signature is None
    assert graph_count() - graphs == 4, "each step recompiled, and each was seen"
