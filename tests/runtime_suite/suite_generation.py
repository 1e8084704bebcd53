"""generation.generate: a ragged batch equals each prompt generated alone (and transformers),
rows stop on EOS while the others go on with no recompile and no cache write past a row's
end, sampling is reproducible for a seed."""

import json

import pytest
import torch
from runtime_suite.current import (
    PAGED,
    TINY,
    compile_config,
    tiny_model,
)
from torch._dynamo.utils import counters

from ascend_runtime.config import (
    InputError,
)
from ascend_runtime.cpu_linears import (
    REPACKED,
)
from ascend_runtime.generation import (
    eos_token_ids,
    generate,
)
from ascend_runtime.graph import (
    compile_decode,
    graph_break_count,
    graph_count,
)
from ascend_runtime.metadata import (
    CacheOverflowError,
)
from ascend_runtime.sampling import (
    TokenSampler,
)

SUITE_KINDS = ("contiguous", "paged")  # run against these examples (runtime_suite/loader.py)

LENGTHS = (5, 9, 1, 7)  # one batch, four prompt lengths (one a single token)
NEW_TOKENS = 8
RTOL = ATOL = 1e-4  # fp32 logits
LENGTH_FORMS = {
    "host-lists+dynamic": False,
    "tensor-lengths+static": True,
}
SENTINEL = 123.0
# inductor's count of linear weights frozen and packed (torch/_inductor/fx_passes/
# mkldnn_fusion.py)
PACKED_LINEARS = "mkldnn_linear_weight_pack_matcher_count"


def prompts(lengths=LENGTHS, seed: int = 4, vocab: int = TINY.vocab_size) -> list[list[int]]:
    generator = torch.Generator().manual_seed(seed)
    return [torch.randint(0, vocab, (n,), generator=generator).tolist() for n in lengths]


def compiled(model, tensor_lengths: bool):
    return compile_decode(model, compile_config("npugraph_ex", tensor_lengths))


def rows_of(result, row: int) -> torch.Tensor:
    """Row `row`'s logits at the steps that produced its tokens: (n_tokens, vocab)."""
    steps = len(result.tokens[row])
    return torch.stack([step[row, -1] for step in result.logits[:steps]])


@pytest.mark.parametrize("tensor_lengths", LENGTH_FORMS.values(), ids=LENGTH_FORMS.keys())
def test_ragged_batch_equals_each_prompt_alone(tensor_lengths):
    batch = prompts()
    model = tiny_model(batch=len(batch))
    decode = compiled(model, tensor_lengths)
    together = generate(
        model, decode, batch, NEW_TOKENS, tensor_lengths=tensor_lengths, keep_logits=True
    )
    for row, ids in enumerate(batch):
        alone_model = tiny_model(batch=1)
        alone = generate(alone_model, alone_model.decode, [ids], NEW_TOKENS, keep_logits=True)
        assert together.tokens[row] == alone.tokens[0], f"row {row}"
        torch.testing.assert_close(
            rows_of(together, row), rows_of(alone, 0), rtol=RTOL, atol=ATOL, msg=f"row {row}"
        )
        assert len(together.tokens[row]) == NEW_TOKENS


@pytest.mark.parametrize("tensor_lengths", LENGTH_FORMS.values(), ids=LENGTH_FORMS.keys())
def test_inductor_stand_in_equals_eager_up_to_the_last_cache_position(tensor_lengths):
    """The perf stand-in (attention traced as maths, weights frozen, graph.py) gives
    eager's tokens and logits on a ragged batch that fills every row's cache, from one
    graph: the step that reads all max_seq_len positions does not recompile."""
    batch = prompts(lengths=(5, 9))
    budgets = [TINY.max_seq_len - len(ids) + 1 for ids in batch]  # the last slot: fine
    model = tiny_model(batch=len(batch))
    eager = generate(model, model.decode, batch, budgets, keep_logits=True)
    decode = compile_decode(model, compile_config("npugraph_ex", tensor_lengths), "inductor")
    graphs, packed = graph_count(), counters["inductor"][PACKED_LINEARS]
    repacked = counters["inductor"][REPACKED]
    fast = generate(model, decode, batch, budgets, tensor_lengths=tensor_lengths, keep_logits=True)
    assert graph_count() - graphs == 1, "decode recompiled on the way to max_seq_len"
    packed = counters["inductor"][PACKED_LINEARS] - packed
    repacked = counters["inductor"][REPACKED] - repacked
    if PAGED:
        # the host rewrites the block table between steps: frozen, it would be a constant
        assert packed == repacked == 0, "the paged model's decode was frozen"
    else:
        if torch._C.has_mkl:  # fp32 linears are packed where MKL is (x86)
            linears = sum(isinstance(m, torch.nn.Linear) for m in model.modules())
            assert packed == linears, f"{packed} of {linears} linear weights frozen and packed"
            # static batch: packed for MKL, then moved to oneDNN (cpu_linears.py)
            assert repacked == linears, f"{repacked} of {linears} linears run on oneDNN"
    assert max(max(step) for step in fast.positions) == TINY.max_seq_len - 1
    assert fast.tokens == eager.tokens
    for row in range(len(batch)):
        torch.testing.assert_close(
            rows_of(fast, row), rows_of(eager, row), rtol=RTOL, atol=ATOL, msg=f"row {row}"
        )


@pytest.mark.parametrize("backend", ["inductor", "aot_eager"])
def test_two_models_in_one_process_each_decode_their_own_weights(backend):
    """Compiled code is cached per code object, shared by every model: a second model
    (other weights, same shapes: a draft model, a reloaded checkpoint) must not replay the
    first one's frozen weights."""
    batch = prompts(lengths=(5, 9))
    first, second = tiny_model(batch=2, seed=0), tiny_model(batch=2, seed=1)
    config = compile_config("npugraph_ex", tensor_lengths=False)
    generate(first, compile_decode(first, config, backend), batch, NEW_TOKENS)
    compiled = generate(
        second, compile_decode(second, config, backend), batch, NEW_TOKENS, keep_logits=True
    )
    eager = generate(second, second.decode, batch, NEW_TOKENS, keep_logits=True)
    assert compiled.tokens == eager.tokens
    for row in range(len(batch)):
        torch.testing.assert_close(
            rows_of(compiled, row), rows_of(eager, row), rtol=RTOL, atol=ATOL, msg=f"row {row}"
        )


def test_equal_length_prompts_take_one_batched_prefill():
    batch = prompts(lengths=(6, 6, 6))
    model = tiny_model(batch=3)
    calls = []
    prefill = model.prefill

    def counting(*args, **kwargs):
        calls.append(kwargs.get("cache_row"))
        return prefill(*args, **kwargs)

    model.prefill = counting
    generate(model, model.decode, batch, 2)
    assert calls == [None]
    calls.clear()
    generate(model, model.decode, prompts(lengths=(6, 2, 6)), 2)
    assert calls == [0, 1, 2]  # ragged: one batch-1 prefill per cache row


def test_eos_stops_a_row_while_the_others_go_on_without_recompiles():
    batch = prompts()
    model = tiny_model(batch=len(batch))
    decode = compiled(model, tensor_lengths=False)
    reference = generate(model, decode, batch, NEW_TOKENS)  # also the warm-up
    # an EOS id no row produces, which row 0 is made to pick as its 3rd token (a sampler
    # that is greedy otherwise): whatever the random weights, row 0 stops there
    produced = {t for row in reference.tokens for t in row}
    eos = next(t for t in range(TINY.vocab_size) if t not in produced)
    stop_at, calls = 2, []

    def greedy_but_row0_stops(logits):
        chosen = logits.argmax(-1)
        if len(calls) == stop_at:
            chosen[0] = eos
        calls.append(1)
        return chosen

    if not PAGED:
        for layer in model.layers:  # mark every cache slot: no write may reach past a row's end
            layer.self_attn.kv_cache.k_cache.fill_(SENTINEL)
            layer.self_attn.kv_cache.v_cache.fill_(SENTINEL)
    graphs, breaks = graph_count(), graph_break_count()
    writes, held = [], []  # per step: each row's write position (and blocks held, paged)

    def watch(step):
        writes.append(step["kv_len"].tolist())
        if PAGED:
            held.append([len(model.block_allocator.blocks_of(r)) for r in range(len(batch))])

    result = generate(
        model,
        decode,
        batch,
        NEW_TOKENS,
        eos_token_ids={eos},
        sampler=greedy_but_row0_stops,
        on_step=watch,
    )
    assert graph_count() == graphs, "decode recompiled when a row finished"
    assert graph_break_count() == breaks
    assert result.tokens[0] == [*reference.tokens[0][:stop_at], eos]
    assert result.stopped_on_eos == [True, False, False, False]
    assert result.tokens[1:] == reference.tokens[1:]
    assert len(writes) == NEW_TOKENS - 1  # the other rows ran every step
    for row, (n, tokens) in enumerate(zip(LENGTHS, result.tokens, strict=True)):
        end = n + len(tokens) - 1  # positions [0, end) hold this row's prompt and fed tokens
        assert max(step[row] for step in writes) == end - 1, f"row {row}"
        if not PAGED:
            for layer in model.layers:
                cache = layer.self_attn.kv_cache
                assert (cache.k_cache[row, :, :end] != SENTINEL).all(), f"row {row} not written"
                assert (cache.k_cache[row, :, end:] == SENTINEL).all(), (
                    f"row {row} written past {end}"
                )
                assert (cache.v_cache[row, :, end:] == SENTINEL).all()
        else:
            # paged: the row held the blocks of its positions and no more (a finished row
            # writes the null block, test_paged_cache.py), and gave them back when it finished
            allocator = model.block_allocator
            assert max(h[row] for h in held) == -(-end // allocator.block_size), f"row {row}"
    if PAGED:
        assert held[-1][0] == 0, "row 0 kept its blocks after its EOS"
        assert allocator.free_blocks == allocator.num_blocks - 1, "blocks held after the call"


def test_a_row_done_at_prefill_rewrites_only_its_last_prompt_slot():
    batch = prompts(lengths=(4, 6))
    model = tiny_model(batch=2)
    result = generate(model, model.decode, batch, [1, 5])  # row 0: one token, from prefill
    assert [len(t) for t in result.tokens] == [1, 5]
    assert [pos[0] for pos in result.positions] == [3] * 4  # its last prompt slot
    assert [pos[1] for pos in result.positions] == [6, 7, 8, 9]


def test_sampling_is_reproducible_for_a_seed_and_stays_out_of_the_graph():
    batch = prompts()
    model = tiny_model(batch=len(batch))
    decode = compiled(model, tensor_lengths=False)

    def run(seed: int):
        # hot enough that a tiny random model's peaked logits (tied embeddings: the input
        # token scores its squared norm) still leave many candidates
        sampler = TokenSampler(temperature=1000.0, top_k=50, top_p=0.99, seed=seed)
        return generate(model, decode, batch, NEW_TOKENS, sampler=sampler).tokens

    first = run(7)
    graphs = graph_count()
    assert run(7) == first
    assert run(8) != first
    assert graph_count() == graphs  # the sampler runs on the host, after the graph


def test_lengths_that_do_not_fit_are_refused_before_running():
    model = tiny_model(batch=1)
    fits = TINY.max_seq_len - NEW_TOKENS + 1
    generate(model, model.decode, [[1] * fits], NEW_TOKENS)  # the last slot: fine
    with pytest.raises(CacheOverflowError, match=f"row 0: prompt {fits + 1}"):
        generate(model, model.decode, [[1] * (fits + 1)], NEW_TOKENS)


@pytest.mark.parametrize(
    ("files", "expected"),
    [
        ({"generation_config.json": {"eos_token_id": [2, 7]}, "config.json": {}}, {2, 7}),
        ({"generation_config.json": {"eos_token_id": 5}, "config.json": {"eos_token_id": 1}}, {5}),
        ({"config.json": {"eos_token_id": 1}}, {1}),
        ({"config.json": {"bos_token_id": 1}}, set()),
    ],
)
def test_eos_ids_come_from_the_checkpoint(tmp_path, files, expected):
    for name, content in files.items():
        (tmp_path / name).write_text(json.dumps(content))
    assert eos_token_ids(tmp_path) == expected
    assert eos_token_ids("") == set()


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"prompts": [[1, 2], [3, TINY.vocab_size]]}, "token id 128 is not an integer in"),
        ({"prompts": [[1, 2], [3, -1]]}, "token id -1 is not an integer in"),
        ({"prompts": [[1, 2], [3.0, 4]]}, "token id 3.0 is not an integer"),
        ({"prompts": [[1, 2], "ab"]}, "prompt 1 must be a list of token ids"),
        ({"prompts": [[1, 2], []]}, "every prompt needs at least one token"),
        ({"max_new_tokens": 2.5}, "max_new_tokens must be an integer or one per row"),
        ({"max_new_tokens": True}, "max_new_tokens must be an integer or one per row"),
        ({"max_new_tokens": [2, 0]}, "max_new_tokens must be an integer >= 1"),
        ({"eos_token_ids": {"2"}}, "eos_token_ids must hold integer token ids"),
        ({"eos_token_ids": 2}, "eos_token_ids must be a set of token ids"),
        ({"sampler": "greedy"}, "sampler must be callable"),
    ],
)
def test_generate_refuses_bad_arguments_in_one_line(change, message):
    """The Python API gets the runner's one-line InputErrors, before anything runs."""
    model = tiny_model(batch=2)
    kwargs = {"prompts": [[1, 2], [3, 4]], "max_new_tokens": 3, **change}
    with pytest.raises(InputError, match=message):
        generate(model, model.decode, **kwargs)


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ((-1.0, 0, 1.0, 0), "temperature must be a finite number >= 0"),
        ((float("nan"), 0, 1.0, 0), "temperature must be a finite number >= 0"),
        ((1.0, -1, 1.0, 0), "top_k must be an integer in"),
        ((1.0, 2.5, 1.0, 0), "top_k must be an integer in"),
        ((1.0, 0, float("nan"), 0), "top_p must be a number in"),
        ((1.0, 0, 1.5, 0), "top_p must be a number in"),
        ((1.0, 0, 1.0, 2**64), "seed must be None or an integer"),
        ((1.0, 0, 1.0, -1), "seed must be None or an integer"),
    ],
)
def test_sampler_refuses_bad_values_in_one_line(values, message):
    with pytest.raises(InputError, match=message):
        TokenSampler(*values)
