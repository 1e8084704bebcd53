"""Bad input -> one `error:` line and exit 2, never a traceback; no step writes past the
KV cache. CPU only, nothing compiled: every case stops before the model would run."""

import json

import pytest
import torch
from runtime_suite.current import (
    MODEL,
    PAGED,
    TINY,
    ModelArgs,
    runner_main,
    tiny_model,
)

from ascend_runtime.config import (
    NEW_TOKENS_KEY,
    PROMPT_KEY,
    InferenceConfig,
    InputError,
)
from ascend_runtime.metadata import (
    CacheOverflowError,
    decode_inputs,
    prefill_inputs,
)
from ascend_runtime.runner import (
    run,
)
from ascend_runtime.weights import (
    CheckpointError,
    model_args_from_hf,
)

SUITE_KINDS = ("contiguous", "paged")  # run against these examples (runtime_suite/loader.py)

MAX_SEQ_LEN = ModelArgs().max_seq_len


def one_error_line(err: str) -> str:
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert "Traceback" not in err
    return lines[0]


@pytest.fixture
def empty_config(tmp_path):
    path = tmp_path / "config.yaml"
    path.write_text("")  # every key at its default
    return path


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--steps", "-3"], "argument --steps: must be >= 1, got -3"),
        (["--steps", "0"], "argument --steps: must be >= 1, got 0"),
        (["--prompt-len", "0"], "argument --prompt-len: must be >= 1, got 0"),
        (["--prompt-len", "x"], "argument --prompt-len: expected an integer"),
    ],
)
def test_bad_flags_exit_2_with_one_line(capsys, empty_config, flags, message):
    with pytest.raises(SystemExit) as exit_:
        runner_main(["--config", str(empty_config), *flags])
    assert exit_.value.code == 2
    assert message in one_error_line(capsys.readouterr().err)


def test_bad_config_exits_2_naming_the_file(capsys, tmp_path):
    path = tmp_path / "broken.yaml"
    path.write_text("model_config: [unclosed\n")
    assert runner_main(["--config", str(path)]) == 2
    assert "broken.yaml: invalid YAML" in one_error_line(capsys.readouterr().err)


@pytest.mark.parametrize(
    ("flags", "yaml_text", "names"),
    [
        ([], "data_config:\n  input_truncated_len: {n}\n", [PROMPT_KEY, NEW_TOKENS_KEY]),
        (["--prompt-len", "{n}", "--steps", "1"], "", ["--prompt-len", "--steps"]),
        (["--token-ids", "{ids}", "--steps", "1"], "", ["--token-ids length", "--steps"]),
    ],
)
def test_lengths_beyond_max_seq_len_exit_2(capsys, tmp_path, flags, yaml_text, names):
    path = tmp_path / "config.yaml"
    path.write_text(yaml_text.format(n=MAX_SEQ_LEN))
    ids = ",".join(["1"] * MAX_SEQ_LEN)
    argv = ["--config", str(path), *(f.format(n=MAX_SEQ_LEN, ids=ids) for f in flags)]
    assert runner_main(argv) == 2
    line = one_error_line(capsys.readouterr().err)
    assert all(name in line for name in names), line
    assert f"max_seq_len ({MAX_SEQ_LEN})" in line


def test_run_refuses_lengths_that_do_not_fit():
    model = tiny_model(batch=1)
    config = InferenceConfig()
    with pytest.raises(InputError, match=r"prompt_len \(90\) \+ steps \(7\) = 97"):
        run(model, config, prompt_len=90, steps=7)  # TINY.max_seq_len 96: 90 + 6 fits


def test_decode_refuses_a_step_past_the_cache():
    tokens = torch.zeros(2, 1, dtype=torch.long)
    last = TINY.max_seq_len - 1
    step = decode_inputs(tokens, [last - 1, last], False, TINY.max_seq_len)  # last slot: fine
    assert step.kv_len.tolist() == [last - 1, last]
    with pytest.raises(CacheOverflowError, match=f"write position {TINY.max_seq_len}, cache"):
        decode_inputs(tokens, [last, last + 1], False, TINY.max_seq_len)


def test_prefill_refuses_a_prompt_longer_than_the_cache():
    prefill_inputs(torch.zeros(1, 8, dtype=torch.long), 8)
    with pytest.raises(CacheOverflowError, match=r"positions \[0, 9\), cache holds"):
        prefill_inputs(torch.zeros(1, 9, dtype=torch.long), 8)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{not json", "invalid JSON at line 1"),
        ("[1, 2]", "top level must be a JSON object"),
        (json.dumps({"model_type": "llama", "hidden_size": "64"}), "hidden_size must be a pos"),
        (json.dumps({"model_type": "llama", "rms_norm_eps": "x"}), "rms_norm_eps must be a fin"),
    ],
)
def test_bad_config_json_names_the_file(tmp_path, text, message):
    (tmp_path / "config.json").write_text(text)
    with pytest.raises(CheckpointError, match=message) as error:
        model_args_from_hf(MODEL, tmp_path)
    assert str(tmp_path / "config.json") in str(error.value)


if PAGED:

    def test_a_budget_that_cannot_hold_the_batch_exits_2_naming_the_yaml_key(capsys, tmp_path):
        """Checked when the config is read, before the model is built: the message names the
        key that raises the budget, and the size it needs."""
        from ascend_runtime.runner import check_budget

        BLOCK_SIZE = ModelArgs().block_size

        path = tmp_path / "config.yaml"
        path.write_text(
            "scheduler_config:\n  batch_size: 4\n  max_new_tokens: 8\n"
            f"  kv_cache_tokens: {BLOCK_SIZE}\n"
            "data_config:\n  input_truncated_len: 8\n"
        )
        assert runner_main(["--config", str(path)]) == 2
        line = one_error_line(capsys.readouterr().err)
        assert "scheduler_config.kv_cache_tokens" in line and "cannot hold 4 rows" in line, line
        assert f"raise it to at least {4 * BLOCK_SIZE}" in line, line
        config = InferenceConfig()
        config.scheduler_config.batch_size = 4
        config.scheduler_config.kv_cache_tokens = 4 * BLOCK_SIZE
        check_budget(ModelArgs(), config, 16)  # what the message asked for fits
else:

    def test_a_paged_budget_in_a_contiguous_package_exits_2(capsys, tmp_path):
        path = tmp_path / "config.yaml"
        path.write_text("scheduler_config:\n  kv_cache_tokens: 4096\n")
        assert runner_main(["--config", str(path)]) == 2
        line = one_error_line(capsys.readouterr().err)
        assert "scheduler_config.kv_cache_tokens" in line and "contiguous" in line, line


@pytest.mark.parametrize(
    ("yaml_text", "message"),
    [
        ("scheduler_config:\n  batch_size: 1000000000\n", "batch_size must be in [1, 4,096]"),
        ("scheduler_config:\n  batch_size: 10000000\n", "batch_size must be in [1, 4,096]"),
        ("scheduler_config:\n  max_new_tokens: 99999999999\n", "max_new_tokens must be in"),
        ("data_config:\n  seed: 18446744073709551616\n", "data_config.seed must be in"),
        ("data_config:\n  top_k: -1\n", "data_config.top_k must be in"),
        ("data_config:\n  input_truncated_len: 0\n", "input_truncated_len must be in"),
        ("parallel_config:\n  world_size: 0\n", "world_size must be in"),
    ],
)
def test_numbers_out_of_bounds_exit_2_in_one_line(capsys, tmp_path, yaml_text, message):
    """The interview's bounds hold in the YAML too: no OOM kill, no traceback."""
    path = tmp_path / "config.yaml"
    path.write_text(yaml_text)
    assert runner_main(["--config", str(path)]) == 2
    assert message in one_error_line(capsys.readouterr().err)


def test_weights_and_kv_cache_beyond_one_device_are_refused_before_allocating():
    import dataclasses

    from ascend_runtime.runner import check_memory

    config = InferenceConfig()
    config.scheduler_config.batch_size = 4096
    if PAGED:
        config.scheduler_config.kv_cache_tokens = 1_073_741_824
        sized_by = "scheduler_config.kv_cache_tokens"
    else:
        sized_by = "scheduler_config.batch_size 4,096"
    args = dataclasses.replace(ModelArgs(), max_seq_len=1_048_576)
    with pytest.raises(InputError, match=f"KV cache .* GiB \\({sized_by}.*exceed the 1,024 GiB"):
        check_memory(MODEL, args, config)
    check_memory(MODEL, TINY, InferenceConfig())  # the tiny model fits


def test_max_new_tokens_counts_new_tokens_as_generate_does():
    """scheduler_config.max_new_tokens N: N new tokens per row (the prefill's, then N - 1
    decode steps), as generate(max_new_tokens=N) gives; it used to run N steps, N + 1 tokens."""
    from ascend_runtime.runner import decode_steps

    model = tiny_model(batch=1)
    config = InferenceConfig()
    config.scheduler_config.max_new_tokens = 5
    report = run(model, config, prompt_len=4, steps=decode_steps(config))
    assert [len(tokens) for tokens in report.tokens] == [5]
    config.scheduler_config.max_new_tokens = 1
    with pytest.raises(InputError, match="at least 2 new tokens"):
        decode_steps(config)


@pytest.mark.parametrize("kind", ["fifo", "deep", "huge"])
def test_a_config_that_cannot_be_one_exits_2_without_hanging(capsys, tmp_path, kind):
    """A FIFO or device would be read forever, a file nested thousands deep overflows the
    parser's recursion, a huge one exhausts memory: each is one line, exit 2."""
    import os

    path = tmp_path / "config.yaml"
    if kind == "fifo":
        os.mkfifo(path)
        message = "is not a regular file"
    elif kind == "deep":
        path.write_text("model_config: " + "[" * 5000 + "]" * 5000 + "\n")
        message = "nested too deeply"
    else:
        with path.open("wb") as file:
            file.truncate(1 << 30)  # sparse: no disk used
        message = "is larger than"
    assert runner_main(["--config", str(path)]) == 2
    assert message in one_error_line(capsys.readouterr().err)
