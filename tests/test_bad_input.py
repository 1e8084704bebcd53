"""Bad answers to `new model`, from flags, data files, HF configs and the interactive
interview: one line, exit 2, nothing written; never a traceback or a broken package."""

import json

import pytest
from conftest import tree_state

from scaffold.questions import asked_questions


def one_error_line(result) -> str:
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: ")
    assert "Traceback" not in result.output
    return lines[0]


def refused(cli, tmp_path, *args):
    before = tree_state(tmp_path)
    result = cli("new", "model", "--defaults", *args, tmp_path / "pkg")
    assert result.exit_code == 2, result.output
    assert tree_state(tmp_path) == before
    return one_error_line(result)


UNSAFE_NAMES = {
    "torch": "depends on or sits beside",
    "numpy": "depends on or sits beside",
    "transformers": "depends on or sits beside",
    "torch_npu": "depends on or sits beside",
    "yaml": "depends on or sits beside",
    "pytest": "depends on or sits beside",
    "os": "standard-library module",
    "typing": "standard-library module",
    "json": "standard-library module",
    "sys": "standard-library module",
    "test": "standard-library module",
    "class": "Python keyword",
    "import": "Python keyword",
    "a" * 65: "at most 64 characters",
}


@pytest.mark.parametrize(("name", "reason"), UNSAFE_NAMES.items())
def test_unsafe_package_names(cli, tmp_path, name, reason):
    assert reason in refused(cli, tmp_path, "--model-name", name)


def test_unsafe_name_derived_from_a_checkpoint_directory(cli, tmp_path):
    ckpt = hf_config(tmp_path, directory="torch")
    line = refused(cli, tmp_path, "--from-hf-config", ckpt)
    assert "'torch'" in line and "derived from the checkpoint directory" in line
    assert "--model-name" in line
    result = cli(
        "new",
        "model",
        "--defaults",
        "--from-hf-config",
        ckpt,
        "--model-name",
        "tiny",
        tmp_path / "p",
    )
    assert result.exit_code == 0, result.output


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--num-attention-heads", "0"], "num_attention_heads must be >= 1, got 0"),
        (["--vocab-size", "abc"], "vocab_size must be int, got 'abc'"),
        (["--vocab-size", "1.5"], "vocab_size must be int, got '1.5'"),
        (["--num-key-value-heads", "0"], "must be divisible by num_key_value_heads (0)"),
        (["--rope-theta", "nan"], "rope_theta must be a finite number, got 'nan'"),
        (["--rope-theta", "inf"], "rope_theta must be a finite number, got 'inf'"),
        (["--rms-norm-eps", "nan"], "rms_norm_eps must be a finite number"),
        (["--rms-norm-eps", "2"], "rms_norm_eps must be < 1.0"),
        (
            ["--rope-scaling", "linear", "--rope-scaling-factor", "nan"],
            "rope_scaling_factor must be a finite number",
        ),
        (["--vocab-size", "1000000000000"], "vocab_size must be <= 2,097,152"),
        (["--max-seq-len", "10000000000"], "max_seq_len must be <= 1,048,576"),
        (["--batch-size", "100000"], "batch_size must be <= 4,096"),
        (
            ["--dtype", "float32"],
            "dtype float32: the fused attention on A3 takes float16/bfloat16/int8 only",
        ),
        (
            ["--max-seq-len", "300000"],
            "max_seq_len 300000: the fused attention on A3 takes KV lengths up to 262144",
        ),
        (
            ["--num-attention-heads", "128", "--num-key-value-heads", "1", "--head-dim", "64"],
            "num_attention_heads / num_key_value_heads = 128: the fused attention on A3 takes "
            "at most 64 query heads per KV head",
        ),
        (
            ["--batch-size", "4096", "--max-seq-len", "262144"],
            "of KV cache (batch_size 4096, max_seq_len 262,144), more than",
        ),
        (
            ["--hidden-size", "72", "--num-attention-heads", "8"],
            "head_dim must be an even number >= 2 (RoPE rotates halves), got 9 (head_dim "
            "defaults to hidden_size // num_attention_heads; set it with --head-dim)",
        ),
        (
            ["--rope-scaling-factor", "4"],
            "rope_scaling_factor applies only when rope_scaling is not 'none' "
            "(here it is 'none'); leave it out",
        ),
    ],
)
def test_bad_flags(cli, tmp_path, flags, message):
    assert message in refused(cli, tmp_path, *flags)


def test_zero_heads_from_a_data_file(cli, tmp_path):
    data = tmp_path / "answers.yml"
    data.write_text("num_attention_heads: 0\n")
    assert "num_attention_heads must be >= 1" in refused(cli, tmp_path, "--data-file", data)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"1: 2\n", "key 1 is not a question name"),
        (b"model_name: caf\xe9\n", "is not UTF-8 text"),
        (b"rope_theta: .nan\n", "rope_theta must be a finite number"),
        (b"model_name: 12\n", "model_name must be str, got 12"),
        (b"vocab_size: true\n", "vocab_size must be int, got True"),
        (b"rope_theta: true\n", "rope_theta must be float, got True"),
    ],
)
def test_bad_data_files(cli, tmp_path, content, message):
    data = tmp_path / "answers.yml"
    data.write_bytes(content)
    assert message in refused(cli, tmp_path, "--data-file", data)


def hf_config(tmp_path, directory="ckpt", **fields):
    ckpt = tmp_path / directory
    ckpt.mkdir(exist_ok=True)
    config = {
        "model_type": "llama",
        "vocab_size": 256,
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        **fields,
    }
    (ckpt / "config.json").write_text(json.dumps(config).replace('"__inf__"', "1e400"))
    return ckpt


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"rope_theta": "__inf__"}, "rope_theta must be a"),
        ({"rms_norm_eps": float("nan")}, "rms_norm_eps must be a"),
        ({"rope_scaling": {"rope_type": ["x"]}}, "rope_scaling.rope_type must be a string"),
        ({"layer_types": "full"}, "layer_types must be a list of strings"),
    ],
)
def test_bad_hf_configs(cli, tmp_path, fields, message):
    ckpt = hf_config(tmp_path, **fields)
    line = refused(cli, tmp_path, "--from-hf-config", ckpt)
    assert message in line and "config.json" in line


def test_non_utf8_hf_config(cli, tmp_path):
    ckpt = hf_config(tmp_path)
    (ckpt / "config.json").write_bytes(b'{"model_type": "caf\xe9"}')
    assert "is not UTF-8 text" in refused(cli, tmp_path, "--from-hf-config", ckpt)


def asked_names(**answers):
    known = {"rope_scaling": "none", "family": "dense", "kv_cache": "contiguous", **answers}
    return [q.name for q in asked_questions() if q.applies(known)]


def test_interview_re_asks_a_bad_name_at_once(cli, tmp_path):
    """A bad first answer is reported right away and asked again; nothing is lost."""
    names = asked_names()
    replies = {"model_name": "Bad-Name\ntorch\ngood_name", "num_attention_heads": "0\n8"}
    text = "\n".join(replies.get(n, "") for n in names) + "\ny\n"
    result = cli("new", "model", tmp_path / "pkg", input=text)
    assert result.exit_code == 0, result.output
    out = result.output
    first_error = out.index("model_name must match")
    assert first_error < out.index("Vocabulary size")  # before the next question
    assert out.index("'torch' is the name of a package") < out.index("Vocabulary size")
    assert "num_attention_heads must be >= 1, got 0" in out
    assert (tmp_path / "pkg/src/good_name").is_dir()


def test_interview_re_asks_a_cross_field_rule(cli, tmp_path):
    names = asked_names()
    replies = {"num_attention_heads": "8", "num_key_value_heads": "3\n2"}
    text = "\n".join(replies.get(n, "") for n in names) + "\ny\n"
    result = cli("new", "model", tmp_path / "pkg", input=text)
    assert result.exit_code == 0, result.output
    assert "num_attention_heads (8) must be divisible by num_key_value_heads (3)" in result.output


def test_summary_before_writing_states_the_design(cli, tmp_path):
    result = cli("new", "model", "--defaults", "--batch-size", "8", tmp_path / "pkg")
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert out.index("design summary for llama_tiny") < out.index("\nrendered ")
    for expected in (
        "8 layers, hidden 512, 8 query / 4 KV heads, head_dim 64",
        "57.9 M parameters, 110.5 MiB in bfloat16",
        "exe_mode    npugraph_ex",
        "fa_interface=torch_npu; enable_dynamic_graph true: torch_npu's attention takes host",
        "torch_npu.npu_fused_infer_attention_score",
        # 8 layers x K,V x (8, 4, 2048 + the spare position, 64) x 2 bytes
        "BNSD (8, 4, 2,049, 64) x K,V x 8 layers, preallocated, written in place: 128.1 MiB",
        "new      src/llama_tiny/modeling.py",
    ):
        assert expected in out


def test_interactive_run_asks_to_confirm_and_yes_skips_it(cli, tmp_path):
    names = asked_names()
    result = cli("new", "model", "--yes", tmp_path / "a", input="\n" * len(names))
    assert result.exit_code == 0, result.output
    assert "design summary" in result.stdout and "write these files?" not in result.stdout
    result = cli("new", "model", tmp_path / "b", input="\n" * len(names) + "y\n")
    assert result.exit_code == 0 and "write these files?" in result.stdout


def test_next_hint_quotes_a_path_with_spaces(cli, tmp_path):
    result = cli("new", "model", "--defaults", tmp_path / "my models" / "tiny")
    assert result.exit_code == 0, result.output
    assert f"pip install -e '{tmp_path}/my models/tiny[test]'" in result.stdout
    assert f"pytest '{tmp_path}/my models/tiny'/tests" in result.stdout


WIDE_KV = (
    "--num-attention-heads",
    "128",
    "--num-key-value-heads",
    "128",
    "--head-dim",
    "512",
    "--hidden-size",
    "1024",
    "--num-hidden-layers",
    "1",
)  # KV_N x D = 65,536


def test_a_paged_only_limit_does_not_refuse_a_contiguous_cache(cli, tmp_path):
    """block_size's validator (KV_N x D <= 65,535 in the paged (blocknum, blocksize, H) layout)
    applies only to a paged cache: a contiguous render of the same shape is written, and the
    paged one refused with one line (copier used to check the validator of every answer it
    was given, applicable or not, and end in a traceback)."""
    result = cli("new", "model", "--defaults", *WIDE_KV, tmp_path / "contiguous")
    assert result.exit_code == 0, result.output
    answers = (tmp_path / "contiguous" / ".copier-answers.yml").read_text()
    assert "block_size" not in answers
    line = refused(cli, tmp_path, *WIDE_KV, "--kv-cache", "paged")
    assert "num_key_value_heads x head_dim = 65536" in line and "65535" in line


MOE4 = ("--family", "moe", "--num-hidden-layers", "4")


@pytest.mark.parametrize(
    ("text", "layers"), [("0 3", "(0, 3)"), ("1 0", "(0, 1)"), ("0, 3", "(0, 3)"), ("2", "(2,)")]
)
def test_mlp_only_layers_read_as_the_user_means_them(cli, tmp_path, text, layers):
    """Commas or spaces separate the indices: "0 3" is layers 0 and 3 (it was read as 3,
    and "1 0" as 10)."""
    result = cli("new", "model", "--defaults", *MOE4, "--mlp-only-layers", text, tmp_path / "p")
    assert result.exit_code == 0, result.output
    architecture = (tmp_path / "p" / "src" / "llama_tiny" / "architecture.py").read_text()
    assert f"mlp_only_layers: tuple[int, ...] = {layers}" in architecture


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("0,,1", "separated by commas or spaces"),
        ("0 x", "separated by commas or spaces"),
        ("0 9", "layer 9 does not exist"),
    ],
)
def test_mlp_only_layers_refused_with_the_accepted_form(cli, tmp_path, text, reason):
    assert reason in refused(cli, tmp_path, *MOE4, "--mlp-only-layers", text)


def test_a_paged_budget_that_cannot_hold_its_own_yaml_is_refused(cli, tmp_path):
    """The rendered YAML runs batch_size rows of prompt + new tokens: a budget that cannot
    hold them would fail the package's own runner, validate and triage."""
    paged = ("--kv-cache", "paged", "--batch-size", "8", "--max-seq-len", "512")
    line = refused(cli, tmp_path, *paged, "--kv-cache-tokens", "512")
    assert "cannot hold the rendered YAML's batch" in line and "at least 1024 tokens" in line
    result = cli("new", "model", "--defaults", *paged, "--kv-cache-tokens", "1024", tmp_path / "ok")
    assert result.exit_code == 0, result.output


@pytest.mark.parametrize(
    ("override", "ignored"),
    [
        (("--family", "dense"), "num_experts, num_experts_per_tok"),
        (("--shared-expert-intermediate-size", "0"), "shared_expert_gate"),
    ],
)
def test_an_override_that_makes_config_answers_inapplicable_is_taken(
    cli, tmp_path, override, ignored
):
    """The user's flag wins over the checkpoint's config, whose answers that no longer apply
    are dropped with a note; the refusal used to blame an answer the user never gave."""
    ckpt = hf_config(
        tmp_path, model_type="qwen2_moe", num_key_value_heads=2, num_experts=4,
        num_experts_per_tok=2, moe_intermediate_size=32, shared_expert_intermediate_size=64,
    )  # fmt: skip
    result = cli("new", "model", "--defaults", "--from-hf-config", ckpt, *override, tmp_path / "p")
    assert result.exit_code == 0, result.output
    assert f"note: the config's {ignored}" in result.stderr
    assert "applies only when" not in result.output


@pytest.mark.parametrize("kind", ["fifo", "deep", "huge"])
def test_an_answers_file_that_cannot_be_one_is_refused_without_hanging(cli, tmp_path, kind):
    import os

    path = tmp_path / "answers.yml"
    if kind == "fifo":
        os.mkfifo(path)
        message = "is not a regular file"
    elif kind == "deep":
        path.write_text("model_name: " + "[" * 5000 + "]" * 5000 + "\n")
        message = "nested too deeply"
    else:
        with path.open("wb") as file:
            file.truncate(1 << 30)
        message = "is larger than"
    work = tmp_path / "work"  # beside the input: tree_state would read the FIFO forever
    work.mkdir()
    assert message in refused(cli, work, "--data-file", path)
