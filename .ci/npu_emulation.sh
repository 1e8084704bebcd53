#!/usr/bin/env bash
# Create a CPU venv with torch==2.13.0 + torch-npu==2.13.0, build the stand-in CANN libraries
# and print the env vars that tests/test_npu_emulation.py, tests/test_npu_mutations.py and
# generated packages' npu_emulated tier use. Usage: .ci/npu_emulation.sh [VENV_DIR]
# (default .venv-npu). The emulation is strict (device limits raise); .ci/run also exports
# ASCEND_SCAFFOLD_REQUIRE_NPU_EMULATION=1 so that nothing needing it may skip.
# In CI: eval "$(.ci/npu_emulation.sh .venv-npu | grep "^export ")" then run pytest.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${1:-.venv-npu}"
py="${PYTHON:-python3}"

for tool in gcc nm ldd; do
    command -v "$tool" >/dev/null || { echo "npu_emulation.sh: '$tool' is required" >&2; exit 1; }
done
[ -x "$venv/bin/python" ] || "$py" -m venv "$venv"
venv="$(cd "$venv" && pwd)"
# torch first (pins the CPU wheel), then torch-npu, whose pin torch==2.13.0.* is then satisfied
"$venv/bin/python" -m pip install -q --disable-pip-version-check "torch==2.13.0"
"$venv/bin/python" -m pip install -q --disable-pip-version-check "torch==2.13.0" \
    "torch-npu==2.13.0" packaging protobuf pyyaml numpy pytest typer copier
# The emulation itself is this repository's scaffold.npu_emulation (the generated packages'
# npu_emulated tier imports it): editable, --no-deps, so the pins above stay as they are.
"$venv/bin/python" -m pip install -q --disable-pip-version-check --no-deps -e "$repo"

export TORCH_DEVICE_BACKEND_AUTOLOAD=0
# run outside the checkout: the import must come from the venv, as in a generated package
stub_dir="$(cd "$venv" && "$venv/bin/python" -c '
from scaffold.npu_emulation import emulation as e
d = e.build_stubs()
e.activate()
import torch, torch_npu, torchair
assert not torch.npu.is_available()
assert e.strict()  # the default: device limits raise
print(d)
' | tail -n 1)"

export ASCEND_SCAFFOLD_NPU_PYTHON="$venv/bin/python"
export ASCEND_SCAFFOLD_NPU_STUBS="$(dirname "$stub_dir")"
echo "stand-in CANN libraries: $stub_dir"
echo "export TORCH_DEVICE_BACKEND_AUTOLOAD=0"
echo "export ASCEND_SCAFFOLD_NPU_STUBS=$ASCEND_SCAFFOLD_NPU_STUBS"
echo "export ASCEND_SCAFFOLD_NPU_PYTHON=$ASCEND_SCAFFOLD_NPU_PYTHON"
