"""The runtime's machinery tests, run once here instead of in every rendered package.

Each tests/runtime_suite/suite_*.py is collected once per KV-cache layout, against the
example package that has it (generated_examples/: llama_tiny contiguous, qwen3_moe paged
MoE). The suite's module namespace is given the example's test kit
(ascend_runtime.testing.kit.ModelKit) and names before the file runs: TINY, tiny_model,
PAGED, MODEL, ... (see `namespace`), which the suite imports from `runtime_suite.current`
(set to that example's names while the file runs), so a suite reads as a package's test would.
"""

from __future__ import annotations

import ast
import importlib
import sys
import types
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = {"contiguous": "llama_tiny", "paged": "qwen3_moe"}


def example(kind: str) -> types.ModuleType:
    name = EXAMPLES[kind]
    src = str(REPO / "generated_examples" / name / "src")
    if src not in sys.path:
        sys.path.insert(0, src)
    return importlib.import_module(name)


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    import torch

    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def namespace(kind: str) -> dict:
    from ascend_runtime.config import load_config
    from ascend_runtime.testing import kit as kit_module

    package = example(kind)
    kit = kit_module.ModelKit(package.MODEL)
    name = package.__name__
    config_path = REPO / "generated_examples" / name / "config" / f"{name}.yaml"
    entry = {
        m: importlib.import_module(f"{name}.{m}").main for m in ("runner", "validate", "triage")
    }
    return {
        "KIT": kit,
        "PAGED": kit.paged,
        "MODEL": package.MODEL,
        "ModelArgs": package.ModelArgs,
        "Transformer": package.Transformer,
        "PACKAGE": name,
        "CONFIG_PATH": config_path,
        "RENDERED_CONFIG": load_config(config_path).model_config,
        "TINY": kit.tiny,
        "TINY_NPU": kit.tiny_npu,
        "BLOCK_SIZE": kit.block_size,
        "BATCH": kit_module.BATCH,
        "PROMPT_LEN": kit_module.PROMPT_LEN,
        "NPU_DTYPE": kit_module.NPU_DTYPE,
        "tiny_model": kit.tiny_model,
        "setup_test_caches": kit.setup_test_caches,
        "test_cache_tokens": kit.test_cache_tokens,
        "prompt": kit.prompt,
        "compile_config": kit_module.compile_config,
        "greedy": kit_module.greedy,
        "runner_main": entry["runner"],
        "validate_main": entry["validate"],
        "triage_main": entry["triage"],
    }


class SuiteModule(pytest.Module):
    """A suite file as a test module bound to one example (its asserts rewritten as
    pytest rewrites a test module's)."""

    kind: str

    def _getobj(self):
        from _pytest.assertion.rewrite import rewrite_asserts

        source = self.path.read_bytes()
        tree = ast.parse(source, filename=str(self.path))
        rewrite_asserts(tree, source, self.path, self.config)
        current = types.ModuleType("runtime_suite.current")
        current.__dict__.update(namespace(self.kind))
        sys.modules[current.__name__] = current
        module = types.ModuleType(f"runtime_suite.{self.path.stem}_{self.kind}")
        module.__file__ = str(self.path)
        module._fresh_dynamo = _fresh_dynamo  # an autouse fixture of every suite
        sys.modules[module.__name__] = module
        exec(compile(tree, str(self.path), "exec"), module.__dict__)
        return module


def suite_kinds(path: Path) -> tuple[str, ...]:
    """The suite's SUITE_KINDS literal (read, not run: collection builds nothing)."""
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "SUITE_KINDS":
            kinds = ast.literal_eval(node.value)
            assert set(kinds) <= set(EXAMPLES), (path, kinds)
            return kinds
    raise AssertionError(f"{path} has no SUITE_KINDS")


class SuiteFile(pytest.File):
    """A suite file: one SuiteModule per example it runs against."""

    def collect(self):
        for kind in suite_kinds(self.path):
            module = SuiteModule.from_parent(
                self, path=self.path, name=kind, nodeid=f"{self.nodeid}::{kind}"
            )
            module.kind = kind
            yield module


def collect(file_path: Path, parent) -> pytest.File | None:
    if file_path.parent != Path(__file__).parent or not file_path.name.startswith("suite_"):
        return None
    return SuiteFile.from_parent(parent, path=file_path)
