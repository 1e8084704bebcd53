"""validate: the report's figures are the ones measured, a recompile fails it, the CLI
writes report.md / report.json and exits non-zero on a failed check."""

import dataclasses
import itertools
import json

import pytest
import torch
from runtime_suite.current import (
    KIT,
    PAGED,
    compile_config,
    test_cache_tokens,
    tiny_model,
    validate_main,
)

from ascend_runtime import (
    validate as validate_module,
)
from ascend_runtime.config import (
    InferenceConfig,
    SchedulerConfig,
)
from ascend_runtime.graph import (
    graph_count,
)

SUITE_KINDS = ("contiguous", "paged")  # run against these examples (runtime_suite/loader.py)


STEPS = 4
PROMPT_LEN = 8
# test doubles on CPU: a static graph (a changing int recompiles) and one that may break
STATIC = {"backend": "aot_eager", "fullgraph": True, "dynamic": False}
BREAKABLE = {"backend": "aot_eager", "fullgraph": False}


def config_for(tensor_lengths: bool, batch: int = 2) -> InferenceConfig:
    model_config = dataclasses.replace(
        compile_config("npugraph_ex", tensor_lengths), dtype="float32"
    )
    return InferenceConfig(
        model_config=model_config, scheduler_config=SchedulerConfig(batch_size=batch)
    )


def run(config: InferenceConfig, **kwargs):
    model = tiny_model(batch=config.scheduler_config.batch_size)
    return validate_module.validate(
        model, config, steps=STEPS, prompt_len=PROMPT_LEN, batch_sizes=[1, 2], **kwargs
    )


def recompiling(model, model_config, portable_backend):  # noqa: ARG001 (the factory's signature)
    """A test double: decode behind a Python int that changes every step (a guarded value
    under dynamic=False), so every step compiles a new graph."""

    def step_scaled(step: int, **kwargs):
        return model.decode(**kwargs) + 0 * step

    compiled = torch.compile(step_scaled, **STATIC)  # graph-ok: a recompiling test double
    counter = itertools.count()
    return lambda **kwargs: compiled(next(counter), **kwargs)


@pytest.mark.parametrize("tensor_lengths", [False, True], ids=["host-lists", "tensor-lengths"])
def test_validate_passes_and_reports_what_was_measured(tensor_lengths):
    before = graph_count()
    report = run(config_for(tensor_lengths))
    measured = graph_count() - before
    assert report.ok, report.markdown()
    compile_, function, perf = (report.check(n) for n in ("compile", "function", "performance"))
    assert compile_.figures["recompiles_after_warmup"] == 0
    assert compile_.figures["graph_breaks"] == 0
    assert compile_.figures["decode_steps"] == STEPS
    per_batch = perf.figures.values()
    reported = compile_.figures["graphs_compiled"] + sum(
        row["warmup_graphs"] + row["recompiles"] for row in per_batch
    )
    assert reported == measured  # every graph dynamo compiled is in the report
    assert all(row["decode_steps"] == STEPS for row in per_batch)
    assert function.figures["greedy_tokens_equal"]
    assert function.figures["max_rel_error"] < function.figures["max_rel_error_threshold"]
    assert report.check("compile cache").status == "n/a"
    assert "portable aot_eager" in report.check("environment").figures["backend"]


def test_a_forced_recompile_fails_validate():
    report = run(config_for(tensor_lengths=True), decode_factory=recompiling)
    compile_ = report.check("compile")
    assert not report.ok
    assert compile_.status == "fail"
    assert compile_.figures["recompiles_after_warmup"] >= STEPS
    reasons = compile_.figures["recompile_reasons"]
    assert reasons and "step" in reasons[0], reasons


def test_a_graph_break_fails_validate():
    def breaking(model, model_config, portable_backend):  # noqa: ARG001
        def step_with_break(**kwargs):
            logits = model.decode(**kwargs)
            torch._dynamo.graph_break()
            return logits

        return torch.compile(step_with_break, **BREAKABLE)  # graph-ok: a breaking test double

    report = run(config_for(tensor_lengths=True), decode_factory=breaking)
    assert report.check("compile").status == "fail"
    assert report.check("compile").figures["graph_breaks"] >= 1
    assert not report.ok


@pytest.mark.parametrize(("factory", "code"), [(None, 0), (recompiling, 1)])
def test_cli_writes_the_reports_and_exits_nonzero_on_a_failure(
    tmp_path, monkeypatch, capsys, factory, code
):
    path = tmp_path / "config.yaml"
    path.write_text(
        "model_config:\n  exe_mode: ge_graph\n  fa_interface: torchair\n  dtype: float32\n"
        "  enable_dynamic_graph: false\n"
        f"scheduler_config:\n  batch_size: 2\n  max_new_tokens: {STEPS}\n"
        # the tiny model's budget (paged), not the rendered one
        + (f"  kv_cache_tokens: {test_cache_tokens(2)}\n" if PAGED else "")
        + f"data_config:\n  input_truncated_len: {PROMPT_LEN}\n"
    )
    monkeypatch.setattr(validate_module, "load_model", lambda *_, **__: tiny_model(2))
    if factory is not None:
        monkeypatch.setattr(validate_module, "compile_decode", factory)
    out = tmp_path / "out"
    assert validate_main(["--config", str(path), "--out", str(out), "--steps", "3"]) == code
    data = json.loads((out / "report.json").read_text())
    assert data["ok"] is (code == 0)
    compile_ = next(c for c in data["checks"] if c["name"] == "compile")
    assert compile_["figures"]["decode_steps"] == 3
    text = (out / "report.md").read_text()
    assert ("**PASS**" if code == 0 else "**FAIL**") in text
    assert "portable aot_eager backend stood in for ge_graph" in text
    assert "compile: " in capsys.readouterr().out


def test_graph_logits_off_eager_fail_the_function_check():
    def off_by_a_bit(model, model_config, portable_backend):
        compiled = validate_module.compile_decode(model, model_config, portable_backend)
        return lambda **kwargs: compiled(**kwargs) * 1.001  # relative error 1e-3 > 1e-5

    report = run(config_for(tensor_lengths=False), decode_factory=off_by_a_bit)
    function = report.check("function")
    assert function.status == "fail" and not report.ok
    assert 1e-4 < function.figures["max_rel_error"] <= 1.01e-3  # prefill is not scaled
    assert report.check("compile").status == "pass"


if PAGED:

    def test_a_budget_failure_is_bad_input_not_a_compile_failure(tmp_path, monkeypatch, capsys):
        BLOCK_SIZE = KIT.block_size

        path = tmp_path / "config.yaml"
        path.write_text(
            f"scheduler_config:\n  batch_size: 2\n  kv_cache_tokens: {BLOCK_SIZE}\n"
            f"data_config:\n  input_truncated_len: {PROMPT_LEN}\n"
        )
        monkeypatch.setattr(validate_module, "load_model", lambda *_, **__: tiny_model(2))
        out = tmp_path / "out"
        assert validate_main(["--config", str(path), "--out", str(out), "--steps", "3"]) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: ") and "scheduler_config.kv_cache_tokens" in err, err
        assert not out.exists()  # nothing filed under "compile"


def test_each_command_help_opens_with_a_whole_sentence():
    from ascend_runtime import runner, triage

    for module in (runner, triage, validate_module):
        description = module.parser().description
        assert description.endswith("."), (module.__name__, description)
        assert "\n" not in description


@pytest.mark.parametrize("where", ["a file", "under a file", "a linked report.md"])
def test_a_bad_report_location_exits_2_before_the_run(tmp_path, monkeypatch, capsys, where):
    """Checked before anything runs (the model is never built), and a report.md that is a
    link is refused, its target untouched."""
    path = tmp_path / "config.yaml"
    path.write_text("")
    target = tmp_path / "yours.md"
    target.write_text("keep me")
    out = tmp_path / "out"
    if where == "a file":
        out.write_text("a file")
    elif where == "under a file":
        (tmp_path / "file").write_text("a file")
        out = tmp_path / "file" / "out"
    else:
        out.mkdir()
        (out / "report.md").symlink_to(target)

    def never(*_):
        raise AssertionError("the model was built before the report location was checked")

    monkeypatch.setattr(validate_module, "load_model", never)
    assert validate_main(["--config", str(path), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and len(err.strip().splitlines()) == 1, err
    assert target.read_text() == "keep me"


def test_the_report_replaces_a_link_and_never_writes_through_it(tmp_path):
    target = tmp_path / "yours.md"
    target.write_text("keep me")
    out = tmp_path / "out"
    out.mkdir()
    report = validate_module.Report([], "config.yaml")
    report.write(out)
    (out / "report.md").unlink()
    (out / "report.md").symlink_to(target)
    with pytest.raises(validate_module.InputError, match="symbolic link"):
        report.write(out)
    assert target.read_text() == "keep me"
