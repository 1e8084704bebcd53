"""Run warm-up, eager prefill and compiled decode; report timings (ascend_runtime.runner).

    python -m deepseek_v2_lite.runner \\
        --config config/deepseek_v2_lite.yaml

The runner itself is ascend_runtime.runner; this module hands it the package's ModelSpec.
"""

import sys

from ascend_runtime.runner import main as run_main

from . import MODEL


def main(argv: list[str] | None = None) -> int:
    return run_main(MODEL, argv)


if __name__ == "__main__":
    sys.exit(main())
