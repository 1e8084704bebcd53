"""triage: stops at the first failing stage and names it, its first graph break or first
recompile reason, and the guide's advice; a sound model passes every stage."""

import dataclasses
import itertools

import torch
from runtime_suite.current import (
    compile_config,
    tiny_model,
    triage_main,
)

from ascend_runtime import (
    triage as triage_module,
)
from ascend_runtime.config import (
    InferenceConfig,
    SchedulerConfig,
)

SUITE_KINDS = ("contiguous", "paged")  # run against these examples (runtime_suite/loader.py)

STEPS = 3
STATIC = {"backend": "aot_eager", "fullgraph": True, "dynamic": False}  # a CPU test double


def config(tensor_lengths: bool = False) -> InferenceConfig:
    model_config = dataclasses.replace(
        compile_config("npugraph_ex", tensor_lengths), dtype="float32"
    )
    return InferenceConfig(model_config=model_config, scheduler_config=SchedulerConfig(2))


def run(model, **kwargs):
    return triage_module.triage(model, config(), steps=STEPS, prompt_len=6, **kwargs)


def test_a_sound_model_passes_every_stage():
    results = run(tiny_model())
    assert [r.stage for r in results] == list(triage_module.STAGES)
    assert all(r.ok for r in results), [r.lines() for r in results]


def test_a_graph_break_stops_at_aot_eager_with_the_break_and_the_advice():
    model = tiny_model()
    sound = model.decode

    def broken(**kwargs):  # a model double whose decode breaks the graph
        logits = sound(**kwargs)
        torch._dynamo.graph_break()
        return logits

    model.decode = broken
    results = run(model)
    assert [r.stage for r in results] == ["aot_eager"]
    text = "\n".join(results[0].lines())
    assert "stage aot_eager (aot_eager): FAIL" in text
    assert "graph_break" in results[0].graph_breaks[0]
    assert "修复用户脚本" in text


def test_a_recompile_in_the_backend_stage_names_its_reason():
    def make_decode(stage, model, model_config, portable_backend):
        if stage != "backend":
            return triage_module.stage_decode(stage, model, model_config, portable_backend)

        def step_scaled(step: int, **kwargs):
            return model.decode(**kwargs) + 0 * step

        compiled = torch.compile(step_scaled, **STATIC)  # graph-ok: a recompiling test double
        counter = itertools.count()
        return (lambda **kwargs: compiled(next(counter), **kwargs)), "recompiling double"

    results = run(tiny_model(), make_decode=make_decode)
    assert [r.stage for r in results] == list(triage_module.STAGES)
    assert [r.ok for r in results] == [True, True, False]
    last = results[-1]
    assert last.figures["recompiles_after_warmup"] == STEPS
    text = "\n".join(last.lines())
    assert "first recompile reason: Recompiling function step_scaled" in text
    assert "step ==" in text and "图模式问题" in text


def test_cli_exits_1_on_a_failing_stage(tmp_path, monkeypatch, capsys):
    path = tmp_path / "config.yaml"
    path.write_text("model_config:\n  exe_mode: npugraph_ex\n  dtype: float32\n")
    model = tiny_model(batch=1)
    sound = model.decode

    def broken(**kwargs):
        torch._dynamo.graph_break()
        return sound(**kwargs)

    model.decode = broken
    monkeypatch.setattr(triage_module, "load_model", lambda *_, **__: model)
    assert triage_main(["--config", str(path), "--steps", "2", "--prompt-len", "4"]) == 1
    out = capsys.readouterr().out
    assert "stage aot_eager" in out and "FAIL" in out and "advice:" in out
