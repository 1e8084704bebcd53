"""Validate a config on this host and write the test report (ascend_runtime.validate).

    python -m deepseek_v2_lite.validate \\
        --config config/deepseek_v2_lite.yaml \\
        [--out DIR]

The validate itself is ascend_runtime.validate; this module hands it the package's ModelSpec.
"""

import sys

from ascend_runtime.validate import main as validate_main

from . import MODEL


def main(argv: list[str] | None = None) -> int:
    return validate_main(MODEL, argv)


if __name__ == "__main__":
    sys.exit(main())
