"""Find the first stage where decode goes wrong (ascend_runtime.triage).

    python -m deepseek_v2_lite.triage \\
        --config config/deepseek_v2_lite.yaml

The triage itself is ascend_runtime.triage; this module hands it the package's ModelSpec.
"""

import sys

from ascend_runtime.triage import main as triage_main

from . import MODEL


def main(argv: list[str] | None = None) -> int:
    return triage_main(MODEL, argv)


if __name__ == "__main__":
    sys.exit(main())
