import pytest
import yaml

from scaffold import __version__
from scaffold.questions import asked_questions


def answers_of(dest):
    return yaml.safe_load((dest / ".copier-answers.yml").read_text())


def test_version(cli):
    result = cli("--version")
    assert result.exit_code == 0
    assert __version__ in result.stdout


@pytest.mark.parametrize("command", [[], ["new"], ["new", "model"]])
def test_help_on_every_command(cli, command):
    result = cli(*command, "--help")
    assert result.exit_code == 0
    assert "Usage" in result.stdout


def test_help_lists_a_flag_per_question(cli):
    text = cli("new", "model", "--help").stdout
    for flag in ("--defaults", "--data-file", "--force", "--exe-mode", "--num-key-value-heads"):
        assert flag in text


def test_defaults_render(cli, tmp_path):
    dest = tmp_path / "pkg"
    result = cli("new", "model", "--defaults", dest)
    assert result.exit_code == 0, result.output
    assert (dest / "src/llama_tiny/modeling.py").is_file()
    answers = answers_of(dest)
    assert answers["exe_mode"] == "npugraph_ex"
    assert answers["fa_interface"] == "torch_npu"
    assert "enable_dynamic_graph: true" in (dest / "config/llama_tiny.yaml").read_text()


def test_dest_defaults_to_model_name(cli, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = cli("new", "model", "--defaults", "--model-name", "my_llm")
    assert result.exit_code == 0, result.output
    assert (tmp_path / "my_llm/src/my_llm/__init__.py").is_file()


def test_prompts_fed_by_input(cli, tmp_path):
    """Every question is asked in copier.yml order; empty lines accept defaults, a bad
    value is asked again; llama3 RoPE scaling brings its own questions."""
    replies = {
        "model_name": "qwen_try",
        "vocab_size": "abc\n4096",
        "rope_scaling": "llama3",
        "rope_scaling_factor": "32",
        "exe_mode": "ge_graph",
    }
    asked = [
        q
        for q in asked_questions()
        if q.applies({"rope_scaling": "llama3", "family": "dense", "kv_cache": "contiguous"})
    ]
    lines = [replies.get(q.name, "") for q in asked]
    dest = tmp_path / "pkg"
    result = cli("new", "model", dest, input="\n".join(lines) + "\ny\n")
    assert result.exit_code == 0, result.output
    assert "vocab_size must be int" in result.output
    answers = answers_of(dest)
    assert answers["model_name"] == "qwen_try"
    assert answers["vocab_size"] == 4096
    assert answers["exe_mode"] == "ge_graph"
    assert answers["fa_interface"] == "torchair"  # its default follows exe_mode
    assert (answers["rope_scaling"], answers["rope_scaling_factor"]) == ("llama3", 32.0)
    assert answers["rope_original_max_position_embeddings"] == 8192


def test_questions_that_do_not_apply_are_not_asked(cli, tmp_path):
    asked = [
        q
        for q in asked_questions()
        if q.applies({"rope_scaling": "none", "family": "dense", "kv_cache": "contiguous"})
    ]
    assert "rope_beta_fast" not in {q.name for q in asked}
    dest = tmp_path / "pkg"
    result = cli("new", "model", dest, input="\n" * len(asked) + "y\n")
    assert result.exit_code == 0, result.output
    assert "scaling factor" not in result.output and "beta_fast" not in result.output
    assert "rope_scaling_factor" not in answers_of(dest)


def test_yarn_asks_its_own_questions(cli, tmp_path):
    replies = {"rope_scaling": "yarn", "rope_scaling_factor": "4", "rope_beta_fast": "16"}
    asked = [
        q
        for q in asked_questions()
        if q.applies({"rope_scaling": "yarn", "family": "dense", "kv_cache": "contiguous"})
    ]
    names = {q.name for q in asked}
    assert {"rope_beta_slow", "rope_attention_factor", "rope_truncate"} <= names
    assert "rope_low_freq_factor" not in names
    dest = tmp_path / "pkg"
    result = cli(
        "new", "model", dest, input="\n".join(replies.get(q.name, "") for q in asked) + "\ny\n"
    )
    assert result.exit_code == 0, result.output
    answers = answers_of(dest)
    assert (answers["rope_scaling_factor"], answers["rope_beta_fast"]) == (4.0, 16.0)
    assert "rope_low_freq_factor" not in answers
    text = (dest / "src/llama_tiny/architecture.py").read_text()
    assert "rope_beta_fast: float = 16.0" in text and "rope_truncate: bool = True" in text


def test_answer_to_a_question_that_does_not_apply(cli, tmp_path):
    result = cli("new", "model", "--defaults", "--rope-scaling-factor", "4", tmp_path / "p")
    assert result.exit_code == 2
    assert (
        "rope_scaling_factor applies only when rope_scaling is not 'none' (here it is 'none')"
        in result.stderr
    )
    assert "{{" not in result.stderr
    assert not (tmp_path / "p").exists()


def test_head_dim_default_follows_hidden_size(cli, tmp_path):
    dest = tmp_path / "pkg"
    result = cli(
        "new", "model", "--defaults", "--hidden-size", "768", "--num-attention-heads", "12", dest
    )
    assert result.exit_code == 0, result.output
    assert answers_of(dest)["head_dim"] == 64


def test_too_little_input_aborts_and_writes_nothing(cli, tmp_path):
    dest = tmp_path / "pkg"
    result = cli("new", "model", dest, input="only_one\n")
    assert result.exit_code == 1
    assert not dest.exists()


def test_data_file_answers_and_flags_override(cli, tmp_path):
    data = tmp_path / "answers.yml"
    data.write_text("model_name: from_file\nexe_mode: eager\nbatch_size: 4\n")
    dest = tmp_path / "pkg"
    result = cli("new", "model", "--data-file", data, "--defaults", "--batch-size", "8", dest)
    assert result.exit_code == 0, result.output
    answers = answers_of(dest)
    assert (answers["model_name"], answers["exe_mode"], answers["batch_size"]) == (
        "from_file",
        "eager",
        8,
    )


BAD_ANSWERS = [
    (
        ["--num-attention-heads", "8", "--num-key-value-heads", "3"],
        "divisible by num_key_value_heads",
    ),
    (["--exe-mode", "eager", "--enable-static-kernel"], "enable_static_kernel is supported only"),
    (
        ["--exe-mode", "ge_graph", "--enable-static-kernel"],
        "enable_static_kernel is supported only",
    ),
    (["--exe-mode", "npugraph_ex", "--fa-interface", "torchair"], "runs only in ge_graph"),
    (["--exe-mode", "eager", "--fa-interface", "torchair"], "runs only in ge_graph"),
    (["--exe-mode", "ge_graph", "--fa-interface", "torch_npu"], "recompile every decode step"),
    (["--exe-mode", "max-autotune"], "exe_mode must be one of"),
    (["--fa-interface", "flash"], "fa_interface must be one of"),
    (["--dtype", "float64"], "dtype must be one of"),
    (["--model-name", "My-Model"], "model_name must match"),
    (["--head-dim", "15"], "head_dim must be an even number"),
    (["--vocab-size", "0"], "vocab_size must be >= 1"),
    (["--batch-size", "0"], "batch_size must be >= 1"),
    (["--rope-theta", "-1"], "rope_theta must be > 1"),
    (["--rope-theta", "1"], "rope_theta must be > 1"),
    (["--max-seq-len", "2"], "max_seq_len must be >= 3"),
    (["--rope-scaling", "dynamic"], "rope_scaling must be one of"),
    (["--rope-scaling", "yarn", "--rope-scaling-factor", "0.5"], "yarn rope_scaling_factor must"),
    (
        ["--rope-scaling", "yarn", "--rope-beta-fast", "1", "--rope-beta-slow", "2"],
        "must be <= rope_beta_fast",
    ),
    (["--rope-scaling", "linear", "--rope-scaling-factor", "0"], "rope_scaling_factor must be > 0"),
    (
        ["--rope-scaling", "llama3", "--rope-low-freq-factor", "4", "--rope-high-freq-factor", "2"],
        "must be > rope_low_freq_factor",
    ),
]


@pytest.mark.parametrize(("flags", "message"), BAD_ANSWERS)
def test_invalid_answers_exit_2_and_write_nothing(cli, tmp_path, flags, message):
    dest = tmp_path / "pkg"
    result = cli("new", "model", "--defaults", *flags, dest)
    assert result.exit_code == 2, result.output
    assert message in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert not dest.exists()


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("model_name: [unclosed", "not valid YAML"),
        ("- a\n- list\n", "must hold a mapping"),
        ("model_name: x\nhidden: 3\n", "unknown answer(s): hidden"),
        ("num_hidden_layers: many\n", "num_hidden_layers must be int"),
    ],
)
def test_bad_data_file(cli, tmp_path, content, message):
    data = tmp_path / "answers.yml"
    data.write_text(content)
    dest = tmp_path / "pkg"
    result = cli("new", "model", "--defaults", "--data-file", data, dest)
    assert result.exit_code == 2
    assert message in result.stderr
    assert not dest.exists()


def test_missing_data_file(cli, tmp_path):
    result = cli("new", "model", "--defaults", "--data-file", tmp_path / "nope.yml", tmp_path / "d")
    assert result.exit_code == 2
    assert "cannot read answers file" in result.stderr


def test_non_empty_destination_needs_force(cli, tmp_path):
    dest = tmp_path / "pkg"
    dest.mkdir()
    (dest / "notes.txt").write_text("mine")
    result = cli("new", "model", "--defaults", dest)
    assert result.exit_code == 2
    assert "--force" in result.stderr
    assert [p.name for p in dest.iterdir()] == ["notes.txt"]

    result = cli("new", "model", "--defaults", "--force", dest)
    assert result.exit_code == 0, result.output
    assert (dest / "notes.txt").read_text() == "mine"
    assert (dest / "src/llama_tiny/modeling.py").is_file()


def test_destination_that_is_a_file(cli, tmp_path):
    target = tmp_path / "file"
    target.write_text("x")
    result = cli("new", "model", "--defaults", target)
    assert result.exit_code == 2
    assert "not a directory" in result.stderr


def test_failed_render_leaves_nothing(cli, tmp_path, monkeypatch):
    import copier

    def half_write(src, dst, **kwargs):
        (dst / "src").mkdir(parents=True)
        (dst / "src" / "partial.py").write_text("")
        raise OSError("disk full")

    monkeypatch.setattr(copier, "run_copy", half_write)
    dest = tmp_path / "pkg"
    result = cli("new", "model", "--defaults", dest)
    assert result.exit_code != 0
    assert not dest.exists()
    assert list(tmp_path.iterdir()) == []


def test_paged_summary_names_the_paged_write_and_counts_blocks_in_english(cli, tmp_path):
    result = cli("new", "model", "--defaults", "--kv-cache", "paged", "--max-seq-len", "128",
                 tmp_path / "p")  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "paged: 1 block of 128 tokens + 1 null block" in result.output
    assert "torch_npu.npu_scatter_nd_update_" in result.output
    assert "torch_npu.scatter_update_" not in result.output
