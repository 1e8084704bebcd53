"""This package's vLLM plugin: the `vllm.general_plugins` entry point (pyproject.toml).

vLLM calls `register` in each process it starts. It serves a checkpoint with this
package's class only when config.json names ARCHITECTURE (else vLLM uses a built-in class
for the same model_type): `python -m <this package>.vllm_plugin mark CHECKPOINT_DIR`
writes it there, or pass `hf_overrides={"architectures": [ARCHITECTURE]}` to vLLM.
"""

from ascend_runtime.serving.plugin import main, register_model

ARCHITECTURE = "Qwen3MoeScaffoldForCausalLM"


def register() -> None:
    # "module:Class": vLLM imports the model only when it builds it
    register_model(ARCHITECTURE, f"{__package__}.vllm_model:VllmForCausalLM")


if __name__ == "__main__":
    from . import MODEL

    raise SystemExit(main(MODEL, ARCHITECTURE))
